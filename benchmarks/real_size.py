"""Fault tolerance at a model size: the tiny model and a GPT of 114M parameters side by side,
each through the same drills on the local target (3 nodes, real etcd / lighthouse, torchrun).

Per size it measures, from the drills' events:
- checkpoints: training blocked per save (launch and the wait for staging), a save's seconds
  in the background, its bytes, the steps' median time with no save in flight and with one,
  and the checkpoint overhead at Young's interval sqrt(2 x C x MTBF) (MTBF 1 h) where C is a
  save's whole cost to training: what it blocked plus what it slowed the steps it overlapped;
- an elastic hard kill: recovery split into detect (the survivors see the loss), rendezvous
  (their workers stop and the agents form the new round), worker start -> model built, state
  loaded (resharded), first step; where the state came from (the survivors' own memory, other
  nodes' memory, storage); steps lost;
- an elastic notice: the emergency save's seconds and the steps lost;
- a per-step (TorchFT) hard kill with a group added back: the survivors' stall, the heal's
  seconds and bytes, the join;
- the peak resident memory of a worker;
- each drill's samples lost or doubled (its sample ledger, lab/drill/ledger.py: the goal is none);
- with --baselines N: each mode's drill against N uninterrupted runs (lab.drill.convergence).

Prints a table per size and draws one figure (--plot).

Run: .venv/bin/python benchmarks/real_size.py [--models tiny gpt-100m] [--baselines 1]
     [--plot benchmarks/real_size.png] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.drill.checkpoint_cost import save_cost
from lab.drill.ledger import lost_and_doubled
from lab.drill.report import LOAD_PARTS
from lab.drill.run import DrillConfig, Progress, run_drill
from lab.vocab import events
from lab.vocab.checkpoint_interval import young_interval_s
from lab.vocab.events import Event
from lab.vocab.job import JobSpec
from lab.vocab.per_step import PerStepSettings

MTBF_S = 3600.0
# The per-step lighthouse's heartbeat timeout where the default (0.2 s) is shorter than a group's
# process pauses: at gpt-100m on this 2-core machine they stopped heartbeating for up to 1.14 s
# (once past 1 s with a 1 s timeout), and the lighthouse left live groups out of quorums, which
# then healed again (the drill's turn-taking finding; docs/real-size.md). benchmarks/parity.py
# runs per-step with the same timeouts.
HEARTBEAT_TIMEOUT_S = {"gpt-100m": 2.0}
DEFAULT_HEARTBEAT_S = PerStepSettings().heartbeat_timeout_s


@dataclass(frozen=True)
class Size:
    """How each model size is drilled: steps, the checkpoint interval, when to evict, and the
    simulated accelerator time per step (the GPT's steps are real CPU compute)."""

    steps: int
    every: int
    evict_at: int
    step_time: float
    timeout_s: float


SIZES = {
    "tiny": Size(steps=300, every=30, evict_at=75, step_time=0.05, timeout_s=300),
    "gpt-small": Size(steps=150, every=20, evict_at=40, step_time=0.05, timeout_s=300),
    "gpt-100m": Size(steps=40, every=8, evict_at=14, step_time=0.0, timeout_s=1500),
}


def drill(
    model: str, mode: str, eviction: str, root: Path, baselines: int, size: Size | None = None
) -> tuple[Any, list[dict[str, Any]]]:
    size = size or SIZES[model]
    workdir = Path(tempfile.mkdtemp(prefix=f"{model}-{mode}-{eviction}-", dir=root))
    args = ["--steps", str(size.steps), "--step-time", f"{size.step_time:g}"]
    if model != "tiny":
        args += ["--model", model]
    spec = JobSpec(
        name="bench",
        min_nodes=2,
        max_nodes=3,
        fault_tolerance=mode,
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=size.every,
        pg_timeout_s=60 if model == "gpt-100m" else 15,  # a step of the 114M model takes seconds on a CPU
        per_step=PerStepSettings(heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S.get(model, DEFAULT_HEARTBEAT_S)),
        script_args=tuple(args),
    )
    cfg = DrillConfig(
        spec=spec,
        workdir=workdir,
        nodes=3,
        target_steps=size.steps,
        eviction=eviction,
        notice_s=30,
        evict_at_step=size.evict_at,
        scale_out_after_s=2.0,
        timeout_s=size.timeout_s,
        baselines=baselines,
    )
    print(f"  {model} {mode} {eviction}: {workdir}", file=sys.stderr, flush=True)
    report = run_drill(cfg, Progress(out=sys.stderr, every_s=30, target=size.steps))
    print(report.summary(), file=sys.stderr, flush=True)
    recorded = events.read(workdir / "events.jsonl")
    # The checkpoints (GBs at real size, for the drill and its baselines) go; the events and
    # logs stay for a look afterwards.
    for checkpoints in [p for p in workdir.rglob("*") if p.is_dir() and p.name in ("ckpt", "checkpoints")]:
        shutil.rmtree(checkpoints, ignore_errors=True)
    return report, recorded


def _first(recorded: list[dict[str, Any]], kind: str, after: float, **where: Any) -> dict[str, Any] | None:
    return next(
        (e for e in recorded if e["event"] == kind and e["t"] > after and all(e.get(k) == v for k, v in where.items())),
        None,
    )


def recovery_parts(report: Any, recorded: list[dict[str, Any]]) -> dict[str, float | None]:
    """An elastic eviction's recovery, part by part (seconds each)."""
    ev = report.evictions[0]
    t0 = ev.t
    detect = min(
        (e["t"] for e in recorded if e["event"] in (Event.RDZV_MEMBER_LOST, Event.COLLECTIVE_FAILED) and e["t"] > t0),
        default=None,
    )
    start = _first(recorded, Event.START, t0)
    built = _first(recorded, Event.MODEL_BUILT, t0)
    loaded = _first(recorded, Event.CHECKPOINT_LOADED, t0)
    step = next(
        (e for e in recorded if e["event"] == Event.STEP and loaded and e["t"] > loaded["t"]),
        None,
    )
    marks = [t0, detect, start and start["t"], built and built["t"], loaded and loaded["t"], step and step["t"]]
    names = ["detect", "rendezvous", "model build", "state load", "first step"]
    parts: dict[str, float | None] = {}
    for name, a, b in zip(names, marks, marks[1:], strict=False):
        parts[name] = round(b - a, 3) if a is not None and b is not None else None
    parts["total"] = ev.recovery_s
    parts["lost steps"] = ev.lost_steps
    return parts


def checkpoint_costs(recorded: list[dict[str, Any]], every: int) -> dict[str, float]:
    """Interval saves (lab.drill.checkpoint_cost): what each blocked, how long it took, its
    bytes; the steps' time with no save in flight and with one; a save's whole cost to training
    and the overhead at Young's interval."""
    cost = save_cost(recorded)
    if cost is None:
        nan = math.nan
        return {"saves": 0, "bytes": 0, "blocked_s": nan, "save_s": nan, "step_s": nan, "step_s_during_save": nan,
                "cost_s": 0.0, "young_interval_s": math.inf, "overhead_at_young_pct": 0.0}  # fmt: skip
    young = young_interval_s(cost.cost_s, MTBF_S) if cost.cost_s > 0 else math.inf
    return {
        "saves": cost.saves,
        "bytes": cost.bytes,
        "blocked_s": cost.blocked_s,
        "save_s": cost.save_s,
        "step_s": cost.step_s,
        "step_s_during_save": cost.step_during_save_s if cost.step_during_save_s is not None else math.nan,
        "cost_s": cost.cost_s,
        "young_interval_s": young,
        "overhead_at_young_pct": 100 * cost.cost_s / young if young < math.inf else 0.0,
    }


def per_step_figures(report: Any, recorded: list[dict[str, Any]]) -> dict[str, Any]:
    ev = report.evictions[0] if report.evictions else None
    join = report.joins[0] if report.joins else None
    # The heal of the group added back (groups that start together heal from each other too).
    heal = next((e for e in recorded if e["event"] == Event.HEALED and join and e.get("node") == join.node), None)
    return {
        "survivors_stall_s": ev.recovery_s if ev else None,
        "committed_lost": ev.lost_steps if ev else None,
        "heal_s": heal["seconds"] if heal else None,
        "heal_bytes": heal["bytes"] if heal else None,
        "join_s": join.join_s if join else None,
        "survivors_stall_during_join_s": join.stall_s if join else None,
    }


def measure(model: str, root: Path, baselines: int) -> dict[str, Any]:
    out: dict[str, Any] = {"model": model}
    hard, hard_events = drill(model, "elastic", "hard", root, baselines)
    built = _first(hard_events, Event.MODEL_BUILT, 0)
    out["parameters"] = built["parameters"] if built else None
    out["passed"] = {"elastic hard": hard.passed}
    out["recovery"] = recovery_parts(hard, hard_events)
    # Where the survivors' state came from (bytes: own memory, other nodes' memory, storage).
    out["state_from"] = hard.evictions[0].state_from if hard.evictions else None
    # Where rank 0's load spent its seconds (lab.runtime.sharded_checkpoint's parts).
    out["load_split"] = hard.evictions[0].load_split if hard.evictions else None
    out["checkpoints"] = checkpoint_costs(hard_events, SIZES[model].every)
    out["convergence"] = {"elastic": hard.convergence}
    notice, notice_events = drill(model, "elastic", "notice", root, 0)
    out["passed"]["elastic notice"] = notice.passed
    ev = notice.evictions[0] if notice.evictions else None
    out["notice"] = {
        "emergency_save_s": ev.emergency_save_s if ev else None,
        "missed": ev.emergency_save_missed if ev else None,
        "lost_steps": ev.lost_steps if ev else None,
        "notice_to_exit_s": ev.notice_to_exit_s if ev else None,
    }
    per_step, per_step_events = drill(model, "per-step", "hard", root, baselines)
    out["passed"]["per-step hard"] = per_step.passed
    out["per_step"] = per_step_figures(per_step, per_step_events)
    out["convergence"]["per-step"] = per_step.convergence
    out["samples"] = {  # the drills' sample ledgers: lost/doubled (the goal is none)
        name: lost_and_doubled([report.ledger])
        for name, report in (("elastic hard", hard), ("elastic notice", notice), ("per-step hard", per_step))
    }
    rss = [e["peak_rss_mb"] for rec in (hard_events, notice_events, per_step_events) for e in rec if "peak_rss_mb" in e]
    out["peak_rss_mb"] = max(rss) if rss else None
    return out


def _fmt(v: Any, unit: str = "", digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}{unit}"
    return f"{v}{unit}"


def _state_from(r: dict[str, Any]) -> str:
    where = r.get("state_from")
    if not where:
        return "-"
    return " / ".join(_fmt(where[k] / 1e6, " MB", 1) for k in ("memory", "peers", "storage"))


def _load_split(r: dict[str, Any]) -> str:
    split = r.get("load_split")
    if not split:
        return "-"
    return ", ".join(f"{LOAD_PARTS.get(k, k)} {_fmt(v, ' s')}" for k, v in split.items())


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        ("parameters", lambda r: _fmt(r["parameters"])),
        ("checkpoint bytes (rank 0)", lambda r: _fmt(r["checkpoints"]["bytes"] / 1e6, " MB", 1)),
        ("training blocked per save", lambda r: _fmt(r["checkpoints"]["blocked_s"], " s", 3)),
        ("save in the background", lambda r: _fmt(r["checkpoints"]["save_s"], " s")),
        (
            "step (no save in flight / during one)",
            lambda r: (
                f"{_fmt(r['checkpoints']['step_s'], ' s', 3)} / {_fmt(r['checkpoints']['step_s_during_save'], ' s', 3)}"
            ),
        ),
        ("a save's whole cost to training", lambda r: _fmt(r["checkpoints"]["cost_s"], " s", 3)),
        ("Young's interval (MTBF 1 h)", lambda r: _fmt(r["checkpoints"]["young_interval_s"], " s", 1)),
        ("overhead at Young's interval", lambda r: _fmt(r["checkpoints"]["overhead_at_young_pct"], " %", 2)),
        ("emergency save on a notice", lambda r: _fmt(r["notice"]["emergency_save_s"], " s", 3)),
        (
            "steps lost: notice / hard kill",
            lambda r: f"{_fmt(r['notice']['lost_steps'])} / {_fmt(r['recovery']['lost steps'])}",
        ),
        *(
            (f"elastic recovery: {part}", lambda r, part=part: _fmt(r["recovery"][part], " s"))
            for part in ("detect", "rendezvous", "model build", "state load", "first step", "total")
        ),
        ("elastic recovery: state from memory / peers / storage", _state_from),
        ("elastic recovery: state load by part (rank 0)", _load_split),
        ("per-step: survivors' stall", lambda r: _fmt(r["per_step"]["survivors_stall_s"], " s")),
        (
            "per-step: heal (bytes)",
            lambda r: (
                f"{_fmt(r['per_step']['heal_s'], ' s')} ({_fmt((r['per_step']['heal_bytes'] or 0) / 1e6, ' MB', 0)})"
            ),
        ),
        ("per-step: join", lambda r: _fmt(r["per_step"]["join_s"], " s")),
        ("peak memory per worker", lambda r: _fmt(r["peak_rss_mb"], " MiB", 0)),
        ("samples lost/doubled: elastic hard, notice, per-step", lambda r: ", ".join(r["samples"].values())),
        ("drills passed", lambda r: f"{sum(r['passed'].values())}/{len(r['passed'])}"),
    ]
    head = "| | " + " | ".join(r["model"] for r in results) + " |"
    lines = [head, "|---" * (len(results) + 1) + "|"]
    for name, cell in rows:
        lines.append(f"| {name} | " + " | ".join(cell(r) for r in results) + " |")
    for r in results:
        for mode, conv in r["convergence"].items():
            if conv:
                lines.append(f"\n{r['model']} {mode}:{conv['summary'][len('  convergence:') :]}")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = ("detect", "rendezvous", "model build", "state load", "first step")
    fig, (rec, ckpt) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [r["model"] for r in results]
    left = [0.0] * len(results)
    for part in parts:
        values = [r["recovery"].get(part) or 0.0 for r in results]
        rec.barh(names, values, left=left, label=part)
        left = [a + b for a, b in zip(left, values, strict=True)]
    rec.set_xlabel("seconds from the eviction (elastic, hard kill)")
    rec.set_title("elastic recovery, by part")
    rec.legend(fontsize=8)
    x = range(len(results))
    width = 0.25
    ckpt.bar([i - width for i in x], [r["checkpoints"]["blocked_s"] for r in results], width, label="blocked per save")
    ckpt.bar(x, [r["checkpoints"]["cost_s"] for r in results], width, label="whole cost per save")
    ckpt.bar(
        [i + width for i in x], [r["notice"]["emergency_save_s"] or 0 for r in results], width, label="emergency save"
    )
    ckpt.set_xticks(list(x), names)
    ckpt.set_ylabel("seconds")
    ckpt.set_title("checkpoints")
    ckpt.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, parsed and checked before anything starts (`argv`: sys.argv's by default)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["tiny", "gpt-100m"], choices=list(SIZES))
    p.add_argument("--baselines", type=int, default=0, help="uninterrupted runs per mode to compare the loss with")
    p.add_argument("--plot", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None, help="write the figures as JSON here")
    args = p.parse_args(argv)
    return args


def main() -> int:
    args = arguments()
    root = Path(tempfile.mkdtemp(prefix="bench-real-size-"))
    results = [measure(m, root, args.baselines) for m in args.models]
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    if args.plot:
        plot(results, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

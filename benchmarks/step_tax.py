"""What each fault-tolerance mode costs per step when nothing fails: 3 nodes on the local
target, the same model, data and simulated compute, no eviction. Per mode: the median
interval between consecutive committed steps at full size, and where a step's time goes
(the step events' `phases`: elastic's compute (the simulated compute, forward and backward,
DDP's gradient all_reduce inside backward) and update; per-step's quorum, compute, cross-group
reduction and commit). The per-step mode's tax is its interval minus elastic's; the
fixed-global batch policy's cost at full size is its interval against per-worker's (the same
step at full size: it should cost nothing).

Run: .venv/bin/python benchmarks/step_tax.py [--steps 300] [--step-time 0.05] [--runs 1]
     [--modes elastic per-step] [--policies fixed-global] [--model tiny]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from lab.local import LocalTarget
from lab.vocab.batch_policy import BATCH_POLICIES
from lab.vocab.events import Event
from lab.vocab.job import JobSpec

MODES = ("elastic", "per-step")
NODES = 3
# The first steps pay for connecting and warming up: left out of the figures.
SKIP_STEPS = 20


def run(mode: str, policy: str, workdir: Path, steps: int, step_time: float, model: str) -> list[dict]:
    """The step events of one run of `steps` steps on 3 nodes."""
    spec = JobSpec(
        name="steptax",
        min_nodes=NODES,
        max_nodes=NODES,
        fault_tolerance=mode,
        batch_policy=policy,
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=10 * steps,  # no save inside the measured steps
        script_args=("--steps", str(steps), "--step-time", str(step_time), "--model", model),
    )
    with LocalTarget(spec, workdir) as local:
        for _ in range(NODES):
            local.add_node()
        deadline = time.monotonic() + 60 + steps * (step_time + 0.5)
        while time.monotonic() < deadline:
            if local.wait(1.0):
                break
        else:
            raise RuntimeError(f"{mode}: the run did not end within its time; see {workdir}")
        return [e for e in local.events() if e["event"] == Event.STEP]


def figures(steps: list[dict]) -> dict[str, float]:
    """Median step interval and median phases, over the steps at full size after warm-up."""
    by_emitter: dict[tuple, list[dict]] = defaultdict(list)
    for e in steps:
        by_emitter[(e.get("replica"), e.get("pid"))].append(e)
    intervals, phases = [], defaultdict(list)
    for evs in by_emitter.values():
        evs.sort(key=lambda e: e["step"])
        for a, b in itertools.pairwise(evs):
            if b["step"] == a["step"] + 1 and b["step"] > SKIP_STEPS and b.get("participants", NODES) == NODES:
                intervals.append(b["t"] - a["t"])
                for name, seconds in (b.get("phases") or {}).items():
                    phases[name].append(seconds)
    if not intervals:
        raise RuntimeError("no consecutive steps at full size were recorded")
    out = {"interval": statistics.median(intervals), "steps": len(intervals)}
    out.update({name: statistics.median(values) for name, values in phases.items()})
    return out


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, parsed and checked before anything starts (`argv`: sys.argv's by default)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--step-time", type=float, default=0.05, help="simulated compute per step, seconds")
    p.add_argument("--runs", type=int, default=1, help="runs of each mode, alternating (medians of the runs)")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--policies", nargs="+", choices=BATCH_POLICIES, default=["fixed-global"], help="batch policies")
    p.add_argument("--model", default="tiny")
    args = p.parse_args(argv)
    return args


def main() -> int:
    args = arguments()
    root = Path(tempfile.mkdtemp(prefix="bench-steptax-"))
    results: dict[str, list[dict[str, float]]] = defaultdict(list)
    for i in range(args.runs):
        for mode, policy in itertools.product(args.modes, args.policies):
            name = mode if args.policies == ["fixed-global"] else f"{mode} {policy}"
            r = figures(run(mode, policy, root / f"{mode}-{policy}-{i}", args.steps, args.step_time, args.model))
            results[name].append(r)
            print(f"run {i + 1} {name}: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in r.items() if k != "steps"))
    print(f"\n{NODES} nodes, {args.model} model, --step-time {args.step_time:g}, {args.steps} steps, medians in ms")
    names = sorted({k for rs in results.values() for r in rs for k in r} - {"interval", "steps"})
    print(f"| mode | step interval | {' | '.join(names)} |")
    print("|---|---|" + "---|" * len(names))
    for mode, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs if k in r) for k in {k for r in rs for k in r}}
        cells = [f"{med[n] * 1000:.1f}" if n in med else "" for n in names]
        print(f"| {mode} | {med['interval'] * 1000:.1f} | {' | '.join(cells)} |")
    if {"elastic", "per-step"} <= results.keys():
        e = statistics.median(r["interval"] for r in results["elastic"])
        s = statistics.median(r["interval"] for r in results["per-step"])
        print(f"per-step tax: {(s - e) * 1000:+.1f} ms a step ({(s / e - 1) * 100:+.1f} % of elastic's interval)")
    for mode in args.modes:
        fixed, per_worker = results.get(f"{mode} fixed-global"), results.get(f"{mode} per-worker")
        if fixed and per_worker:
            f = statistics.median(r["interval"] for r in fixed)
            w = statistics.median(r["interval"] for r in per_worker)
            print(
                f"{mode}: fixed-global {f * 1000:.1f} ms a step against per-worker's {w * 1000:.1f} "
                f"({(f / w - 1) * 100:+.1f} %)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

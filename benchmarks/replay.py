"""Goodput against the capacity a real spot trace offered: named windows replayed on the local
target (lab.drill.replay) by elastic, per-step and restart-everything, with each cloud's notice
rule, beside on demand; a table, one timeline plot per replay and, with --json, the figures.

Each replay is a drill of 3 slots (the proportional rule, seed 0) of the tiny model (or
gpt-small), sized to train through its window (steps = the window's replay seconds over the
step time: at full size the job is still training at the window's end). Per replay:

- goodput: useful samples (the final history's steps that ended inside the window) over the
  capacity bound (the integral of min(alive, 3) over the window, times one node's throughput
  at full size measured in the same replay); samples a second a node at each size beside it, so
  that a ratio above 1 cannot hide a loss (lab.drill.replay_goodput);
- wipeouts survived (the job trained again after each) and the steps each cost;
- samples lost and doubled over the whole run (the drill's sample ledger);
- the restart budget used: the most worker restarts any agent counted against --max-restarts;
- cost per million useful samples: the capacity offered at the spot price per node-hour (the
  trace's own prices where it has them, else the plan's price table), against on demand (every
  slot trains the whole window at full size, at the on-demand price). Windows of a trace with no
  price (the GCP H100 one) have none.

--whole-trace NAME replays a carried trace from its start to its end instead of the named
windows (bamboo-p3-32: 11.4 h, 344 adds and removes of its pool): the drill's time is sized from
the schedule, and the row says whether any budget ran out.

Run: python benchmarks/replay.py [--windows aws-4node-wipeouts bamboo-p3-partial] [--speedup 20]
     [--modes elastic per-step restart-everything] [--notices aws gcp azure none] [--model tiny]
     [--whole-trace bamboo-p3-32] [--plots DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.drill.plot import plot_timeline
from lab.drill.report import DrillReport
from lab.drill.run import DrillConfig, Progress, run_drill, run_uninterrupted
from lab.plan.cost import load_prices
from lab.vocab.events import Event
from lab.vocab.job import FaultTolerance, JobSpec
from lab.vocab.layout import ROOT
from lab.vocab.models import GPT_SIZES, TINY, demo_args
from lab.vocab.replay_schedule import NOTICE_RULES, ReplaySchedule
from lab.vocab.spot_goodput import costs_for
from lab.vocab.spot_trace import SpotTrace
from lab.vocab.trace_files import CARRIED_TRACES, load_trace
from lab.vocab.trace_goodput import check_against_replay, report_costs
from lab.vocab.trace_schedule import schedule
from lab.vocab.trace_windows import NAMED_WINDOWS, load_window

# The public traces the project may not carry (no licence): read beside the checkout, when there.
SHARED_TRACES_DIR = ROOT.parent / "shared" / "traces"

MODES = ("elastic", "per-step", "restart-everything")
SLOTS = 3
STEP_TIME_S = 0.05
CHECKPOINT_EVERY = 50
# The 1-node spot-traces file: a p3.2xlarge's spot price at each tick (no licence: read from
# ../shared/traces, never carried).
PRICES_TRACE = "spot-traces-preemption-1node-aws-us-west-2c-v100-prices.json"
# The instance type of each trace the benchmark prices (traces/README.md and ../shared/traces):
# the V100 traces are p3.2xlarge pools; the H100 one is GCP's, which the price table lacks.
INSTANCE_TYPES = {
    "bamboo-p3-32": "p3.2xlarge",
    "spot-traces-preemption-4node-aws-us-west-2c-v100.json": "p3.2xlarge",
}


@dataclass(frozen=True)
class Prices:
    """$ per node-hour, and where each figure came from."""

    spot: float
    on_demand: float
    said: str


@dataclass
class Row:
    window: str
    mode: str
    notice: str
    report: DrillReport
    prices: Prices | None
    plot: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def figures(self) -> dict[str, Any]:
        g, ledger = self.report.replay, self.report.ledger
        spot = g.spot_cost_per_million(self.prices.spot) if g and self.prices else None
        on_demand = g.on_demand_cost_per_million(self.prices.on_demand) if g and self.prices else None
        return {
            "window": self.window,
            "mode": self.mode,
            "notice": self.notice,
            "passed": self.report.passed,
            "finished": self.report.finished,
            "goodput": g.to_dict() if g else None,
            "samples_lost": ledger.lost if ledger and ledger.kept else None,
            "samples_doubled": ledger.doubled if ledger and ledger.kept else None,
            "preemptions": self.report.preemptions,
            "nodes_added": self.report.nodes_added,
            "restart_budget_used": self.report.max_restart_count,
            "spot_cost_per_million": spot,
            "on_demand_cost_per_million": on_demand,
            "prices": vars(self.prices) if self.prices else None,
            "plot": self.plot,
            "problems": self.report.problems,
            **self.extra,
        }


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, parsed and checked before anything starts (`argv`: sys.argv's by default)."""
    names = [w.name for w in NAMED_WINDOWS]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--windows", nargs="+", choices=names, default=names[:2], help=f"named windows [{' '.join(names[:2])}]"
    )
    p.add_argument("--speedup", type=float, default=20.0, help="the time compression [20]")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--notices", nargs="+", choices=tuple(NOTICE_RULES), default=["aws", "none"], help="[aws none]")
    p.add_argument("--model", choices=(TINY, GPT_SIZES[0]), default=TINY, help=f"the demo's model [{TINY}]")
    p.add_argument(
        "--whole-trace",
        choices=tuple(CARRIED_TRACES),
        help="replay this carried trace from start to end instead of the named windows",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=CHECKPOINT_EVERY,
        help=f"steps between the job's checkpoints [{CHECKPOINT_EVERY}]",
    )
    p.add_argument("--plots", type=Path, help="where the timeline plots go [a new temporary directory]")
    p.add_argument("--json", type=Path, help="write every replay's figures here")
    args = p.parse_args(argv)
    if not (math.isfinite(args.speedup) and args.speedup > 0):
        p.error(f"--speedup {args.speedup:g} is invalid: expected a factor > 0")
    return args


def _mean_price(trace: SpotTrace) -> float | None:
    """The trace's spot price averaged over its span (None: it has none)."""
    if trace.prices is None:
        return None
    times = [t for t, _ in trace.prices] + [trace.span_s]
    held = [(b - a) * price for (a, price), b in zip(trace.prices, times[1:], strict=True)]
    return sum(held) / trace.span_s


def prices_for(trace_name: str) -> Prices | None:
    """The spot price of the trace's own instance type: the 1-node trace's where it can be read,
    else the plan's table; on demand from the table. None: no price for this trace."""
    instance = INSTANCE_TYPES.get(trace_name)
    if instance is None:
        return None
    row = load_prices()["aws"]["ec2"]["us-east-1"][instance]
    path = SHARED_TRACES_DIR / PRICES_TRACE
    spot = _mean_price(load_trace(path)) if path.is_file() else None
    said = f"{instance}: spot {'from ' + PRICES_TRACE if spot is not None else 'from lab/plan/prices.yaml'}"
    said += ", on demand from lab/plan/prices.yaml"
    return Prices(spot if spot is not None else float(row["spot"]), float(row["on_demand"]), said)


def drill_config(
    replay: ReplaySchedule,
    mode: str,
    model: str,
    workdir: Path,
    checkpoint_every: int = CHECKPOINT_EVERY,
    step_s: float = STEP_TIME_S,
) -> DrillConfig:
    """A drill of `replay` by `mode`, sized to train through it and timed to hold it (`step_s`:
    a step's seconds at full size)."""
    # What the capacity offered trains at full-size throughput, and a margin: the job ends soon
    # after the window (a job that ends inside it is counted up to its end). A larger model's
    # nodes share this machine's cores at full size and train faster alone (gpt-small: 1.8x), so
    # its job would end inside the window without half again as many steps.
    margin = 1.1 if model == TINY else 1.5
    steps = math.ceil(replay.capacity_node_seconds() / replay.slots / step_s * margin)
    spec = JobSpec(
        name="replay",
        min_nodes=SLOTS if mode == "restart-everything" else 1,
        max_nodes=SLOTS,
        fault_tolerance=FaultTolerance.PER_STEP if mode == "per-step" else FaultTolerance.ELASTIC,
        checkpoint_dir=str(workdir / "checkpoints"),
        checkpoint_every_steps=checkpoint_every,
        script_args=demo_args(steps, STEP_TIME_S, model),
    )
    return DrillConfig(
        spec=spec,
        workdir=workdir / "run",
        nodes=SLOTS,
        fault="trace",
        replay=replay,
        target_steps=steps,
        # The window, then the job's catching up at full size on what it could not train: at
        # worst all of it again, and the starts.
        timeout_s=2 * replay.duration_s + 180.0,
        restart_everything=mode == "restart-everything",
    )


# Steps of the short uninterrupted run that times a model's step at full size, and the first
# ones left out (the start's).
CALIBRATION_STEPS = 40
CALIBRATION_SKIP = 10


def full_size_step_s(replay: ReplaySchedule, model: str, root: Path) -> float:
    """A step's seconds of `model` at full size on this machine: the tiny model's is its
    simulated compute (its CPU work is small beside it); a larger one's is measured by a short
    uninterrupted run (the median time between its steps), so that its replay is sized to the
    capacity offered and not to the tiny model's pace."""
    if model == TINY:
        return STEP_TIME_S
    cfg = drill_config(replay, "elastic", model, root / f"calibrate-{model}")
    cfg = dataclasses.replace(cfg, spec=cfg.spec.replace(script_args=demo_args(CALIBRATION_STEPS, STEP_TIME_S, model)))
    recorded = run_uninterrupted(cfg, order_seed=None, progress=Progress(every_s=30.0))
    times = sorted(float(e["t"]) for e in recorded if e["event"] == Event.STEP)
    gaps = [b - a for a, b in itertools.pairwise(times[CALIBRATION_SKIP:])]
    if not gaps:
        raise SystemExit(f"model={model!r}: its timing run trained {len(times)} step(s), expected {CALIBRATION_STEPS}")
    return statistics.median(gaps)


def replays(args: argparse.Namespace) -> list[tuple[str, str, ReplaySchedule]]:
    """(what, trace, schedule) for each window and notice rule."""
    out = []
    for notice in args.notices:
        if args.whole_trace:
            trace = load_trace(args.whole_trace)
            out.append((f"{args.whole_trace} (whole)", notice, schedule(trace, SLOTS, None, args.speedup, notice)))
            continue
        for name in args.windows:
            trace, window = load_window(name, SHARED_TRACES_DIR)
            out.append((name, notice, schedule(trace, SLOTS, window, args.speedup, notice)))
    return out


def _trace_of(name: str) -> str:
    return next((w.trace for w in NAMED_WINDOWS if w.name == name), name.split(" ")[0])


def run_one(what: str, notice: str, replay: ReplaySchedule, mode: str, args: argparse.Namespace, root: Path) -> Row:
    slug = f"{what.split(' ')[0]}-{mode}-{notice}"
    cfg = drill_config(replay, mode, args.model, root / slug, args.checkpoint_every, args.step_s)
    report = run_drill(cfg, Progress(target=cfg.target_steps, every_s=30.0))
    row = Row(what, mode, notice, report, prices_for(_trace_of(what)))
    row.extra = {
        "changes": len(replay.changes),
        "replay_s": replay.duration_s,
        "max_restarts": cfg.spec.max_restarts,
        "model": model_figures(replay, mode, report, args.model),
    }
    try:
        row.plot = str(plot_timeline(report, args.plots / f"{slug}.png"))
    except Exception as exc:  # noqa: BLE001 - the figures stand without their plot
        print(f"  no plot for {slug}: {exc}", file=sys.stderr)
    return row


def model_figures(replay: ReplaySchedule, mode: str, report: DrillReport, model: str) -> dict[str, float] | None:
    """The goodput model's prediction of this replay (lab.vocab.trace_goodput), fed with the
    replay's schedule, its measured throughput per size and checkpoint interval: with the
    project's measured costs for the model's size, and with the stalls this replay measured
    itself."""
    if report.replay is None or report.replay.ratio is None:
        return None
    doc = {**report.to_dict(), "fault_tolerance": mode}
    measured = costs_for(model)
    return {
        "default_costs": check_against_replay(replay, doc, measured).predicted,
        "own_costs": check_against_replay(replay, doc, report_costs(doc, measured)).predicted,
    }


def _model_cell(figures: dict[str, Any]) -> str:
    model = figures.get("model")
    if not model:
        return "-"
    return f"{100 * model['default_costs']:.1f}%; {100 * model['own_costs']:.1f}%"


def table(rows: list[Row]) -> list[str]:
    head = (
        "| window | notice | mode | of the bound (at each size's rate) | model (its costs; this run's) | "
        "useful samples | wipeouts survived | steps lost per wipeout | "
        "samples lost / doubled | samples/s a node by size | preempted; added | restarts used | "
        "$ / M samples (spot; on demand) |"
    )
    lines = [head, "|---" * 13 + "|"]
    for row in rows:
        f, g = row.figures(), row.report.replay
        ratio = f"{g.ratio:.1%}" if g and g.ratio is not None else "no bound"
        if g and g.size_ratio is not None:
            ratio += f" ({g.size_ratio:.1%})"
        sizes = ", ".join(f"{t.nodes}: {t.per_node:.0f}" for t in g.per_size) if g else "-"
        lost = ", ".join(map(str, g.wipeout_steps_lost)) if g and g.wipeout_steps_lost else "-"
        cost = (
            f"{f['spot_cost_per_million']:.2f}; {f['on_demand_cost_per_million']:.2f}"
            if f["spot_cost_per_million"] is not None and f["on_demand_cost_per_million"] is not None
            else "no price"
        )
        lines.append(
            f"| {row.window} | {row.notice} | {row.mode}{'' if row.report.passed else ' (FAILED)'} | {ratio} | "
            f"{_model_cell(f)} | "
            f"{g.useful_samples if g else 0:,} | {f'{g.wipeouts_resumed}/{g.wipeouts}' if g else '-'} | {lost} | "
            f"{f['samples_lost']} / {f['samples_doubled']} | {sizes} | {f['preemptions']}; {f['nodes_added']} | "
            f"{f['restart_budget_used']} of "
            f"{f['max_restarts']} | {cost} |"
        )
    return lines


def main() -> int:
    args = arguments()
    planned = replays(args)  # every trace read and every window cut before anything starts
    root = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    args.plots = args.plots or root / "plots"
    rows: list[Row] = []
    args.step_s = full_size_step_s(planned[0][2], args.model, root)
    print(f"model {args.model}: a step at full size takes {args.step_s:.3f} s here", flush=True)
    for what, notice, replay in planned:
        print(
            f"{what}, notice {notice}: {len(replay.changes)} slot changes in {replay.duration_s:.0f} s of replay "
            f"({args.speedup:g}x)",
            flush=True,
        )
        for mode in args.modes:
            row = run_one(what, notice, replay, mode, args, root)
            rows.append(row)
            print("\n".join(table([row])[2:]), flush=True)
            if not row.report.passed:
                print("  problems: " + "; ".join(row.report.problems), flush=True)
    print("\n".join(table(rows)))
    print(
        f"model {args.model}, {SLOTS} slots, checkpoint every {args.checkpoint_every} steps, speed-up {args.speedup:g}x"
    )
    priced = {row.prices.said for row in rows if row.prices}
    print("prices: " + ("; ".join(sorted(priced)) or "none"))
    ratios = [r.report.replay.ratio for r in rows if r.report.replay and r.report.replay.ratio is not None]
    if ratios:
        print(f"plots in {args.plots}; median of the bound {statistics.median(ratios):.1%}")
    if args.json:
        args.json.write_text(json.dumps([row.figures() for row in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Is the model trained through evictions the one trained without them? For each
fault-tolerance mode: the same job drilled through a hard kill, a notice and a silent loss
(3 -> 2 -> 3 nodes) and a scale-out to 4, against its twin (the same job uninterrupted, the same
sample order) and uninterrupted runs in other sample orders (their spread is the yardstick:
lab.drill.parity). Per drill: the largest per-step loss difference from the twin, as a share
of the spread, and the last fifth's mean loss against the twin's; a plot of every curve's
difference from the twin.

Run: .venv/bin/python benchmarks/parity.py [--model gpt-small] [--steps 300] [--orders 2]
     [--modes elastic per-step] [--faults hard notice silent scale-out] [--batch-policy fixed-global]
     [--plot benchmarks/parity.png]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from real_size import DEFAULT_HEARTBEAT_S, HEARTBEAT_TIMEOUT_S

from lab.drill.convergence import Curve
from lab.drill.parity import Parity, differences, parity
from lab.drill.run import DrillConfig, Progress, run_drill, run_uninterrupted
from lab.vocab import events
from lab.vocab.batch_policy import BATCH_POLICIES
from lab.vocab.job import JobSpec
from lab.vocab.models import MODELS
from lab.vocab.per_step import PerStepSettings

MODES = ("elastic", "per-step")
FAULTS = ("hard", "notice", "silent", "scale-out")
# Per model: seconds of simulated accelerator time per micro-batch, steps between checkpoints,
# the drill's patience.
SETTINGS = {"tiny": (0.02, 50, 300), "gpt-small": (0.0, 25, 900), "gpt-100m": (0.0, 8, 3000)}


def _spec(args: argparse.Namespace, mode: str, workdir: Path, max_nodes: int) -> JobSpec:
    step_time, every, _ = SETTINGS[args.model]
    script = ["--steps", str(args.steps), "--step-time", f"{step_time:g}", "--model", args.model]
    return JobSpec(
        name="parity",
        min_nodes=2,
        max_nodes=max_nodes,
        fault_tolerance=mode,
        batch_policy=args.batch_policy,
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=every,
        pg_timeout_s=60 if args.model == "gpt-100m" else 15,
        per_step=PerStepSettings(heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S.get(args.model, DEFAULT_HEARTBEAT_S)),
        script_args=tuple(script),
    )


def _config(args: argparse.Namespace, mode: str, fault: str, workdir: Path) -> DrillConfig:
    """A drill of `fault`: an eviction a fifth into the run and a node back 2 s after the job
    recovered, or a scale-out from 3 to 4 nodes (a job of up to 4 nodes: its twin too)."""
    timeout = SETTINGS[args.model][2]
    if fault == "scale-out":
        return DrillConfig(
            spec=_spec(args, mode, workdir, 4),
            workdir=workdir,
            nodes=3,
            fault="scale",
            scale_to=(4,),
            target_steps=args.steps,
            evict_at_step=args.steps // 5,
            timeout_s=timeout,
        )
    return DrillConfig(
        spec=_spec(args, mode, workdir, 3),
        workdir=workdir,
        nodes=3,
        target_steps=args.steps,
        eviction=fault,
        notice_s=30,
        evict_at_step=args.steps // 5,
        scale_out_after_s=2.0,
        timeout_s=timeout,
    )


def _uninterrupted(cfg: DrillConfig, orders: int, progress: Progress) -> tuple[Curve, list[Curve]]:
    """The twin and `orders` runs in other sample orders of the drilled job."""
    curves = []
    for order in (None, *range(1, orders + 1)):
        recorded = run_uninterrupted(cfg, order_seed=order, progress=progress)
        curves.append(Curve.of(recorded))
    return curves[0], curves[1:]


def _drilled(cfg: DrillConfig, progress: Progress) -> tuple[Any, Curve]:
    report = run_drill(cfg, progress)
    print(report.summary(), file=sys.stderr, flush=True)
    return report, Curve.of(events.read(cfg.workdir / "events.jsonl"))


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=MODELS, default="gpt-small")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--orders", type=int, default=2, help="uninterrupted runs in other sample orders")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--faults", nargs="+", choices=FAULTS, default=list(FAULTS))
    p.add_argument("--batch-policy", choices=BATCH_POLICIES, default="fixed-global")
    p.add_argument("--plot", type=Path, default=None, help="draw every drill's difference from its twin here")
    args = p.parse_args(argv)
    if args.steps < 50:
        p.error(f"--steps={args.steps} is invalid: expected >= 50 (an eviction a fifth in, a node back after it)")
    if args.orders < 1:
        p.error(f"--orders={args.orders} is invalid: expected >= 1 (the yardstick is their spread)")
    return args


def main() -> int:
    args = arguments()
    root = Path(tempfile.mkdtemp(prefix="bench-parity-"))
    rows: list[tuple[str, str, Parity, dict[str, Any]]] = []
    for mode in args.modes:
        twins: dict[int, tuple[Curve, list[Curve]]] = {}  # by the job's maximum nodes
        for fault in args.faults:
            cfg = _config(args, mode, fault, root / f"{mode}-{fault}")
            print(f"{args.model} {mode} {fault}: {cfg.workdir}", file=sys.stderr, flush=True)
            # A drill waits for its warm-up on what its own progress saw: one each.
            report, drilled = _drilled(cfg, Progress(out=sys.stderr, every_s=30, target=args.steps))
            if cfg.spec.max_nodes not in twins:
                progress = Progress(out=sys.stderr, every_s=30, target=args.steps)
                twins[cfg.spec.max_nodes] = _uninterrupted(cfg, args.orders, progress)
            twin, others = twins[cfg.spec.max_nodes]
            result = parity(drilled, twin, others)
            curves = {"drilled": drilled, "twin": twin, "others": others}
            rows.append((mode, fault, result, {"passed": report.passed, "curves": curves}))
            print(result.summary(), file=sys.stderr, flush=True)
            for checkpoints in [p for p in cfg.workdir.rglob("*") if p.is_dir() and p.name in ("ckpt", "checkpoints")]:
                shutil.rmtree(checkpoints, ignore_errors=True)
    _table(args, rows)
    if args.plot is not None:
        _plot(args, rows, args.plot)
    return 0


def _table(args: argparse.Namespace, rows: list[tuple[str, str, Parity, dict[str, Any]]]) -> None:
    print(
        f"\n{args.model}, {args.steps} steps, {args.batch_policy}, {args.orders} uninterrupted run(s) in other orders"
    )
    print(
        "| mode | fault | drill | largest per-step difference | share of another order's | last fifth: drilled / twin "
        "| parity |"
    )
    print("|---|---|---|---|---|---|---|")
    for mode, fault, result, extra in rows:
        samples, diff = result.largest
        print(
            f"| {mode} | {fault} | {'PASSED' if extra['passed'] else 'FAILED'} | {abs(diff):.3g} (sample {samples}) "
            f"| {result.largest_fraction:.1%} of {result.spread:.3g} | {result.final_drilled:.4f} / "
            f"{result.final_twin:.4f} ({result.final_relative:+.2%}) | {'holds' if result.holds else 'does NOT hold'} |"
        )


def _plot(args: argparse.Namespace, rows: list[tuple[str, str, Parity, dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(rows), 2, figsize=(12, 2.6 * len(rows)), squeeze=False)
    for (mode, fault, result, extra), (curve_ax, diff_ax) in zip(rows, axes, strict=True):
        curves = extra["curves"]
        for i, other in enumerate(curves["others"]):
            curve_ax.plot(
                other.samples, other.loss, color="tab:grey", linewidth=0.6, label="other order" if i == 0 else None
            )
            d = differences(other, curves["twin"])
            diff_ax.plot([s for s, _ in d], [v for _, v in d], color="tab:grey", linewidth=0.6)
        curve_ax.plot(curves["twin"].samples, curves["twin"].loss, color="black", linewidth=0.9, label="uninterrupted")
        curve_ax.plot(
            curves["drilled"].samples, curves["drilled"].loss, color="tab:red", linewidth=0.9, label="drilled"
        )
        d = differences(curves["drilled"], curves["twin"])
        diff_ax.plot([s for s, _ in d], [v for _, v in d], color="tab:red", linewidth=1.0)
        diff_ax.axhline(0, color="black", linewidth=0.5)
        curve_ax.set_title(f"{mode}, {fault}: loss", fontsize=9)
        diff_ax.set_title(
            f"drilled - uninterrupted: largest {abs(result.largest[1]):.3g} ({result.largest_fraction:.1%} of another "
            f"order's), last fifth {result.final_relative:+.2%}",
            fontsize=9,
        )
        curve_ax.legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("samples trained")
    fig.suptitle(f"{args.model}: parity through evictions ({args.batch_policy})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())

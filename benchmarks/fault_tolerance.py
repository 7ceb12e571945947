"""Both fault-tolerance modes side by side, same schedule: 3 nodes, one evicted (hard kill,
notice, silent loss) at the same step, one added back after the same pause, same model,
data and checkpoints. Per eviction: the survivors' stall (elastic: eviction -> first step
at the smaller world size, every worker restarted; per-step: eviction -> the survivors'
first committed step in a quorum without the evicted group), committed steps lost,
in-flight steps discarded (per-step); per join: node start -> first step with it (per-step
also: its workers started -> its first step in a quorum), and the survivors' longest stall
meanwhile; per run, the samples its model was trained on lost or doubled (the drill's sample
ledger, lab/drill/ledger.py: the goal is none). Prints medians and a plot.

Run: .venv/bin/python benchmarks/fault_tolerance.py [--runs 5] [--evictions hard notice silent]
     [--modes elastic per-step] [--plot fault_tolerance.png]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lab.drill.ledger import lost_and_doubled
from lab.drill.run import DrillConfig, Progress, run_drill
from lab.vocab.job import JobSpec

MODES = ("elastic", "per-step")
EVICTIONS = ("hard", "notice", "silent")


def one(mode: str, eviction: str, root: Path, steps: int, every: int) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix=f"{mode}-{eviction}-", dir=root))
    spec = JobSpec(
        name="bench",
        min_nodes=2,
        max_nodes=3,
        fault_tolerance=mode,
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=every,
        script_args=("--steps", str(steps), "--step-time", "0.03"),
    )
    cfg = DrillConfig(
        spec=spec,
        workdir=workdir,
        nodes=3,
        target_steps=steps,
        eviction=eviction,
        notice_s=30,
        evict_at_step=steps // 4,
        scale_out_after_s=2.0,
        timeout_s=240,
    )
    report = run_drill(cfg, Progress(out=open("/dev/null", "w")))  # noqa: SIM115 - closed with the process
    ev = report.evictions[0] if report.evictions else None
    join = report.joins[0] if report.joins else None
    return {
        "passed": report.passed,
        "stall_s": ev.recovery_s if ev else None,
        "lost": ev.lost_steps if ev else None,
        "discarded": ev.discarded_steps if ev else None,
        "join_s": join.join_s if join else None,
        "join_stall_s": join.stall_s if join else None,
        "from_workers_s": join.from_workers_s if join else None,
        "duration_s": report.duration_s,
        "samples": report.ledger,
        "problems": report.problems,
    }


def med(values: list) -> float:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else float("nan")


def plot(results: dict[tuple[str, str], list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evictions = sorted({e for _, e in results}, key=EVICTIONS.index)
    modes = sorted({m for m, _ in results}, key=MODES.index)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        xs = [k + i * width for k in range(len(evictions))]
        stalls = [med([r["stall_s"] for r in results.get((mode, e), [])]) for e in evictions]
        axes[0].bar(xs, stalls, width, label=mode)
        for e_i, e in enumerate(evictions):
            runs = [r["stall_s"] for r in results.get((mode, e), []) if r["stall_s"] is not None]
            axes[0].scatter([xs[e_i]] * len(runs), runs, color="black", s=8, zorder=3)
    axes[0].set_xticks([k + width * (len(modes) - 1) / 2 for k in range(len(evictions))], evictions)
    axes[0].set_ylabel("seconds")
    axes[0].set_title("survivors' stall after an eviction (median, dots: runs)")
    axes[0].legend()
    joins = [med([r["join_s"] for e in evictions for r in results.get((m, e), [])]) for m in modes]
    join_stalls = [med([r["join_stall_s"] for e in evictions for r in results.get((m, e), [])]) for m in modes]
    axes[1].bar([k - 0.2 for k in range(len(modes))], joins, 0.4, label="node start -> trains with it")
    axes[1].bar([k + 0.2 for k in range(len(modes))], join_stalls, 0.4, label="survivors' longest stall meanwhile")
    axes[1].set_xticks(range(len(modes)), modes)
    axes[1].set_title("a node joining (median)")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, parsed and checked before anything starts (`argv`: sys.argv's by default)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--evictions", nargs="+", choices=EVICTIONS, default=list(EVICTIONS))
    p.add_argument("--plot", type=Path, default=None, help="write a bar chart of the medians here (PNG)")
    args = p.parse_args(argv)
    return args


def main() -> int:
    args = arguments()
    root = Path(tempfile.mkdtemp(prefix="bench-fault-tolerance-"))
    results: dict[tuple[str, str], list[dict]] = {}
    # Interleaved, run by run: both modes see the same machine load.
    for i in range(args.runs):
        for eviction in args.evictions:
            for mode in args.modes:
                t = time.time()
                r = one(mode, eviction, root, args.steps, args.checkpoint_every)
                results.setdefault((mode, eviction), []).append(r)
                stall = "none" if r["stall_s"] is None else f"{r['stall_s']:.2f} s"
                join = "none" if r["join_s"] is None else f"{r['join_s']:.2f} s"
                print(
                    f"  run {i + 1}/{args.runs} {mode:<8} {eviction:<7} stall {stall}, lost {r['lost']}, "
                    f"discarded {r['discarded']}, join {join}, "
                    f"samples lost/doubled {lost_and_doubled([r['samples']])}, "
                    f"passed {r['passed']} ({time.time() - t:.0f} s)" + ("" if r["passed"] else f" {r['problems']}"),
                    file=sys.stderr,
                    flush=True,
                )
    print(
        f"\nOne of 3 nodes evicted at step {args.steps // 4} of {args.steps}, one added back 2 s after recovery "
        f"({args.runs} runs each, checkpoint every {args.checkpoint_every} steps)"
    )
    print(
        f"{'mode':<9} {'eviction':<8} {'stall s':>8} {'min s':>6} {'max s':>6} {'lost':>5} {'discarded':>9} "
        f"{'join s':>7} {'workers->quorum s':>17} {'join stall s':>12} {'samples lost/doubled':>20} {'passed':>7}"
    )
    for (mode, eviction), rs in results.items():
        stalls = [r["stall_s"] for r in rs if r["stall_s"] is not None] or [float("nan")]
        print(
            f"{mode:<9} {eviction:<8} {med(stalls):8.2f} {min(stalls):6.2f} {max(stalls):6.2f} "
            f"{med([r['lost'] for r in rs]):5.0f} {med([r['discarded'] for r in rs]):9.0f} "
            f"{med([r['join_s'] for r in rs]):7.2f} {med([r['from_workers_s'] for r in rs]):17.2f} "
            f"{med([r['join_stall_s'] for r in rs]):12.2f} {lost_and_doubled(r['samples'] for r in rs):>20} "
            f"{sum(r['passed'] for r in rs):>4}/{len(rs)}"
        )
    if args.plot:
        plot(results, args.plot)
        print(f"plot: {args.plot}")
    return 0 if all(r["passed"] for rs in results.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())

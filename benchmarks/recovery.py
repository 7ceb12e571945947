"""Recovery after an eviction of one of three nodes: hard kill, notice and silent loss (the
node's tree stopped, as a vanished VM), etcd-v2 and c10d; our rendezvous settings or
torchrun's defaults. The demo trains with DistributedDataParallel and torch.optim. Prints
medians of several drills on the local target, and the samples their models were trained on
lost or doubled over all runs (the drill's sample ledger, lab/drill/ledger.py: the goal is none).

Run: .venv/bin/python benchmarks/recovery.py [--runs 5] [--backends etcd-v2 c10d]
     [--evictions hard notice silent] [--settings ours torch-defaults]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lab.drill.ledger import lost_and_doubled
from lab.drill.run import DrillConfig, Progress, run_drill
from lab.vocab.job import JobSpec
from lab.vocab.rendezvous_timeouts import RendezvousTimeouts

SETTINGS = {"ours": RendezvousTimeouts(), "torch-defaults": RendezvousTimeouts.torch_defaults()}


def one(
    settings: str,
    eviction: str,
    backend: str,
    root: Path,
    steps: int,
    every: int,
    save_on_failure: bool = True,
    evict_at: int | None = None,
) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix=f"{settings}-{eviction}-", dir=root))
    spec = JobSpec(
        name="bench",
        min_nodes=2,
        max_nodes=3,
        rdzv_backend=backend,
        rdzv_timeouts=SETTINGS[settings],
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=every,
        script_args=(
            "--steps",
            str(steps),
            "--step-time",
            "0.03",
            *(() if save_on_failure else ("--no-save-on-failure",)),
        ),
    )
    cfg = DrillConfig(
        spec=spec,
        workdir=workdir,
        nodes=3,
        target_steps=steps,
        eviction=eviction,
        notice_s=30,
        evict_at_step=evict_at or steps // 4,
        scale_out_after_s=None,
        timeout_s=300,
    )
    with open(os.devnull, "w") as quiet:
        report = run_drill(cfg, Progress(out=quiet))
    (ev,) = report.evictions
    return {
        "passed": report.passed,
        "recovery_s": ev.recovery_s,
        "lost": ev.lost_steps,
        "save_s": ev.emergency_save_s,
        "rdzv_s": ev.rendezvous_s,
        "detected_s": ev.detected_s,
        "restarts_used": report.max_restart_count,
        "samples": report.ledger,
    }


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, parsed and checked before anything starts (`argv`: sys.argv's by default)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--backends", nargs="+", default=["etcd-v2", "c10d"])
    p.add_argument("--steps", type=int, default=160)
    p.add_argument("--checkpoint-every", type=int, default=40)
    p.add_argument("--settings", nargs="+", default=["ours"], choices=list(SETTINGS))
    p.add_argument("--evictions", nargs="+", default=["hard", "notice", "silent"])
    p.add_argument(
        "--evict-at-step",
        type=int,
        default=None,
        help="evict when this step is reached (default steps/4); mid-interval shows lost work",
    )
    p.add_argument(
        "--no-save-on-failure",
        action="store_true",
        help="workers do not save when a peer vanishes: lost work is bounded by the timer alone",
    )
    args = p.parse_args(argv)
    return args


def main() -> int:
    args = arguments()
    root = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    results: dict[tuple[str, str, str], list[dict]] = {}
    for settings in args.settings:
        for backend in args.backends:
            for eviction in args.evictions:
                for i in range(args.runs):
                    t = time.time()
                    r = one(
                        settings,
                        eviction,
                        backend,
                        root,
                        args.steps,
                        args.checkpoint_every,
                        save_on_failure=not args.no_save_on_failure,
                        evict_at=args.evict_at_step,
                    )
                    results.setdefault((settings, backend, eviction), []).append(r)
                    rec = "none" if r["recovery_s"] is None else f"{r['recovery_s']:.2f} s"
                    print(
                        f"  {settings:<15} {backend:<8} {eviction:<7} run {i + 1}/{args.runs}: recovery {rec}, "
                        f"lost {r['lost']} steps, samples lost/doubled {lost_and_doubled([r['samples']])}, "
                        f"passed {r['passed']} ({time.time() - t:.0f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
    print(
        f"\nRecovery of 1 of 3 nodes ({args.runs} runs each, checkpoint every {args.checkpoint_every} steps, "
        f"save-on-failure {'off' if args.no_save_on_failure else 'on'})"
    )
    print(
        f"{'settings':<15} {'backend':<8} {'eviction':<8} {'median s':>9} {'min s':>7} {'max s':>7} "
        f"{'seen s':>7} {'rdzv s':>7} {'lost steps':>10} {'max lost':>8} {'save s':>7} "
        f"{'samples lost/doubled':>20} {'passed':>7}"
    )
    for (settings, backend, eviction), rs in results.items():
        rec = [r["recovery_s"] for r in rs if r["recovery_s"] is not None] or [float("nan")]
        lost = [r["lost"] for r in rs if r["lost"] is not None] or [float("nan")]
        print(
            f"{settings:<15} {backend:<8} {eviction:<8} {med(rec):9.2f} {min(rec):7.2f} {max(rec):7.2f} "
            f"{med([r['detected_s'] for r in rs]):7.2f} {med([r['rdzv_s'] for r in rs]):7.2f} "
            f"{med(lost):10.1f} {max(lost):8.0f} {med([r['save_s'] for r in rs]):7.3f} "
            f"{lost_and_doubled(r['samples'] for r in rs):>20} {sum(r['passed'] for r in rs):>4}/{len(rs)}"
        )
    for backend in args.backends:
        for eviction in args.evictions:
            ours, defaults = (
                results.get(("ours", backend, eviction)),
                results.get(("torch-defaults", backend, eviction)),
            )
            if ours and defaults:
                a, b = med([r["recovery_s"] for r in defaults]), med([r["recovery_s"] for r in ours])
                print(f"ratio torch-defaults / ours ({backend}, {eviction}): {a / b:.1f}x")
    return 0 if all(r["passed"] for rs in results.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())

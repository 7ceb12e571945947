"""A rendezvous server restart under a running job: the server is stopped for a few seconds while
3 nodes train, then started again at the same address (etcd with its data, as a restarted pod;
etcd empty, as a pod moved to another node; a c10d store, which always restarts empty); then one
node is evicted and one added, through the restarted server. Prints, per case, the medians of
several drills: the longest gap between steps around the outage, worker restarts and steps lost
because of it, the eviction's recovery after it, and the samples the models were trained on
lost or doubled over all runs (the drill's sample ledger, lab/drill/ledger.py: the goal is none).

Run: .venv/bin/python benchmarks/rendezvous_outage.py [--runs 5] [--outage 3] [--cases etcd-kept etcd-lost c10d]
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

CASES = {"etcd-kept": ("etcd-v2", True), "etcd-lost": ("etcd-v2", False), "c10d": ("c10d", False)}


def one(case: str, outage_s: float, root: Path, steps: int) -> dict:
    backend, keeps_data = CASES[case]
    workdir = Path(tempfile.mkdtemp(prefix=f"outage-{case}-", dir=root))
    spec = JobSpec(
        name="bench",
        min_nodes=2,
        max_nodes=3,
        rdzv_backend=backend,
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=40,
        script_args=("--steps", str(steps), "--step-time", "0.03"),
    )
    cfg = DrillConfig(
        spec=spec,
        workdir=workdir,
        nodes=3,
        fault="rendezvous-restart",
        outage_s=outage_s,
        outage_keeps_data=keeps_data,
        target_steps=steps,
        evict_at_step=steps // 8,
        scale_out_after_s=1.0,
        timeout_s=300,
    )
    with open(os.devnull, "w") as quiet:
        report = run_drill(cfg, Progress(out=quiet))
    (outage,) = report.outages
    ev = report.evictions[0] if report.evictions else None
    return {
        "passed": report.passed,
        "down_s": outage.down_s,
        "stall_s": outage.stall_s,
        "steps_during": outage.steps_during,
        "restarts": outage.restarts,
        "lost": outage.lost_steps,
        "cut_off_s": outage.agents_cut_off_s,
        "evict_recovery_s": ev.recovery_s if ev else None,
        "samples": report.ledger,
    }


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, parsed and checked before anything starts (`argv`: sys.argv's by default)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--outage", type=float, default=3.0, help="seconds the server stays stopped (default 3)")
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    p.add_argument("--steps", type=int, default=320)
    args = p.parse_args(argv)
    return args


def main() -> int:
    args = arguments()
    root = Path(tempfile.mkdtemp(prefix="bench-outage-"))
    results: dict[str, list[dict]] = {}
    for case in args.cases:
        for i in range(args.runs):
            t = time.time()
            r = one(case, args.outage, root, args.steps)
            results.setdefault(case, []).append(r)
            print(
                f"  {case:<9} run {i + 1}/{args.runs}: server down {r['down_s']:.2f} s, stall {r['stall_s']:.2f} s, "
                f"restarts {r['restarts']}, lost {r['lost']}, eviction after it recovered in "
                f"{r['evict_recovery_s']:.2f} s, samples lost/doubled {lost_and_doubled([r['samples']])}, "
                f"passed {r['passed']} ({time.time() - t:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    print(
        f"\nRendezvous server stopped {args.outage:g} s under 3 training nodes, then restarted "
        f"(median of {args.runs} runs; 'down' counts until the restarted server answers)"
    )
    print(
        f"{'case':<9} {'down s':>7} {'agents cut off s':>16} {'stall s':>8} {'max stall s':>11} "
        f"{'steps during':>12} {'restarts':>8} {'lost':>5} {'eviction after s':>16} {'samples lost/doubled':>20}"
    )
    for case, rs in results.items():
        print(
            f"{case:<9} {med([r['down_s'] for r in rs]):7.2f} {med([r['cut_off_s'] for r in rs]):16.2f} "
            f"{med([r['stall_s'] for r in rs]):8.2f} {max(r['stall_s'] or 0 for r in rs):11.2f} "
            f"{med([r['steps_during'] for r in rs]):12.0f} {med([r['restarts'] for r in rs]):8.0f} "
            f"{med([r['lost'] for r in rs]):5.0f} {med([r['evict_recovery_s'] for r in rs]):16.2f} "
            f"{lost_and_doubled(r['samples'] for r in rs):>20}"
        )
    return 0 if all(r["passed"] for rs in results.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())

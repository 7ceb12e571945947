"""Checkpoint cost of the demo model: save seconds (timer and emergency saves use the same
path), step time, the interval Young's formula gives, and the measured overhead there.

Run: .venv/bin/python benchmarks/checkpoint_overhead.py [--mtbf 3600]
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from lab.runtime.checkpoint import CheckpointStore
from lab.runtime.demo import make_model
from lab.vocab import events
from lab.vocab.events import Event


def save_seconds(repeats: int = 20) -> tuple[float, int]:
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(8, 32)).sum().backward()
    opt.step()  # momentum buffers exist, as in a real checkpoint
    store = CheckpointStore(tempfile.mkdtemp(prefix="bench-ckpt-"), keep=2)
    times, size = [], 0
    for step in range(repeats):
        saved = store.save(
            {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "step": step,
                "rng": {"torch": torch.get_rng_state()},
            },
            step,
            "bench",
        )
        times.append(saved.seconds)
        size = saved.nbytes
    return statistics.median(times), size


def run_job(workdir: Path, steps: int, every: int, step_time: float, nproc: int = 2) -> list[dict]:
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LAB_EVENTS_FILE": str(workdir / "events.jsonl"), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "lab.runtime.train",
        "--steps",
        str(steps),
        "--checkpoint-every",
        str(every),
        "--step-time",
        f"{step_time:g}",
        "--checkpoint-dir",
        str(workdir / "ckpt"),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"the training job failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return events.read(workdir / "events.jsonl")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, parsed and checked before anything starts (`argv`: sys.argv's by default)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mtbf", type=float, default=3600.0, help="mean seconds between evictions (default 3600)")
    p.add_argument("--step-time", type=float, default=0.05, help="simulated accelerator seconds per step")
    p.add_argument("--steps", type=int, default=600)
    args = p.parse_args(argv)
    return args


def main() -> int:
    args = arguments()

    c, nbytes = save_seconds()
    print(f"checkpoint save (model + optimizer + RNG, {nbytes / 1e6:.2f} MB, fsync + rename): median {c * 1000:.1f} ms")
    root = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    base = run_job(root / "none", args.steps, 10**9, args.step_time)
    step_t = [e["t"] for e in base if e["event"] == Event.STEP]
    step_s = statistics.median(b - a for a, b in itertools.pairwise(step_t))
    base_wall = step_t[-1] - step_t[0]
    young_s = math.sqrt(2 * c * args.mtbf)
    every = max(1, round(young_s / step_s))
    print(f"step time (2 workers, gloo, {args.step_time:g} s simulated compute): median {step_s * 1000:.1f} ms")
    print(f"Young's interval sqrt(2 x C x MTBF) with MTBF {args.mtbf:g} s: {young_s:.2f} s = {every} steps")

    # Measured: the same job with checkpoints at Young's interval, and at 10x that rate.
    for label, k in (("Young", every), ("10x more often", max(1, every // 10))):
        ev = run_job(root / f"every-{k}", args.steps, k, args.step_time)
        steps = [e for e in ev if e["event"] == Event.STEP]
        saves = [e["blocking_s"] for e in ev if e["event"] == Event.CHECKPOINT_SAVED and e["reason"] == "interval"]
        wall = steps[-1]["t"] - steps[0]["t"]
        print(
            f"  every {k:>4} steps ({label}): {len(saves)} saves blocked training {sum(saves):.3f} s of {wall:.1f} s "
            f"= {100 * sum(saves) / wall:.3f} % overhead (wall time {wall - base_wall:+.2f} s vs no checkpoints)"
        )
    print(f"expected overhead at Young's interval C / interval = {100 * c / young_s:.3f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())

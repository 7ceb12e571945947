"""The real-size figures that depend on the accelerator, measured on a machine with one GPU
(falls back to the CPU elsewhere, to try the script):

1. checkpoints: the demo job (`lab.runtime.train`, FSDP2, sharded asynchronous DCP saves) on one
   node under plain `torchrun --standalone`, one worker on the GPU (NCCL); a save every
   `--every` steps, then a spot notice (SIGTERM to torchrun) for the emergency save. From the
   job's own events: training blocked per save, a save in the background, the steps' time with
   no save in flight and during one, a save's whole cost to training and the overhead at Young's
   interval (MTBF 1 h), the emergency save, the steps lost on the notice.
2. per-step: the per-step (TorchFT) hard-kill drill of benchmarks/real_size.py, 3 replica groups
   of one worker each, all on the one GPU (one NCCL communicator each; the groups reduce across
   over gloo): the survivors' stall, the heal of the group added back, the join.

One GPU cannot hold an elastic drill of several nodes: NCCL refuses two ranks of one
communicator on the same device, so the elastic recovery figures stay those of real_size.py.

Run: python benchmarks/accelerator.py [--model gpt-100m] [--parts checkpoints per-step]
     [--json results.json] [--keep logs.tar.gz]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from real_size import SIZES, _fmt, checkpoint_costs, drill, per_step_figures

from lab.vocab import events
from lab.vocab.events import Event
from lab.vocab.job import ENV_EVENTS_FILE


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"CPU ({os.cpu_count()} cores), torch {torch.__version__}"


def _session_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def checkpoints(model: str, steps: int, every: int, batch: int, staging: str, workdir: Path) -> dict[str, Any]:
    """One node, one worker: interval saves, then a notice at `steps` for the emergency save."""
    events_path = workdir / "events.jsonl"
    env = {**os.environ, ENV_EVENTS_FILE: str(events_path)}
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "1",
        "-m",
        "lab.runtime.train",
        *("--model", model, "--steps", str(steps + 10_000), "--checkpoint-every", str(every)),
        *("--checkpoint-dir", str(workdir / "ckpt"), "--batch-size", str(batch), "--notice-seconds", "30"),
        "--pinned-staging" if staging == "pinned" else "--no-pinned-staging",
    ]
    log = (workdir / "train.log").open("wb")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    tail = events.Tail(events_path)
    reached, noticed_at = 0, None
    deadline = time.monotonic() + 900
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            for e in tail.poll():
                if e["event"] == Event.STEP:
                    reached = max(reached, e["step"])
            if noticed_at is None and reached >= steps:
                noticed_at = time.time()
                os.kill(proc.pid, signal.SIGTERM)  # the spot notice, as the notice handler sends it
                print(f"  notice at step {reached}", file=sys.stderr, flush=True)
            time.sleep(0.05)
        # torchrun may return before its worker has finished the emergency save: wait for
        # every process of the session to end.
        while time.monotonic() < deadline and _session_alive(proc.pid):
            time.sleep(0.1)
    finally:
        if _session_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
    recorded = events.read(events_path)
    left = next((e for e in reversed(recorded) if e["event"] == Event.EXIT), None)
    out: dict[str, Any] = {
        "exit": left.get("reason") if left else None,
        "notice_at_step": reached if noticed_at else None,
    }
    built = next((e for e in recorded if e["event"] == Event.MODEL_BUILT), None)
    out["parameters"] = built["parameters"] if built else None
    # A process's first save allocates the host buffers it stages into (pinned memory on a
    # GPU), once: the later saves are what every checkpoint interval costs.
    saves = [e for e in recorded if e["event"] == Event.CHECKPOINT_SAVED and e.get("reason") == "interval"]
    first_done = saves[0]["t"] if saves else math.inf
    out["first_save"] = checkpoint_costs([e for e in recorded if e["t"] <= first_done], every)
    out["checkpoints"] = checkpoint_costs([e for e in recorded if e["t"] > first_done], every)
    notice = [e for e in recorded if e["event"] == Event.CHECKPOINT_SAVED and e.get("reason") != "interval"]
    last_step = max((e["step"] for e in recorded if e["event"] == Event.STEP), default=None)
    out["notice"] = {
        "emergency_save_s": notice[-1]["seconds"] if notice else None,
        "saved_step": notice[-1]["step"] if notice else None,
        "last_step": last_step,
        "lost_steps": (last_step - notice[-1]["step"]) if notice and last_step is not None else None,
    }
    quiet = [e["seconds"] for e in recorded if e["event"] == Event.STEP and "seconds" in e]
    out["steps"] = len(quiet)
    out["step_s_median_all"] = statistics.median(quiet) if quiet else None
    rss = [e["peak_rss_mb"] for e in recorded if "peak_rss_mb" in e]
    out["peak_rss_mb"] = max(rss) if rss else None
    return out


def table(device: str, model: str, runs: dict[str, dict[str, Any]], per_step: dict[str, Any] | None) -> str:
    lines = [f"{model} on {device}"]
    for staging, ckpt in runs.items():
        c, first = ckpt["checkpoints"], ckpt["first_save"]
        lines += [
            "",
            f"| checkpoints, {staging} staging | |",
            "|---|---|",
            f"| parameters | {_fmt(ckpt['parameters'])} |",
            f"| a process's first save: blocked / whole cost | {_fmt(first['blocked_s'], ' s', 3)} / "
            f"{_fmt(first['cost_s'], ' s', 3)} |",
            f"| later interval saves | {c['saves']} of {_fmt(c['bytes'] / 1e6, ' MB', 1)} each |",
            f"| training blocked per save | {_fmt(c['blocked_s'], ' s', 3)} |",
            f"| a save in the background | {_fmt(c['save_s'], ' s', 2)} |",
            f"| step: no save in flight / during one | {_fmt(c['step_s'], ' s', 4)} / "
            f"{_fmt(c['step_s_during_save'], ' s', 4)} |",
            f"| a save's whole cost to training | {_fmt(c['cost_s'], ' s', 3)} |",
            f"| Young's interval (MTBF 1 h) | {_fmt(c['young_interval_s'], ' s', 1)} |",
            f"| overhead at Young's interval | {_fmt(c['overhead_at_young_pct'], ' %', 2)} |",
            f"| emergency save on a notice | {_fmt(ckpt['notice']['emergency_save_s'], ' s', 3)} |",
            f"| steps lost on the notice | {_fmt(ckpt['notice']['lost_steps'])} |",
            f"| the worker left because of | {ckpt['exit']} |",
        ]
    if per_step:
        lines += [
            "",
            "| per-step mode | |",
            "|---|---|",
            f"| per-step: survivors' stall | {_fmt(per_step['survivors_stall_s'], ' s', 3)} |",
            f"| per-step: committed steps lost | {_fmt(per_step['committed_lost'])} |",
            f"| per-step: heal (bytes) | {_fmt(per_step['heal_s'], ' s', 3)} "
            f"({_fmt((per_step['heal_bytes'] or 0) / 1e6, ' MB', 0)}) |",
            f"| per-step: join | {_fmt(per_step['join_s'], ' s', 2)} |",
            f"| per-step: survivors' stall during the join | "
            f"{_fmt(per_step['survivors_stall_during_join_s'], ' s', 3)} |",
            f"| per-step: drill passed | {per_step['passed']} |",
        ]
    return "\n".join(lines)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, parsed and checked before anything starts (`argv`: sys.argv's by default)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt-100m", choices=[m for m in SIZES if m != "tiny"])
    p.add_argument("--parts", nargs="+", default=["checkpoints", "per-step"], choices=["checkpoints", "per-step"])
    p.add_argument("--steps", type=int, default=500, help="steps before the notice (checkpoints)")
    p.add_argument(
        "--every", type=int, default=100, help="steps between interval saves, more than a save takes (checkpoints)"
    )
    p.add_argument("--batch-size", type=int, default=8, help="samples per step (checkpoints)")
    p.add_argument(
        "--staging",
        nargs="+",
        default=["pinned", "plain"],
        choices=["pinned", "plain"],
        help="host memory the state is staged into (checkpoints; pinned needs a GPU)",
    )
    p.add_argument(
        "--per-step-steps", type=int, default=150, help="steps of the per-step drill: time for a group to join"
    )
    p.add_argument("--per-step-every", type=int, default=40, help="steps between the per-step drill's saves")
    p.add_argument("--json", type=Path, default=None, help="write the figures as JSON here")
    p.add_argument("--keep", type=Path, default=None, help="archive the runs' events and logs here (.tar.gz)")
    args = p.parse_args(argv)
    return args


def main() -> int:
    args = arguments()
    device = device_name()
    print(f"device: {device}", file=sys.stderr, flush=True)
    # Stopped from outside (a time limit): the runs' processes stop and their logs are kept.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    root = Path(tempfile.mkdtemp(prefix="bench-accelerator-"))
    results: dict[str, Any] = {"device": device, "model": args.model}
    try:
        results["checkpoints"] = {}
        for staging in args.staging if "checkpoints" in args.parts else []:
            workdir = root / f"checkpoints-{staging}"
            workdir.mkdir()
            print(f"  checkpoints, {staging} staging: {workdir}", file=sys.stderr, flush=True)
            results["checkpoints"][staging] = checkpoints(
                args.model, args.steps, args.every, args.batch_size, staging, workdir
            )
            shutil.rmtree(workdir / "ckpt", ignore_errors=True)
        if "per-step" in args.parts:
            size = dataclasses.replace(SIZES[args.model], steps=args.per_step_steps, every=args.per_step_every)
            report, recorded = drill(args.model, "per-step", "hard", root, 0, size)
            results["per_step"] = {**per_step_figures(report, recorded), "passed": report.passed}
        print(table(device, args.model, results.get("checkpoints"), results.get("per_step")))
        if args.json:
            args.json.write_text(json.dumps(results, indent=2, default=str))
    finally:
        if args.keep:
            with tarfile.open(args.keep, "w:gz") as archive:
                for f in sorted(root.rglob("*")):
                    if f.is_file() and f.suffix in (".jsonl", ".log", ".json", ".txt"):
                        archive.add(f, arcname=str(f.relative_to(root)))
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

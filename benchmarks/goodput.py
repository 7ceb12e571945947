"""Goodput under a repeated eviction schedule: elastic (continue at the smaller world size,
grow back when capacity returns; every worker restarts at each change), per-step (TorchFT:
the survivors train on, a returning node heals from them) and restart-everything (all nodes
stopped at each eviction, the job restarted from its checkpoint once capacity is back).
Same schedule, same model.

Goodput = useful samples (those in the steps of the final model's history) per second of
wall time from the first step to the end.

Run: .venv/bin/python benchmarks/goodput.py [--evict-every 15] [--evictions 4] [--capacity-back 8]
     [--modes elastic per-step restart-everything] [--checkpoint-every 50 (0: derived)] [--model tiny]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from lab.local import LocalTarget, LocalTargetError
from lab.vocab import events
from lab.vocab.events import Event
from lab.vocab.job import JobSpec

MODES = ("elastic", "per-step", "restart-everything")


def useful_samples(evs: list[dict]) -> tuple[int, float]:
    steps = [e for e in evs if e["event"] == Event.STEP]
    final = {}
    for e in steps:  # a re-done step replaces the lost one
        final[e["step"]] = e["samples"]
    return sum(final.values()), steps[-1]["t"] - steps[0]["t"]


def evict_if_alive(local: LocalTarget, node) -> None:
    try:
        local.evict(node)
    except LocalTargetError:
        pass  # it exited between the check and the kill (the job just finished)


def drive(
    mode: str,
    workdir: Path,
    steps: int,
    evict_every: float,
    max_evictions: int,
    capacity_back: float,
    every: int,
    model: str = "tiny",
) -> dict:
    elastic = mode in ("elastic", "per-step")
    spec = JobSpec(
        name="goodput",
        min_nodes=2 if elastic else 3,
        max_nodes=3,
        fault_tolerance="per-step" if mode == "per-step" else "elastic",
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=every,
        script_args=("--model", model, "--steps", str(steps), "--step-time", "0.05"),
    )
    with LocalTarget(spec, workdir) as local:
        for _ in range(3):
            local.add_node()
        tail, seen = events.Tail(local.events_file), []
        evictions, pending_returns, next_evict = 0, [], None
        while True:
            seen.extend(tail.poll())
            now = time.time()
            if any(e["event"] == Event.EXIT and e.get("reason") == "done" for e in seen):
                if not local.wait(60):
                    raise RuntimeError("nodes did not exit after the job finished")
                break
            if next_evict is None and any(e["event"] == Event.STEP for e in seen):
                next_evict = now + evict_every
            if next_evict is not None and now >= next_evict and evictions < max_evictions and local.alive_nodes:
                evict_if_alive(local, local.alive_nodes[-1])  # hard kill: the spot node is gone
                evictions += 1
                if elastic:
                    pending_returns.append(now + capacity_back)  # a replacement spot node
                else:  # restart-everything: stop the whole job, start it again on 3 nodes
                    for node in local.alive_nodes:
                        evict_if_alive(local, node)
                    local.spec = local.spec.replace(rdzv_id=f"goodput-restart-{evictions}")
                    pending_returns += [now + capacity_back] * 3
                next_evict = now + evict_every
            for t in [t for t in pending_returns if t <= now]:
                pending_returns.remove(t)
                local.add_node()
            if not local.alive_nodes and not pending_returns:
                raise RuntimeError(f"{mode}: every node is gone and none is coming back")
            time.sleep(0.05)
    recorded = local.events()
    samples, wall = useful_samples(recorded)
    # A derived interval (--checkpoint-every 0): the decisions where what it knew changed, and the last.
    chosen = [e for e in recorded if e["event"] == Event.CHECKPOINT_INTERVAL]
    turns = [e for i, e in enumerate(chosen) if i == 0 or e["evictions"] != chosen[i - 1]["evictions"]]
    intervals = [
        f"step {e['step']}: {e['steps']} steps ({e['source']}, {e['evictions']} eviction(s), "
        f"a node lost every {e['mtbf_s']:.0f} s; a save {e['cost_s']:.3f} s, a step {e['step_s']:.3f} s)"
        for e in turns + chosen[-1:]
    ]
    if chosen:
        intervals.append(f"{len(chosen)} decisions, {sum(1 for e in chosen if e['source'] == 'observed')} observed")
    result = {"mode": mode, "evictions": evictions, "samples": samples, "wall_s": wall, "goodput": samples / wall}
    return result | {"intervals": intervals}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--evict-every", type=float, default=15.0, help="seconds between evictions (default 15)")
    p.add_argument("--evictions", type=int, default=4, help="evictions in the schedule (default 4)")
    p.add_argument(
        "--capacity-back",
        type=float,
        default=8.0,
        help="seconds until a replacement node is available after an eviction (default 8)",
    )
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps; 0: derived while the job runs (elastic)")
    p.add_argument(
        "--model",
        choices=("tiny", "gpt-small"),
        default="tiny",
        help="the demo's model: tiny (whole checkpoints) or gpt-small (sharded) [tiny]",
    )
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-goodput-"))
    results = {}
    for mode in args.modes:
        r = drive(
            mode,
            root / mode,
            args.steps,
            args.evict_every,
            args.evictions,
            args.capacity_back,
            args.checkpoint_every,
            args.model,
        )
        results[mode] = r
        print(
            f"{mode:<19} {r['evictions']} evictions, {r['samples']} useful samples in {r['wall_s']:.1f} s "
            f"= {r['goodput']:.0f} samples/s",
            flush=True,
        )
        for line in r["intervals"]:
            print(f"  checkpoint interval: {line}", flush=True)
    schedule = (
        f"{args.evictions} evictions, one every {args.evict_every:g} s, capacity back after "
        f"{args.capacity_back:g} s, checkpoint every {args.checkpoint_every or 'derived'} steps, model {args.model}"
    )
    if "restart-everything" in results:
        base = results["restart-everything"]["goodput"]
        for mode in (m for m in results if m != "restart-everything"):
            print(f"goodput ratio {mode} / restart-everything: {results[mode]['goodput'] / base:.2f} ({schedule})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

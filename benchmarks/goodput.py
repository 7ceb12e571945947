"""Goodput under a repeated eviction schedule: elastic (continue at the smaller world size,
grow back when capacity returns; every worker restarts at each change), per-step (TorchFT:
the survivors train on, a returning node heals from them) and restart-everything (all nodes
stopped at each eviction, the job restarted from its checkpoint once capacity is back).
Same schedule, same model.

Goodput = useful samples (those in the steps of the final model's history) per second of
wall time from the first step to the end.

The schedule: one eviction every `--evict-every` seconds from the first step, `--evictions` of
them; or, with `--band`, evictions at random times drawn (`--seed`) as a Poisson process at that
monthly band's rate for the job's 3 nodes, sped up `--speedup` times (a run of minutes sees no
eviction at the band's own rate), the same draws for every mode. A replacement node is available
`--capacity-back` seconds after each eviction either way: a node's start is not sped up.

Run: .venv/bin/python benchmarks/goodput.py [--evict-every 15] [--evictions 4] [--capacity-back 8]
     [--band 10-15% --speedup 430000 --seed 1]
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
from lab.vocab.checkpoint_interval import BAND_NAMES, band_share, job_mtbf_s
from lab.vocab.events import Event
from lab.vocab.job import JobSpec
from lab.vocab.spot_goodput import eviction_times

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
    schedule: list[float],
    capacity_back: float,
    every: int,
    model: str = "tiny",
) -> dict:
    """Run the job in `mode`, a node evicted (hard) at each of `schedule`'s times (seconds from
    the first step) while one is up: its goodput."""
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
        evictions, pending_returns, due = 0, [], list(schedule)
        first_step: float | None = None
        while True:
            seen.extend(tail.poll())
            now = time.time()
            if any(e["event"] == Event.EXIT and e.get("reason") == "done" for e in seen):
                if not local.wait(60):
                    raise RuntimeError("nodes did not exit after the job finished")
                break
            if first_step is None and any(e["event"] == Event.STEP for e in seen):
                first_step = now
            if first_step is not None and due and now >= first_step + due[0]:
                due.pop(0)
                if not local.alive_nodes:
                    continue  # every node already gone: this eviction finds none
                evict_if_alive(local, local.alive_nodes[-1])  # hard kill: the spot node is gone
                evictions += 1
                if elastic:
                    pending_returns.append(now + capacity_back)  # a replacement spot node
                else:  # restart-everything: stop the whole job, start it again on 3 nodes
                    for node in local.alive_nodes:
                        evict_if_alive(local, node)
                    local.spec = local.spec.replace(rdzv_id=f"goodput-restart-{evictions}")
                    pending_returns += [now + capacity_back] * 3
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


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, parsed and checked before anything starts (`argv`: sys.argv's by default)."""
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
    p.add_argument(
        "--band",
        choices=BAND_NAMES,
        help="evictions drawn at this monthly band's rate for 3 nodes, sped up --speedup times",
    )
    p.add_argument("--speedup", type=float, help="with --band: how many times faster than the band's own rate")
    p.add_argument("--seed", type=int, default=1, help="with --band: the draw of the schedule (default 1)")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    args = p.parse_args(argv)
    if args.band is None and args.speedup is not None:
        p.error(f"--speedup {args.speedup:g} is invalid without --band: expected --band too")
    if args.band is not None and args.speedup is None:
        p.error(
            f"--band {args.band} needs --speedup: expected a factor > 0 (the band's own rate evicts nothing in a run)"
        )
    if args.band is not None and not args.speedup > 0:
        p.error(f"--speedup {args.speedup:g} is invalid: expected a factor > 0")
    return args


def main() -> int:
    args = arguments()
    if args.band is None:
        schedule = [args.evict_every * (i + 1) for i in range(args.evictions)]
        described = f"{args.evictions} evictions, one every {args.evict_every:g} s"
    else:
        mean_s = job_mtbf_s(band_share(args.band), 3) / args.speedup
        # Far past any run's end: the job's last steps meet whatever the draw holds.
        schedule = eviction_times(mean_s, args.seed, horizon_s=3600.0)
        described = (
            f"band {args.band} sped up {args.speedup:g}x: a node lost every {mean_s:.1f} s on average"
            f" (seed {args.seed})"
        )
        print(f"{described}; evictions due at {', '.join(f'{t:.1f}' for t in schedule[:12])} ... s", flush=True)
    root = Path(tempfile.mkdtemp(prefix="bench-goodput-"))
    results = {}
    for mode in args.modes:
        r = drive(
            mode,
            root / mode,
            args.steps,
            schedule,
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
    said = (
        f"{described}, capacity back after {args.capacity_back:g} s, checkpoint every "
        f"{args.checkpoint_every or 'derived'} steps, model {args.model}"
    )
    if "restart-everything" in results:
        base = results["restart-everything"]["goodput"]
        for mode in (m for m in results if m != "restart-everything"):
            print(f"goodput ratio {mode} / restart-everything: {results[mode]['goodput'] / base:.2f} ({said})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

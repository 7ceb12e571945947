"""`elastic-lab rebalance JOB`: move a job's workers off its fallback GPU ranks, back to rank 1
(lab/ops/rebalance.py says how and why).

Only argparse and the vocabulary are imported here; the command imports the clients when it runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from lab.ops.cli import _connection_arguments, connected, run_command, stack_target_of, the_job
from lab.vocab.capacity import REBALANCE_MOVE_TIMEOUT_S, REBALANCE_PROBE_TIMEOUT_S
from lab.vocab.command_flags import add_output
from lab.vocab.problems import InvalidInput, Problem

DESCRIPTION = """\
Move a running job's workers off the stack's fallback GPU ranks (a larger spot size, or the
on-demand rank) back to rank 1, the GPU spot pool: the cluster autoscaler never does it, so a
worker placed on the on-demand rank pays the on-demand price until the job ends (`plan` prices
it). One worker at a time, the highest rank first: a placeholder pod asking for what the worker
asks, on rank 1 only, finds out whether rank 1 has room (the autoscaler scales rank 1 up for it);
once it runs, it is deleted and the worker's node is drained (cordon, then the Eviction API with
the pod's grace period: the worker saves on the notice, the elastic job re-forms, the operator
recreates the pod, which takes the freed place on rank 1). When rank 1 has no room within
--probe-timeout, nothing moves. Run it now and then (e.g. from cron) while a job runs on a
fallback rank. --dry-run lists the workers on a fallback rank and changes nothing.

Exit status: 0 every worker moved, or none could be for lack of room on rank 1 (nothing lost);
1 a worker evicted and not running again within --move-timeout, or a request the cluster
refused; 2 refused input."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "rebalance",
        help="move a job's workers off its fallback GPU ranks (on-demand) back to rank 1 (spot), one at a time",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _connection_arguments(p, stack_required=False)
    p.add_argument("job_name", nargs="?", metavar="JOB", help="job name, or give it with --job")
    p.add_argument("--job", help="job name (the same as JOB)")
    p.add_argument("--dry-run", action="store_true", help="list the workers on a fallback rank, move none")
    p.add_argument(
        "--probe-timeout",
        type=float,
        default=REBALANCE_PROBE_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long rank 1 may take to find room for a worker (a new node) [{REBALANCE_PROBE_TIMEOUT_S:g}]",
    )
    p.add_argument(
        "--move-timeout",
        type=float,
        default=REBALANCE_MOVE_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long a moved worker may take to run again [{REBALANCE_MOVE_TIMEOUT_S:g}]",
    )
    add_output(p)
    p.set_defaults(func=rebalance_main)


def timeout_problems(args: argparse.Namespace) -> list[Problem]:
    """The timeouts that are no finite number of seconds >= 0."""
    return [
        Problem(flag, value, "a finite number of seconds >= 0")
        for flag, value in (("--probe-timeout", args.probe_timeout), ("--move-timeout", args.move_timeout))
        if not 0 <= value < float("inf")  # NaN fails both comparisons
    ]


def rebalance_main(args: argparse.Namespace) -> int:
    def body() -> int:
        from lab.ops.rebalance import Move, Rebalancer

        name = the_job(args)
        problems = timeout_problems(args)
        if problems:
            raise InvalidInput(problems)
        as_json = args.output == "json"
        with connected(args, stack_target_of(args.stack)) as (kube, namespace):
            rebalancer = Rebalancer(
                kube,
                name,
                namespace,
                probe_timeout_s=args.probe_timeout,
                move_timeout_s=args.move_timeout,
                say=(lambda line: None) if as_json else print,
            )
            found = rebalancer.on_fallback()
            if not as_json:
                print(f"job {namespace}/{name}: {len(found)} worker(s) on a fallback GPU rank")
                for worker in found:
                    print(f"  {worker.pod} on {worker.where()}")
            moves = [] if args.dry_run else rebalancer.run(found)
        if as_json:
            doc = {
                "job": name,
                "namespace": namespace,
                "on_fallback": [dataclasses.asdict(w) for w in found],
                "moves": [
                    {
                        "pod": m.worker.pod,
                        "outcome": m.outcome,
                        "to": dataclasses.asdict(m.to) if m.to else None,
                        "waited_s": round(m.waited_s, 1),
                    }
                    for m in moves
                ],
            }
            print(json.dumps(doc, indent=2))
        return 1 if any(m.outcome == Move.NOT_BACK for m in moves) else 0

    return run_command("rebalance", body)

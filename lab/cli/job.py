"""A job on a cluster: `elastic-lab status | logs | delete | scale | rebalance JOB` (submit is
lab.cli.submit; the cluster drill lab.cli.drill_cluster).

The cluster is reached with --kubeconfig, else the stack's kubeconfig (the byo stack's file, or
the Pulumi stack output of a cloud stack), else $KUBECONFIG; --context picks a context.
Only argparse and the vocabulary are imported here; each command imports the clients when it runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from typing import Any

from lab.cli.common import command_with_text, connected, connection_arguments, connection_problems, target_of
from lab.vocab.capacity import REBALANCE_MOVE_TIMEOUT_S, REBALANCE_PROBE_TIMEOUT_S
from lab.vocab.command_flags import add_output
from lab.vocab.job import INT32_MAX
from lab.vocab.names import DNS_1035_LABEL_RULE, is_dns_1035_label
from lab.vocab.problems import InvalidInput, Problem, Problems


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, helptext, func in (
        ("status", "a job's conditions, world size, restarts, pods and their nodes", status_main),
        ("logs", "a job's worker logs", logs_main),
        ("delete", "delete a job and what was created with it", delete_main),
        ("scale", "set a running job's number of nodes (Worker replicas) within its range", scale_main),
    ):
        q = subparsers.add_parser(name, help=helptext, description=helptext)
        connection_arguments(q, stack_required=False)
        q.add_argument(
            "job_name",
            nargs="?",
            metavar="JOB",
            help="job name, or give it with --job" + (" (neither: list the jobs)" if name == "status" else ""),
        )
        q.add_argument("--job", help="job name (the same as JOB)")
        if name == "status":
            add_output(q)
        if name == "scale":
            q.add_argument(
                "--nodes",
                type=int,
                required=True,
                metavar="N",
                help="the job's new number of nodes: an elastic job's within minReplicas..maxReplicas",
            )
        if name == "logs":
            q.add_argument("--worker", type=int, help="only this worker (replica index)")
            q.add_argument("-f", "--follow", action="store_true", help="stream the logs as they grow")
            q.add_argument("--tail", type=int, metavar="N", help="only the last N lines of each worker [all]")
            q.add_argument(
                "--since", metavar="DURATION", help="only lines of the last DURATION, e.g. 30s, 10m, 2h [all]"
            )
            q.add_argument(
                "-p",
                "--previous",
                action="store_true",
                help="the previous container's log (a worker that restarted: its crash is there)",
            )
        q.set_defaults(func=func)
    register_rebalance(subparsers)


def job_named(args: argparse.Namespace, *, required: bool = True) -> str | None:
    """The job a command (status, logs, delete, scale) is about: JOB or --job (the same name if
    both); None if neither and not `required`. Every problem of the command's input at once
    (one InvalidInput), before the cluster is reached: the name, --namespace, --kubeconfig and
    the command's own flags."""
    found = Problems()
    found.extend(connection_problems(args))
    given = [(key, name) for key, name in (("JOB", args.job_name), ("--job", args.job)) if name is not None]
    for key, name in given:
        if not is_dns_1035_label(name):
            found.add(key, name, f"a PyTorchJob's name, {DNS_1035_LABEL_RULE}")
    if len({name for _, name in given}) > 1:
        found.add("--job", args.job, f"the same job as JOB ({args.job_name!r}), or only one of them")
    if required and not given:
        found.add("JOB", None, "the job's name (as JOB or --job): `elastic-lab status` lists them")
    found.extend(_command_problems(args))
    found.raise_if_any()
    return given[0][1] if given else None


def _command_problems(args: argparse.Namespace) -> list[Problem]:
    """The flags of one job command: scale's --nodes, logs' --worker and window."""
    found = Problems()
    nodes = getattr(args, "nodes", None)
    if nodes is not None and not 1 <= nodes <= INT32_MAX:
        found.add("--nodes", nodes, "a number of nodes >= 1 (the job's own range is read from the cluster)")
    worker = getattr(args, "worker", None)
    if worker is not None and not 0 <= worker < INT32_MAX:
        found.add("--worker", worker, "a worker's replica index, 0 or more (`elastic-lab status` lists them)")
    if hasattr(args, "since"):
        try:
            log_window(args)
        except InvalidInput as exc:
            found.extend(exc.problems)
    return found.items


def the_job(args: argparse.Namespace) -> str:
    """The job a command needs (InvalidInput when neither JOB nor --job names one)."""
    return str(job_named(args))


def status_main(args: argparse.Namespace) -> int:
    from lab.cluster import jobs

    name = job_named(args, required=False)
    as_json = args.output == "json"
    with connected(args, target_of(args)) as (kube, namespace):
        if not name:
            names = jobs.list_jobs(kube, namespace)
            if as_json:
                print(json.dumps({"namespace": namespace, "jobs": names}, indent=2))
            else:
                print(f"PyTorchJobs in {namespace}: " + (", ".join(names) if names else "none"))
            return 0
        found = jobs.status(kube, name, namespace)
        print(json.dumps(found.as_dict(), indent=2) if as_json else "\n".join(found.lines()))
    return 0


def scale_main(args: argparse.Namespace) -> int:
    from lab.cluster import jobs

    name = the_job(args)
    with connected(args, target_of(args)) as (kube, namespace):
        print(jobs.scale(kube, name, namespace, args.nodes).line())
    return 0


_DURATION = re.compile(r"^(\d+)(s|m|h)$")


_SECONDS = {"s": 1, "m": 60, "h": 3600}


def log_window(args: argparse.Namespace) -> Any:
    """The part of each log `logs` shows, from --tail/--since/--previous (refused with every
    problem before anything is read)."""
    from lab.cluster.jobs import LogWindow

    problems = []
    if args.tail is not None and args.tail < 0:
        problems.append(Problem("--tail", args.tail, "a number of lines >= 0"))
    since = None
    if args.since is not None:
        m = _DURATION.match(args.since)
        if not m or int(m.group(1)) == 0:
            problems.append(Problem("--since", args.since, "a duration such as 30s, 10m or 2h"))
        else:
            since = int(m.group(1)) * _SECONDS[m.group(2)]
    if args.previous and args.follow:
        problems.append(Problem("--previous", True, "without --follow: the previous container has ended"))
    if problems:
        raise InvalidInput(problems)
    return LogWindow(tail=args.tail, since_s=since, previous=args.previous)


def logs_main(args: argparse.Namespace) -> int:
    from lab.cluster import jobs

    name = the_job(args)  # every input refused before the cluster is asked anything
    window = log_window(args)
    with connected(args, target_of(args)) as (kube, namespace):
        try:
            for pod, line in jobs.logs(kube, name, namespace, worker=args.worker, follow=args.follow, window=window):
                print(f"[{pod}] {line}", flush=True)
        except KeyboardInterrupt:
            return 130
    return 0


def delete_main(args: argparse.Namespace) -> int:
    from lab.cluster import jobs

    name = the_job(args)
    with connected(args, target_of(args)) as (kube, namespace):
        deleted = jobs.delete(kube, name, namespace)
    print(f"deleted {', '.join(deleted)} from namespace {namespace}")
    return 0


REBALANCE_DESCRIPTION = """\
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


def register_rebalance(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = command_with_text(
        subparsers,
        "rebalance",
        "move a job's workers off its fallback GPU ranks (on-demand) back to rank 1 (spot), one at a time",
        REBALANCE_DESCRIPTION,
    )
    connection_arguments(p, stack_required=False)
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
    from lab.cluster.rebalance import Move, Rebalancer

    name = the_job(args)
    problems = timeout_problems(args)
    if problems:
        raise InvalidInput(problems)
    as_json = args.output == "json"
    with connected(args, target_of(args)) as (kube, namespace):
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

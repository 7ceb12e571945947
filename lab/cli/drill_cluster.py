"""`elastic-lab drill --stack STACK`: the eviction drill on a stack's cluster (lab.cluster.drill),
added to the local drill's command: without --stack the local drill runs, and the cluster's
options are refused there. A spot trace is replayed on either target with the same flags
(--trace, --window, --speedup, --notice, --trace-rule, --trace-seed); on a cluster its slots are
the job's workers (--max-nodes, or the attached job's maxReplicas).

Only argparse and the job vocabulary are imported here; the clients when the drill runs.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.cli.common import connected, said, spec_or_problems, target_of
from lab.drill.drill_config import reclaim_steps
from lab.vocab.command_flags import add_namespace, add_team
from lab.vocab.job import JobSpec
from lab.vocab.job_flags import job_spec as job_fields_spec
from lab.vocab.job_flags import node_counts, own_model_problems
from lab.vocab.models import DEFAULT_STEPS, demo_args
from lab.vocab.problems import InvalidInput, Problem

if TYPE_CHECKING:
    from lab.vocab.replay_schedule import ReplaySchedule

BACKENDS = ("aks", "eks", "kubernetes")
# Options of the cluster drill that mean nothing on the local target (flag -> dest).
CLUSTER_ONLY = {
    "--job": "job",
    "--replace": "replace",
    "--evict-with": "evict_with",
    "--node": "node",
    "--force": "force",
    "--delete-node": "delete_node",
    "--fis-any-instance": "fis_any_instance",
    "--dry-run": "dry_run",
    "--deadline": "deadline",
    "--kubeconfig": "kubeconfig",
    "--context": "context",
    "--namespace": "namespace",
    "--team": "team",
    "--image": "image",
    "--owners-class": "owners_class",
}
DEFAULT_BACKEND = {"aks": "aks", "eks": "eks"}  # any other cloud (byo): kubernetes
# The local drill's options the cluster drill has no use for: its nodes are the cluster's, its
# faults are the cloud's own evictions (and a reclaim, by the scheduler's preemption: the grace
# is the burst pods' own).
LOCAL_ONLY = (
    "nodes",
    "etcd_binary",
    "outage",
    "rendezvous_data",
    "eviction",
    "notice",
    "evict_after",
    "victim",
    "scale_out_after",
    "grace",
    "baselines",
    "timeout",
    "quiet",
    "resume",
)


def local_only_given(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The local-only options given a value other than their default (named as typed); a
    replayed trace's --notice is the cluster's too."""
    flags = {a.dest: a.option_strings[-1] for a in parser._actions if a.option_strings}
    local_only = [dest for dest in LOCAL_ONLY if not (dest == "notice" and args.trace is not None)]
    return [flags[dest] for dest in local_only if dest in flags and getattr(args, dest) != parser.get_default(dest)]


def trace_schedule_of(args: argparse.Namespace, slots: int) -> tuple[ReplaySchedule | None, list[Problem]]:
    """The window of --trace as the schedule of a job of `slots` nodes (None without --trace),
    or its problems keyed by the options that set them."""
    if args.trace is None:
        return None, []
    from lab.vocab.spot_trace import parse_window
    from lab.vocab.trace_files import load_trace
    from lab.vocab.trace_schedule import schedule

    keys = {
        "window": "--window",
        "speedup": "--speedup",
        "notice": "--notice",
        "slots": "--nodes",
        "seed": "--trace-seed",
    }
    try:
        trace = load_trace(args.trace)
        window = parse_window(args.window)
        notice = "none" if args.notice is None else args.notice
        replay = schedule(trace, slots, window, args.speedup, notice, args.trace_rule, args.trace_seed)
    except InvalidInput as exc:
        return None, [
            Problem(keys.get(p.key, p.key if p.key.startswith("-") else f"--{p.key}"), p.value, p.expected)
            for p in exc.problems
        ]
    return replay, []


def _cluster_replay(args: argparse.Namespace, slots: int) -> ReplaySchedule | None:
    """--trace's window over the job's `slots` workers, or every bad trace option (InvalidInput)."""
    replay, problems = trace_schedule_of(args, slots)
    if problems:
        raise InvalidInput(
            [Problem("--max-nodes" if p.key == "--nodes" else p.key, p.value, p.expected) for p in problems]
        )
    return replay


def _cluster_options(c: argparse._ArgumentGroup) -> None:
    """The options of the cluster drill (CLUSTER_ONLY)."""
    c.add_argument("-s", "--stack", help="run the drill on this stack's cluster instead of this machine")
    c.add_argument("--job", help="attach to this running job instead of submitting one")
    c.add_argument("--replace", action="store_true", help="replace a job of the same name when submitting")
    c.add_argument(
        "--evict-with",
        choices=BACKENDS,
        help="aks: VMSS simulateEviction; eks: FIS; kubernetes: drain [the stack's cloud; kubernetes for byo]",
    )
    c.add_argument("--node", help="the node to evict [the node of the highest-index worker]")
    c.add_argument("--force", action="store_true", help="evict a node outside the stack's GPU spot pool")
    c.add_argument("--delete-node", action="store_true", help="kubernetes backend: delete the Node after the drain")
    c.add_argument(
        "--fis-any-instance",
        action="store_true",
        help="eks: start the stack's FIS template as is (FIS picks an instance) instead of aiming at --node",
    )
    c.add_argument(
        "--dry-run",
        action="store_true",
        help="print every API call the drill would make, make none (where the deployed stack cannot be read "
        "here: from its offline plan, with placeholders)",
    )
    c.add_argument(
        "--deadline",
        type=float,
        default=1800.0,
        help="seconds the cluster drill waits in all (GPU nodes take minutes to arrive) [1800]",
    )
    c.add_argument("--kubeconfig", help="kubeconfig file [the stack's, else $KUBECONFIG]")
    c.add_argument("--context", help="kubeconfig context [the current one]")
    add_namespace(c, "namespace [the stack's training namespace (a team's: --team)]")
    add_team(c)
    c.add_argument("--image", default=None, help="training image [the stack's trainerImage]")
    c.add_argument(
        "--owners-class",
        default=None,
        metavar="PRIORITYCLASS",
        help="--fault reclaim: the PriorityClass of the owners' work that takes the burst back by preemption [the "
        "lowest of the cluster's that preempts and is above the burst's]",
    )


def drill_steps(args: argparse.Namespace) -> int:
    """--steps, or by default DEFAULT_STEPS; a reclaim's demo job as many as it needs to train
    through the borrowed nodes' grace and --reclaim-for and grow back (lab.drill.drill_config)."""
    if args.steps is not None:
        return int(args.steps)
    if args.fault == "reclaim" and not args.script and math.isfinite(args.step_time) and args.step_time >= 0:
        grace = None if isinstance(args.grace, str) else float(args.grace)
        return reclaim_steps(args.step_time, grace, args.reclaim_for, DEFAULT_STEPS)
    return DEFAULT_STEPS


def add_drill_arguments(p: argparse.ArgumentParser, local_main: Callable[[argparse.Namespace], int]) -> None:
    """The cluster drill's options on `elastic-lab drill`; with --stack it runs on the stack's
    cluster, without it the local drill (`local_main`) runs as before."""
    _cluster_options(p.add_argument_group("cluster (with --stack: the drill runs on the stack's cluster)"))

    def dispatch(args: argparse.Namespace) -> int:
        if args.stack:
            ignored = local_only_given(p, args)
            if ignored:
                print(
                    f"elastic-lab drill: {', '.join(ignored)} {'applies' if len(ignored) == 1 else 'apply'} to the "
                    "local drill only; the cluster drill "
                    "(--stack) evicts a real node (--evict-with, --node) and sizes the job with the job options",
                    file=sys.stderr,
                )
                return 2
            return drill_main(args)
        needs_stack = [flag for flag, dest in CLUSTER_ONLY.items() if getattr(args, dest) not in (None, False, 1800.0)]
        if needs_stack:
            print(f"elastic-lab drill: {', '.join(needs_stack)} need(s) --stack (the cluster drill)", file=sys.stderr)
            return 2
        return local_main(args)

    p.set_defaults(func=dispatch)


def _evictor(name: str, args: argparse.Namespace, kube: Any, outputs: Any, job: tuple[str, str]) -> Any:
    """The eviction backend, built from the stack's outputs (a cloud's backend) or the cluster
    (a drain, a reclaim's owners' work for `job` (namespace, name); `kube` None: a dry run's,
    which only lists its calls)."""
    if name == "preemption":
        from lab.cluster.reclaim import PreemptionReclaim

        return PreemptionReclaim(kube, *job, owners_class=args.owners_class)
    if name == "kubernetes":
        from lab.cluster.drain import KubernetesDrainEvictor

        return KubernetesDrainEvictor(kube, delete_node=args.delete_node)
    if name == "aks":
        from lab.cluster.aks_eviction import AksVmssEvictor

        return AksVmssEvictor(
            node_resource_group=outputs.need("node_resource_group"),
            gpu_pool_name=outputs.gpu_pool("pool_names"),
            spot_pool_names=outputs.spot_gpu_pools("pool_names"),
        )
    from lab.cluster.eks_eviction import FisEvictor

    return FisEvictor(
        region=outputs.need("region"),
        cluster_name=outputs.need("cluster_name"),
        gpu_node_group=outputs.gpu_pool("node_group_names"),
        template_id=outputs.need("fis_template_id"),
        role_arn=outputs.fis_role_arn,
        target_instance=not args.fis_any_instance,
    )


def _rehearse(cfg: Any, target: Any, spec: JobSpec | None, why: str) -> None:
    """The drill's dry run from the stack's offline plan (lab.stacks.rehearsal): the job, the
    calls in order with a node to be found, and what a real run needs besides."""
    from lab.cluster.aks_eviction import EVICT_PERMISSION, READ_PERMISSION
    from lab.cluster.drill import planned_calls
    from lab.cluster.eviction import Node
    from lab.stacks import rehearsal
    from lab.vocab.placeholders import placeholder

    lines = rehearsal.header("the drill", target.stack, why)
    if spec is not None:
        lines.append(
            f"  run the job {spec.name} ({spec.min_nodes}..{spec.max_nodes} nodes) from the image {spec.image}, and "
            f"{_fault_of(cfg)} once it trained step {cfg.evict_at_step} at full size, through {cfg.evictor.name}:"
        )
    else:
        lines.append(
            f"  {_fault_of(cfg)} of the running job {cfg.job} once it trained step {cfg.evict_at_step}, through "
            f"{cfg.evictor.name}:"
        )
    where = "the node of a burst worker" if cfg.reclaim_for_s is not None else "a Ready node of the GPU spot pool"
    node = Node.to_be_found(cfg.node or placeholder(f"{where}, found when the drill runs"))
    lines += [f"    {call}" for call in planned_calls(cfg, node)]
    access = {
        "aks": f"Azure credentials (`az login`) allowed {READ_PERMISSION} and {EVICT_PERMISSION} on the node "
        "resource group",
        "eks": "AWS credentials (`aws configure` or `aws sso login`) allowed the ec2 and fis calls above, and to pass "
        "the stack's FIS role",
    }
    lines += rehearsal.needs(target.cloud, target.stack, access.get(cfg.evictor.name))
    print("\n".join(lines))


def _fault_of(cfg: Any) -> str:
    if cfg.reclaim_for_s is not None:
        return f"take the burst back by preemption for {cfg.reclaim_for_s:g} s"
    return f"evict {'the nodes a trace window loses' if cfg.replay else 'a node'}"


def _drilled_job(args: argparse.Namespace, target: Any) -> tuple[JobSpec | None, Any]:
    """(the job rendered for the stack, its objects), or (None, None) to attach to --job."""
    from lab.k8s.job import render_job

    if args.job:
        # The running job's model is its own: what the drill would run is not asked for.
        if own := own_model_problems(args, "--job"):
            raise InvalidInput(own)
        return None, None
    extra = [a for a in (args.script_args or []) if a != "--"] if args.script else []
    own = own_model_problems(args, "--script") if args.script else []
    steps = drill_steps(args)
    script_kw = (
        {"module": None, "script": args.script, "script_args": tuple(extra)}
        if args.script
        else {"script_args": demo_args(steps, args.step_time, args.model, args.parallel)}
    )
    spec = spec_or_problems(own, lambda: job_fields_spec(args, image=target.image_for(args.image), **script_kw))
    if args.fault == "reclaim" and not spec.burst_nodes:
        raise InvalidInput(
            [Problem("--burst", spec.burst_nodes, "at least 1 with --fault reclaim: the nodes taken back")]
        )
    if spec.burst_nodes and args.fault != "reclaim":
        # An eviction drill follows one PyTorchJob's workers; a job with a burst is two.
        raise InvalidInput(
            [
                Problem(
                    "--burst",
                    spec.burst_nodes,
                    "0 for an eviction drill on a cluster, which follows one PyTorchJob; a job with a burst is drilled "
                    "with --fault reclaim (its burst taken back by preemption)",
                )
            ]
        )
    job = render_job(spec, target)
    return job.spec, job.objects


def drill_main(args: argparse.Namespace) -> int:
    from lab.cluster import jobs
    from lab.cluster.drill import ClusterDrill
    from lab.cluster.kube import KubeError
    from lab.drill.replay import knowing_the_windows_rate
    from lab.k8s.job import render_job
    from lab.stacks import rehearsal
    from lab.stacks.automation import StackError
    from lab.stacks.outputs import read_outputs

    target = target_of(args)
    reclaim = args.fault == "reclaim"
    backend = "preemption" if reclaim else args.evict_with or DEFAULT_BACKEND.get(target.cloud, "kubernetes")
    if problems := _cluster_fault_problems(args):
        raise InvalidInput(problems)
    spec, objects = _drilled_job(args, target)
    # An attached job's slots are known once it is read; a dry run that cannot read it takes --max-nodes.
    replay = _cluster_replay(args, spec.max_nodes if spec is not None else node_counts(args)[1])
    if spec is not None and (knowing := knowing_the_windows_rate(spec, replay)) is not spec:
        # The job rendered here replays a window: it knows the window's rate of evictions.
        job = render_job(knowing, target)
        spec, objects = job.spec, job.objects
    name = spec.name if spec is not None else args.job  # the job rendered here, or an existing one
    evict_at = args.evict_at_step if args.evict_at_step is not None else max(1, drill_steps(args) // 4)
    workdir = Path(args.workdir or f"runs/cluster-drill-{name}").absolute()

    config = functools.partial(_drill_config, args, target, name, objects, evict_at, workdir)
    with ExitStack() as context:
        try:
            outputs = read_outputs(target.stack) if backend in BACKENDS[:2] else None
            kube, namespace = context.enter_context(connected(args, target))
        except (StackError, KubeError) as exc:
            if not args.dry_run:
                raise
            # Nothing of the deployed stack can be read here: the drill from its offline plan.
            planned = rehearsal.planned_outputs(target.stack) if backend in BACKENDS[:2] else None
            namespace = args.namespace or target.facts.namespace
            cfg = config(namespace, _evictor(backend, args, None, planned, (namespace, name)), 0, replay)
            _rehearse(cfg, target, spec, str(exc))
            return 0
        evictor = _evictor(backend, args, kube, outputs, (namespace, name))
        every = spec.checkpoint_every_steps if spec else jobs.checkpoint_every(kube, name, namespace)
        if spec is None and args.trace is not None:
            replay = _cluster_replay(args, int(jobs.status(kube, name, namespace).max_replicas or 1))
        drill = ClusterDrill(
            config(namespace, evictor, every, replay),
            kube,
            say=lambda line: print(line, file=sys.stderr, flush=True),
        )
        if args.dry_run:
            for call in drill.planned_calls():
                print(call)
            return 0
        report = drill.run()
    return _reported(report, args, workdir)


def _cluster_fault_problems(args: argparse.Namespace) -> list[Problem]:
    """What the cluster drill refuses of the fault options, before anything starts."""
    out = []
    if args.deadline <= 0 or args.deadline != args.deadline:
        out.append(Problem("--deadline", args.deadline, "a finite number of seconds > 0"))
    if args.fault not in ("node", "reclaim"):
        out.append(
            Problem(
                "--fault",
                args.fault,
                "node (a node evicted through --evict-with) or reclaim (the burst taken back by preemption) on a "
                "cluster; the other faults are the local drill's",
            )
        )
    if args.fault == "reclaim":
        for flag, value in (("--evict-with", args.evict_with), ("--node", args.node), ("--trace", args.trace)):
            if value is not None:
                why = "the scheduler picks what it preempts (the burst's workers); no node is evicted"
                out.append(Problem(flag, value, f"none with --fault reclaim: {why}"))
        if not 0 <= args.reclaim_for <= 3600:
            out.append(Problem("--reclaim-for", args.reclaim_for, "seconds in [0, 3600] that the owners keep the GPUs"))
    elif args.owners_class is not None:
        out.append(Problem("--owners-class", args.owners_class, "none without --fault reclaim"))
    return out


def _drill_config(
    args: argparse.Namespace,
    target: Any,
    name: str,
    objects: Any,
    evict_at: int,
    workdir: Path,
    namespace: str,
    evictor: Any,
    checkpoint_every: int,
    replay: Any,
) -> Any:
    """The cluster drill's configuration (lab.cluster.drill.ClusterDrillConfig) from its flags,
    once the namespace, the evictor and the job's checkpoint interval are known."""
    from lab.cluster.drill import ClusterDrillConfig

    return ClusterDrillConfig(
        namespace=namespace,
        job=name,
        evictor=evictor,
        gpu_labels=dict(target.facts.pools.gpu_labels),
        workdir=workdir,
        objects=objects,
        replace=args.replace,
        node=args.node,
        force=args.force,
        evict_at_step=evict_at,
        target_steps=None if args.job or args.script else drill_steps(args),
        checkpoint_every=checkpoint_every,
        timeout_s=args.deadline,
        replay=replay,
        reclaim_for_s=args.reclaim_for if args.fault == "reclaim" else None,
    )


def _reported(report: Any, args: argparse.Namespace, workdir: Path) -> int:
    """The report saved, its timeline drawn, and said; the exit status of its verdict."""
    from lab.drill.plot import plot_timeline

    (workdir / "report.json").write_text(report.to_json())
    try:
        timeline = str(plot_timeline(report, args.plot or workdir / "timeline.png"))
    except Exception as exc:  # noqa: BLE001 - the report is saved; the plot is an extra
        timeline = f"not drawn ({type(exc).__name__}: {exc})"
    return said(
        report,
        args.output,
        {"timeline": timeline, "report": str(workdir / "report.json"), "events": str(workdir / "events.jsonl")},
    )

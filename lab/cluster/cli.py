"""The job's life on a cluster: `elastic-lab submit | status | logs | delete`, and
`elastic-lab drill --stack STACK` (the eviction drill on the stack's cluster).

A job is rendered from a JobSpec (the same flags as the local drill) and the stack's
platform, checked (Kubernetes schema, PyTorchJob CRD v1.9.4, guardrails, sizing against the
stack's pools), and created through the kubeflow-training SDK. The cluster is reached with
--kubeconfig, else the stack's kubeconfig (the byo stack's file, or the Pulumi stack output
of a cloud stack), else $KUBECONFIG; --context picks a context.

Only argparse and the job vocabulary are imported here; each command imports the clients
when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab.job_args import add_job_arguments
from lab.job_args import job_spec as job_fields_spec
from lab.spec.job import JobSpec
from lab.spec.problems import InvalidInput

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
}
DEFAULT_BACKEND = {"aks": "aks", "eks": "eks"}  # any other cloud (byo): kubernetes


def _connection_arguments(p: argparse.ArgumentParser, *, stack_required: bool) -> None:
    p.add_argument(
        "--stack", required=stack_required, help="stack name (stacks/Pulumi.<stack>.yaml): its platform and cluster"
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: the stack's, else $KUBECONFIG)")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument("--namespace", help="namespace (default: the stack's training namespace, else the context's)")


def _job_arguments(p: argparse.ArgumentParser) -> None:
    d = JobSpec.__dataclass_fields__
    job = p.add_argument_group("job (lab/spec/job.py JobSpec; the same flags as `elastic-lab drill`)")
    add_job_arguments(job)
    job.add_argument(
        "--image", default=d["image"].default, help="training image, built from the Dockerfile (torch, this project)"
    )
    target = job.add_mutually_exclusive_group()
    target.add_argument("--module", default=None, help=f"Python module to run [{d['module'].default}]")
    target.add_argument("--script", default=None, help="script path inside the image")
    job.add_argument("--rdzv-id", default="", help="rendezvous id (default: <name>-<random>)")
    size = p.add_argument_group("size (checked against the stack's pools)")
    size.add_argument("--cpu", help="CPU request per worker pod, e.g. 4 or 3500m (default: the chart's)")
    size.add_argument("--memory", help="memory request per worker pod, e.g. 16Gi (default: the chart's)")
    size.add_argument("--gpus", type=int, help="GPUs per worker pod (default: the platform's GPUs per node)")
    size.add_argument("--replicas", type=int, help="worker pods to create (default: --max-nodes)")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "submit",
        help="render the elastic PyTorchJob for a stack and create it on its cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _connection_arguments(p, stack_required=True)
    p.add_argument("--dry-run", action="store_true", help="print the YAML that would be created, create nothing")
    p.add_argument("--replace", action="store_true", help="delete a job of the same name first")
    _job_arguments(p)
    p.add_argument("script_args", nargs="*", help="arguments for the training script (after --)")
    p.set_defaults(func=submit_main)

    for name, helptext in (
        ("up", "check the stack offline, then `pulumi up` through the Automation API (with the policy pack)"),
        ("preview", "check the stack offline, then `pulumi preview` (with the policy pack)"),
        ("destroy", "`pulumi destroy` of the stack (see `teardown` for jobs, volumes and leftovers too)"),
    ):
        q = subparsers.add_parser(name, help=helptext, description=helptext)
        q.add_argument("--stack", required=True, help="stack name (stacks/Pulumi.<stack>.yaml)")
        if name == "destroy":
            q.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        q.set_defaults(func=stack_main, operation=name)

    for name, helptext, func in (
        ("status", "a job's conditions, world size, restarts, pods and their nodes", status_main),
        ("logs", "a job's worker logs", logs_main),
        ("delete", "delete a job and what was created with it", delete_main),
    ):
        q = subparsers.add_parser(name, help=helptext, description=helptext)
        _connection_arguments(q, stack_required=False)
        q.add_argument(
            "--job",
            required=name != "status",
            help="job name" + (" (default: list the jobs)" if name == "status" else ""),
        )
        if name == "logs":
            q.add_argument("--worker", type=int, help="only this worker (replica index)")
            q.add_argument("-f", "--follow", action="store_true", help="stream the logs as they grow")
        q.set_defaults(func=func)


def job_spec(args: argparse.Namespace) -> JobSpec:
    module = args.module if (args.module or args.script) else JobSpec.__dataclass_fields__["module"].default
    return job_fields_spec(
        args,
        image=args.image,
        module=module if not args.script else None,
        script=args.script,
        script_args=tuple(args.script_args),
        rdzv_id=args.rdzv_id,
    )


def _sizing(args: argparse.Namespace) -> Any:
    from lab.submit.core import JobSizing

    return JobSizing(cpu=args.cpu, memory=args.memory, gpus=args.gpus, replicas=args.replicas)


def _fail(command: str, exc: BaseException, code: int) -> int:
    print(f"elastic-lab {command}: {exc}", file=sys.stderr)
    return code


def _run(command: str, body: Callable[[], int]) -> int:
    """Run a command body; bad input exits 2, a refused or failed operation 1."""
    from lab.cluster.eviction import EvictionError
    from lab.cluster.kube import ClusterError
    from lab.k8s.helm import ChartRenderError
    from lab.plan.stack_files import StackNotFound
    from lab.submit.core import SubmitError

    try:
        return body()
    except (InvalidInput, ChartRenderError, StackNotFound) as exc:
        return _fail(command, exc, 2)
    except (SubmitError, ClusterError, EvictionError) as exc:
        return _fail(command, exc, 1)


def _target(stack: str | None) -> Any:
    from lab.submit.core import stack_target

    return stack_target(stack) if stack else None


def _namespace(args: argparse.Namespace, target: Any, cluster: Any) -> str:
    if args.namespace:
        return str(args.namespace)
    return str(target.facts.namespace) if target is not None else str(cluster.namespace)


def submit_main(args: argparse.Namespace) -> int:
    def body() -> int:
        from lab.cluster import jobs
        from lab.cluster.kube import stack_cluster
        from lab.submit.core import job_notes, manifest_text, render_job

        spec = job_spec(args)
        target = _target(args.stack)
        sizing = _sizing(args)
        cluster_spec, objects = render_job(spec, target, sizing)
        if args.dry_run:
            sys.stdout.write(manifest_text(cluster_spec, target, objects))
            return 0
        with stack_cluster(target, args.kubeconfig, args.context) as cluster:
            namespace = _namespace(args, target, cluster)
            created = jobs.submit(cluster, objects, namespace, replace=args.replace)
        print(f"created {', '.join(created)} in namespace {namespace} (rdzvId {cluster_spec.rdzv_id})")
        print(job_notes(cluster_spec, target, sizing).replace("<stack>", args.stack))
        return 0

    return _run("submit", body)


def status_main(args: argparse.Namespace) -> int:
    def body() -> int:
        from lab.cluster import jobs
        from lab.cluster.kube import stack_cluster

        target = _target(args.stack)
        with stack_cluster(target, args.kubeconfig, args.context) as cluster:
            namespace = _namespace(args, target, cluster)
            if not args.job:
                names = jobs.list_jobs(cluster, namespace)
                print(f"PyTorchJobs in {namespace}: " + (", ".join(names) if names else "none"))
                return 0
            print("\n".join(jobs.status(cluster, args.job, namespace).lines()))
        return 0

    return _run("status", body)


def logs_main(args: argparse.Namespace) -> int:
    def body() -> int:
        from lab.cluster import jobs
        from lab.cluster.kube import stack_cluster

        target = _target(args.stack)
        with stack_cluster(target, args.kubeconfig, args.context) as cluster:
            namespace = _namespace(args, target, cluster)
            try:
                for pod, line in jobs.logs(cluster, args.job, namespace, worker=args.worker, follow=args.follow):
                    print(f"[{pod}] {line}", flush=True)
            except KeyboardInterrupt:
                return 130
        return 0

    return _run("logs", body)


def delete_main(args: argparse.Namespace) -> int:
    def body() -> int:
        from lab.cluster import jobs
        from lab.cluster.kube import stack_cluster

        target = _target(args.stack)
        with stack_cluster(target, args.kubeconfig, args.context) as cluster:
            namespace = _namespace(args, target, cluster)
            deleted = jobs.delete(cluster, args.job, namespace)
        print(f"deleted {', '.join(deleted)} from namespace {namespace}")
        return 0

    return _run("delete", body)


def stack_main(args: argparse.Namespace) -> int:
    operation = args.operation

    def body() -> int:
        from lab.cluster.stacks import run

        if operation == "destroy" and not args.yes and not _confirm(f"destroy every resource of stack {args.stack!r}?"):
            print("nothing destroyed", file=sys.stderr)
            return 1
        run(operation, args.stack)
        return 0

    return _run(operation, body)


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        print(f"{question} (not a terminal: pass --yes)", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


# ------------------------------------------------------------------ the cluster drill
def add_drill_arguments(p: argparse.ArgumentParser, local_main: Callable[[argparse.Namespace], int]) -> None:
    """The cluster drill's options on `elastic-lab drill`; with --stack it runs on the stack's
    cluster, without it the local drill (`local_main`) runs as before."""
    c = p.add_argument_group("cluster (with --stack: the drill runs on the stack's cluster)")
    c.add_argument("--stack", help="run the drill on this stack's cluster instead of this machine")
    c.add_argument("--job", help="attach to this running job instead of submitting one")
    c.add_argument("--replace", action="store_true", help="replace a job of the same name when submitting")
    c.add_argument(
        "--evict-with",
        choices=BACKENDS,
        help="aks: VMSS simulateEviction; eks: FIS; kubernetes: drain (default: the stack's cloud, kubernetes for byo)",
    )
    c.add_argument("--node", help="the node to evict (default: the node of the highest-index worker)")
    c.add_argument("--force", action="store_true", help="evict a node outside the stack's GPU spot pool")
    c.add_argument("--delete-node", action="store_true", help="kubernetes backend: delete the Node after the drain")
    c.add_argument(
        "--fis-any-instance",
        action="store_true",
        help="eks: start the stack's FIS template as is (FIS picks an instance) instead of aiming at --node",
    )
    c.add_argument("--dry-run", action="store_true", help="print every API call the drill would make, make none")
    c.add_argument(
        "--deadline",
        type=float,
        default=1800.0,
        help="seconds the cluster drill waits in all (default 1800: GPU nodes take minutes)",
    )
    c.add_argument("--kubeconfig", help="kubeconfig file (default: the stack's, else $KUBECONFIG)")
    c.add_argument("--context", help="kubeconfig context")
    c.add_argument("--namespace", help="namespace (default: the stack's training namespace)")
    c.add_argument("--image", default=JobSpec.__dataclass_fields__["image"].default, help="training image")

    def dispatch(args: argparse.Namespace) -> int:
        if args.stack:
            return drill_main(args)
        needs_stack = [flag for flag, dest in CLUSTER_ONLY.items() if getattr(args, dest) not in (None, False, 1800.0)]
        if needs_stack:
            print(f"elastic-lab drill: {', '.join(needs_stack)} need(s) --stack (the cluster drill)", file=sys.stderr)
            return 2
        return local_main(args)

    p.set_defaults(func=dispatch)


def _evictor(name: str, args: argparse.Namespace, target: Any, cluster: Any) -> Any:
    """The eviction backend, built from the deployed stack's outputs."""
    if name == "kubernetes":
        from lab.cluster.drain import KubernetesDrainEvictor

        return KubernetesDrainEvictor(cluster, delete_node=args.delete_node)
    from lab.submit.core import stack_outputs

    outputs = stack_outputs(target.stack)
    if name == "aks":
        from lab.cluster.aks_eviction import AksVmssEvictor

        return AksVmssEvictor(
            node_resource_group=str(outputs["nodeResourceGroup"]), gpu_pool_name=str(outputs["poolNames"]["gpu-spot"])
        )
    from lab.cluster.eks_eviction import FisEvictor

    return FisEvictor(
        region=str(outputs["region"]),
        cluster_name=str(outputs["clusterName"]),
        gpu_node_group=str(outputs["nodeGroupNames"]["gpu-spot"]),
        template_id=str(outputs["fisTemplateId"]),
        role_arn=outputs.get("fisRoleArn"),
        target_instance=not args.fis_any_instance,
    )


def drill_main(args: argparse.Namespace) -> int:
    def body() -> int:
        from lab.cluster import jobs
        from lab.cluster.drill import ClusterDrill, ClusterDrillConfig
        from lab.cluster.kube import stack_cluster
        from lab.drill.cli import DEFAULT_STEPS
        from lab.drill.plot import plot_timeline
        from lab.submit.core import render_job

        target = _target(args.stack)
        backend = args.evict_with or DEFAULT_BACKEND.get(target.cloud, "kubernetes")
        if args.deadline <= 0 or args.deadline != args.deadline:
            raise InvalidInput([_problem("--deadline", args.deadline, "a finite number of seconds > 0")])
        objects, spec = None, None
        if not args.job:
            extra = [a for a in (args.script_args or []) if a != "--"] if args.script else []
            steps = args.steps or DEFAULT_STEPS
            script_kw = (
                {"module": None, "script": args.script, "script_args": tuple(extra)}
                if args.script
                else {"script_args": ("--steps", str(steps), "--step-time", f"{args.step_time:g}")}
            )
            spec = job_fields_spec(args, image=args.image, **script_kw)
            spec, objects = render_job(spec, target)
        name = args.job or spec.name
        evict_at = args.evict_at_step if args.evict_at_step is not None else max(1, (args.steps or DEFAULT_STEPS) // 4)
        with stack_cluster(target, args.kubeconfig, args.context) as cluster:
            namespace = _namespace(args, target, cluster)
            evictor = _evictor(backend, args, target, cluster)
            workdir = Path(args.workdir or f"runs/cluster-drill-{name}").absolute()
            cfg = ClusterDrillConfig(
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
                target_steps=None if args.job or args.script else (args.steps or DEFAULT_STEPS),
                checkpoint_every=spec.checkpoint_every_steps
                if spec
                else jobs.checkpoint_every(cluster, name, namespace),
                timeout_s=args.deadline,
            )
            drill = ClusterDrill(cfg, cluster, say=lambda line: print(line, file=sys.stderr, flush=True))
            if args.dry_run:
                for call in drill.planned_calls():
                    print(call)
                return 0
            report = drill.run()
        (workdir / "report.json").write_text(report.to_json())
        try:
            timeline = str(plot_timeline(report, args.plot or workdir / "timeline.png"))
        except Exception as exc:  # noqa: BLE001 - the report is saved; the plot is an extra
            timeline = f"not drawn ({type(exc).__name__}: {exc})"
        if args.json:
            print(report.to_json())
        else:
            print(report.summary())
            print(
                f"  timeline: {timeline}\n  report:   {workdir / 'report.json'}\n  events:   {workdir / 'events.jsonl'}"
            )
        return 0 if report.passed else 1

    return _run("drill", body)


def _problem(key: str, value: Any, expected: str) -> Any:
    from lab.spec.problems import Problem

    return Problem(key, value, expected)

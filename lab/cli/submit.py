"""`elastic-lab submit`: render a job for a stack's platform and create it on its cluster.

A job is rendered from a JobSpec (the same flags as the local drill) and the stack's
platform, checked (Kubernetes schema, PyTorchJob CRD v1.9.4, guardrails, sizing against the
stack's pools), and created through the kubeflow-training SDK; the objects rendered with it
(a c10d store, or the lighthouse of a `--fault-tolerance per-step` job) first, through the
kubernetes client.

Only argparse and the job vocabulary are imported here; the clients when it runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lab.cli.common import (
    command_with_text,
    connected,
    connection_arguments,
    connection_problems,
    spec_or_problems,
    target_of,
)
from lab.vocab.checkpoint_location import CheckpointAccess
from lab.vocab.job import JobSpec
from lab.vocab.job_flags import add_job_arguments, add_model_arguments, own_model_problems
from lab.vocab.job_flags import job_spec as job_fields_spec
from lab.vocab.models import model_arguments
from lab.vocab.names import is_dns_label
from lab.vocab.problems import InvalidInput, Problem, Problems

SUBMIT_DESCRIPTION = """\
Render a job for the stack's platform and create it on its cluster. The job takes the same
flags as the local drill; it is checked before anything is created (Kubernetes schema, the
PyTorchJob CRD, the platform's guardrails, sizes against the stack's pools), then created with
what it needs (a c10d store, or the lighthouse of a `--fault-tolerance per-step` job).

The cluster is reached with --kubeconfig, else the stack's kubeconfig (the byo stack's file,
or a cloud stack's output), else $KUBECONFIG; --context picks a context. --dry-run prints the
YAML and reaches nothing. Then: `elastic-lab status JOB`, `logs JOB -f`, `drill -s STACK --job
JOB` to evict one of its nodes, `delete JOB`."""


def _job_arguments(p: argparse.ArgumentParser) -> None:
    d = JobSpec.__dataclass_fields__
    job = p.add_argument_group("job (lab/vocab/job.py JobSpec; the same flags as `elastic-lab drill`)")
    add_job_arguments(job, name_as_job=True)
    add_model_arguments(job)
    job.add_argument(
        "--image",
        default=None,
        help="training image, built from the Dockerfile (torch, this project) [the stack's trainerImage]",
    )
    target = job.add_mutually_exclusive_group()
    target.add_argument("--module", default=None, help=f"Python module to run [{d['module'].default}]")
    target.add_argument("--script", default=None, help="script path inside the image")
    job.add_argument("--rdzv-id", default="", help="rendezvous id [<name>-<random>]")
    size = p.add_argument_group("size (checked against the stack's pools)")
    size.add_argument("--cpu", help="CPU request per worker pod, e.g. 4 or 3500m [the chart's]")
    size.add_argument("--memory", help="memory request per worker pod, e.g. 16Gi [the chart's]")
    size.add_argument("--gpus", type=int, help="GPUs per worker pod [the platform's GPUs per node]")
    size.add_argument("--replicas", type=int, help="worker pods to create [--max-nodes]")
    size.add_argument(
        "--autoscale-cpu",
        type=int,
        metavar="PERCENT",
        help="an HPA that adds and removes nodes between --min-nodes and --max-nodes to hold the workers' CPU "
        "use at PERCENT of their request (elastic jobs; the operator makes it from elasticPolicy.metrics) [none]",
    )
    job.add_argument(
        "--checkpoint-access",
        choices=[a.value for a in CheckpointAccess],
        default=CheckpointAccess.MOUNT.value,
        help="mount: the platform's checkpoint volume; client: the storage's URL (s3://, az://) in a folder "
        "named after the job, written by the pods' own clients with the platform's identity, no volume "
        "[mount]",
    )


# The module a job runs unless told otherwise: the project's demo trainer.
DEMO_TRAINER = JobSpec.__dataclass_fields__["module"].default


def job_spec(args: argparse.Namespace, target: Any) -> JobSpec:
    """The JobSpec of submit's flags: --module, else --script, else the demo trainer (a module or
    script given empty is refused by the JobSpec, never replaced)."""
    module = args.module if args.module is not None else DEMO_TRAINER if args.script is None else None
    script_args = tuple(args.script_args)
    own: list[Problem] = []
    if module == DEMO_TRAINER:
        # The demo's model as typed flags; what follows `--` comes after them, and wins.
        script_args = model_arguments(args.model, args.parallel) + script_args
    else:
        own = own_model_problems(args, "--script" if args.script is not None else "--module")
    return spec_or_problems(
        own,
        lambda: job_fields_spec(
            args,
            image=target.image_for(args.image),
            module=module,
            script=args.script,
            script_args=script_args,
            rdzv_id=args.rdzv_id,
        ),
    )


def trainer_argument_problems(spec: JobSpec) -> list[Problem]:
    """The arguments after `--`, when the job runs the demo trainer: checked by the trainer's own
    parser (lab.runtime.train_settings.parse_args), which would refuse them on every worker. A
    module or script of the user's gets its arguments untouched."""
    if spec.module != DEMO_TRAINER or not spec.script_args:
        return []
    import contextlib
    import io

    from lab.runtime.train_settings import parse_args

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            parse_args(list(spec.script_args))
    except SystemExit:
        # argparse prints the usage, then "<prog>: error: <what>" as its last line; --help, no error.
        _, found, error = said.getvalue().strip().rpartition("error: ")
        error = error if found else "no --help here (`python -m lab.runtime.train --help` prints it)"
        return [Problem("after --", " ".join(spec.script_args), f"arguments {spec.module} takes (its --help): {error}")]
    return []


def checked_submission(args: argparse.Namespace, target: Any) -> tuple[JobSpec, Any]:
    """The job and its sizing from submit's flags, or every problem of them at once (one
    InvalidInput), before anything is rendered or reached."""
    from lab.k8s.job import int32_problems

    found = Problems()
    found.extend(connection_problems(args))
    namespace = target.facts.namespace
    if args.namespace is not None and is_dns_label(args.namespace) and args.namespace != namespace:
        found.add(
            "--namespace",
            args.namespace,
            f"the stack's training namespace {namespace!r}, or none: the job's service account, checkpoint "
            "claim and rendezvous server are there",
        )
    flags = ("--min-nodes", "--max-nodes", "--max-restarts", "--replicas")
    found.extend(int32_problems({flag: getattr(args, flag[2:].replace("-", "_")) for flag in flags}))
    spec: JobSpec | None = None
    try:
        spec = job_spec(args, target)
    except InvalidInput as exc:
        found.extend(p for p in exc.problems if p not in found.items)
    sizing = _sizing(args)
    found.extend(sizing.problems(spec, target))
    if spec is not None:
        found.extend(trainer_argument_problems(spec))
    if spec is None or found:
        raise InvalidInput(found.items)
    return spec, sizing


def _sizing(args: argparse.Namespace) -> Any:
    from lab.k8s.job import JobSizing

    return JobSizing(
        cpu=args.cpu, memory=args.memory, gpus=args.gpus, replicas=args.replicas, autoscale_cpu=args.autoscale_cpu
    )


def submit_main(args: argparse.Namespace) -> int:
    from lab.cluster import jobs
    from lab.k8s.job import manifest_text, render_job
    from lab.stacks.on_demand_notice import on_demand_notice
    from lab.vocab.checkpoint_interval import interval_line

    target = target_of(args)
    spec, sizing = checked_submission(args, target)
    job = render_job(spec, target, sizing, CheckpointAccess(args.checkpoint_access))
    cluster_spec = job.spec
    notice = on_demand_notice(target, cluster_spec)
    if args.dry_run:
        sys.stdout.write(manifest_text(cluster_spec, target, job.objects))
        if notice:  # on stderr: stdout stays the YAML alone
            print("\n".join(notice), file=sys.stderr)
        return 0
    with connected(args, target) as (kube, namespace):
        created = jobs.submit(kube, job.objects, namespace, replace=args.replace)
        kueue = jobs.kueue_warning(kube, namespace)
    which = (
        "lighthouse " + cluster_spec.lighthouse_endpoint
        if cluster_spec.per_step_mode
        else "rdzvId " + cluster_spec.rdzv_id
    )
    print(f"created {', '.join(created)} in namespace {namespace} ({which})")
    print(job.notes.replace("<stack>", args.stack))
    print(interval_line(cluster_spec.max_nodes, cluster_spec.checkpoint_every_steps))
    if notice:
        print("\n".join(notice))
    if kueue:
        print(kueue, file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = command_with_text(
        subparsers,
        "submit",
        "render the PyTorchJob (elastic or per-step) for a stack and create it on its cluster",
        SUBMIT_DESCRIPTION,
    )
    connection_arguments(p, stack_required=True)
    p.add_argument("--dry-run", action="store_true", help="print the YAML that would be created, create nothing")
    p.add_argument("--replace", action="store_true", help="delete a job of the same name first")
    _job_arguments(p)
    p.add_argument("script_args", nargs="*", help="arguments for the training script (after --)")
    p.set_defaults(func=submit_main)

"""The stack and the job on a cluster: `elastic-lab up | preview | destroy` and
`elastic-lab submit | status | logs | delete | scale` (the cluster drill is in lab.ops.drill_cli).

A job is rendered from a JobSpec (the same flags as the local drill) and the stack's
platform, checked (Kubernetes schema, PyTorchJob CRD v1.9.4, guardrails, sizing against the
stack's pools), and created through the kubeflow-training SDK; the objects rendered with it
(a c10d store, or the lighthouse of a `--fault-tolerance per-step` job) first, through the
kubernetes client. The cluster is reached with --kubeconfig, else the stack's kubeconfig
(the byo stack's file, or the Pulumi stack output of a cloud stack), else $KUBECONFIG;
--context picks a context.

Only argparse and the job vocabulary are imported here; each command imports the clients
when it runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lab.vocab.checkpoint_location import CheckpointAccess
from lab.vocab.command_flags import add_namespace, add_output, add_yes
from lab.vocab.current_stack import STACK_DEFAULT, STACK_OPTIONAL, STACK_REQUIRED
from lab.vocab.errors import LabError
from lab.vocab.job import INT32_MAX, JobSpec
from lab.vocab.job_flags import add_job_arguments
from lab.vocab.job_flags import job_spec as job_fields_spec
from lab.vocab.names import DNS_1035_LABEL_RULE, DNS_LABEL_RULE, is_dns_1035_label, is_dns_label
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


def _connection_arguments(p: argparse.ArgumentParser, *, stack_required: bool) -> None:
    p.add_argument(
        "-s", "--stack", help=f"stack name (stacks/Pulumi.<stack>.yaml): its platform and cluster {STACK_DEFAULT}"
    )
    p.set_defaults(stack_default=STACK_REQUIRED if stack_required else STACK_OPTIONAL)
    p.add_argument("--kubeconfig", help="kubeconfig file [the stack's, else $KUBECONFIG]")
    p.add_argument("--context", help="kubeconfig context [the current one]")
    add_namespace(p, "namespace [the stack's training namespace, else the context's]")


def _job_arguments(p: argparse.ArgumentParser) -> None:
    d = JobSpec.__dataclass_fields__
    job = p.add_argument_group("job (lab/vocab/job.py JobSpec; the same flags as `elastic-lab drill`)")
    add_job_arguments(job, name_as_job=True)
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


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "submit",
        help="render the PyTorchJob (elastic or per-step) for a stack and create it on its cluster",
        description=SUBMIT_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _connection_arguments(p, stack_required=True)
    p.add_argument("--dry-run", action="store_true", help="print the YAML that would be created, create nothing")
    p.add_argument("--replace", action="store_true", help="delete a job of the same name first")
    _job_arguments(p)
    p.add_argument("script_args", nargs="*", help="arguments for the training script (after --)")
    p.set_defaults(func=submit_main)

    q = subparsers.add_parser(
        "check",
        help="every prerequisite of deploying a stack from here, each with its fix",
        description="Every prerequisite at once, each with its fix: the Pulumi CLI and its version, the "
        "backend login (and a self-managed backend's passphrase), the cloud's credentials, subscription or "
        "account, resource providers, the aws CLI for EKS, a byo cluster's API server, Docker for the image. "
        "Without --stack: the Pulumi and cloud checks of every cloud. `up` runs the stack's checks first.",
    )
    q.add_argument(
        "-s",
        "--stack",
        help="stack name (stacks/Pulumi.<stack>.yaml) [the current stack: `elastic-lab stack`; without one, "
        "every cloud's checks]",
    )
    add_output(q)
    q.set_defaults(func=check_main, stack_default=STACK_OPTIONAL)

    q = subparsers.add_parser(
        "image",
        help="build the training image, push it to the stack's registry, make it the stack's trainerImage",
        description="Build the Dockerfile for linux/amd64, log Docker in to the stack's registry (its imageRegistry "
        "output: az acr login on AKS, an ECR token on EKS), push, and set elastic-spot-lab:trainerImage: the next "
        "`up` installs the spot-notice handler from it and jobs run it by default.",
    )
    q.add_argument("-s", "--stack", help=f"a deployed aks or eks stack {STACK_DEFAULT}")
    q.add_argument(
        "--tag",
        help="the image's tag, one the registry does not hold yet on EKS (ECR's tags are immutable) [the checkout's "
        "commit; with changes -dirty-<their hash>; with --build-arg -args-<their hash>]",
    )
    q.add_argument(
        "--build-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed to docker build, e.g. TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128",
    )
    q.add_argument("--dry-run", action="store_true", help="say every step, run none")
    q.set_defaults(func=image_main, stack_default=STACK_REQUIRED)

    for name, helptext in (
        ("up", "check the stack offline, then `pulumi up` through the Automation API (with the policy pack)"),
        ("preview", "check the stack offline, then `pulumi preview` (with the policy pack)"),
        ("destroy", "`pulumi destroy` of the stack (see `teardown` for jobs, volumes and leftovers too)"),
    ):
        q = subparsers.add_parser(name, help=helptext, description=helptext)
        q.add_argument("-s", "--stack", help=f"stack name (stacks/Pulumi.<stack>.yaml) {STACK_DEFAULT}")
        if name != "preview":
            add_yes(q, "skip the preview and the question (for scripts)")
        q.set_defaults(func=stack_main, operation=name, stack_default=STACK_REQUIRED)

    for name, helptext, func in (
        ("status", "a job's conditions, world size, restarts, pods and their nodes", status_main),
        ("logs", "a job's worker logs", logs_main),
        ("delete", "delete a job and what was created with it", delete_main),
        ("scale", "set a running job's number of nodes (Worker replicas) within its range", scale_main),
    ):
        q = subparsers.add_parser(name, help=helptext, description=helptext)
        _connection_arguments(q, stack_required=False)
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


# The module a job runs unless told otherwise: the project's demo trainer.
DEMO_TRAINER = JobSpec.__dataclass_fields__["module"].default


def job_spec(args: argparse.Namespace, target: Any) -> JobSpec:
    """The JobSpec of submit's flags: --module, else --script, else the demo trainer (a module or
    script given empty is refused by the JobSpec, never replaced)."""
    module = args.module if args.module is not None else DEMO_TRAINER if args.script is None else None
    return job_fields_spec(
        args,
        image=target.image_for(args.image),
        module=module,
        script=args.script,
        script_args=tuple(args.script_args),
        rdzv_id=args.rdzv_id,
    )


def trainer_argument_problems(spec: JobSpec) -> list[Problem]:
    """The arguments after `--`, when the job runs the demo trainer: checked by the trainer's own
    parser (lab.runtime.train.parse_args), which would refuse them on every worker. A module or
    script of the user's gets its arguments untouched."""
    if spec.module != DEMO_TRAINER or not spec.script_args:
        return []
    import contextlib
    import io

    from lab.runtime.train import parse_args

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


def connection_problems(args: argparse.Namespace) -> list[Problem]:
    """--namespace and --kubeconfig, as every command that reaches a cluster takes them."""
    from lab.ops.kube import kubeconfig_problems

    found = Problems()
    if args.namespace is not None and not is_dns_label(args.namespace):
        found.add("--namespace", args.namespace, f"a namespace name, {DNS_LABEL_RULE}")
    found.extend(kubeconfig_problems(args.kubeconfig))
    return found.items


def checked_submission(args: argparse.Namespace, target: Any) -> tuple[JobSpec, Any]:
    """The job and its sizing from submit's flags, or every problem of them at once (one
    InvalidInput), before anything is rendered or reached."""
    from lab.submit.core import int32_problems

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
    from lab.submit.core import JobSizing

    return JobSizing(
        cpu=args.cpu, memory=args.memory, gpus=args.gpus, replicas=args.replicas, autoscale_cpu=args.autoscale_cpu
    )


def _fail(command: str, exc: BaseException, code: int) -> int:
    print(f"elastic-lab {command}: {exc}", file=sys.stderr)
    return code


def run_command(command: str, body: Callable[[], int]) -> int:
    """Run a command body; an error of the lab exits with its code (2 refused input, 1 a
    failed operation)."""
    try:
        return body()
    except LabError as exc:
        return _fail(command, exc, exc.exit_code)


def stack_target_of(stack: str | None) -> Any:
    from lab.submit.core import stack_target

    return stack_target(stack) if stack else None


def namespace_of(args: argparse.Namespace, target: Any, kube: Any) -> str:
    if args.namespace:
        return str(args.namespace)
    return str(target.facts.namespace) if target is not None else str(kube.namespace)


def submit_main(args: argparse.Namespace) -> int:
    def body() -> int:
        from lab.ops import jobs
        from lab.submit.core import manifest_text, render_job
        from lab.submit.fallback import on_demand_notice
        from lab.vocab.checkpoint_interval import interval_line

        target = stack_target_of(args.stack)
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
        return 0

    return run_command("submit", body)


@contextmanager
def connected(args: argparse.Namespace, target: Any = None) -> Iterator[tuple[Any, str]]:
    """(cluster, namespace) for a command's --stack, --kubeconfig, --context and --namespace."""
    from lab.ops.kube import connect_to_stack

    with connect_to_stack(target, args.kubeconfig, args.context) as kube:
        yield kube, namespace_of(args, target, kube)


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
    def body() -> int:
        from lab.ops import jobs

        name = job_named(args, required=False)
        as_json = args.output == "json"
        with connected(args, stack_target_of(args.stack)) as (kube, namespace):
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

    return run_command("status", body)


def scale_main(args: argparse.Namespace) -> int:
    def body() -> int:
        from lab.ops import jobs

        name = the_job(args)
        with connected(args, stack_target_of(args.stack)) as (kube, namespace):
            print(jobs.scale(kube, name, namespace, args.nodes).line())
        return 0

    return run_command("scale", body)


_DURATION = re.compile(r"^(\d+)(s|m|h)$")
_SECONDS = {"s": 1, "m": 60, "h": 3600}


def log_window(args: argparse.Namespace) -> Any:
    """The part of each log `logs` shows, from --tail/--since/--previous (refused with every
    problem before anything is read)."""
    from lab.ops.jobs import LogWindow

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
    def body() -> int:
        from lab.ops import jobs

        name = the_job(args)  # every input refused before the cluster is asked anything
        window = log_window(args)
        with connected(args, stack_target_of(args.stack)) as (kube, namespace):
            try:
                for pod, line in jobs.logs(
                    kube, name, namespace, worker=args.worker, follow=args.follow, window=window
                ):
                    print(f"[{pod}] {line}", flush=True)
            except KeyboardInterrupt:
                return 130
        return 0

    return run_command("logs", body)


def delete_main(args: argparse.Namespace) -> int:
    def body() -> int:
        from lab.ops import jobs

        name = the_job(args)
        with connected(args, stack_target_of(args.stack)) as (kube, namespace):
            deleted = jobs.delete(kube, name, namespace)
        print(f"deleted {', '.join(deleted)} from namespace {namespace}")
        return 0

    return run_command("delete", body)


def check_main(args: argparse.Namespace) -> int:
    def body() -> int:
        from lab.stacks import prerequisites
        from lab.stacks.automation import configured_cloud, stack_prerequisites

        if args.stack:
            cloud = configured_cloud(args.stack)
            found = stack_prerequisites(cloud, args.stack)
            if args.output != "json":
                print(f"stack {args.stack!r} ({cloud}):")
        else:
            found = prerequisites.check(None)
        missing = prerequisites.problems(found)
        if args.output == "json":
            print(json.dumps({"stack": args.stack, "prerequisites": [dataclasses.asdict(p) for p in found]}, indent=2))
            return 1 if missing else 0
        for item in found:
            print(item.line())
        unchecked = [p for p in found if not p.checked]
        said = [f"{len(missing)} missing" if missing else "everything needed is here"]
        if unchecked:
            said.append(f"{len(unchecked)} not checked until what they need works")
        later = prerequisites.later_needs(found)
        if later:
            said.append(f"{len(later)} needed later ({', '.join(p.name for p in later)})")
        print("; ".join(said))
        return 1 if missing else 0

    return run_command("check", body)


def image_main(args: argparse.Namespace) -> int:
    def body() -> int:
        from lab.stacks import image
        from lab.stacks.automation import configured_cloud
        from lab.stacks.outputs import read_outputs

        cloud = configured_cloud(args.stack)
        if cloud not in ("aks", "eks"):
            raise InvalidInput(
                [Problem("--stack", args.stack, "an aks or eks stack: a byo cluster has no registry of ours")]
            )
        bad = [b for b in args.build_arg if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", b)]
        if bad:
            raise InvalidInput([Problem("--build-arg", b, "KEY=VALUE, e.g. TORCH_INDEX_URL=...") for b in bad])
        tag = args.tag or image.commit_tag(args.build_arg)
        if not image.TAG.match(tag):
            raise InvalidInput([Problem("--tag", tag, "a Docker tag: letters, digits, '_', '.', '-', at most 128")])
        earlier = None  # the image ECR already holds under this tag
        if args.dry_run:
            registry = f"<imageRegistry of {args.stack}>"
            reference = f"{registry}:{tag}" if cloud == "eks" else f"{registry}/{image.IMAGE_PATH}:{tag}"
            steps = [image.Step("log Docker in to the stack's registry", (f"({cloud} login)",))]
        else:
            outputs = read_outputs(args.stack)
            registry = outputs.need("image_registry")
            reference = image.image_reference(cloud, registry, tag)
            earlier = image.earlier_push(cloud, registry, tag, outputs.region, tag_given=bool(args.tag))
            steps = [] if earlier else image.login_steps(cloud, registry, outputs.region)
        steps += image.build_steps(reference, args.build_arg)
        if args.dry_run:
            if cloud == "eks":
                print(f"would look {tag} up in the stack's ECR repository: an image pushed under it is used as is")
            for step in steps:
                print(f"would {step}")
            print(f"would set {image.TRAINER_IMAGE_KEY}={reference}@<its digest> in stack {args.stack!r}")
            return 0
        if earlier:
            print(f"{reference} is in the stack's registry already (built from the same content): not built again")
            reference = earlier
        else:
            image.run_steps(steps, say=lambda line: print(line, flush=True))
            reference = image.pushed_reference(reference)
        image.remember(args.stack, reference)
        print(f"{image.TRAINER_IMAGE_KEY}={reference}; next: elastic-lab up --stack {args.stack}")
        return 0

    return run_command("image", body)


def stack_main(args: argparse.Namespace) -> int:
    operation = args.operation

    def body() -> int:
        from lab.stacks.automation import run

        asks = operation != "preview" and not args.yes
        run(operation, args.stack, confirm=confirm if asks else None)  # NotConfirmed exits 1
        return 0

    return run_command(operation, body)


def confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        print(f"{question} (not a terminal: pass --yes)", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")

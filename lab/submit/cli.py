"""`elastic-lab submit --stack STACK [job flags] [--dry-run]`.

Renders charts/elastic-pytorchjob from a JobSpec (the same launch parameters as the local
target) and the stack's platform, checks it (Kubernetes schema, PyTorchJob CRD v1.9.4,
guardrails), then prints it (--dry-run) or applies it with the stack's kubeconfig.
"""

from __future__ import annotations

import argparse
import sys

from lab.job_args import add_job_arguments
from lab.job_args import job_spec as job_fields_spec
from lab.spec.job import JobSpec
from lab.spec.problems import InvalidInput


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "submit", help="render the elastic PyTorchJob for a stack and apply it", description=__doc__
    )
    p.add_argument("--stack", required=True, help="stack name (stacks/Pulumi.<stack>.yaml)")
    p.add_argument("--dry-run", action="store_true", help="print the YAML that would be applied, apply nothing")
    p.add_argument("--kubeconfig", help="kubeconfig to apply with (default: the stack's)")
    d = JobSpec.__dataclass_fields__
    job = p.add_argument_group("job (lab/spec/job.py JobSpec; the same flags as `elastic-lab drill`)")
    add_job_arguments(job)
    job.add_argument(
        "--image",
        default=d["image"].default,
        help="training image, built from the Dockerfile (torch, python-etcd, this project)",
    )
    target = job.add_mutually_exclusive_group()
    target.add_argument("--module", default=None, help=f"Python module to run [{d['module'].default}]")
    target.add_argument("--script", default=None, help="script path inside the image")
    job.add_argument("--rdzv-id", default="", help="rendezvous id (default: <name>-<random>)")
    job.add_argument("script_args", nargs="*", help="arguments for the training script (after --)")
    p.set_defaults(func=main)


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


def main(args: argparse.Namespace) -> int:
    from lab.k8s.helm import ChartRenderError
    from lab.submit.core import SubmitError, apply, kubeconfig_for, manifest_text, render_job, stack_target

    try:
        spec = job_spec(args)
        target = stack_target(args.stack)
        cluster_spec, objects = render_job(spec, target)
        manifest = manifest_text(cluster_spec, target, objects)
        if args.dry_run:
            sys.stdout.write(manifest)
            return 0
        with kubeconfig_for(target, args.kubeconfig) as kubeconfig:
            out = apply(manifest, kubeconfig)
        sys.stdout.write(out)
        print(f"submitted {cluster_spec.name} to namespace {target.facts.namespace} (rdzvId {cluster_spec.rdzv_id})")
        return 0
    except (InvalidInput, ChartRenderError) as exc:
        print(f"elastic-lab submit: {exc}", file=sys.stderr)
        return 2
    except SubmitError as exc:
        print(f"elastic-lab submit: {exc}", file=sys.stderr)
        return 1

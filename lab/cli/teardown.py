"""`elastic-lab teardown --stack S` and `elastic-lab teardown --local`: leave nothing billed, and
nothing running.

A cloud stack, in this order: the stack's outputs are read (they are gone after the destroy);
on the cluster, the jobs, LoadBalancer Services and (with --delete-checkpoints) the volume
claims are deleted while the controllers that clean up after them still run; `pulumi destroy`;
then the cloud is swept for what the controllers made outside Pulumi's state (Azure: tagged
resource groups, disks and public IPs in the node resource group; AWS: load balancers, target
groups, ENIs, volumes, security groups of the cluster, and the stack's image repository with its
images, which ECR refuses to delete unforced). Those leftovers are what makes a destroy
fail: when it does, the sweep runs first and the destroy once more. Checkpoint storage is kept unless
--delete-checkpoints. `--dry-run` lists what would be deleted and the calls, deleting nothing;
where the deployed stack or its cluster cannot be read here, it says each step and its calls from
the stack's offline plan, placeholders in <angle brackets> for what only the cloud knows, and what a
real run needs besides. Without --yes a person confirms. A second run finds nothing and changes
nothing.

The local target: every process a local run started for a work directory (`--workdir`, or
every run under runs/), then the directory.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.cli.common import command_with_text, confirm, connected, stack_target_of
from lab.vocab.command_flags import add_namespace, add_yes
from lab.vocab.problems import InvalidInput, Problem

if TYPE_CHECKING:
    from lab.stacks.outputs import StackOutputs


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = command_with_text(
        subparsers,
        "teardown",
        "delete a stack and everything it left (jobs, volumes, controller-made cloud resources), or a local run",
        __doc__,
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("-s", "--stack", help="the stack to tear down")
    where.add_argument("--local", action="store_true", help="the local target: stop a local run and remove it")
    p.add_argument("--workdir", type=Path, help="--local: this run's work directory [every run under runs/]")
    add_yes(p, "do not ask for confirmation")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted and the calls; delete nothing")
    p.add_argument("--delete-checkpoints", action="store_true", help="delete the checkpoint storage and claims too")
    p.add_argument("--kubeconfig", help="kubeconfig file [the stack's, else $KUBECONFIG]")
    p.add_argument("--context", help="kubeconfig context [the current one]")
    add_namespace(p, "namespace of the jobs [the stack's training namespace and every team's]")
    p.add_argument("--subscription", help="aks: Azure subscription id [$AZURE_SUBSCRIPTION_ID]")
    p.set_defaults(func=main)


def _show(title: str, sweep: Any, found: list[Any], dry_run: bool) -> None:
    print(f"{title}: {len(found)} to delete" + (", kept: " + str(len(sweep.kept)) if sweep.kept else ""))
    for item in found:
        print(f"  - {item.kind} {item.id} ({item.reason})")
    for item in sweep.kept:
        print(f"  = kept {item.kind} {item.id} ({item.reason})")
    if dry_run:
        for call in sweep.calls():
            print(f"    would call {call}")


def _local(args: argparse.Namespace) -> int:
    from lab.cluster.teardown import LocalTeardown

    if args.workdir and not args.workdir.is_dir():
        # Gone already (a second teardown changes nothing), or never there (a typo): say which
        # could be, and leave the exit status to what was left, nothing.
        print(
            f"local run {args.workdir}: no such directory, nothing to tear down (without --workdir, "
            "`elastic-lab teardown --local` tears down every run under runs/)"
        )
        return 0
    runs = [args.workdir] if args.workdir else sorted(p for p in Path("runs").glob("*") if (p / "nodes").is_dir())
    if not runs:
        print("no local run to tear down (runs/ holds none)")
        return 0
    for workdir in runs:
        sweep = LocalTeardown(workdir)
        found = sweep.find()
        _show(f"local run {workdir}", sweep, found, args.dry_run)
        if args.dry_run or not found:
            continue
        if not args.yes and not confirm(f"stop and remove local run {workdir}?"):
            print("left as it was", file=sys.stderr)
            return 1
        for line in sweep.delete(found):
            print(f"  deleted {line}")
    return 0


def _cloud_sweep(cloud: str, outputs: StackOutputs, args: argparse.Namespace, *, rehearsal: bool = False) -> Any:
    """The sweep of what the stack's cluster left in its cloud (None: a byo cluster's cloud is
    not ours). A `rehearsal` (a dry run from the offline plan) takes a placeholder for the Azure
    subscription a real run must be given."""
    keep = not args.delete_checkpoints
    if cloud == "aks":
        from lab.cluster.teardown import AzureSweep
        from lab.vocab.placeholders import placeholder

        subscription = args.subscription or os.environ.get("AZURE_SUBSCRIPTION_ID")
        if not subscription and rehearsal:
            subscription = placeholder("the stack's subscription: --subscription or $AZURE_SUBSCRIPTION_ID")
        if not subscription:
            raise InvalidInput(
                [Problem("--subscription", None, "the stack's Azure subscription id (or $AZURE_SUBSCRIPTION_ID)")]
            )
        return AzureSweep(
            subscription,
            args.stack,
            outputs.need("resource_group_name"),
            outputs.need("node_resource_group"),
            keep_checkpoints=keep,
            cluster_name=outputs.cluster_name,
            storage_account=outputs.storage_account_name,
        )
    if cloud == "eks":
        from lab.cluster.teardown import AwsSweep

        return AwsSweep(
            outputs.need("region"),
            outputs.need("cluster_name"),
            outputs.vpc_id,
            keep_checkpoints=keep,
            checkpoint_bucket=outputs.checkpoint_bucket,
            image_registry=outputs.image_registry,
        )
    return None


def _rehearse(args: argparse.Namespace, target: Any, why: str) -> int:
    """The teardown's dry run from the stack's offline plan (lab.stacks.rehearsal): each step in
    order with the calls it makes, placeholders for what is found, and what a real run needs."""
    from lab.cluster.teardown import kubernetes_sweep_calls
    from lab.stacks import rehearsal

    cloud = None
    if target.cloud in ("aks", "eks"):
        cloud = _cloud_sweep(target.cloud, rehearsal.planned_outputs(args.stack), args, rehearsal=True)
    kept = "" if args.delete_checkpoints else ", keeping the checkpoint claims"
    lines = rehearsal.header("the teardown", args.stack, why)
    for namespace in _namespaces(args, target, args.namespace or target.facts.namespace):
        lines.append(
            f"  1. on the cluster, in namespace {namespace}: delete the training jobs and LoadBalancer Services{kept}"
        )
        lines += [f"    would call {call}" for call in kubernetes_sweep_calls(namespace, not args.delete_checkpoints)]
    keeps = target.cloud in ("aks", "eks") and not args.delete_checkpoints
    storage = ", keeping the checkpoint storage for the next `up` to take back" if keeps else ""
    lines.append(f"  2. pulumi destroy of stack {args.stack!r}{storage}")
    if cloud is not None:
        lines.append(
            f"  3. delete what the cluster's controllers left in the cloud ({target.cloud}) outside Pulumi's state "
            "(should the destroy fail, this runs first and the destroy once more)"
        )
        lines += [f"    would call {call}" for call in cloud.calls()]
    access = {
        "aks": "Azure credentials (`az login`) in the stack's subscription (--subscription or $AZURE_SUBSCRIPTION_ID), "
        "allowed the calls above",
        "eks": "AWS credentials (`aws configure` or `aws sso login`) allowed the aws calls above",
    }
    lines += rehearsal.needs(
        target.cloud,
        args.stack,
        "the Pulumi CLI, logged in to the stack's backend: the destroy runs through it" if cloud is None else None,
        access.get(target.cloud),
        None if args.yes else "a person to answer yes before anything is deleted (or --yes)",
    )
    print("\n".join(lines))
    return 0


def _namespaces(args: argparse.Namespace, target: Any, namespace: str) -> list[str]:
    """The namespaces swept: --namespace alone, else the platform's and every team's."""
    if args.namespace:
        return [namespace]
    return [namespace, *(team.namespace for team in target.facts.teams.values())]


def _stack(args: argparse.Namespace) -> int:
    from lab.cluster.kube import KubeError
    from lab.cluster.teardown import KubernetesSweep, TeardownError
    from lab.stacks.automation import StackError, run
    from lab.stacks.outputs import read_outputs

    target = stack_target_of(args.stack)
    outputs = None
    if target.cloud in ("aks", "eks"):
        try:
            outputs = read_outputs(args.stack)
        except StackError as exc:
            if args.dry_run:
                return _rehearse(args, target, str(exc))
            print(f"note: {exc}; only what the cluster and the stack's own state still hold can go", file=sys.stderr)
    cloud = _cloud_sweep(target.cloud, outputs, args) if outputs else None
    plan: list[tuple[str, Any, list[Any]]] = []
    try:
        with ExitStack() as context:
            try:
                kube, namespace = context.enter_context(connected(args, target))
            except KubeError as exc:
                if args.dry_run:
                    return _rehearse(args, target, str(exc))
                raise
            sweeps = [
                KubernetesSweep(kube, ns, keep_checkpoints=not args.delete_checkpoints)
                for ns in _namespaces(args, target, namespace)
            ]
            plan += [(f"on the cluster, in namespace {k8s.namespace}", k8s, k8s.find()) for k8s in sweeps]
            if cloud is not None:
                plan.append((f"left in the cloud ({target.cloud})", cloud, cloud.find()))
            for title, sweep, found in plan:
                _show(title, sweep, found, args.dry_run)
            print(
                f"then: pulumi destroy of stack {args.stack!r}"
                + ("" if cloud is None else ", and the cloud swept again")
            )
            if args.dry_run:
                return 0
            if not args.yes and not confirm(f"tear down stack {args.stack!r} as listed?"):
                print("nothing deleted", file=sys.stderr)
                return 1
            for _, k8s, found in plan[: len(sweeps)]:
                for line in k8s.delete(found):
                    print(f"  deleted {line}")
    except (KubeError, TeardownError) as exc:
        if args.dry_run:
            raise
        print(f"note: the cluster cannot be reached ({exc}); going on with the destroy", file=sys.stderr)
        if not args.yes and not confirm(f"destroy stack {args.stack!r} without cleaning the cluster first?"):
            return 1
    # Checkpoints the sweep deletes are not for the next `up` to take back.
    remember = not args.delete_checkpoints
    destroy_and_sweep(lambda: run("destroy", args.stack, checks=False, remember_kept=remember), cloud, target.cloud)
    print(f"stack {args.stack!r} torn down" + (" (checkpoints kept)" if not args.delete_checkpoints else ""))
    return 0


def destroy_and_sweep(destroy: Callable[[], object], cloud: Any, cloud_name: str) -> None:
    """`destroy`, then delete what the cloud's controllers left outside Pulumi's state. Those
    leftovers (a load balancer's ENIs and security groups in the VPC, disks in the node resource
    group) are often why a destroy fails: then they are deleted first and the destroy is run once
    more; its second failure is the one reported."""
    from lab.stacks.automation import StackError

    try:
        destroy()
    except StackError as exc:
        if cloud is None:
            raise
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(
            f"note: the destroy failed ({reason}); deleting what the cluster's controllers left in the "
            "cloud, then destroying again",
            file=sys.stderr,
        )
        _sweep(cloud, f"left in the cloud ({cloud_name}) before the second destroy")
        destroy()
    if cloud is not None:
        _sweep(cloud, f"left in the cloud ({cloud_name}) after the destroy")


def _sweep(cloud: Any, title: str) -> None:
    found = cloud.find()
    _show(title, cloud, found, False)
    for line in cloud.delete(found):
        print(f"  deleted {line}")


def main(args: argparse.Namespace) -> int:
    return _local(args) if args.local else _stack(args)

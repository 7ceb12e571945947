"""A stack as a job sees it, read once: the platform's facts (namespace, etcd Service,
checkpoint claim, pools, priorities, the eviction notice), its Kubernetes version, the kubeconfig,
the trainer image and the priced GPU ranks; and the connection to its cluster.

The facts come from the stack's own Pulumi program run offline under mocks
(lab.program.harness): the same code that declares the platform, so a job always matches the
platform it lands on. Every command that reaches a stack's cluster (submit, status, logs, delete,
scale, rebalance, the cluster drill) reads it here, once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from lab.cluster.kube import KubeApi, KubeError, connect, kubeconfig_problems
from lab.plan.aks_pools import pools
from lab.plan.cost import CostEstimate, estimate
from lab.plan.quota_needs import NODE_GROUP, StackQuota, stack_quota
from lab.program.harness import run_program
from lab.program.stack_files import StackNotFound
from lab.stacks.automation import StackError
from lab.stacks.outputs import kubeconfig_file
from lab.vocab.capacity import rank_in
from lab.vocab.job import JobSpec
from lab.vocab.machine_shapes import NodeRoom, node_room
from lab.vocab.names import BYO_CLUSTER_TYPE, PLATFORM_TYPE, PROJECT
from lab.vocab.platform_facts import PlatformFacts
from lab.vocab.problems import InvalidInput, Problem
from lab.vocab.versions import DEFAULT_KUBERNETES_VERSION


class TargetError(StackError):
    """A stack that has no platform to run a job on; the message says why and what to do."""


@dataclass(frozen=True)
class StackTarget:
    stack: str
    cloud: str
    kubernetes_version: str
    facts: PlatformFacts
    kubeconfig_path: str | None  # byo: from the stack config
    inference_priority_class: str = "elastic-inference"
    trainer_image: str | None = None  # the stack's elastic-spot-lab:trainerImage: the jobs' default image
    cost: CostEstimate | None = None  # the stack's pools and GPU ranks, priced (lab.plan.cost)
    # What each size of the GPU spot pool (capacity rank 1) leaves to a worker pod; empty where
    # the stack declares no such pool (byo) or its sizes are not in lab/vocab/machine_shapes.py.
    worker_nodes: tuple[NodeRoom, ...] = ()
    # The cloud quota its plan needs (lab.plan.quota_needs; None: no cloud node pools), kept so that
    # saying what is missing here never runs the program a second time.
    quota: StackQuota | None = None

    def image_for(self, given: str | None) -> str:
        """The image a job runs: the one given, else the stack's trainer image (InvalidInput
        when neither is known)."""
        if given is not None:
            return given
        if self.trainer_image:
            return self.trainer_image
        if self.cloud == "byo":
            # No registry of ours: the Dockerfile's name, built locally (e.g. `kind load docker-image`).
            return str(JobSpec.__dataclass_fields__["image"].default)
        raise InvalidInput(
            [
                Problem(
                    "--image",
                    None,
                    f"the training image: stack {self.stack!r} has no elastic-spot-lab:trainerImage yet; build the "
                    "Dockerfile, push it to the stack's registry (its imageRegistry output) and set trainerImage, "
                    "or pass --image",
                )
            ]
        )


def stack_target(stack: str) -> StackTarget:
    """Run the stack's program offline and read the platform's facts back."""
    try:
        plan = run_program(stack)
    except StackNotFound:
        raise  # a name that is no stack: refused input
    except FileNotFoundError as exc:
        raise TargetError(str(exc)) from None
    platforms = [r for r in plan.resources if r.type == PLATFORM_TYPE]
    if not platforms:
        raise TargetError(f"stack {stack!r} declares no training platform ({PLATFORM_TYPE}); nothing to submit to")
    outputs = platforms[0].outputs or {}
    byo = next((r for r in plan.resources if r.type == BYO_CLUSTER_TYPE), None)
    return StackTarget(
        stack=stack,
        cloud=str(plan.cloud),
        kubernetes_version=str(outputs.get("kubernetesVersion", DEFAULT_KUBERNETES_VERSION)),
        facts=PlatformFacts.from_dict(outputs["jobFacts"]),
        kubeconfig_path=((byo.outputs or {}).get("kubeconfigPath") if byo else None),
        inference_priority_class=str((outputs.get("priorityClasses") or {}).get("inference", "elastic-inference")),
        trainer_image=plan.config.get(f"{PROJECT}:trainerImage") or None,
        cost=estimate(plan),
        worker_nodes=worker_node_rooms(plan),
        quota=stack_quota(plan),
    )


def worker_node_rooms(plan: Any) -> tuple[NodeRoom, ...]:
    """What a node of each size of the plan's GPU spot pool (capacity rank 1, where the job is
    sized: lab/vocab/capacity.py) leaves to pods; sizes not known here are left out."""
    cloud = str(plan.cloud)
    sizes: list[tuple[str, int | None]] = []
    if cloud == "aks":
        sizes = [(str(v.get("vmSize")), v.get("maxPods")) for v in pools(plan) if rank_in(v.get("nodeLabels")) == 1]
    elif cloud == "eks":
        sizes = [
            (str(size), None)
            for group in plan.of_type(NODE_GROUP)
            if rank_in(group.inputs.get("labels")) == 1
            for size in group.inputs.get("instanceTypes") or []
        ]
    rooms = (node_room(cloud, size, max_pods if isinstance(max_pods, int) else None) for size, max_pods in sizes)
    return tuple(room for room in rooms if room is not None)


@contextmanager
def connect_to_stack(target: StackTarget | None, kubeconfig: str | None, context: str | None) -> Iterator[KubeApi]:
    """The Cluster of a stack (or, with no stack, of $KUBECONFIG): --kubeconfig, else the
    stack's kubeconfig, else $KUBECONFIG when the stack output cannot be read here."""
    if problems := kubeconfig_problems(kubeconfig):
        raise InvalidInput(problems)
    if kubeconfig or target is None:
        yield connect(kubeconfig, context)
        return
    with ExitStack() as files:
        try:
            path: str | None = files.enter_context(kubeconfig_file(target.stack, configured=target.kubeconfig_path))
            note = ""
        except StackError as exc:
            if not os.environ.get("KUBECONFIG"):
                from lab.stacks.automation import missing_prerequisites

                # Why the stack's outputs cannot be read here, said whole (`elastic-lab check`).
                missing = missing_prerequisites(
                    target.cloud, target.stack, target.quota, with_quota=target.quota is not None
                )
                raise KubeError(
                    f"{exc}; pass --kubeconfig PATH or set $KUBECONFIG instead"
                    + (f"; missing here:\n{missing}" if missing else "")
                ) from None
            path, note = None, f" [stack {target.stack!r}: using $KUBECONFIG, {exc}]"
        kube = connect(path, context)
        kube.source += note
        yield kube

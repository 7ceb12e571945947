"""Render a job for a stack and check it, offline.

The platform's facts (namespace, etcd Service, checkpoint claim, pools, priorities, the
eviction notice) come from the stack's own Pulumi program run offline under mocks
(lab.plan.harness): the same code that declares the platform, so a job always matches the
platform it lands on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.k8s.helm import render_release, to_yaml
from lab.k8s.job_values import values_for
from lab.k8s.platform_guardrails import GuardrailContext, run_guardrails
from lab.k8s.schemas import CrdSchemaMissing, validate_objects
from lab.plan.cost import CostEstimate, estimate
from lab.plan.harness import run_program
from lab.plan.stack_files import StackNotFound
from lab.vocab.checkpoint_location import CheckpointAccess
from lab.vocab.errors import LabError
from lab.vocab.job import JobSpec
from lab.vocab.layout import JOB_CHART
from lab.vocab.names import BYO_CLUSTER_TYPE, PLATFORM_TYPE, PROJECT, image_repository
from lab.vocab.platform_facts import PlatformFacts
from lab.vocab.problems import InvalidInput, Problem, Problems
from lab.vocab.versions import DEFAULT_KUBERNETES_VERSION, PROJECT_IMAGE


class SubmitError(LabError):
    """Submission cannot go on; the message says why and what to do."""


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
        raise SubmitError(str(exc)) from None
    platforms = [r for r in plan.resources if r.type == PLATFORM_TYPE]
    if not platforms:
        raise SubmitError(f"stack {stack!r} declares no training platform ({PLATFORM_TYPE}); nothing to submit to")
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
    )


# A Kubernetes resource quantity as requests take it: a number and an optional suffix.
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


@dataclass(frozen=True)
class JobSizing:
    """How big each worker pod is and how many start; None keeps the chart's and platform's
    defaults (the chart's requests, the platform's GPUs per node, maxNodes pods)."""

    cpu: str | None = None  # CPU request per worker pod, a Kubernetes quantity ("4", "3500m")
    memory: str | None = None  # memory request per worker pod ("16Gi")
    gpus: int | None = None  # GPUs per worker pod (nvidia.com/gpu)
    replicas: int | None = None  # worker pods to create, between min and max nodes
    # An HPA over the Worker replicas (elastic jobs): the workers' average CPU utilisation, in
    # percent of their CPU request, that it holds them at by adding or removing nodes.
    autoscale_cpu: int | None = None

    def problems(self, spec: JobSpec, facts: PlatformFacts) -> Problems:
        """Every way this sizing (and the job's node counts) cannot fit the stack's pools,
        named by the flag that set it. A job whose minimum the GPU pool can never reach
        would wait for its rendezvous forever."""
        found = Problems()
        for flag, value in (("--cpu", self.cpu), ("--memory", self.memory)):
            if value is not None and (not _QUANTITY.match(value) or float(re.sub(r"[^0-9.]", "", value) or 0) == 0):
                found.add(flag, value, "a Kubernetes quantity above zero, e.g. 4, 3500m, 16Gi")
        if self.gpus is not None:
            have = facts.gpus_per_node
            if have == 0 and self.gpus != 0:
                found.add("--gpus", self.gpus, "0: the stack's platform has no GPUs (gpusPerNode 0)")
            elif not 0 <= self.gpus <= have:
                found.add("--gpus", self.gpus, f"0..{have}, the GPUs of one node of the stack's GPU pool")
            elif spec.nproc_per_node > self.gpus > 0:
                found.add("--gpus", self.gpus, f">= --nproc-per-node ({spec.nproc_per_node}): one GPU per process")
        if self.replicas is not None and not spec.min_nodes <= self.replicas <= spec.max_nodes:
            found.add(
                "--replicas",
                self.replicas,
                f"between --min-nodes ({spec.min_nodes}) and --max-nodes ({spec.max_nodes})",
            )
        if self.autoscale_cpu is not None:
            if isinstance(self.autoscale_cpu, bool) or not 1 <= self.autoscale_cpu <= 100:
                found.add("--autoscale-cpu", self.autoscale_cpu, "a CPU utilisation in percent, 1..100")
            elif spec.per_step_mode:
                found.add(
                    "--autoscale-cpu",
                    self.autoscale_cpu,
                    "no HPA for a per-step job (the training operator makes one from an elasticPolicy only): "
                    "`elastic-lab scale` sets its size",
                )
            elif spec.min_nodes == spec.max_nodes:
                found.add(
                    "--autoscale-cpu",
                    self.autoscale_cpu,
                    f"--min-nodes below --max-nodes (both {spec.max_nodes}): the HPA has no room to move",
                )
        pool_max = facts.pools.gpu_max_nodes
        if pool_max is not None:
            if spec.min_nodes > pool_max:
                found.add(
                    "--min-nodes",
                    spec.min_nodes,
                    f"<= {pool_max}, the GPU spot pool's maximum: the job could never rendezvous",
                )
            if self.replicas is not None and self.replicas > pool_max:
                found.add("--replicas", self.replicas, f"<= {pool_max}, the GPU spot pool's maximum")
            elif self.replicas is None and spec.max_nodes > pool_max:
                found.add(
                    "--max-nodes",
                    spec.max_nodes,
                    f"<= {pool_max}, the GPU spot pool's maximum: the job starts --max-nodes pods, and the ones "
                    "beyond the pool would stay Pending (or give --replicas)",
                )
        return found

    def apply(self, values: dict[str, Any]) -> None:
        """Write this sizing into the job chart's values."""
        requests = {
            **((values.get("resources") or {}).get("requests") or {}),
            **({"cpu": self.cpu} if self.cpu else {}),
            **({"memory": self.memory} if self.memory else {}),
        }
        if requests:
            values["resources"] = {**(values.get("resources") or {}), "requests": requests}
        if self.gpus is not None:
            values["gpusPerNode"] = self.gpus
        if self.replicas is not None:
            values["replicas"] = self.replicas
        if self.autoscale_cpu is not None:
            values["metrics"] = [cpu_utilization(self.autoscale_cpu)]


def cpu_utilization(percent: int) -> dict[str, Any]:
    """An autoscaling/v2 MetricSpec: the pods' average CPU use at `percent` of their request."""
    return {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": percent}},
    }


@dataclass(frozen=True)
class RenderedJob:
    """A job rendered once for a stack's platform and checked: the spec as the cluster runs
    it, the chart's objects, and its NOTES.txt (what was created, the commands that follow)."""

    spec: JobSpec
    objects: list[dict[str, Any]]
    notes: str


def render_job(
    spec: JobSpec,
    target: StackTarget,
    sizing: JobSizing | None = None,
    access: CheckpointAccess = CheckpointAccess.MOUNT,
) -> RenderedJob:
    """The job for the stack's platform, validated and guarded (raises on problems)."""
    if sizing is not None:
        sizing.problems(spec, target.facts).raise_if_any()
    if target.cloud != "byo" and image_repository(spec.image) == PROJECT_IMAGE:
        # A byo cluster may hold a local build under that name (kind load); cloud nodes pull.
        raise InvalidInput(
            [
                Problem(
                    "--image",
                    spec.image,
                    f"an image in a registry the nodes pull from (stack {target.stack!r}: its imageRegistry output): "
                    f"{PROJECT_IMAGE} is the Dockerfile's name, which nothing publishes (the pods would never start)",
                )
            ]
        )
    cluster_spec, values = values_for(spec, target.facts, access)
    if sizing is not None:
        sizing.apply(values)
    release = render_release(JOB_CHART, values, release=spec.name, namespace=target.facts.namespace)
    objects = release.objects
    problems: list[str] = []
    try:
        problems += [str(p) for p in validate_objects(objects, target.kubernetes_version)]
    except CrdSchemaMissing as exc:
        problems.append(f"cannot check the PyTorchJob: {exc}")
    ctx = GuardrailContext(
        facts=target.facts, expect_platform=False, inference_priority_class=target.inference_priority_class
    )
    for name, violations in run_guardrails(objects, ctx).items():
        problems += [f"[guardrail:{name}] {v}" for v in violations]
    if problems:
        raise SubmitError("the rendered job fails its checks:\n  - " + "\n  - ".join(problems))
    return RenderedJob(cluster_spec, objects, release.notes)


def rendezvous_summary(spec: JobSpec) -> str:
    """Where the job's nodes meet: the rendezvous (elastic) or the lighthouse (per-step)."""
    if spec.per_step_mode:
        return (
            f"per-step (TorchFT): lighthouse at {spec.lighthouse_endpoint}, quorum of at least {spec.min_nodes} "
            f"of up to {spec.max_nodes} replica groups"
        )
    return f"rendezvous {spec.rdzv_backend.value} at {spec.rdzv_endpoint}, id {spec.rdzv_id}, nodes {spec.nnodes}"


def manifest_text(spec: JobSpec, target: StackTarget, objects: Sequence[Mapping[str, Any]]) -> str:
    header = (
        f"# elastic-lab submit --stack {target.stack}: job {spec.name} on {target.cloud}, "
        f"namespace {target.facts.namespace}\n"
        f"# {rendezvous_summary(spec)}\n"
    )
    return header + "---\n" + to_yaml([dict(o) for o in objects])

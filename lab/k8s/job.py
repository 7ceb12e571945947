"""A job rendered for a platform and checked, offline: the job chart's values from a JobSpec
and the platform's facts, the worker pods' sizing against the stack's pools, the Kubernetes
schemas, the PyTorchJob CRD and the platform's guardrails; the YAML `submit --dry-run` prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

from components.charts import chart_default
from lab.k8s.helm import render_release, to_yaml
from lab.k8s.job_values import values_for
from lab.k8s.platform_guardrails import GuardrailContext, run_guardrails
from lab.k8s.schemas import CrdSchemaMissing, validate_objects
from lab.vocab.checkpoint_location import CheckpointAccess
from lab.vocab.errors import LabError
from lab.vocab.job import INT32_MAX, JobSpec
from lab.vocab.layout import JOB_CHART
from lab.vocab.machine_shapes import NodeRoom
from lab.vocab.names import image_repository
from lab.vocab.platform_facts import PlatformFacts
from lab.vocab.problems import InvalidInput, Problem, Problems
from lab.vocab.quantity import MIB, cpu_text, memory_text, parse_quantity
from lab.vocab.versions import PROJECT_IMAGE


class SubmitError(LabError):
    """Submission cannot go on; the message says why and what to do."""


class JobTarget(Protocol):
    """Where a job is rendered for: what the rendering reads of a stack (lab.stacks.target)."""

    @property
    def stack(self) -> str: ...
    @property
    def cloud(self) -> str: ...
    @property
    def kubernetes_version(self) -> str: ...
    @property
    def facts(self) -> PlatformFacts: ...
    @property
    def inference_priority_class(self) -> str: ...
    @property
    def worker_nodes(self) -> tuple[NodeRoom, ...]: ...


# The least memory a worker pod may request: its agent and each of its workers import torch, about
# 220 MiB of resident memory apiece (torch 2.13, measured here), before any model or data.
MIN_WORKER_MEMORY = 512 * MIB
# The most nodes a job may span where the stack does not say how far its GPU pool scales (byo):
# Kubernetes supports clusters of up to 5000 nodes (kubernetes.io, "Considerations for large
# clusters"), and each worker pod of an elastic job is a node of its rendezvous.
MAX_JOB_NODES = 5000
# The PyTorchJob CRD (training operator v1.9.4, schemas/kubeflow.org_pytorchjobs.v1.9.4.yaml) types
# these fields `integer, format: int32` (INT32_MAX); the flag that sets each. The API server
# stores a larger number as something else, or refuses the job.
INT32_FIELDS = {
    "--min-nodes": "spec.elasticPolicy.minReplicas",
    "--max-nodes": "spec.elasticPolicy.maxReplicas",
    "--max-restarts": "spec.elasticPolicy.maxRestarts",
    "--replicas": "spec.pytorchReplicaSpecs.Worker.replicas",
}


def int32_problems(values: Mapping[str, Any]) -> list[Problem]:
    """A problem for each flag of INT32_FIELDS (by name in `values`) whose number the CRD's int32
    field cannot hold."""
    return [
        Problem(flag, value, f"at most {INT32_MAX}: {INT32_FIELDS[flag]} is an int32 in the PyTorchJob CRD")
        for flag, value in values.items()
        if isinstance(value, int) and not isinstance(value, bool) and value > INT32_MAX
    ]


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

    def problems(self, spec: JobSpec | None, target: JobTarget) -> Problems:
        """Every way this sizing (and the job's node counts) cannot fit the stack's pools,
        named by the flag that set it. A job whose minimum the GPU pool can never reach
        would wait for its rendezvous forever; a pod that asks for more than a GPU node has
        would stay Pending. Without a valid `spec` (its own problems are reported apart),
        only what does not depend on it."""
        found = Problems()
        found.extend(self._request_problems(target.worker_nodes))
        if self.gpus is not None:
            have = target.facts.gpus_per_node
            if have == 0 and self.gpus != 0:
                found.add("--gpus", self.gpus, "0: the stack's platform has no GPUs (gpusPerNode 0)")
            elif not 0 <= self.gpus <= have:
                found.add("--gpus", self.gpus, f"0..{have}, the GPUs of one node of the stack's GPU pool")
            elif spec is not None and spec.nproc_per_node > self.gpus > 0:
                found.add("--gpus", self.gpus, f">= --nproc-per-node ({spec.nproc_per_node}): one GPU per process")
        if self.autoscale_cpu is not None and not self._autoscale_percent():
            found.add("--autoscale-cpu", self.autoscale_cpu, "a CPU utilisation in percent, 1..100")
        if spec is not None:
            found.extend(self._count_problems(spec, target.facts.pools.gpu_max_nodes))
            found.extend(self._quota_problems(spec, target.facts))
        return found

    def _quota_problems(self, spec: JobSpec, facts: PlatformFacts) -> list[Problem]:
        """The job against the team's quotas (platform.quota, or a team's platform.teams.<team>):
        its core's GPUs within the team's share, its burst's within what it may borrow, each at
        full size."""
        found = Problems()
        key = f"platform.teams.{facts.team}" if facts.team else "platform.quota"
        team = f"team {facts.team!r}" if facts.team else "the team"
        per_worker = self.gpus if self.gpus is not None else facts.gpus_per_node
        core = self.replicas if self.replicas is not None else spec.core_nodes
        for flag, nodes, quota, what in (
            ("--max-nodes" if not spec.burst_nodes else "--core", core, facts.gpu_quota, f"{team}'s share"),
            ("--burst", spec.burst_nodes, facts.borrowed_gpu_quota, f"what {team} may borrow"),
        ):
            if quota is not None and per_worker and nodes * per_worker > quota:
                found.add(
                    flag,
                    nodes,
                    f"at most {quota // per_worker} node(s) of {per_worker} GPU(s): {what} is {quota} GPU(s) "
                    f"(the stack's {key}; a ResourceQuota would refuse the rest of its pods)",
                )
        return found.items

    def _autoscale_percent(self) -> bool:
        value = self.autoscale_cpu
        return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 100

    def _request_problems(self, rooms: Sequence[NodeRoom]) -> list[Problem]:
        """--cpu and --memory: Kubernetes quantities above zero (memory enough for torch), and
        no more than the smallest node of the GPU spot pool leaves to pods."""
        found = Problems()
        # Each request in the room's units: millicores of cores, MiB of bytes.
        for flag, value, in_room_units in (
            ("--cpu", self.cpu, Fraction(1000)),
            ("--memory", self.memory, Fraction(1, MIB)),
        ):
            if value is None:
                continue
            amount = parse_quantity(value)
            if amount is None or amount <= 0:
                found.add(flag, value, "a Kubernetes quantity above zero, e.g. 4, 3500m, 16Gi")
                continue
            if flag == "--memory" and amount < MIN_WORKER_MEMORY:
                found.add(
                    flag,
                    value,
                    f"at least {memory_text(MIN_WORKER_MEMORY)}, e.g. 16Gi (a number without a unit is bytes): "
                    "the agent and each worker import torch, about 220 MiB apiece",
                )
                continue
            room = min(rooms, key=lambda r: r.cpu_millis if flag == "--cpu" else r.memory_mib, default=None)
            if room is None:
                continue
            left = Fraction(room.cpu_millis if flag == "--cpu" else room.memory_mib)
            if amount * in_room_units > left:
                shown = cpu_text(left / 1000) if flag == "--cpu" else memory_text(left * MIB)
                found.add(
                    flag,
                    value,
                    f"at most {shown}: what a {room.size} node of the GPU spot pool leaves to pods after the "
                    "kubelet's and the system's reservations (a larger request would leave the workers Pending)",
                )
        return found.items

    def _count_problems(self, spec: JobSpec, pool_max: int | None) -> list[Problem]:
        """--replicas and the node counts against the job's range and the GPU pool's size, and
        --autoscale-cpu against the job's mode and range."""
        found = Problems()
        if self.replicas is not None and not spec.min_nodes <= self.replicas <= spec.core_nodes:
            found.add(
                "--replicas",
                self.replicas,
                f"between --min-nodes ({spec.min_nodes}) and --max-nodes ({spec.max_nodes})"
                if not spec.burst_nodes
                else f"between --min-nodes ({spec.min_nodes}) and the core ({spec.core_nodes}): with --burst "
                "it sizes the core, the borrowed part keeps its --burst nodes",
            )
        if self.autoscale_cpu is not None and self._autoscale_percent():
            if spec.burst_nodes:
                found.add(
                    "--autoscale-cpu",
                    self.autoscale_cpu,
                    "no HPA with --burst: the training operator's HPA would scale the core past its nodes "
                    "(and one on the borrowed part would raise it to --min-nodes)",
                )
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
        if pool_max is None:
            if INT32_MAX >= spec.max_nodes > MAX_JOB_NODES:
                found.add(
                    "--max-nodes",
                    spec.max_nodes,
                    f"at most {MAX_JOB_NODES}: the most nodes Kubernetes supports in one cluster (kubernetes.io, "
                    "Considerations for large clusters), and the stack does not say how far its GPU pool scales",
                )
            return found.items
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
        return found.items

    def apply(self, values: dict[str, Any]) -> None:
        """Write this sizing into the job chart's values. A worker's memory limit is its memory
        request: a worker that grows past it is killed in its own container, OOMKilled at a limit
        `elastic-lab status` names, never by a node out of memory that takes its neighbours (the
        device plugin, the kubelet's evictions) with it."""
        resources = values.get("resources") or {}
        requests = {
            **(chart_default(JOB_CHART, "resources", "requests") or {}),
            **(resources.get("requests") or {}),
            **({"cpu": self.cpu} if self.cpu else {}),
            **({"memory": self.memory} if self.memory else {}),
        }
        if requests:
            values["resources"] = {**resources, "requests": requests}
        if "memory" in requests:
            limits = {**(resources.get("limits") or {}), "memory": requests["memory"]}
            values["resources"] = {**values["resources"], "limits": limits}
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
    target: JobTarget,
    sizing: JobSizing | None = None,
    access: CheckpointAccess = CheckpointAccess.MOUNT,
) -> RenderedJob:
    """The job for the stack's platform, validated and guarded (raises on problems)."""
    if spec.burst_nodes and not target.facts.burst_priority_class:
        raise InvalidInput(
            [
                Problem(
                    "--burst",
                    spec.burst_nodes,
                    f"0 on stack {target.stack!r}: its platform declares no PriorityClass for borrowed workers (it "
                    "was deployed before there was one; `elastic-lab up` adds it)",
                )
            ]
        )
    if sizing is not None:
        sizing.problems(spec, target).raise_if_any()
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
    (sizing or JobSizing()).apply(values)
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


def manifest_text(spec: JobSpec, target: JobTarget, objects: Sequence[Mapping[str, Any]]) -> str:
    header = (
        f"# elastic-lab submit --stack {target.stack}: job {spec.name} on {target.cloud}, "
        f"namespace {target.facts.namespace}\n"
        f"# {rendezvous_summary(spec)}\n"
    )
    return header + "---\n" + to_yaml([dict(o) for o in objects])

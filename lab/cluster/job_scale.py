"""A job scaled: its Worker replicas set through the PyTorchJob's scale subresource, within
the range its spec allows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from lab.cluster.kube import KubeApi, api_error
from lab.cluster.pytorchjob import JobError, job_limits, read_job, worker_replica
from lab.vocab.job import FaultTolerance
from lab.vocab.job_parts import PART_BURST, PART_CORE, burst_job_name, core_job_name, part_of
from lab.vocab.problems import InvalidInput, Problem


@dataclass(frozen=True)
class Scaled:
    """A job's Worker replicas before and after `scale`, and the range it may take."""

    name: str
    namespace: str
    before: int | None
    after: int
    minimum: int | None
    maximum: int | None
    fault_tolerance: str

    def line(self) -> str:
        limits = f"{self.minimum}..{self.maximum if self.maximum is not None else 'any'}"
        change = "unchanged" if self.before == self.after else f"{self.before} -> {self.after}"
        return (
            f"{self.namespace}/{self.name}: Worker replicas {change} (range {limits}); the operator adds or removes "
            "workers and the survivors re-form the job at the new size (`elastic-lab status` shows it)"
        )


def scale(kube: KubeApi, name: str, namespace: str, nodes: int) -> Scaled:
    """Set the job's Worker replicas to `nodes` through the PyTorchJob's scale subresource
    (what `kubectl scale` and an HPA use), within its range: an elastic job's
    elasticPolicy minReplicas..maxReplicas, a per-step job's quorum minimum and up. Refused
    (InvalidInput) outside it, before anything changes."""
    job = read_job(kube, name, namespace)
    if job is None:
        raise JobError(f"no PyTorchJob {namespace}/{name}")
    fault_tolerance, minimum, maximum, _ = job_limits(job)
    before = _replicas(job)
    if fault_tolerance == FaultTolerance.PER_STEP.value:
        maximum = None  # a per-step job's groups join its lighthouse at any count
    low = minimum if minimum is not None else 1
    other = _other_part(kube, job, namespace)
    if other is not None:
        # One run in two PyTorchJobs: each part's range leaves the other's workers their room,
        # and the borrowed part may go down to none.
        if maximum is not None:
            maximum -= _replicas(other) or 0
        if part_of(job) == PART_BURST:
            low = 0
    if (
        isinstance(nodes, bool)
        or not isinstance(nodes, int)
        or nodes < low
        or (maximum is not None and nodes > maximum)
    ):
        where = (
            "elasticPolicy minReplicas..maxReplicas"
            if fault_tolerance == FaultTolerance.ELASTIC.value
            else "its quorum minimum and up"
        ) + (f", less the {_replicas(other)} worker(s) of its other part" if other is not None else "")
        shown = f"{low}..{maximum}" if maximum is not None else f"{low} or more"
        raise InvalidInput([Problem("--nodes", nodes, f"{shown}: the job's range ({where})")])
    if before != nodes:
        try:
            kube.custom.patch_namespaced_custom_object_scale(
                "kubeflow.org", "v1", namespace, "pytorchjobs", name, {"spec": {"replicas": nodes}}
            )
        except ApiException as exc:
            raise api_error(exc, f"scale PyTorchJob {namespace}/{name}") from None
    return Scaled(name, namespace, before, nodes, low if other is not None else minimum, maximum, fault_tolerance)


def _replicas(job: Mapping[str, Any]) -> int | None:
    replicas = worker_replica(job).get("replicas")
    return int(replicas) if replicas is not None else None


def _other_part(kube: KubeApi, job: Mapping[str, Any], namespace: str) -> dict[str, Any] | None:
    """The other PyTorchJob of a job with a burst: the borrowed part of a core, the core of a
    borrowed part; None for a job of one PyTorchJob."""
    name = job["metadata"]["name"]
    if part_of(job) == PART_BURST and (core := core_job_name(name)) is not None:
        return read_job(kube, core, namespace)
    if part_of(job) == PART_CORE:
        return read_job(kube, burst_job_name(name), namespace)
    return None

"""A job scaled: its Worker replicas set through the PyTorchJob's scale subresource, within
the range its spec allows."""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes.client.rest import ApiException

from lab.cluster.kube import KubeApi, api_error
from lab.cluster.pytorchjob import JobError, job_limits, read_job
from lab.vocab.job import FaultTolerance
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
    before = ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).get("Worker", {}).get("replicas")
    if fault_tolerance == FaultTolerance.PER_STEP.value:
        maximum = None  # a per-step job's groups join its lighthouse at any count
    low = minimum if minimum is not None else 1
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
        )
        shown = f"{low}..{maximum}" if maximum is not None else f"{low} or more"
        raise InvalidInput([Problem("--nodes", nodes, f"{shown}: the job's range ({where})")])
    if before != nodes:
        try:
            kube.custom.patch_namespaced_custom_object_scale(
                "kubeflow.org", "v1", namespace, "pytorchjobs", name, {"spec": {"replicas": nodes}}
            )
        except ApiException as exc:
            raise api_error(exc, f"scale PyTorchJob {namespace}/{name}") from None
    return Scaled(name, namespace, before, nodes, minimum, maximum, fault_tolerance)

"""A PyTorchJob as the server holds it: the labels the operator and our chart put on what a job
makes, reading and listing jobs, a job's pods, and what its spec says of its range and its
checkpoints. Refusals come back as `JobError` with the server's reason, not as matched text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes.client.rest import ApiException

from lab.cluster.kube import KubeApi, KubeError, api_error
from lab.vocab.job import ENV_CHECKPOINT_EVERY, FaultTolerance
from lab.vocab.names import PROJECT
from lab.vocab.per_step import ENV_MIN_REPLICAS

# Labels the training operator puts on a job's pods.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
# The label our job chart puts on everything it renders.
JOB_LABEL = f"{PROJECT}/job"
PYTORCHJOB = "PyTorchJob"
# The container of a worker pod that runs the agent (the operator's default container name).
TRAINING_CONTAINER = "pytorch"


class JobError(KubeError):
    """A job operation cannot be done (exists already, missing, refused by the server)."""


def read_job(kube: KubeApi, name: str, namespace: str) -> dict[str, Any] | None:
    """The PyTorchJob as the server holds it, or None when there is none of that name."""
    try:
        job = kube.custom.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise api_error(exc, f"reading PyTorchJob {namespace}/{name}") from None
    return dict(job)


def job_exists(kube: KubeApi, name: str, namespace: str) -> bool:
    return read_job(kube, name, namespace) is not None


def list_jobs(kube: KubeApi, namespace: str) -> list[str]:
    try:
        found = kube.custom.list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")
    except ApiException as exc:
        raise api_error(exc, f"listing PyTorchJobs in {namespace}") from None
    return sorted(item["metadata"]["name"] for item in found.get("items", []))


def job_pods(kube: KubeApi, name: str, namespace: str) -> list[Any]:
    try:
        pods = kube.core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={name}").items
    except ApiException as exc:
        raise api_error(exc, f"listing the pods of job {namespace}/{name}") from None
    return sorted(pods, key=lambda p: (replica_index(p) is None, replica_index(p) or 0, p.metadata.name))


def replica_index(pod: Any) -> int | None:
    """The worker's replica index, from the operator's label on its pod."""
    value = (pod.metadata.labels or {}).get(REPLICA_INDEX_LABEL)
    return int(value) if value is not None and str(value).isdigit() else None


def worker_replica(job: Mapping[str, Any]) -> Mapping[str, Any]:
    """The PyTorchJob's Worker replica spec (empty where it has none)."""
    return ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).get("Worker") or {}


def worker_pod_spec(job: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod spec of the PyTorchJob's Worker template (empty where it has none)."""
    return (worker_replica(job).get("template") or {}).get("spec") or {}


def training_container(job: Mapping[str, Any]) -> Mapping[str, Any]:
    """The Worker's training container (the operator's, by name), empty where it has none."""
    return next((c for c in worker_pod_spec(job).get("containers") or [] if c.get("name") == TRAINING_CONTAINER), {})


def job_limits(job: Mapping[str, Any]) -> tuple[str, int | None, int | None, int | None]:
    """(fault tolerance, min and max nodes, restarts allowed per agent) of a PyTorchJob."""
    spec = job.get("spec") or {}
    policy = spec.get("elasticPolicy")
    if policy is not None:
        return (
            FaultTolerance.ELASTIC.value,
            policy.get("minReplicas"),
            policy.get("maxReplicas"),
            policy.get("maxRestarts"),
        )
    # A per-step job (no elasticPolicy): the quorum's minimum is in its workers' environment, its
    # groups are the Worker replicas, and each group's torchrun has its budget on its command line.
    worker = (spec.get("pytorchReplicaSpecs") or {}).get("Worker") or {}
    minimum = restarts = None
    for container in ((worker.get("template") or {}).get("spec") or {}).get("containers") or []:
        for item in container.get("env") or []:
            if item.get("name") == ENV_MIN_REPLICAS and str(item.get("value", "")).isdigit():
                minimum = int(item["value"])
        for arg in container.get("args") or []:
            flag, _, value = str(arg).partition("=")
            if flag == "--max-restarts" and value.isdigit():
                restarts = int(value)
    return FaultTolerance.PER_STEP.value, minimum, worker.get("replicas"), restarts


def checkpoint_every(kube: KubeApi, name: str, namespace: str, default: int = 50) -> int:
    """The running job's checkpoint interval (its workers' LAB_CHECKPOINT_EVERY), else `default`."""
    job = read_job(kube, name, namespace)
    if job is None:
        raise JobError(f"no PyTorchJob {namespace}/{name} to attach to")
    for replica in ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).values():
        for container in ((replica.get("template") or {}).get("spec") or {}).get("containers") or []:
            for item in container.get("env") or []:
                if item.get("name") == ENV_CHECKPOINT_EVERY and str(item.get("value", "")).isdigit():
                    return int(item["value"])
    return default

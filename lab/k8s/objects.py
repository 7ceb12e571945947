"""Finding things among rendered Kubernetes objects: workloads and their pod templates, the
rendezvous servers, the training operator, PriorityClasses, PyTorchJobs and their workers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.platform.values import OPERATOR_LABELS
from lab.vocab.job import FaultTolerance
from lab.vocab.per_step import ENV_FAULT_TOLERANCE

ETCD_NAME_LABEL = ("app.kubernetes.io/name", "etcd-rendezvous")
STORE_ROLE_LABEL = ("elastic-spot-lab/role", "rdzv-store")
LIGHTHOUSE_ROLE_LABEL = ("elastic-spot-lab/role", "lighthouse")
NOTICE_HANDLER_LABEL = ("app.kubernetes.io/name", "spot-notice-handler")
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Pod")


def object_id(obj: Mapping[str, Any]) -> str:
    """`Kind/namespace/name` (`Kind/name` for cluster-scoped objects)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind', '?')}/{ns + '/' if ns else ''}{meta.get('name', '?')}"


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(((obj.get("metadata") or {}).get("labels")) or {})


def pod_template(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = obj.get("kind")
    if kind == "Pod":
        return dict(obj)
    if kind in WORKLOAD_KINDS:
        return ((obj.get("spec") or {}).get("template")) or {}
    return None


def pod_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    tpl = pod_template(obj) or {}
    return {**_labels(obj), **dict(((tpl.get("metadata") or {}).get("labels")) or {})}


def has_label(labels: Mapping[str, str], pair: tuple[str, str]) -> bool:
    return labels.get(pair[0]) == pair[1]


def rendezvous_workloads(objects: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """etcd, c10d store and lighthouse workloads: the rendezvous servers (a per-step job's
    lighthouse forms its quorum at every step)."""
    roles = (ETCD_NAME_LABEL, STORE_ROLE_LABEL, LIGHTHOUSE_ROLE_LABEL)
    return [o for o in objects if o.get("kind") in WORKLOAD_KINDS and any(has_label(pod_labels(o), r) for r in roles)]


def etcd_workloads(objects: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [o for o in rendezvous_workloads(objects) if has_label(pod_labels(o), ETCD_NAME_LABEL)]


def notice_handler_workloads(objects: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The spot-notice handler's DaemonSet (charts/spot-notice-handler)."""
    return [o for o in objects if o.get("kind") in WORKLOAD_KINDS and has_label(pod_labels(o), NOTICE_HANDLER_LABEL)]


def operator_workloads(objects: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The training operator's Deployment (as its transforms place it)."""
    return [
        o
        for o in objects
        if o.get("kind") in WORKLOAD_KINDS and all(pod_labels(o).get(k) == v for k, v in OPERATOR_LABELS.items())
    ]


def priority_values(objects: list[Mapping[str, Any]]) -> dict[str, int]:
    return {o["metadata"]["name"]: int(o.get("value", 0)) for o in objects if o.get("kind") == "PriorityClass"}


def pytorchjobs(objects: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [o for o in objects if o.get("kind") == "PyTorchJob"]


def worker_pod_specs(job: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    replicas = ((job.get("spec") or {}).get("pytorchReplicaSpecs")) or {}
    return [(rtype, (((r or {}).get("template") or {}).get("spec")) or {}) for rtype, r in replicas.items()]


def training_containers(job: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(replica type, container) of each replica's `pytorch` container (the operator's)."""
    return [
        (rtype, c)
        for rtype, spec in worker_pod_specs(job)
        for c in spec.get("containers") or []
        if c.get("name") == "pytorch"
    ]


def is_per_step(job: Mapping[str, Any]) -> bool:
    """A per-step (TorchFT) job: its training containers say so in their environment."""
    return any(
        e.get("name") == ENV_FAULT_TOLERANCE and e.get("value") == FaultTolerance.PER_STEP.value
        for _, c in training_containers(job)
        for e in c.get("env") or []
    )


def containers(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's containers and init containers."""
    return list(pod_spec.get("containers") or []) + list(pod_spec.get("initContainers") or [])

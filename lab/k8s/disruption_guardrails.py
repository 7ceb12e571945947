"""Guardrails on voluntary evictions: a rendezvous server moves only when its node is drained,
one pod at a time, and no PodDisruptionBudget blocks every drain (and with it cluster and node
upgrades)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.k8s.guardrail import GuardrailContext, Objects, Violation
from lab.k8s.objects import (
    WORKLOAD_KINDS,
    object_id,
    pod_template,
    rendezvous_workloads,
)

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"


def _blocks_evictions(pdb: Mapping[str, Any], replicas: int) -> bool:
    """Whether the budget refuses every voluntary eviction of `replicas` healthy pods."""
    spec = pdb.get("spec") or {}
    if "maxUnavailable" in spec:
        return spec["maxUnavailable"] in (0, "0", "0%")
    min_available = spec.get("minAvailable")
    return (isinstance(min_available, int) and min_available >= replicas) or min_available == "100%"


def _one_at_a_time(pdb: Mapping[str, Any]) -> bool:
    spec = pdb.get("spec") or {}
    return spec.get("maxUnavailable") in (1, "1")


def _budgets_selecting(budgets: Objects, namespace: object, labels: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        b
        for b in budgets
        if (b.get("metadata") or {}).get("namespace") == namespace
        and (match := ((b.get("spec") or {}).get("selector") or {}).get("matchLabels"))
        and all(labels.get(k) == v for k, v in match.items())
    ]


def rendezvous_moved_by_drains_only(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """A rendezvous server (etcd, a c10d store, a lighthouse) moves only when its node is
    drained (an upgrade, a person), one pod at a time: a PodDisruptionBudget with
    maxUnavailable 1 (the jobs ride out its restart; a budget of 0 makes AKS refuse cluster
    upgrades and fail node-image upgrades, and EKS node group updates fail), and the cluster
    autoscaler is told not to move it to empty a node (`safe-to-evict: "false"`)."""
    out = []
    budgets = [o for o in objects if o.get("kind") == "PodDisruptionBudget"]
    for obj in rendezvous_workloads(objects):
        template = pod_template(obj) or {}
        meta = template.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if annotations.get(SAFE_TO_EVICT) != "false":
            out.append(
                Violation(
                    object_id(obj),
                    f"spec.template.metadata.annotations.{SAFE_TO_EVICT}",
                    annotations.get(SAFE_TO_EVICT),
                    "'false' (the cluster autoscaler would evict it to empty a CPU node)",
                )
            )
        covering = _budgets_selecting(budgets, (obj.get("metadata") or {}).get("namespace"), meta.get("labels") or {})
        if not covering or not all(_one_at_a_time(b) for b in covering):
            out.append(
                Violation(
                    object_id(obj),
                    "PodDisruptionBudget",
                    [f"{object_id(b)}: maxUnavailable {(b.get('spec') or {}).get('maxUnavailable')}" for b in covering]
                    or None,
                    "a PodDisruptionBudget selecting its pods with maxUnavailable 1: a drain moves it once "
                    "and waits until it is back (0 blocks drains and upgrades; none lets a drain evict a "
                    "server that is still starting)",
                )
            )
    return out


def disruption_budgets_satisfiable(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """No PodDisruptionBudget refuses every eviction of the pods it selects: AKS refuses a
    cluster upgrade up front (UnsatisfiablePDB) and ends a node-image upgrade Failed on a node
    it cannot drain; an EKS node group update fails after its drain timeout."""
    out = []
    budgets = [o for o in objects if o.get("kind") == "PodDisruptionBudget"]
    for obj in objects:
        if obj.get("kind") not in WORKLOAD_KINDS or obj.get("kind") == "DaemonSet":
            continue  # a drain leaves DaemonSet pods alone
        meta = (pod_template(obj) or {}).get("metadata") or {}
        replicas = int((obj.get("spec") or {}).get("replicas", 1))
        namespace = (obj.get("metadata") or {}).get("namespace")
        for budget in _budgets_selecting(budgets, namespace, meta.get("labels") or {}):
            if _blocks_evictions(budget, replicas):
                spec = budget.get("spec") or {}
                key = "maxUnavailable" if "maxUnavailable" in spec else "minAvailable"
                out.append(
                    Violation(
                        f"{object_id(budget)} (selects {object_id(obj)}, {replicas} replica(s))",
                        f"spec.{key}",
                        spec.get(key),
                        "a budget that allows at least one eviction: one that allows none blocks every "
                        "drain, so AKS refuses cluster upgrades (UnsatisfiablePDB) and node upgrades end Failed",
                    )
                )
    return out

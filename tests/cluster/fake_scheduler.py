"""The parts of Kubernetes a reclaim by preemption goes through, for the fake API server.

- Priority admission (the API server's Priority plugin): a pod naming a PriorityClass that does
  not exist is refused (403 Forbidden); one that exists gets `spec.priority` and
  `spec.preemptionPolicy` from it.
- The kube-scheduler, for a pod created with no node: the nodes its required node affinity's
  `matchFields` (metadata.name In ...) allow; it is bound (and runs) on the first where its GPU
  request fits the node's allocatable GPUs less what the pods bound there request (pods being
  deleted included: their GPUs are not free until their kubelet confirms them gone). Where it fits
  nowhere and its preemptionPolicy is PreemptLowerPriority, the scheduler preempts on the first
  node where removing pods of lower priority would make it fit: it takes the lowest priorities
  first and spares every victim it can, the highest first; each victim gets the condition
  DisruptionTarget (reason PreemptionByScheduler) and a graceful deletion with its own grace
  period, and the pod is nominated to the node (`status.nominatedNodeName`) and bound once they
  are gone. Otherwise it stays Pending, Unschedulable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

GPU = "nvidia.com/gpu"
PREEMPTED = "PreemptionByScheduler"
Objects = dict[str, dict[str, Any]]


def _priority_classes(objects: Objects) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects.values() if o.get("kind") == "PriorityClass"}


def admit(objects: Objects, pod: dict[str, Any]) -> str | None:
    """Why the Priority admission plugin refuses `pod` (None: admitted, its priority set)."""
    spec = pod.setdefault("spec", {})
    name = spec.get("priorityClassName")
    if not name:
        spec.setdefault("priority", 0)
        return None
    found = _priority_classes(objects).get(name)
    if found is None:
        return f'pods "{pod["metadata"].get("name")}" is forbidden: no PriorityClass with name {name} was found'
    spec["priority"] = int(found["value"])
    spec["preemptionPolicy"] = found.get("preemptionPolicy", "PreemptLowerPriority")
    return None


def _priority(objects: Objects, pod: dict[str, Any]) -> int:
    spec = pod.get("spec") or {}
    if "priority" in spec:
        return int(spec["priority"])
    found = _priority_classes(objects).get(spec.get("priorityClassName") or "")
    return int(found["value"]) if found else 0


def _gpus(pod: dict[str, Any]) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        asked = resources.get("requests") or resources.get("limits") or {}
        total += int(asked.get(GPU, 0))
    return total


def _bound(objects: Objects, node: str) -> list[dict[str, Any]]:
    return [
        o
        for o in objects.values()
        if o.get("kind") == "Pod"
        and (o.get("spec") or {}).get("nodeName") == node
        and (o.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]


def _allowed_nodes(objects: Objects, pod: dict[str, Any]) -> list[str]:
    nodes = sorted(o["metadata"]["name"] for o in objects.values() if o.get("kind") == "Node")
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return nodes
    allowed: set[str] = set()
    for term in terms:
        for field in term.get("matchFields") or []:
            if field["key"] == "metadata.name" and field["operator"] == "In":
                allowed |= set(field["values"])
    return [n for n in nodes if n in allowed]


def _free(objects: Objects, node: str, without: list[dict[str, Any]] | None = None) -> int:
    """The GPUs of `node` no pod bound there requests, were the pods `without` gone."""
    without = without or []
    found = next(o for o in objects.values() if o.get("kind") == "Node" and o["metadata"]["name"] == node)
    allocatable = int(((found.get("status") or {}).get("allocatable") or {}).get(GPU, 0))
    return allocatable - sum(_gpus(p) for p in _bound(objects, node) if not any(p is w for w in without))


def _victims(objects: Objects, pod: dict[str, Any], node: str) -> list[dict[str, Any]] | None:
    """The pods of lower priority on `node` whose removal makes `pod` fit, as few and as low as
    the scheduler takes; None: even removing them all would not."""
    mine = _priority(objects, pod)
    lower = [p for p in _bound(objects, node) if _priority(objects, p) < mine]
    if _free(objects, node, lower) < _gpus(pod):
        return None
    chosen = list(lower)
    for spared in sorted(lower, key=lambda p: -_priority(objects, p)):  # reprieve the highest first
        trial = [p for p in chosen if p is not spared]
        if _free(objects, node, trial) >= _gpus(pod):
            chosen = trial
    return chosen


def schedule(objects: Objects, mark_deleted: Callable[[dict[str, Any], int | None], None]) -> None:
    """One pass of the scheduler over the pending pods that have no node."""
    pending = [
        o
        for o in objects.values()
        if o.get("kind") == "Pod"
        and not (o.get("spec") or {}).get("nodeName")
        and (o.get("status") or {}).get("phase") in (None, "Pending")
    ]
    for pod in pending:
        nodes = _allowed_nodes(objects, pod)
        status = pod.setdefault("status", {})
        nominated = status.get("nominatedNodeName")
        fits = [n for n in ([nominated] if nominated in nodes else nodes) if _free(objects, n) >= _gpus(pod)]
        if fits:
            pod["spec"]["nodeName"] = fits[0]
            status.update(phase="Running", conditions=[{"type": "PodScheduled", "status": "True"}])
            status.pop("nominatedNodeName", None)
            continue
        status["phase"] = "Pending"
        if nominated or (pod["spec"].get("preemptionPolicy") or "PreemptLowerPriority") == "Never":
            continue
        for node in nodes:
            victims = _victims(objects, pod, node)
            if victims is None:
                continue
            for victim in victims:
                conditions = victim.setdefault("status", {}).setdefault("conditions", [])
                if not any(c.get("type") == "DisruptionTarget" for c in conditions):
                    conditions.append({"type": "DisruptionTarget", "status": "True", "reason": PREEMPTED})
                if "deletionTimestamp" not in victim["metadata"]:
                    mark_deleted(victim, None)
            status["nominatedNodeName"] = node
            break
        else:
            status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]

"""Where a pod may run, read from its spec: the node labels its selector and required
affinity demand, and the taints its tolerations admit."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lab.vocab.pools import Taint


def required_node_labels(pod_spec: Mapping[str, Any]) -> list[dict[str, set[str]]]:
    """Each way the pod may be placed (one per nodeSelectorTerm; nodeSelector applies to
    all) as {label key: allowed values}."""
    base = {k: {v} for k, v in (pod_spec.get("nodeSelector") or {}).items()}
    terms = (
        (
            ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms")
    ) or [{}]
    ways = []
    for term in terms:
        way = {k: set(v) for k, v in base.items()}
        for expr in term.get("matchExpressions") or []:
            if expr.get("operator") == "In":
                values = set(expr.get("values") or [])
                way[expr["key"]] = way[expr["key"]] & values if expr["key"] in way else values
        ways.append(way)
    return ways


def pins_to(pod_spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Every placement the pod allows requires all of `labels`."""
    return all(all(way.get(k) == {v} for k, v in labels.items()) for way in required_node_labels(pod_spec))


def may_select(pod_spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Some placement the pod allows requires one of `labels` (e.g. spot labels)."""
    return any(any(v in way.get(k, set()) for k, v in labels.items()) for way in required_node_labels(pod_spec))


def tolerates(tolerations: Iterable[Mapping[str, Any]] | None, taint: Taint) -> bool:
    """Some toleration admits `taint` (as the scheduler matches them)."""
    for t in tolerations or []:
        if t.get("effect") and t.get("effect") != taint.effect:
            continue
        op = t.get("operator", "Equal")
        if op == "Exists" and not t.get("key"):
            return True
        if t.get("key") != taint.key:
            continue
        if op == "Exists" or (t.get("value") or "") == taint.value:
            return True
    return False

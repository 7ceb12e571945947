"""The GPU capacity ranks of a plan, held together (lab/vocab/capacity.py).

  guardrail:gpu-capacity-ranks  every GPU pool (AKS) or node group (EKS) has a rank 1..n, each
      once; rank 1 is spot; an on-demand rank only last; its capacity label says which it is;
      the autoscaler uses the priority expander and gives up on a node sooner than its 15 min
      default; the expander's ConfigMap gives each rank's node group a priority below the rank
      above it and matches every other group; and every rank carries the labels the platform's
      workers select, with no taint they do not tolerate.

Node group ids are the cloud's (components/capacity.py): a sample id per pool stands for the
scale set or Auto Scaling group the cloud will name.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from lab.plan.aks_pools import MANAGED_CLUSTER, pools
from lab.plan.findings import Finding
from lab.vocab import pools as labels
from lab.vocab.capacity import PRIORITY_CONFIGMAP, PRIORITY_NAMESPACE, PROVISION_TIMEOUT_MIN, RANK_LABEL, rank_of_group
from lab.vocab.pools import Effect

CHECK = "guardrail:gpu-capacity-ranks"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
HELM_CHART = "kubernetes:helm.sh/v4:Chart"
PLATFORM = "elastic-spot-lab:platform:TrainingPlatform"
AUTOSCALER_DEFAULT_PROVISION_MIN = 15
_SAMPLE_UUID = "0a1b2c3d-4e5f-6789-abcd-ef0123456789"


@dataclass(frozen=True)
class RankedPool:
    """A GPU pool or node group as the plan declares it."""

    resource: Any
    name: str
    rank: Any  # the rank label's value, checked below
    spot: bool
    node_labels: Mapping[str, str]
    taints: tuple[str, ...]  # key=value:Effect
    group_id: str  # a sample of the id the cloud's autoscaler knows it by
    at: str  # the property path prefix of its labels


def applies(plan: Any) -> bool:
    return bool(gpu_pools(plan))


def _aks_pools(plan: Any) -> list[RankedPool]:
    out = []
    for pool in pools(plan):
        if pool.role != labels.POOL_GPU_SPOT:
            continue
        node_labels = pool.get("nodeLabels") or {}
        out.append(
            RankedPool(
                pool.resource,
                pool.name,
                node_labels.get(RANK_LABEL),
                pool.spot,
                node_labels,
                tuple(t for t in pool.get("nodeTaints") or [] if isinstance(t, str)),
                f"aks-{pool.name}-12345678-vmss",
                pool.path("nodeLabels"),
            )
        )
    return out


# EKS's taint effects in Kubernetes' spelling; a startup taint (Mountpoint's) leaves the node
# before any worker runs there: workers need not tolerate it.
_EFFECTS: dict[Any, Effect] = {
    "NO_SCHEDULE": "NoSchedule",
    "NO_EXECUTE": "NoExecute",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
}
_STARTUP_KEYS = {labels.MOUNTPOINT_STARTUP_TAINT.key}


def _eks_groups(plan: Any) -> list[RankedPool]:
    out = []
    for g in plan.of_type(NODE_GROUP):
        node_labels = g.inputs.get("labels") or {}
        if node_labels.get(labels.POOL_LABEL) != labels.POOL_GPU_SPOT:
            continue
        name = str(g.inputs.get("nodeGroupName") or g.name)
        taints = tuple(
            labels.Taint(t.get("key", ""), t.get("value", "") or "", _EFFECTS.get(t.get("effect"), "NoSchedule")).text()
            for t in g.inputs.get("taints") or []
            if t.get("key") not in _STARTUP_KEYS
        )
        out.append(
            RankedPool(
                g,
                name,
                node_labels.get(RANK_LABEL),
                g.inputs.get("capacityType") == "SPOT",
                node_labels,
                taints,
                f"eks-{name}-{_SAMPLE_UUID}",
                "labels",
            )
        )
    return out


def gpu_pools(plan: Any) -> list[RankedPool]:
    return _aks_pools(plan) + _eks_groups(plan)


def ranks(plan: Any) -> Iterator[Finding]:
    found = gpu_pools(plan)
    numbered = yield from _numbering(found)
    if numbered:
        yield from _order(numbered)
    yield from _expander(plan, found)
    if numbered:
        yield from _priorities(plan, numbered, found)
    yield from _workers_fit(plan, found)


def _numbering(found: list[RankedPool]) -> Generator[Finding, None, list[RankedPool]]:
    """Rank labels 1..n, each once; returns the pools by rank when they are."""
    seen: dict[int, RankedPool] = {}
    ok = True
    for pool in found:
        value = pool.rank
        if not (isinstance(value, str) and value.isdigit() and int(value) >= 1):
            ok = False
            yield Finding.error(
                CHECK, pool.resource, f"{pool.at}.{RANK_LABEL}", value, "the pool's capacity rank: '1' tried first"
            )
        elif int(value) in seen:
            ok = False
            yield Finding.error(
                CHECK,
                pool.resource,
                f"{pool.at}.{RANK_LABEL}",
                value,
                f"a rank of its own ({seen[int(value)].name} has rank {value})",
            )
        else:
            seen[int(value)] = pool
    if ok and sorted(seen) != list(range(1, len(seen) + 1)):
        ok = False
        last = seen[max(seen)]
        yield Finding.error(
            CHECK, last.resource, f"{last.at}.{RANK_LABEL}", last.rank, f"ranks 1 to {len(seen)} without gaps"
        )
    return [seen[r] for r in sorted(seen)] if ok else []


def _order(numbered: list[RankedPool]) -> Iterator[Finding]:
    if not numbered[0].spot:
        yield Finding.error(
            CHECK, numbered[0].resource, "capacity", "on-demand", "spot: rank 1 is the workers' spot capacity"
        )
    for pool in numbered[:-1]:
        if not pool.spot:
            yield Finding.error(
                CHECK,
                pool.resource,
                "capacity",
                "on-demand",
                f"spot: an on-demand rank goes last (rank {pool.rank} has spot ranks below it, never tried)",
            )
    for pool in numbered:
        wanted = labels.CAPACITY_SPOT if pool.spot else labels.CAPACITY_ON_DEMAND
        if pool.node_labels.get(labels.CAPACITY_LABEL) != wanted:
            yield Finding.error(
                CHECK,
                pool.resource,
                f"{pool.at}.{labels.CAPACITY_LABEL}",
                pool.node_labels.get(labels.CAPACITY_LABEL),
                f"{wanted!r}: the pool's capacity (the notice handler and the drills find spot nodes by it)",
            )


def _expander(plan: Any, found: list[RankedPool]) -> Iterator[Finding]:
    """The autoscaler picks by priority and gives up on a node that never comes sooner than 15 min."""
    for mc in plan.of_type(MANAGED_CLUSTER):
        profile = mc.inputs.get("autoScalerProfile") or {}
        if profile.get("expander") != "priority":
            yield Finding.error(
                CHECK,
                mc,
                "autoScalerProfile.expander",
                profile.get("expander"),
                "'priority': otherwise the autoscaler picks a GPU rank at random (default 'random')",
            )
        yield from _provision_time(mc, "autoScalerProfile.maxNodeProvisionTime", profile.get("maxNodeProvisionTime"))
    if not any(p.resource.type == NODE_GROUP for p in found):
        return
    # Where the plan shows the autoscaler chart's values (the stack config refuses fallback
    # ranks without the autoscaler).
    for chart in (c for c in plan.of_type(HELM_CHART) if "cluster-autoscaler" in str(c.inputs.get("chart", ""))):
        extra = (chart.inputs.get("values") or {}).get("extraArgs") or {}
        if str(extra.get("expander", "")).split(",")[0] != "priority":
            yield Finding.error(
                CHECK,
                chart,
                "values.extraArgs.expander",
                extra.get("expander"),
                "'priority' first (e.g. 'priority,least-waste'): otherwise the autoscaler ignores the ranks",
            )
        yield from _provision_time(
            chart, "values.extraArgs.max-node-provision-time", extra.get("max-node-provision-time")
        )


def _minutes(value: Any) -> float | None:
    text = str(value or "")
    total, number = 0.0, ""
    for ch in text:
        if ch.isdigit() or ch == ".":
            number += ch
        elif ch in "hms" and number:
            total += float(number) * {"h": 60, "m": 1, "s": 1 / 60}[ch]
            number = ""
        else:
            return None
    return total if text and not number else None


def _provision_time(resource: Any, prop: str, value: Any) -> Iterator[Finding]:
    minutes = _minutes(value)
    if minutes is None or not 0 < minutes < AUTOSCALER_DEFAULT_PROVISION_MIN:
        yield Finding.error(
            CHECK,
            resource,
            prop,
            value,
            f"under {AUTOSCALER_DEFAULT_PROVISION_MIN} min (e.g. {PROVISION_TIMEOUT_MIN}m): a rank whose node never "
            "registers is given up on only after it, and the job waits that long before the next rank",
        )


def _priorities(plan: Any, numbered: list[RankedPool], found: list[RankedPool]) -> Iterator[Finding]:
    maps = [
        c
        for c in plan.of_type(CONFIG_MAP)
        if (c.inputs.get("metadata") or {}).get("name") == PRIORITY_CONFIGMAP
        and (c.inputs.get("metadata") or {}).get("namespace") == PRIORITY_NAMESPACE
    ]
    if not maps:
        yield Finding.error(
            CHECK,
            numbered[0].resource,
            f"ConfigMap {PRIORITY_NAMESPACE}/{PRIORITY_CONFIGMAP}",
            None,
            "the priority expander's ConfigMap ranking the GPU pools (without it the expander chooses none)",
        )
        return
    config_map = maps[0]
    text = (config_map.inputs.get("data") or {}).get("priorities")
    try:
        table = yaml.safe_load(text) if isinstance(text, str) else None
        if not isinstance(table, dict) or not all(
            isinstance(k, int) and isinstance(v, list) and all(isinstance(x, str) for x in v) for k, v in table.items()
        ):
            raise ValueError
    except (yaml.YAMLError, ValueError):
        yield Finding.error(
            CHECK, config_map, "data.priorities", text, "YAML mapping each whole-number priority to a list of patterns"
        )
        return
    above: int | None = None
    for pool in numbered:
        got = rank_of_group(table, pool.group_id)
        if got is None or (above is not None and got >= above):
            yield Finding.error(
                CHECK,
                config_map,
                "data.priorities",
                text,
                f"a priority for {pool.group_id!r} (rank {pool.rank}) below rank {int(pool.rank) - 1}'s"
                if above is not None
                else f"a priority for {pool.group_id!r} (rank 1), the highest",
            )
        above = got
    other = "aks-cpu-12345678-vmss" if numbered[0].group_id.startswith("aks-") else f"eks-cpu-{_SAMPLE_UUID}"
    lowest = min((rank_of_group(table, p.group_id) or 0) for p in numbered)
    got = rank_of_group(table, other)
    if got is None or got >= lowest:
        yield Finding.error(
            CHECK,
            config_map,
            "data.priorities",
            text,
            "a catch-all pattern ('.*') below every GPU rank: the autoscaler never scales a group no pattern matches "
            "(the CPU pool)",
        )


def _workers_fit(plan: Any, found: list[RankedPool]) -> Iterator[Finding]:
    """Workers select what every rank carries and tolerate every rank's taints (the platform's facts)."""
    for platform in plan.of_type(PLATFORM):
        facts = ((platform.outputs or {}).get("jobFacts") or {}).get("pools", {}).get("gpuSpot") or {}
        selected, tolerated = facts.get("labels"), facts.get("taints")
        if not isinstance(selected, Mapping) or not isinstance(tolerated, list):
            continue
        for pool in found:
            missing = {k: v for k, v in selected.items() if pool.node_labels.get(k) != v}
            if missing:
                yield Finding.error(
                    CHECK,
                    pool.resource,
                    pool.at,
                    dict(pool.node_labels),
                    f"the labels the workers select ({missing}): otherwise no worker lands on rank {pool.rank}",
                )
            untolerated = [t for t in pool.taints if t not in tolerated]
            if untolerated:
                yield Finding.error(
                    CHECK,
                    pool.resource,
                    "taints",
                    list(pool.taints),
                    f"only taints the workers tolerate ({', '.join(tolerated)}): {', '.join(untolerated)} keeps "
                    f"them off rank {pool.rank}",
                )

"""Ranked GPU capacity: the GPU pools (AKS) or node groups (EKS) the workers may run on, in the
order the cluster autoscaler tries them.

Spot capacity of one size in one region runs out (`SkuNotAvailable`, `AllocationFailed`,
`InsufficientInstanceCapacity`), so a stack may list more than one rank: rank 1 is the stack's
GPU spot pool, then further spot sizes, and at the bottom, optionally, an on-demand GPU rank
that runs the job at the on-demand price when no spot rank has capacity.

How a rank is chosen: the cluster autoscaler's priority expander. Each rank is its own pool
(node group), and the ConfigMap `cluster-autoscaler-priority-expander` in `kube-system` gives
each a priority (higher is tried first): for pending workers the autoscaler scales up the
highest-priority pool that can take them. A pool whose scale-up fails (no capacity, no quota)
is backed off and the next rank is tried; a node that never registers counts as failed after
the autoscaler's `max-node-provision-time`, which the stacks shorten from 15 min to
`PROVISION_TIMEOUT_MIN` so that a rank without capacity is skipped in minutes.
Why not Karpenter / AKS node auto-provisioning: see docs/stacks.md ("GPU capacity ranks").

What a rank may hold: the job is sized for rank 1, so every size of a lower rank has at least
as much memory per GPU as the smallest of rank 1's and at least as many GPUs per node (a
worker asking for rank 1's GPUs fits; more memory or GPUs only cost more). Sizes without a
shape in lab/vocab/machine_shapes.py are not compared.

Every rank carries the workers' pool label and the GPU taint; spot ranks also carry their
cloud's spot label and taint. Workers select the labels every rank has and tolerate the taints
any rank has, so they schedule on whichever rank the autoscaler brings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.vocab.machine_shapes import Shape
from lab.vocab.names import PROJECT
from lab.vocab.problems import Problem, Problems

# The label that says which rank a GPU node came from (1 = tried first).
RANK_LABEL = f"{PROJECT}/gpu-rank"
CAPACITY_TYPES = ("spot", "on-demand")
# The priority expander's ConfigMap (cluster-autoscaler expander/priority readme).
PRIORITY_CONFIGMAP = "cluster-autoscaler-priority-expander"
PRIORITY_NAMESPACE = "kube-system"
# A node that has not registered this long after its scale-up counts as failed, and its pool
# is backed off (the autoscaler's default is 15 min). GPU nodes take several minutes to boot
# and install their driver, so this is not shorter.
PROVISION_TIMEOUT_MIN = 10
# Moving a worker back to rank 1 (`elastic-lab rebalance`): how long rank 1 may take to find
# room for it (a node that counts as failed after the provision time, then its GPU advertised
# and the worker's image pulled), and how long the moved worker may take to run again (its
# grace to save and leave, the operator's recreation, the container's start).
REBALANCE_PROBE_TIMEOUT_S = PROVISION_TIMEOUT_MIN * 60 + 300.0
REBALANCE_MOVE_TIMEOUT_S = 600.0
MAX_RANKS = 6
# Priority of every node group no rank names (the CPU pool): the lowest.
OTHER_GROUPS_PRIORITY = 1


def rank_in(labels: Mapping[str, Any] | None) -> int | None:
    """The capacity rank a pool's or node's labels give (None: not a GPU rank's)."""
    value = (labels or {}).get(RANK_LABEL)
    return int(value) if isinstance(value, str) and value.isdigit() else None


@dataclass(frozen=True)
class GpuRank:
    """One rank of GPU capacity: its place (1 = tried first), its pool or node group name, the
    sizes it launches (one VM size on AKS; instance types on EKS), spot or on-demand, and the
    zones it is pinned to (none: any zone of the region)."""

    rank: int
    name: str
    sizes: tuple[str, ...]
    spot: bool
    zones: tuple[str, ...] = ()

    @property
    def capacity(self) -> str:
        return "spot" if self.spot else "on-demand"

    def describe(self) -> str:
        where = f" in zone(s) {', '.join(self.zones)}" if self.zones else ""
        return f"rank {self.rank}: {self.name} ({', '.join(self.sizes)}, {self.capacity}{where})"


def expander_priorities(ranks: Sequence[GpuRank], pattern: Callable[[str], str]) -> dict[int, list[str]]:
    """The priority expander's table: rank 1 highest, every other node group lowest.
    `pattern(name)` is the regular expression matching the cloud's node group id of a pool."""
    top = 10 * len(ranks)
    table = {top - 10 * (r.rank - 1): [pattern(r.name)] for r in ranks}
    table[OTHER_GROUPS_PRIORITY] = [".*"]
    return table


def priorities_text(table: Mapping[int, Sequence[str]]) -> str:
    """The ConfigMap's `priorities` value: YAML mapping each priority to its patterns (the
    patterns are quoted: a regular expression may hold YAML's special characters)."""
    lines = []
    for priority in sorted(table, reverse=True):
        lines.append(f"{priority}:")
        lines += ["  - '" + p.replace("'", "''") + "'" for p in table[priority]]
    return "\n".join(lines) + "\n"


def rank_of_group(table: Mapping[int, Sequence[str]], group_id: str) -> int | None:
    """Which priority a node group id gets from the table: the highest whose pattern is found in
    it anywhere, as the autoscaler matches them (unanchored: anchor a pattern to match whole ids)."""
    matched = [p for p, patterns in table.items() if any(re.search(x, group_id) for x in patterns)]
    return max(matched) if matched else None


def fallback_problems(
    entries: Any,
    key: str,
    *,
    sizes_key: str,
    size_problems: Callable[[Any, str], list[Problem]],
    name_problem: Callable[[Any], str | None],
    zones_allowed: tuple[str, ...] | None,
) -> list[Problem]:
    """Problems of a stack's fallback ranks (`key`: a list of mappings with `sizes_key`, an
    optional `capacity`, `name` and, where `zones_allowed`, `zones`). The on-demand rank, if
    any, comes last: after it no spot rank would ever be tried."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        return [Problem(key, entries, f"a list of ranks, each a mapping with {sizes_key} and capacity")]
    found = Problems()
    if len(entries) > MAX_RANKS - 1:
        found.add(key, len(entries), f"at most {MAX_RANKS - 1} fallback ranks (each is a pool the autoscaler tries)")
    allowed = {sizes_key, "capacity", "name", *({"zones"} if zones_allowed is not None else set())}
    for i, entry in enumerate(entries):
        at = f"{key}[{i}]"
        if not isinstance(entry, Mapping):
            found.add(at, entry, f"a mapping with {sizes_key} and capacity (spot or on-demand)")
            continue
        for extra in sorted(set(entry) - allowed):
            found.add(f"{at}.{extra}", entry[extra], "one of " + ", ".join(sorted(allowed)))
        if sizes_key not in entry:
            found.add(f"{at}.{sizes_key}", None, f"the rank's {sizes_key}")
        else:
            found.extend(size_problems(entry[sizes_key], f"{at}.{sizes_key}"))
        capacity = entry.get("capacity", "spot")
        if capacity not in CAPACITY_TYPES:
            found.add(f"{at}.capacity", capacity, "spot or on-demand")
        elif capacity == "on-demand" and i != len(entries) - 1:
            found.add(
                f"{at}.capacity",
                capacity,
                "spot: only the last rank may be on-demand (the autoscaler would never try a spot rank below it)",
            )
        if "name" in entry and (why := name_problem(entry["name"])) is not None:
            found.add(f"{at}.name", entry["name"], why)
        if "zones" in entry and zones_allowed is not None:
            zones = entry["zones"]
            if not isinstance(zones, list) or not zones or any(str(z) not in zones_allowed for z in zones):
                found.add(f"{at}.zones", zones, "a non-empty list of zones from " + ", ".join(zones_allowed))
    return found.items


def rank_from_entry(rank: int, entry: Mapping[str, Any], *, sizes_key: str, default_name: str) -> GpuRank:
    """A checked fallback entry as a GpuRank."""
    sizes = entry[sizes_key]
    return GpuRank(
        rank=rank,
        name=str(entry.get("name") or default_name),
        sizes=tuple(sizes) if isinstance(sizes, list) else (str(sizes),),
        spot=entry.get("capacity", "spot") == "spot",
        zones=tuple(str(z) for z in entry.get("zones") or ()),
    )


def default_rank_name(base: str, rank: int, spot: bool, *, limit: int, separator: str = "") -> str:
    """A fallback rank's pool or group name: the GPU spot pool's with the rank for a spot rank
    (gpuspot -> gpuspot2), `gpu<sep>ondemand` for the on-demand one; cut to `limit`."""
    if not spot:
        return f"gpu{separator}on{separator}demand" if separator else "gpuondemand"
    tail = f"{separator}{rank}"
    return base[: limit - len(tail)] + tail


def shape_problems(ranks: Sequence[GpuRank], shapes: Mapping[str, Shape]) -> list[tuple[int, str, str]]:
    """(rank, size, what it should be) for each size of a lower rank smaller than rank 1 allows."""
    first = [shapes[s] for s in ranks[0].sizes if s in shapes] if ranks else []
    if not first:
        return []
    memory = min(s.gpu_memory_gib for s in first)
    gpus = min(s.gpus for s in first)
    out = []
    for rank in ranks[1:]:
        for size in rank.sizes:
            shape = shapes.get(size)
            if shape is None:
                continue
            if shape.gpu_memory_gib < memory:
                out.append(
                    (
                        rank.rank,
                        size,
                        f"a size with at least {memory:g} GiB per GPU, as rank 1 has ({size} has "
                        f"{shape.gpu_memory_gib:g}): the job is sized for rank 1",
                    )
                )
            elif shape.gpus < gpus:
                out.append(
                    (
                        rank.rank,
                        size,
                        f"a size with at least {gpus} GPUs per node, as rank 1 has ({size} has "
                        f"{shape.gpus}): a worker asks for rank 1's GPUs",
                    )
                )
    return out


def rank_list_problems(
    ranks: Sequence[GpuRank], shapes: Mapping[str, Shape], *, key: str, sizes_key: str, other_pools: set[str]
) -> list[Problem]:
    """Problems of a valid list of ranks taken together: a lower rank's size smaller than rank
    1 allows (`key[i].sizes_key`), and pool names that repeat or clash with `other_pools`."""
    found = Problems()
    for rank, size, expected in shape_problems(ranks, shapes):
        found.add(f"{key}[{rank - 2}].{sizes_key}", size, expected)
    names = [r.name for r in ranks]
    clash = sorted({n for n in names if names.count(n) > 1 or n in other_pools})
    if clash:
        found.add(
            key,
            [r.name for r in ranks[1:]],
            "ranks whose pool names differ from each other and from the other pools "
            f"({', '.join(sorted(other_pools))}; set `name` on the rank): {', '.join(clash)} repeats",
        )
    return found.items

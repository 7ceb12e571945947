"""Node pools and where pods may run: pool labels, taints, tolerations and the placement the
platform and the jobs select.

The cluster components put these labels and taints on their pools; the platform and the
job chart select and tolerate exactly what a cluster hands over (`PoolPlacement`). Keys are
defined here and only here, so a pool and the pods meant for it cannot drift apart.

Pools:
  system    cloud add-ons only (on AKS the system pool, tainted CriticalAddonsOnly)
  cpu       on-demand CPU pool: etcd rendezvous, training operator, launchers
  gpu-spot  spot GPU pool: the elastic workers; scales to zero
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from lab.vocab.names import LABEL_KEY, LABEL_VALUE, PROJECT
from lab.vocab.problems import InvalidInput, Problem, Problems

# Our own pool label: `elastic-spot-lab/pool: system | cpu | gpu-spot`.
POOL_LABEL = f"{PROJECT}/pool"
POOL_SYSTEM = "system"
POOL_CPU = "cpu"
POOL_GPU_SPOT = "gpu-spot"
POOLS = (POOL_SYSTEM, POOL_CPU, POOL_GPU_SPOT)

# Our own capacity label, set on every pool: `elastic-spot-lab/capacity: on-demand | spot`.
CAPACITY_LABEL = f"{PROJECT}/capacity"
CAPACITY_ON_DEMAND = "on-demand"
CAPACITY_SPOT = "spot"

# The NVIDIA device plugin's default node affinity selects nodes with this label
# (its chart's values.yaml): without it the plugin schedules nowhere.
NVIDIA_GPU_PRESENT_LABEL = "nvidia.com/gpu.present"

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
Effect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


@dataclass(frozen=True)
class Taint:
    """A node taint: the project's one Taint, rendered for each place that needs it."""

    key: str
    value: str
    effect: Effect = "NoSchedule"

    def text(self) -> str:
        """`key=value:Effect` (`key:Effect` when the value is empty): the form `parse_taint`
        reads, and the form of an AKS pool's `nodeTaints` entries."""
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"

    def eks(self) -> dict[str, str]:
        """An EKS managed node group's `taints` entry (effects NO_SCHEDULE, ...)."""
        effect = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}
        return {"key": self.key, "value": self.value, "effect": effect[self.effect]}

    def as_dict(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}

    def toleration(self) -> dict[str, str]:
        """The toleration of exactly this taint: operator Equal with the taint's value (an
        empty value matches a taint without one, as Kubernetes compares them)."""
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


# Our GPU taint: only pods that ask for GPUs (and tolerate it) land on GPU nodes.
GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
# Our spot taint, where the cloud puts none on spot nodes (EKS): only pods that accept being
# evicted at short notice land there.
SPOT_TAINT = Taint(f"{PROJECT}/spot", "true", "NoSchedule")
# Where the checkpoint bucket is mounted by the Mountpoint S3 CSI driver (EKS GPU nodes): a new
# node carries this until the driver's node plugin runs there and removes it, so no worker starts
# before its checkpoint volume can be mounted. Workers do not tolerate it; the cluster autoscaler
# is told it is a startup taint (`--startup-taint`), or it would count a new node as unable to
# take the pending workers and add more.
MOUNTPOINT_STARTUP_TAINT = Taint("s3.csi.aws.com/agent-not-ready", "", "NoExecute")


def pool_labels(pool: str, *, spot: bool) -> dict[str, str]:
    """Our cloud-neutral labels for a pool."""
    if pool not in POOLS:
        raise InvalidInput([Problem("pool", pool, "one of " + ", ".join(POOLS))])
    return {POOL_LABEL: pool, CAPACITY_LABEL: CAPACITY_SPOT if spot else CAPACITY_ON_DEMAND}


def required_affinity(labels: Mapping[str, str]) -> dict[str, Any]:
    """A node affinity that requires every one of `labels`."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": k, "operator": "In", "values": [v]} for k, v in sorted(labels.items())
                        ]
                    }
                ]
            }
        }
    }


def common_labels(each: Iterable[Mapping[str, str]], *, leave_out: Iterable[str] = ()) -> dict[str, str]:
    """The labels every one of `each` carries with the same value (less `leave_out`): what a pod
    selects to land on any of several pools."""
    maps = [dict(m) for m in each]
    if not maps:
        return {}
    skip = set(leave_out)
    return {k: v for k, v in maps[0].items() if k not in skip and all(m.get(k) == v for m in maps[1:])}


def all_taints(each: Iterable[Iterable[Taint]]) -> tuple[Taint, ...]:
    """Every taint any of several pools carries, once each, in first-seen order: what a pod
    tolerates to land on any of them."""
    out: list[Taint] = []
    for taints in each:
        out += [t for t in taints if t not in out]
    return tuple(out)


# ------------------------------------------------------------------ checking labels and taints
def label_problems(key: str, labels: Any, *, required: bool = True) -> list[Problem]:
    """Problems of a mapping of node labels given as `key`."""
    if not isinstance(labels, Mapping) or (required and not labels):
        return [Problem(key, labels, "a non-empty mapping of node label key to value")]
    out = Problems()
    for name, value in labels.items():
        if not isinstance(name, str) or not LABEL_KEY.match(name):
            out.add(f"{key}.{name}", name, "a Kubernetes label key such as elastic-spot-lab/pool")
        elif not isinstance(value, str) or not LABEL_VALUE.match(value):
            out.add(f"{key}.{name}", value, "a label value: up to 63 of [A-Za-z0-9-_.] (quote numbers and booleans)")
    return out.items


def taint_problems(taint: Taint, key: str = "taint", given: Any = None) -> list[Problem]:
    """Problems of `taint` (given as `key`; `given` is how the input wrote it)."""
    shown = given if given is not None else taint.text() if isinstance(taint.key, str) else taint
    if not isinstance(taint.key, str) or not LABEL_KEY.match(taint.key):
        return [Problem(key, shown, "a taint whose key is a Kubernetes label key (key=value:Effect)")]
    if not isinstance(taint.value, str) or not LABEL_VALUE.match(taint.value):
        return [
            Problem(key, shown, "a taint whose value is a label value: up to 63 of [A-Za-z0-9-_.] (key=value:Effect)")
        ]
    if taint.effect not in TAINT_EFFECTS:
        return [Problem(key, shown, "a taint effect " + ", ".join(TAINT_EFFECTS) + " (key=value:Effect)")]
    return []


def parse_taint(spec: Any, key: str = "taint") -> Taint:
    """A valid Taint from `key=value:Effect`, `key:Effect` (empty value), a mapping with
    key/value/effect, or a Taint; InvalidInput naming `key` otherwise."""
    given: Any = None
    if isinstance(spec, Taint):
        taint = spec
    elif isinstance(spec, Mapping):
        given = dict(spec)
        if set(spec) - {"key", "value", "effect"}:
            raise InvalidInput([Problem(key, given, "a taint with keys key, value, effect")])
        taint = Taint(spec.get("key", ""), spec.get("value", "") or "", spec.get("effect", "NoSchedule"))
    elif isinstance(spec, str) and ":" in spec:
        given = spec
        pair, _, effect = spec.rpartition(":")
        name, _, value = pair.partition("=")
        taint = Taint(name, value, effect)  # type: ignore[arg-type]  # checked below
    else:
        raise InvalidInput([Problem(key, spec, "a taint: key=value:Effect or {key, value, effect}")])
    if problems := taint_problems(taint, key, given):
        raise InvalidInput(problems)
    return taint


def _parse_taints(key: str, taints: Any, out: Problems) -> tuple[Taint, ...]:
    if isinstance(taints, (str, bytes)) or not isinstance(taints, Iterable):
        out.add(key, taints, "a list of taints")
        return ()
    parsed = []
    for spec in taints:
        try:
            parsed.append(parse_taint(spec, key))
        except InvalidInput as exc:
            out.extend(exc.problems)
    return tuple(parsed)


# ------------------------------------------------------------------ placement
class PoolShape(Protocol):
    """What a placement reads of one pool (a cloud's pool or node group spec)."""

    @property
    def node_labels(self) -> Mapping[str, str]: ...
    @property
    def taints(self) -> tuple[Taint, ...]: ...
    @property
    def max_nodes(self) -> int: ...


@dataclass(frozen=True)
class PoolPlacement:
    """Node pools as the platform sees them: what a cluster hands over about its pools.

    cpu_labels: labels of the on-demand CPU pool (etcd, operator, c10d stores).
    cpu_taints: taints of that pool, if any (tolerated by what runs there).
    gpu_labels: labels of the GPU spot pool (workers, device plugin).
    gpu_taints: exactly the taints of the GPU spot pool (workers tolerate these and no other).
    spot_labels: labels every spot node carries (a cloud's own spot label, our capacity
      label); nothing preserved may select them.
    gpu_max_nodes: the most nodes the GPU spot pool scales to, where the cluster knows it
      (None: unknown, e.g. a cluster brought along); a job needing more can never start.

    The defaults are our own cloud-neutral labels and the GPU taint; a cluster component
    adds what its cloud puts on spot nodes. Taints may be given as text (`key=value:Effect`)
    or mappings; every bad value is reported at once.
    """

    cpu_labels: Mapping[str, str] = field(default_factory=lambda: {POOL_LABEL: POOL_CPU})
    gpu_labels: Mapping[str, str] = field(default_factory=lambda: {POOL_LABEL: POOL_GPU_SPOT})
    gpu_taints: tuple[Taint, ...] = (GPU_TAINT,)
    spot_labels: Mapping[str, str] = field(default_factory=lambda: {CAPACITY_LABEL: CAPACITY_SPOT})
    cpu_taints: tuple[Taint, ...] = ()
    gpu_max_nodes: int | None = None

    def __post_init__(self) -> None:
        found = Problems()
        if self.gpu_max_nodes is not None and (
            isinstance(self.gpu_max_nodes, bool) or not isinstance(self.gpu_max_nodes, int) or self.gpu_max_nodes < 1
        ):
            found.add("pools.gpuSpot.maxNodes", self.gpu_max_nodes, "a whole number of nodes >= 1")
        found.extend(label_problems("pools.cpu.labels", self.cpu_labels))
        found.extend(label_problems("pools.gpuSpot.labels", self.gpu_labels))
        found.extend(label_problems("pools.gpuSpot.spotLabels", self.spot_labels, required=False))
        no_gpu_taints = isinstance(self.gpu_taints, (list, tuple)) and not self.gpu_taints
        object.__setattr__(self, "gpu_taints", _parse_taints("pools.gpuSpot.taints", self.gpu_taints, found))
        object.__setattr__(self, "cpu_taints", _parse_taints("pools.cpu.taints", self.cpu_taints, found))
        for name in ("cpu_labels", "gpu_labels", "spot_labels"):
            value = getattr(self, name)
            object.__setattr__(self, name, dict(value) if isinstance(value, Mapping) else {})
        if no_gpu_taints:
            found.add(
                "pools.gpuSpot.taints", [], "at least one taint: without one, any pod may land on a spot GPU node"
            )
        clash = {k for k, v in self.cpu_labels.items() if self.spot_labels.get(k) == v}
        if clash:
            found.add(
                "pools.cpu.labels",
                dict(self.cpu_labels),
                "labels no spot node carries (" + ", ".join(sorted(clash)) + ")",
            )
        if len({t.key for t in self.gpu_taints}) != len(self.gpu_taints):
            found.add("pools.gpuSpot.taints", [t.text() for t in self.gpu_taints], "one taint per key")
        found.raise_if_any()

    @property
    def spot_gpu_labels(self) -> dict[str, str]:
        """What selects the spot GPU nodes alone (the GPU ranks' common labels and the spot
        labels): where a GPU capacity list ends in an on-demand rank, its nodes lack these."""
        return {**self.gpu_labels, **self.spot_labels}

    @classmethod
    def from_mapping(cls, pools: Any) -> PoolPlacement:
        """From config: {cpu: {labels, taints}, gpuSpot: {labels, taints, spotLabels}}; keys
        left out take the defaults. Every problem at once: the shape's and the values'."""
        if not isinstance(pools, Mapping):
            raise InvalidInput([Problem("pools", pools, "a mapping with cpu and gpuSpot")])
        found = Problems()
        for unknown in sorted(set(pools) - {"cpu", "gpuSpot"}):
            found.add("pools." + unknown, pools[unknown], "one of cpu, gpuSpot")
        parts: dict[str, Mapping[str, Any]] = {}
        for name, allowed in (
            ("cpu", {"labels", "taints"}),
            ("gpuSpot", {"labels", "taints", "spotLabels", "maxNodes"}),
        ):
            part = pools.get(name) or {}
            if not isinstance(part, Mapping):
                found.add(f"pools.{name}", part, "a mapping")
                part = {}
            for extra in sorted(set(part) - allowed):
                found.add(f"pools.{name}.{extra}", part[extra], "one of " + ", ".join(sorted(allowed)))
            parts[name] = part
        cpu, gpu = parts["cpu"], parts["gpuSpot"]
        defaults = cls()
        try:
            placement = cls(
                cpu_labels=cpu.get("labels", defaults.cpu_labels),
                cpu_taints=cpu.get("taints", ()),
                gpu_labels=gpu.get("labels", defaults.gpu_labels),
                gpu_taints=gpu.get("taints", defaults.gpu_taints),
                spot_labels=gpu.get("spotLabels", defaults.spot_labels),
                gpu_max_nodes=gpu.get("maxNodes"),
            )
        except InvalidInput as exc:
            found.extend(exc.problems)
        found.raise_if_any()
        return placement

    @classmethod
    def over_ranks(
        cls,
        cpu: PoolShape,
        ranks: Sequence[PoolShape],
        *,
        rank_labels: Iterable[str],
        spot_labels: Mapping[str, str],
    ) -> PoolPlacement:
        """A cluster whose GPU capacity comes in ranks (lab.vocab.capacity): the CPU pool's
        labels and taints; the labels every rank carries alike, less `rank_labels` (those that
        tell ranks apart), and every taint any rank carries, so that workers land on whichever
        rank has capacity; the most nodes a rank scales to; `spot_labels`, what the cloud and
        we put on every spot node."""
        return cls(
            cpu_labels=cpu.node_labels,
            cpu_taints=cpu.taints,
            gpu_labels=common_labels([r.node_labels for r in ranks], leave_out=rank_labels),
            gpu_taints=all_taints([r.taints for r in ranks]),
            gpu_max_nodes=max(r.max_nodes for r in ranks),
            spot_labels=spot_labels,
        )

    def as_mapping(self) -> dict[str, Any]:
        """The form `from_mapping` reads, taints as text."""
        return {
            "cpu": {"labels": dict(self.cpu_labels), "taints": [t.text() for t in self.cpu_taints]},
            "gpuSpot": {
                "labels": dict(self.gpu_labels),
                "taints": [t.text() for t in self.gpu_taints],
                "spotLabels": dict(self.spot_labels),
                **({"maxNodes": self.gpu_max_nodes} if self.gpu_max_nodes is not None else {}),
            },
        }

    def cpu_tolerations(self) -> list[dict[str, str]]:
        """Tolerations of exactly the CPU pool's taints (etcd, operator, c10d stores)."""
        return [t.toleration() for t in self.cpu_taints]

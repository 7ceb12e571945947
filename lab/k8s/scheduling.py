"""Where pods may run: node pools as labels and taints.

Plain data shared by the platform component (components/platform), the job chart values
(lab/k8s/job_values.py) and the guardrails (lab/k8s/guardrails.py). Pool names, labels and
taints are the cluster components' (components/labels.py): one Taint class, one set of keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from components import labels as cluster_labels
from components.labels import Taint

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# A qualified label key: optional DNS prefix and a name of at most 63 characters.
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class SchedulingError(ValueError):
    """A pool label or taint is invalid. `key`, `value` and `expected` say which, what it
    was and what fits; the message reads `key=value is invalid: expected ...`."""

    def __init__(self, key: str, value: Any, expected: str) -> None:
        self.key, self.value, self.expected = key, value, expected
        super().__init__(f"{key}={value!r} is invalid: expected {expected}")


def _fail(name: str, value: Any, expected: str) -> SchedulingError:
    return SchedulingError(name, value, expected)


def check_labels(name: str, labels: Mapping[str, str], *, required: bool = True) -> dict[str, str]:
    if not isinstance(labels, Mapping) or (required and not labels):
        raise _fail(name, labels, "a non-empty mapping of node label key to value")
    out = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            raise _fail(f"{name}.{key}", key, "a Kubernetes label key such as elastic-spot-lab/pool")
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            raise _fail(f"{name}.{key}", value, "a label value: up to 63 of [A-Za-z0-9-_.] (quote numbers and booleans)")
        out[key] = value
    return out


# ------------------------------------------------------------------ taints
# One Taint class for the whole project: components.labels.Taint (key, value, effect), the
# one the cluster components put on their pools. `toleration()` below is the one rule that
# turns a taint into the toleration of exactly it; the job chart renders the same.
def check_taint(taint: Taint, name: str = "taint", given: Any = None) -> Taint:
    """`taint` if its key, value and effect are valid Kubernetes values; else a
    SchedulingError for config key `name` with the value as `given`."""
    shown = given if given is not None else taint_text(taint) if isinstance(taint.key, str) else taint
    if not isinstance(taint.key, str) or not _LABEL_KEY.match(taint.key):
        raise _fail(name, shown, "a taint whose key is a Kubernetes label key (key=value:Effect)")
    if not isinstance(taint.value, str) or not _LABEL_VALUE.match(taint.value):
        raise _fail(name, shown, "a taint whose value is a label value: up to 63 of [A-Za-z0-9-_.] (key=value:Effect)")
    if taint.effect not in TAINT_EFFECTS:
        raise _fail(name, shown, "a taint effect " + ", ".join(TAINT_EFFECTS) + " (key=value:Effect)")
    return taint


def parse_taint(spec: Any, name: str = "taint") -> Taint:
    """A validated Taint from `key=value:Effect`, `key:Effect` (empty value), a mapping with
    key/value/effect, or a Taint."""
    if isinstance(spec, Taint):
        return check_taint(spec, name)
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"key", "value", "effect"}
        if unknown:
            raise _fail(name, dict(spec), "a taint with keys key, value, effect")
        return check_taint(Taint(spec.get("key", ""), spec.get("value", "") or "", spec.get("effect", "NoSchedule")), name, dict(spec))
    if isinstance(spec, str) and ":" in spec:
        kv, _, effect = spec.rpartition(":")
        key, _, value = kv.partition("=")
        return check_taint(Taint(key, value, effect), name, spec)  # type: ignore[arg-type]
    raise _fail(name, spec, "a taint: key=value:Effect or {key, value, effect}")


def toleration(taint: Taint) -> dict[str, str]:
    """The toleration of exactly `taint`: operator Equal with the taint's value (an empty
    value matches a taint without one, as Kubernetes compares them)."""
    return {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}


def taint_text(taint: Taint) -> str:
    """`key=value:Effect` (`key:Effect` when the value is empty): what parse_taint reads."""
    return f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"


def taint_dict(taint: Taint) -> dict[str, str]:
    return {"key": taint.key, "value": taint.value, "effect": taint.effect}


@dataclass(frozen=True)
class PoolPlacement:
    """Node pools as the platform sees them.

    cpu_labels: labels of the on-demand CPU pool (etcd, operator, c10d stores).
    cpu_taints: taints of that pool, if any (tolerated by what runs there).
    gpu_labels: labels of the GPU spot pool (workers, device plugin).
    gpu_taints: exactly the taints of the GPU spot pool (workers tolerate these and no other).
    spot_labels: labels every spot node carries (e.g. AKS scalesetpriority=spot); nothing
      preserved may select them.
    """

    # Defaults: the AKS cluster's pools (components/labels.py).
    cpu_labels: Mapping[str, str] = field(default_factory=lambda: {cluster_labels.POOL_LABEL: cluster_labels.POOL_CPU})
    gpu_labels: Mapping[str, str] = field(default_factory=lambda: {cluster_labels.POOL_LABEL: cluster_labels.POOL_GPU_SPOT})
    gpu_taints: tuple[Taint, ...] = (cluster_labels.AKS_SPOT_TAINT, cluster_labels.GPU_TAINT)
    spot_labels: Mapping[str, str] = field(default_factory=lambda: {cluster_labels.AKS_SPOT_LABEL: cluster_labels.AKS_SPOT_VALUE})
    cpu_taints: tuple[Taint, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpu_labels", check_labels("pools.cpu.labels", self.cpu_labels))
        object.__setattr__(self, "gpu_labels", check_labels("pools.gpuSpot.labels", self.gpu_labels))
        object.__setattr__(self, "spot_labels", check_labels("pools.gpuSpot.spotLabels", self.spot_labels, required=False))
        object.__setattr__(self, "gpu_taints", tuple(parse_taint(t, "pools.gpuSpot.taints") for t in self.gpu_taints))
        object.__setattr__(self, "cpu_taints", tuple(parse_taint(t, "pools.cpu.taints") for t in self.cpu_taints))
        if not self.gpu_taints:
            raise _fail("pools.gpuSpot.taints", [], "at least one taint: without one, any pod may land on a spot GPU node")
        clash = {k for k, v in self.cpu_labels.items() if self.spot_labels.get(k) == v}
        if clash:
            raise _fail("pools.cpu.labels", dict(self.cpu_labels), "labels no spot node carries (" + ", ".join(sorted(clash)) + ")")
        gpu_keys = {t.key for t in self.gpu_taints}
        if len(gpu_keys) != len(self.gpu_taints):
            raise _fail("pools.gpuSpot.taints", [taint_text(t) for t in self.gpu_taints], "one taint per key")

    @classmethod
    def from_mapping(cls, pools: Mapping[str, Any]) -> "PoolPlacement":
        """From stack config: {cpu: {labels, taints}, gpuSpot: {labels, taints, spotLabels}}."""
        if not isinstance(pools, Mapping):
            raise _fail("pools", pools, "a mapping with cpu and gpuSpot")
        unknown = set(pools) - {"cpu", "gpuSpot"}
        if unknown:
            raise _fail("pools." + sorted(unknown)[0], pools[sorted(unknown)[0]], "one of cpu, gpuSpot")
        cpu = pools.get("cpu") or {}
        gpu = pools.get("gpuSpot") or {}
        for name, part, allowed in (("cpu", cpu, {"labels", "taints"}), ("gpuSpot", gpu, {"labels", "taints", "spotLabels"})):
            if not isinstance(part, Mapping):
                raise _fail(f"pools.{name}", part, "a mapping")
            extra = set(part) - allowed
            if extra:
                key = sorted(extra)[0]
                raise _fail(f"pools.{name}.{key}", part[key], "one of " + ", ".join(sorted(allowed)))
        defaults = cls()
        return cls(
            cpu_labels=cpu.get("labels", defaults.cpu_labels),
            cpu_taints=tuple(_taints("pools.cpu.taints", cpu.get("taints", ()))),
            gpu_labels=gpu.get("labels", defaults.gpu_labels),
            gpu_taints=tuple(_taints("pools.gpuSpot.taints", gpu.get("taints", defaults.gpu_taints))),
            spot_labels=gpu.get("spotLabels", defaults.spot_labels),
        )

    def cpu_tolerations(self) -> list[dict[str, str]]:
        """Tolerations of exactly the CPU pool's taints (etcd, operator, c10d stores)."""
        return [toleration(t) for t in self.cpu_taints]


def _taints(name: str, taints: Iterable[Any]) -> list[Taint]:
    if isinstance(taints, (str, bytes)) or not isinstance(taints, Iterable):
        raise _fail(name, taints, "a list of taints")
    return [parse_taint(t, name) for t in taints]


def required_affinity(labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(labels.items())]}
                ]
            }
        }
    }

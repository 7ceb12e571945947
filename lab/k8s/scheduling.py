"""Where pods may run: node pools as labels and taints.

Plain data shared by the platform component (components/platform), the job chart values
(lab/k8s/job_values.py) and the guardrails (lab/k8s/guardrails.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# A qualified label key: optional DNS prefix and a name of at most 63 characters.
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class SchedulingError(ValueError):
    """A pool label or taint is invalid; the message names it, its value and what is expected."""


def _fail(name: str, value: Any, expected: str) -> SchedulingError:
    return SchedulingError(f"{name}={value!r} is invalid: expected {expected}")


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


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not _LABEL_KEY.match(self.key):
            raise _fail("taint.key", self.key, "a Kubernetes label key")
        if not isinstance(self.value, str) or not _LABEL_VALUE.match(self.value):
            raise _fail(f"taint {self.key}: value", self.value, "a label value")
        if self.effect not in TAINT_EFFECTS:
            raise _fail(f"taint {self.key}: effect", self.effect, "one of " + ", ".join(TAINT_EFFECTS))

    @classmethod
    def parse(cls, spec: Any) -> "Taint":
        """`key=value:Effect`, `key:Effect`, or a mapping with key/value/effect."""
        if isinstance(spec, Taint):
            return spec
        if all(hasattr(spec, a) for a in ("key", "value", "effect")) and not isinstance(spec, (str, Mapping)):
            return cls(key=spec.key, value=spec.value or "", effect=spec.effect)  # e.g. components.labels.Taint
        if isinstance(spec, Mapping):
            unknown = set(spec) - {"key", "value", "effect"}
            if unknown:
                raise _fail("taint", dict(spec), "keys key, value, effect")
            return cls(key=spec.get("key", ""), value=spec.get("value", "") or "", effect=spec.get("effect", "NoSchedule"))
        if isinstance(spec, str) and ":" in spec:
            kv, _, effect = spec.rpartition(":")
            key, _, value = kv.partition("=")
            return cls(key=key, value=value, effect=effect)
        raise _fail("taint", spec, "key=value:Effect or {key, value, effect}")

    def as_dict(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}

    def toleration(self) -> dict[str, str]:
        """The toleration that matches exactly this taint."""
        if self.value:
            return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}
        return {"key": self.key, "operator": "Exists", "effect": self.effect}

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


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

    cpu_labels: Mapping[str, str] = field(default_factory=lambda: {"elastic-spot-lab/pool": "cpu"})
    gpu_labels: Mapping[str, str] = field(default_factory=lambda: {"elastic-spot-lab/pool": "gpu-spot"})
    gpu_taints: tuple[Taint, ...] = (
        Taint("kubernetes.azure.com/scalesetpriority", "spot"),
        Taint("nvidia.com/gpu", "present"),
    )
    spot_labels: Mapping[str, str] = field(default_factory=lambda: {"kubernetes.azure.com/scalesetpriority": "spot"})
    cpu_taints: tuple[Taint, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpu_labels", check_labels("pools.cpu.labels", self.cpu_labels))
        object.__setattr__(self, "gpu_labels", check_labels("pools.gpuSpot.labels", self.gpu_labels))
        object.__setattr__(self, "spot_labels", check_labels("pools.gpuSpot.spotLabels", self.spot_labels, required=False))
        object.__setattr__(self, "gpu_taints", tuple(Taint.parse(t) for t in self.gpu_taints))
        object.__setattr__(self, "cpu_taints", tuple(Taint.parse(t) for t in self.cpu_taints))
        if not self.gpu_taints:
            raise _fail("pools.gpuSpot.taints", [], "at least one taint: without one, any pod may land on a spot GPU node")
        clash = {k for k, v in self.cpu_labels.items() if self.spot_labels.get(k) == v}
        if clash:
            raise _fail("pools.cpu.labels", dict(self.cpu_labels), "labels no spot node carries (" + ", ".join(sorted(clash)) + ")")
        gpu_keys = {t.key for t in self.gpu_taints}
        if len(gpu_keys) != len(self.gpu_taints):
            raise _fail("pools.gpuSpot.taints", [str(t) for t in self.gpu_taints], "one taint per key")

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
        return [t.toleration() for t in self.cpu_taints]

    def gpu_tolerations(self) -> list[dict[str, str]]:
        return [t.toleration() for t in self.gpu_taints]

    def gpu_affinity(self) -> dict[str, Any]:
        """Required node affinity for the GPU spot pool."""
        return required_affinity(self.gpu_labels)


def _taints(name: str, taints: Iterable[Any]) -> list[Taint]:
    if isinstance(taints, (str, bytes)) or not isinstance(taints, Iterable):
        raise _fail(name, taints, "a list of taints")
    return [Taint.parse(t) for t in taints]


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

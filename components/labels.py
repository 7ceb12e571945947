"""Cloud-neutral node-pool labels and taints, shared by every cluster and the platform.

The cluster components (AKS today, EKS later) put these labels and taints on their pools;
the platform component selects and tolerates exactly them. Keep the keys here, and only
here, so that a pool and the pods meant for it cannot drift apart.

Pools:
  system    cloud add-ons only (AKS system pool; tainted CriticalAddonsOnly)
  cpu       on-demand CPU pool: etcd rendezvous, training operator, launchers
  gpu-spot  spot GPU pool: the elastic workers; scales to zero
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PREFIX = "elastic-spot-lab"

# Our own pool label: `elastic-spot-lab/pool: system | cpu | gpu-spot`.
POOL_LABEL = f"{PREFIX}/pool"
POOL_SYSTEM = "system"
POOL_CPU = "cpu"
POOL_GPU_SPOT = "gpu-spot"
POOLS = (POOL_SYSTEM, POOL_CPU, POOL_GPU_SPOT)

# Our own capacity label, set on every pool: `elastic-spot-lab/capacity: on-demand | spot`.
CAPACITY_LABEL = f"{PREFIX}/capacity"
CAPACITY_ON_DEMAND = "on-demand"
CAPACITY_SPOT = "spot"

# The NVIDIA device plugin's default node affinity selects nodes with this label
# (../shared/FACTS.md, "NVIDIA device plugin"): without it the plugin schedules nowhere.
NVIDIA_GPU_PRESENT_LABEL = "nvidia.com/gpu.present"

# AKS labels spot nodes with this itself (../shared/FACTS.md, AKS).
AKS_SPOT_LABEL = "kubernetes.azure.com/scalesetpriority"
AKS_SPOT_VALUE = "spot"
# (AKS also labels GPU nodes `kubernetes.azure.com/accelerator=nvidia` itself; we neither
# declare nor select it: our pods select our own pool label.)

Effect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


@dataclass(frozen=True)
class Taint:
    """A node taint, rendered for each place that needs it: the project's one Taint class
    (the platform uses it too, lab/k8s/scheduling.py)."""

    key: str
    value: str
    effect: Effect = "NoSchedule"

    def aks(self) -> str:
        """AKS `nodeTaints` entry: `key=value:Effect`."""
        return f"{self.key}={self.value}:{self.effect}"

    def eks(self) -> dict[str, str]:
        """EKS node group `taints` entry (effect names NO_SCHEDULE, ...).

        Not called yet: kept for the EKS cluster component (a future issue), whose spot GPU
        node group must declare our taints in this form (EKS adds no spot taint itself;
        ../shared/FACTS.md, EKS). Tested in tests/infra/test_aks_component.py."""
        effect = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}
        return {"key": self.key, "value": self.value, "effect": effect[self.effect]}

    def toleration(self) -> dict[str, str]:
        """A Kubernetes pod toleration that tolerates exactly this taint (used by the
        platform: lab/k8s/scheduling.py, lab/k8s/guardrails.py)."""
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


# Our GPU taint: only pods that ask for GPUs (and tolerate it) land on GPU nodes.
GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
# The taint AKS puts on spot nodes itself; declared explicitly so Pulumi shows no perpetual
# diff (pulumi-azure-native#959).
AKS_SPOT_TAINT = Taint(AKS_SPOT_LABEL, AKS_SPOT_VALUE, "NoSchedule")
# The AKS system pool's taint for "critical add-ons only" (keeps our pods on the CPU pool).
CRITICAL_ADDONS_TAINT = Taint("CriticalAddonsOnly", "true", "NoSchedule")


def pool_labels(pool: str, *, spot: bool) -> dict[str, str]:
    """Our cloud-neutral labels for a pool."""
    if pool not in POOLS:
        raise ValueError(f"pool {pool!r} is invalid: expected one of {', '.join(POOLS)}")
    return {POOL_LABEL: pool, CAPACITY_LABEL: CAPACITY_SPOT if spot else CAPACITY_ON_DEMAND}


def node_selector(pool: str) -> dict[str, str]:
    """The nodeSelector that places a pod on one of our pools (the platform's default pool
    placement, lab/k8s/scheduling.py)."""
    return {POOL_LABEL: pool}

"""The cluster autoscaler's priority expander over the GPU capacity ranks: one ConfigMap in
`kube-system` giving each rank's pool (node group) its priority (lab/vocab/capacity.py); and
the name of each pool's resource.

Each cloud's autoscaler knows a pool by its own node group id, matched here by a regular
expression from the pool's name:
  AKS  the pool's scale set, `aks-<pool>-<digits>-vmss`
  EKS  the managed node group's Auto Scaling group, `eks-<group>-<uuid>`
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import pulumi
import pulumi_kubernetes as k8s

from lab.vocab.capacity import PRIORITY_CONFIGMAP, PRIORITY_NAMESPACE, GpuRank, expander_priorities, priorities_text
from lab.vocab.names import PROJECT

_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def aks_scale_set(pool: str) -> str:
    """The pattern of an AKS pool's scale set name (the autoscaler's node group id there)."""
    return f"^aks-{re.escape(pool)}-[0-9]+-vmss$"


def eks_auto_scaling_group(group: str) -> str:
    """The pattern of an EKS managed node group's Auto Scaling group name."""
    return f"^eks-{re.escape(group)}-{_UUID}$"


def pool_resource_name(component: str, role: str, rank: int) -> str:
    """The Pulumi name of a pool's (node group's) resource, `<component>-<role>`, with
    `-rank<n>` for a GPU rank after the first: rank 1 keeps the name the GPU spot pool always
    had (no replacement on upgrade)."""
    return f"{component}-{role}" + ("" if rank <= 1 else f"-rank{rank}")


def priority_expander(
    name: str,
    ranks: Sequence[GpuRank],
    *,
    pattern: Callable[[str], str],
    provider: k8s.Provider,
    parent: pulumi.Resource,
) -> k8s.core.v1.ConfigMap:
    """The priority expander's ConfigMap: rank 1 highest, every other node group lowest."""
    table = expander_priorities(ranks, pattern)
    return k8s.core.v1.ConfigMap(
        name,
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=PRIORITY_CONFIGMAP,
            namespace=PRIORITY_NAMESPACE,
            labels={"app.kubernetes.io/part-of": PROJECT},
        ),
        data={"priorities": priorities_text(table)},
        opts=pulumi.ResourceOptions(parent=parent, provider=provider),
    )

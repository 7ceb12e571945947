"""Node pools: the system pool profile (inside the ManagedCluster) and our two user pools.

What AKS requires of the pools:
- spot GPU pool = AgentPool mode User, scaleSetPriority Spot, scaleSetEvictionPolicy
  Delete, spotMaxPrice -1, autoscaling with minCount 0; a spot pool cannot be the system
  pool and cannot set upgradeSettings.maxSurge; priority and max price are immutable;
- AKS adds the label and taint `kubernetes.azure.com/scalesetpriority=spot[:NoSchedule]` to
  spot nodes: both are declared here so Pulumi shows no perpetual diff;
- `ignore_changes=["count"]` where the cluster autoscaler owns the count;
- `gpuProfile.driver: Install` installs the GPU driver only; the NVIDIA device plugin (the
  platform's) needs `nvidia.com/gpu.present=true` on the nodes;
- one agent-pool operation at a time per cluster: AKS answers a second, parallel create or
  delete with 409 "Another agentpool operation is in progress". The GPU pool depends on the
  CPU pool, so Pulumi creates them one after the other and deletes them in reverse order.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import containerservice

from components.aks.args import AksClusterArgs
from lab.vocab import pools as labels
from lab.vocab.capacity import RANK_LABEL, GpuRank
from lab.vocab.pools import PoolPlacement, Taint

# AKS labels and taints spot nodes itself; the pools declare both
# so that Pulumi shows no perpetual diff (pulumi-azure-native#959).
AKS_SPOT_LABEL = "kubernetes.azure.com/scalesetpriority"
AKS_SPOT_VALUE = "spot"
AKS_SPOT_TAINT = Taint(AKS_SPOT_LABEL, AKS_SPOT_VALUE, "NoSchedule")
# (AKS also labels GPU nodes `kubernetes.azure.com/accelerator=nvidia` itself; we neither
# declare nor select it: our pods select our own pool label.)
# The system pool's taint for "critical add-ons only" (keeps our pods on the CPU pool).
CRITICAL_ADDONS_TAINT = Taint("CriticalAddonsOnly", "true", "NoSchedule")


@dataclass(frozen=True)
class PoolSpec:
    """One pool as our platform sees it: name, labels, taints, spot or not."""

    role: str  # labels.POOL_*
    name: str
    vm_size: str
    spot: bool
    min_nodes: int
    max_nodes: int
    node_labels: dict[str, str]
    taints: tuple[Taint, ...]
    rank: int = 0  # GPU capacity rank (1 = tried first); 0 for the CPU and system pools
    zones: tuple[str, ...] = ()

    @property
    def aks_taints(self) -> list[str]:
        """`nodeTaints` entries: `key=value:Effect`."""
        return [t.text() for t in self.taints]


def gpu_rank_spec(args: AksClusterArgs, rank: GpuRank) -> PoolSpec:
    """The pool of one GPU capacity rank: the workers' pool label and the GPU taint on every
    rank; AKS's spot label and taint on spot ranks (AKS puts them there)."""
    node_labels = {
        **labels.pool_labels(labels.POOL_GPU_SPOT, spot=rank.spot),
        labels.NVIDIA_GPU_PRESENT_LABEL: "true",  # the device plugin's node affinity
        RANK_LABEL: str(rank.rank),
    }
    if rank.spot:
        node_labels[AKS_SPOT_LABEL] = AKS_SPOT_VALUE  # AKS sets it anyway; declared: no diff
    return PoolSpec(
        labels.POOL_GPU_SPOT,
        rank.name,
        rank.sizes[0],
        rank.spot,
        args.gpu_min_nodes if rank.rank == 1 else 0,
        args.gpu_max_nodes,
        node_labels,
        (labels.GPU_TAINT, AKS_SPOT_TAINT) if rank.spot else (labels.GPU_TAINT,),
        rank=rank.rank,
        zones=rank.zones,
    )


def rank_of(spec: PoolSpec) -> GpuRank:
    """A GPU pool's capacity rank."""
    return GpuRank(spec.rank, spec.name, (spec.vm_size,), spec.spot, spec.zones)


def gpu_rank_specs(args: AksClusterArgs) -> tuple[PoolSpec, ...]:
    """Every GPU capacity rank's pool, rank 1 (the GPU spot pool) first."""
    return tuple(gpu_rank_spec(args, rank) for rank in args.gpu_ranks())


def pool_specs(args: AksClusterArgs) -> dict[str, PoolSpec]:
    """The system and CPU pools and rank 1 of the GPU capacity, keyed by role."""
    return {
        labels.POOL_SYSTEM: PoolSpec(
            labels.POOL_SYSTEM,
            args.system_pool_name,
            args.system_vm_size,
            False,
            args.system_node_count,
            args.system_node_count,
            labels.pool_labels(labels.POOL_SYSTEM, spot=False),
            (CRITICAL_ADDONS_TAINT,),
        ),
        labels.POOL_CPU: PoolSpec(
            labels.POOL_CPU,
            args.cpu_pool_name,
            args.cpu_vm_size,
            False,
            args.cpu_min_nodes,
            args.cpu_max_nodes,
            labels.pool_labels(labels.POOL_CPU, spot=False),
            (),
        ),
        labels.POOL_GPU_SPOT: gpu_rank_specs(args)[0],
    }


def placement(specs: dict[str, PoolSpec], ranks: tuple[PoolSpec, ...]) -> PoolPlacement:
    """The pools as the platform selects and tolerates them (`PoolPlacement.over_ranks`): the
    GPU ranks differ by their rank label; every spot node carries AKS's spot label and our
    capacity label."""
    return PoolPlacement.over_ranks(
        specs[labels.POOL_CPU],
        ranks,
        rank_labels=(RANK_LABEL,),
        spot_labels={AKS_SPOT_LABEL: AKS_SPOT_VALUE, labels.CAPACITY_LABEL: labels.CAPACITY_SPOT},
    )


def system_pool_profile(args: AksClusterArgs, spec: PoolSpec) -> containerservice.ManagedClusterAgentPoolProfileArgs:
    """The system pool, declared inside the ManagedCluster (AKS needs one at creation).

    On-demand (`Regular`), fixed size, tainted CriticalAddonsOnly so that only AKS add-ons
    run there and our etcd / operator land on the CPU pool.

    Being inline, any edit of it is an update of the whole ManagedCluster, which puts
    every pool of the cluster (the user pools below included) into `Scaling` until AKS is
    done (pulumi/pulumi-azure-native#4264; see components/aks/cluster.py).
    """
    return containerservice.ManagedClusterAgentPoolProfileArgs(
        name=spec.name,
        mode=containerservice.AgentPoolMode.SYSTEM,
        vm_size=spec.vm_size,
        count=spec.min_nodes,
        os_type=containerservice.OSType.LINUX,
        type=containerservice.AgentPoolType.VIRTUAL_MACHINE_SCALE_SETS,
        scale_set_priority=containerservice.ScaleSetPriority.REGULAR,
        orchestrator_version=args.kubernetes_version,
        node_labels=spec.node_labels,
        node_taints=spec.aks_taints,
        upgrade_settings=containerservice.AgentPoolUpgradeSettingsArgs(max_surge="1"),
        tags=args.tags,
    )


def user_pool(
    name: str,
    args: AksClusterArgs,
    spec: PoolSpec,
    *,
    resource_group: pulumi.Input[str],
    cluster: containerservice.ManagedCluster,
    parent: pulumi.Resource,
    after: containerservice.AgentPool | None = None,
) -> containerservice.AgentPool:
    """A separate, autoscaled Linux VMSS `User` pool of `cluster`, as `spec` describes it: the
    CPU pool or the GPU pool of one capacity rank.

    Common to both: count range from the spec (the count starts at the minimum), labels and
    taints from the spec, the cluster's Kubernetes version and tags, and
    `ignore_changes=["count"]` because the cluster autoscaler owns the node count. What differs
    per pool (priority, eviction, GPU profile, max surge, zones) comes from `_cpu_settings` or
    `_gpu_settings`. `after`: the cluster's pool this one is created after and deleted before
    (AKS runs one agent-pool operation at a time).
    """
    specific = _cpu_settings() if spec.role == labels.POOL_CPU else _gpu_settings(args, spec)
    return containerservice.AgentPool(
        name,
        resource_group_name=resource_group,
        resource_name_=cluster.name,
        agent_pool_name=spec.name,
        mode=containerservice.AgentPoolMode.USER,  # never the system pool (a spot pool cannot be)
        vm_size=spec.vm_size,
        os_type=containerservice.OSType.LINUX,
        type=containerservice.AgentPoolType.VIRTUAL_MACHINE_SCALE_SETS,
        orchestrator_version=args.kubernetes_version,
        enable_auto_scaling=True,
        count=spec.min_nodes,
        min_count=spec.min_nodes,
        max_count=spec.max_nodes,
        node_labels=spec.node_labels,
        node_taints=spec.aks_taints,
        tags=args.tags,
        # The cluster autoscaler owns the node count.
        opts=pulumi.ResourceOptions(parent=parent, ignore_changes=["count"], depends_on=[after] if after else None),
        **specific,
    )


def _cpu_settings() -> dict[str, object]:
    """The on-demand CPU pool for etcd, the training operator and launchers."""
    return {
        "scale_set_priority": containerservice.ScaleSetPriority.REGULAR,
        # An upgrade drains one node at a time onto a surge node: the rendezvous servers'
        # budgets allow one eviction (the jobs ride out the restart). Should some other
        # budget block a drain, the node stays schedulable, not upgraded, and the surge node
        # is deleted (Cordon would quarantine the node and keep a billed surge node; both
        # leave the upgrade Failed, which the platform guardrails prevent for our budgets).
        "upgrade_settings": containerservice.AgentPoolUpgradeSettingsArgs(
            max_surge="1",
            undrainable_node_behavior=containerservice.UndrainableNodeBehavior.SCHEDULE,
        ),
    }


def _gpu_settings(args: AksClusterArgs, spec: PoolSpec) -> dict[str, object]:
    """The GPU pool of one capacity rank for elastic workers; scales to zero. A spot rank is
    Spot + Delete + max price; an on-demand rank is Regular."""
    capacity: dict[str, object] = (
        {
            "scale_set_priority": containerservice.ScaleSetPriority.SPOT,  # immutable
            "scale_set_eviction_policy": containerservice.ScaleSetEvictionPolicy.DELETE,
            "spot_max_price": args.gpu_spot_max_price,  # -1: up to on-demand; immutable
            # No upgrade_settings.max_surge: AKS rejects it on spot pools.
        }
        if spec.spot
        else {"scale_set_priority": containerservice.ScaleSetPriority.REGULAR}
    )
    return {
        "gpu_profile": containerservice.GPUProfileArgs(driver=containerservice.GPUDriver.INSTALL),
        **capacity,
        **({"availability_zones": list(spec.zones)} if spec.zones else {}),
    }

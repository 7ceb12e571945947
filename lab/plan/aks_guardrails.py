"""Our guardrails on an AKS plan (beyond what Azure itself would reject).

  guardrail:spot-pool         every spot pool: mode User, eviction Delete, AKS spot label and
                              taint declared, no maxSurge, max price -1 (warning otherwise)
  guardrail:gpu-pool          every GPU pool (capacity rank): autoscaled, can reach zero, GPU
                              label and taint (spot or not: lab/plan/capacity_checks.py)
  guardrail:on-demand-pools   system pools and our CPU/system-labelled pools are not spot
  guardrail:autoscaled-count  autoscaled pools ignore changes to `count`
  guardrail:cluster-features  Blob CSI driver, OIDC issuer and workload identity are on
  guardrail:network-policy    the cluster enforces NetworkPolicies: a policy engine is set
                              (cilium needs the cilium dataplane)
  guardrail:storage-outside-node-rg  checkpoint storage is not in the node resource group
  guardrail:pool-operations   the agent pools of one cluster are created one after the other
                              (AKS refuses parallel agent-pool operations with a 409)
  guardrail:checkpoints-kept  `pulumi destroy` leaves the checkpoint account, container and
                              resource group (retainOnDelete), unless the stack lets them go
  guardrail:maintenance-window  every auto-upgrade channel that upgrades has its window

Each finding names resource, property, value
and what was expected.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from components.aks.maintenance import AUTO_UPGRADE_SCHEDULE, NODE_OS_UPGRADE_SCHEDULE
from components.aks.node_pools import AKS_SPOT_LABEL, AKS_SPOT_TAINT, AKS_SPOT_VALUE
from lab.plan.aks_pools import AGENT_POOL, MANAGED_CLUSTER, STORAGE_ACCOUNT, PoolView, pools
from lab.plan.findings import Finding
from lab.plan.guardrails import deleted_on_destroy, keeps_checkpoints, not_one_at_a_time
from lab.vocab import pools as labels

BLOB_CONTAINER = "azure-native:storage:BlobContainer"
RESOURCE_GROUP = "azure-native:resources:ResourceGroup"
MAINTENANCE_CONFIGURATION = "azure-native:containerservice:MaintenanceConfiguration"


def is_aks(plan: Any) -> bool:
    return bool(plan.of_type(MANAGED_CLUSTER, AGENT_POOL))


def has_managed_cluster(plan: Any) -> bool:
    return bool(plan.of_type(MANAGED_CLUSTER))


def has_checkpoint_account(plan: Any) -> bool:
    return bool(plan.of_type(MANAGED_CLUSTER)) and bool(plan.of_type(STORAGE_ACCOUNT))


def _taints(pool: PoolView) -> list[str]:
    return [t for t in (pool.get("nodeTaints") or []) if isinstance(t, str)]


# --------------------------------------------------------------------------- pools


def spot_pools(plan: Any) -> Iterator[Finding]:
    """Every spot pool is a User pool, evicts with Delete, and declares AKS's spot label and taint."""
    name = "guardrail:spot-pool"
    for pool in (p for p in pools(plan) if p.spot):
        r = pool.resource
        if not pool.eq("mode", "User"):
            yield Finding.error(
                name, r, pool.path("mode"), pool.get("mode"), "'User' (a spot pool cannot be the system pool)"
            )
        if not pool.eq("scaleSetEvictionPolicy", "Delete"):
            yield Finding.error(
                name,
                r,
                pool.path("scaleSetEvictionPolicy"),
                pool.get("scaleSetEvictionPolicy"),
                "'Delete' (Deallocate keeps evicted disks, costs storage and counts against quota)",
            )
        if AKS_SPOT_TAINT.text() not in _taints(pool):
            yield Finding.error(
                name,
                r,
                pool.path("nodeTaints"),
                pool.get("nodeTaints"),
                f"to contain {AKS_SPOT_TAINT.text()!r} (AKS adds it; undeclared it is a perpetual diff)",
            )
        node_labels = pool.get("nodeLabels") or {}
        if node_labels.get(AKS_SPOT_LABEL) != AKS_SPOT_VALUE:
            yield Finding.error(
                name,
                r,
                pool.path(f"nodeLabels.{AKS_SPOT_LABEL}"),
                node_labels.get(AKS_SPOT_LABEL),
                f"{AKS_SPOT_VALUE!r} (AKS adds it; undeclared it is a perpetual diff)",
            )
        surge = (pool.get("upgradeSettings") or {}).get("maxSurge")
        if surge is not None:
            yield Finding.error(
                name, r, pool.path("upgradeSettings.maxSurge"), surge, "unset (AKS rejects maxSurge on spot pools)"
            )
        price = pool.get("spotMaxPrice")
        if price is None:
            yield Finding.error(
                name, r, pool.path("spotMaxPrice"), None, "-1 set explicitly (immutable after creation)"
            )
        elif price != -1:
            yield Finding.warning(
                name,
                r,
                pool.path("spotMaxPrice"),
                price,
                "-1 (pay up to on-demand: evicted only for capacity, never for price)",
            )


def gpu_pool(plan: Any) -> Iterator[Finding]:
    """Every GPU pool is autoscaled, can reach zero, and carries the GPU label and taint."""
    name = "guardrail:gpu-pool"
    gpu = [p for p in pools(plan) if p.role == labels.POOL_GPU_SPOT]
    if not gpu:
        mc = (plan.of_type(MANAGED_CLUSTER) or plan.of_type(AGENT_POOL))[0]
        yield Finding.error(
            name,
            mc,
            f"nodeLabels.{labels.POOL_LABEL}",
            None,
            f"one pool labelled {labels.POOL_LABEL}={labels.POOL_GPU_SPOT} (the workers' spot GPU pool)",
        )
        return
    for pool in gpu:
        r = pool.resource
        if pool.is_profile:
            yield Finding.error(
                name, r, pool.path("name"), pool.name, "a separate AgentPool, not a profile inside the ManagedCluster"
            )
        if pool.get("enableAutoScaling") is not True:
            yield Finding.error(
                name,
                r,
                pool.path("enableAutoScaling"),
                pool.get("enableAutoScaling"),
                "True (the autoscaler adds and removes GPU nodes)",
            )
        if pool.get("minCount") != 0:
            yield Finding.error(
                name, r, pool.path("minCount"), pool.get("minCount"), "0 (the GPU pool must be able to scale to zero)"
            )
        max_count = pool.get("maxCount")
        if not isinstance(max_count, int) or max_count < 1:
            yield Finding.error(name, r, pool.path("maxCount"), max_count, "a whole number >= 1")
        node_labels = pool.get("nodeLabels") or {}
        if node_labels.get(labels.NVIDIA_GPU_PRESENT_LABEL) != "true":
            yield Finding.error(
                name,
                r,
                pool.path(f"nodeLabels.{labels.NVIDIA_GPU_PRESENT_LABEL}"),
                node_labels.get(labels.NVIDIA_GPU_PRESENT_LABEL),
                "'true' (the NVIDIA device plugin's node affinity selects it; without it GPUs are never advertised)",
            )
        if labels.GPU_TAINT.text() not in _taints(pool):
            yield Finding.error(
                name,
                r,
                pool.path("nodeTaints"),
                pool.get("nodeTaints"),
                f"to contain {labels.GPU_TAINT.text()!r} (only GPU workloads on GPU nodes)",
            )


def on_demand_pools(plan: Any) -> Iterator[Finding]:
    """System pools and our CPU / system pools never run on spot capacity."""
    name = "guardrail:on-demand-pools"
    for pool in pools(plan):
        if not pool.spot:
            continue
        if pool.system:
            yield Finding.error(
                name,
                pool.resource,
                pool.path("scaleSetPriority"),
                pool.get("scaleSetPriority"),
                "'Regular' (a System pool cannot be spot; it hosts AKS's own add-ons)",
            )
        elif pool.role in (labels.POOL_CPU, labels.POOL_SYSTEM):
            yield Finding.error(
                name,
                pool.resource,
                pool.path("scaleSetPriority"),
                pool.get("scaleSetPriority"),
                f"'Regular' (the {pool.role} pool hosts etcd, the operator and launchers: on-demand)",
            )
    if not any(p.role == labels.POOL_CPU for p in pools(plan)):
        r = (plan.of_type(MANAGED_CLUSTER) or plan.of_type(AGENT_POOL))[0]
        yield Finding.error(
            name,
            r,
            f"nodeLabels.{labels.POOL_LABEL}",
            None,
            f"one on-demand pool labelled {labels.POOL_LABEL}={labels.POOL_CPU} (etcd, operator, launchers)",
        )


def autoscaled_count(plan: Any) -> Iterator[Finding]:
    """An autoscaled AgentPool ignores `count`, or every `pulumi up` fights the autoscaler."""
    for r in plan.of_type(AGENT_POOL):
        if r.inputs.get("enableAutoScaling") is True and "count" not in r.ignore_changes:
            yield Finding.error(
                "guardrail:autoscaled-count",
                r,
                "options.ignore_changes",
                r.ignore_changes,
                "to contain 'count' (the cluster autoscaler owns the node count)",
            )


# --------------------------------------------------------------------------- cluster


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def cluster_features(plan: Any) -> Iterator[Finding]:
    """Blob CSI driver (checkpoints), OIDC issuer and workload identity (storage access) are on."""
    name = "guardrail:cluster-features"
    for r in plan.of_type(MANAGED_CLUSTER):
        for path, why in (
            (("storageProfile", "blobCSIDriver", "enabled"), "the AKS-managed Blob CSI driver mounts checkpoints"),
            (("oidcIssuerProfile", "enabled"), "workload identity needs the cluster's OIDC issuer"),
            (
                ("securityProfile", "workloadIdentity", "enabled"),
                "training pods reach storage through workload identity",
            ),
        ):
            value = _dig(r.inputs, *path)
            if value is not True:
                yield Finding.error(name, r, ".".join(path), value, f"True ({why})")


# AKS network policy engines (ContainerServiceNetworkProfile.networkPolicy, API 2025-09-01):
# "none" (or unset) means NetworkPolicy objects are accepted and never enforced.
POLICY_ENGINES = ("cilium", "azure", "calico")


def network_policy(plan: Any) -> Iterator[Finding]:
    """The cluster enforces NetworkPolicies (the platform's etcd policy): a policy engine is set."""
    name = "guardrail:network-policy"
    for r in plan.of_type(MANAGED_CLUSTER):
        profile = r.inputs.get("networkProfile") or {}
        policy = profile.get("networkPolicy") if isinstance(profile, dict) else None
        dataplane = profile.get("networkDataplane") if isinstance(profile, dict) else None
        if not isinstance(policy, str) or policy.lower() not in POLICY_ENGINES:
            yield Finding.error(
                name,
                r,
                "networkProfile.networkPolicy",
                policy,
                "a network policy engine, 'cilium' (with networkDataplane 'cilium'); without one AKS "
                "stores NetworkPolicy objects and enforces none, e.g. the etcd rendezvous policy",
            )
        elif policy.lower() == "cilium" and (not isinstance(dataplane, str) or dataplane.lower() != "cilium"):
            yield Finding.error(
                name,
                r,
                "networkProfile.networkDataplane",
                dataplane,
                "'cilium' (networkPolicy 'cilium' is enforced by the Cilium dataplane; AKS rejects it on another)",
            )


def node_resource_groups(plan: Any) -> set[str]:
    groups: set[str] = set()
    for r in plan.of_type(MANAGED_CLUSTER):
        for source in (r.inputs, r.state):
            value = source.get("nodeResourceGroup")
            if isinstance(value, str) and value:
                groups.add(value)
    return groups


def storage_outside_node_rg(plan: Any) -> Iterator[Finding]:
    """Checkpoint storage must outlive the cluster: not in the node resource group."""
    groups = {g.lower(): g for g in node_resource_groups(plan)}
    for r in plan.of_type(STORAGE_ACCOUNT):
        rg = r.inputs.get("resourceGroupName")
        if not isinstance(rg, str):
            continue
        if rg.lower() in groups or rg.upper().startswith("MC_"):
            yield Finding.error(
                "guardrail:storage-outside-node-rg",
                r,
                "resourceGroupName",
                rg,
                f"a resource group of our own, not the node resource group {groups.get(rg.lower(), rg)!r} "
                "(AKS deletes it, and the checkpoints, with the cluster)",
            )


# --------------------------------------------------------------------------- lifecycle


def pool_operations(plan: Any) -> Iterator[Finding]:
    """The AgentPools of one cluster form a chain of dependencies: Pulumi then creates them one
    after the other and deletes them in reverse, and AKS never sees two pool operations at once."""
    yield from not_one_at_a_time(
        "guardrail:pool-operations",
        plan,
        plan.of_type(AGENT_POOL),
        lambda r: (str(r.inputs.get("resourceGroupName")).lower(), str(r.inputs.get("resourceName")).lower()),
        "AKS refuses a second agent-pool operation on a cluster while one runs "
        "(409 'Another agentpool operation is in progress')",
    )


def checkpoints_kept(plan: Any) -> Iterator[Finding]:
    """Checkpoints outlive the cluster: `pulumi destroy` forgets the account, its container and
    the resource group holding them instead of deleting them (unless the stack lets them go)."""
    if not keeps_checkpoints(plan):
        return
    groups = {str(a.inputs.get("resourceGroupName")).lower() for a in plan.of_type(STORAGE_ACCOUNT)}
    kept = [
        *plan.of_type(STORAGE_ACCOUNT),
        *plan.of_type(BLOB_CONTAINER),
        *(g for g in plan.of_type(RESOURCE_GROUP) if str(g.inputs.get("resourceGroupName")).lower() in groups),
    ]
    yield from (f for r in kept if (f := deleted_on_destroy("guardrail:checkpoints-kept", r)) is not None)


def maintenance_window(plan: Any) -> Iterator[Finding]:
    """Each auto-upgrade channel that upgrades the cluster has a maintenance window, or AKS
    drains the CPU pool's etcd and the GPU workers whenever it schedules an upgrade."""
    windows = {str(r.inputs.get("configName")) for r in plan.of_type(MAINTENANCE_CONFIGURATION)}
    for r in plan.of_type(MANAGED_CLUSTER):
        profile = r.inputs.get("autoUpgradeProfile") or {}
        for path, off, config in (
            ("upgradeChannel", ("none",), AUTO_UPGRADE_SCHEDULE),
            ("nodeOSUpgradeChannel", ("none", "unmanaged"), NODE_OS_UPGRADE_SCHEDULE),
        ):
            channel = profile.get(path) if isinstance(profile, dict) else None
            if isinstance(channel, str) and channel.lower() in off:
                continue
            if config not in windows:
                yield Finding.error(
                    "guardrail:maintenance-window",
                    r,
                    f"autoUpgradeProfile.{path}",
                    channel,
                    f"a MaintenanceConfiguration {config!r} (a weekly window), or the channel 'none': "
                    "upgrades drain the etcd rendezvous and the operator at any time otherwise",
                )

"""Our guardrails on the recorded plan (beyond what Azure itself would reject).

  guardrail:spot-pool         every spot pool: mode User, eviction Delete, AKS spot label and
                              taint declared, no maxSurge, max price -1 (warning otherwise)
  guardrail:gpu-pool          the GPU pool: spot, autoscaled, can reach zero, GPU label/taint
  guardrail:on-demand-pools   system pools and our CPU/system-labelled pools are not spot
  guardrail:autoscaled-count  autoscaled pools ignore changes to `count`
  guardrail:cluster-features  Blob CSI driver, OIDC issuer and workload identity are on
  guardrail:network-policy    the cluster enforces NetworkPolicies: a policy engine is set
                              (cilium needs the cilium dataplane)
  guardrail:storage-outside-node-rg  checkpoint storage is not in the node resource group
  guardrail:no-plain-secrets  no kubeconfig / key / token in a plain (non-secret) output

Facts from ../shared/FACTS.md (AKS section). Each finding names resource, property, value
and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from components import labels
from lab.plan.checks import Finding, register_check

MANAGED_CLUSTER = "azure-native:containerservice:ManagedCluster"
AGENT_POOL = "azure-native:containerservice:AgentPool"
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
K8S_PROVIDER = "pulumi:providers:kubernetes"


@dataclass
class PoolView:
    """A node pool, whether a separate AgentPool or a ManagedCluster agentPoolProfiles entry."""

    resource: Any  # RecordedResource
    prefix: str  # "" or "agentPoolProfiles[i]."
    props: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.props.get("name") or self.props.get("agentPoolName") or self.resource.name)

    @property
    def is_profile(self) -> bool:
        return bool(self.prefix)

    def get(self, key: str, default: Any = None) -> Any:
        return self.props.get(key, default)

    def path(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def eq(self, key: str, value: str) -> bool:
        got = self.props.get(key)
        return isinstance(got, str) and got.lower() == value.lower()

    @property
    def spot(self) -> bool:
        return self.eq("scaleSetPriority", "Spot")

    @property
    def role(self) -> str | None:
        return (self.props.get("nodeLabels") or {}).get(labels.POOL_LABEL)

    @property
    def system(self) -> bool:
        return self.eq("mode", "System")


def pools(plan: Any) -> list[PoolView]:
    out = [PoolView(r, "", r.inputs) for r in plan.of_type(AGENT_POOL)]
    for mc in plan.of_type(MANAGED_CLUSTER):
        for i, profile in enumerate(mc.inputs.get("agentPoolProfiles") or []):
            if isinstance(profile, dict):
                out.append(PoolView(mc, f"agentPoolProfiles[{i}].", profile))
    return out


def _is_aks(plan: Any) -> bool:
    return bool(plan.of_type(MANAGED_CLUSTER, AGENT_POOL))


def _taints(pool: PoolView) -> list[str]:
    return [t for t in (pool.get("nodeTaints") or []) if isinstance(t, str)]


# --------------------------------------------------------------------------- pools


@register_check("guardrail:spot-pool", applies=_is_aks)
def spot_pools(plan: Any) -> Iterator[Finding]:
    """Every spot pool is a User pool, evicts with Delete, and declares AKS's spot label and taint."""
    name = "guardrail:spot-pool"
    for pool in (p for p in pools(plan) if p.spot):
        r = pool.resource
        if not pool.eq("mode", "User"):
            yield Finding.error(name, r, pool.path("mode"), pool.get("mode"), "'User' (a spot pool cannot be the system pool)")
        if not pool.eq("scaleSetEvictionPolicy", "Delete"):
            yield Finding.error(
                name, r, pool.path("scaleSetEvictionPolicy"), pool.get("scaleSetEvictionPolicy"),
                "'Delete' (Deallocate keeps evicted disks, costs storage and counts against quota)",
            )
        if labels.AKS_SPOT_TAINT.aks() not in _taints(pool):
            yield Finding.error(
                name, r, pool.path("nodeTaints"), pool.get("nodeTaints"),
                f"to contain {labels.AKS_SPOT_TAINT.aks()!r} (AKS adds it; undeclared it is a perpetual diff)",
            )
        node_labels = pool.get("nodeLabels") or {}
        if node_labels.get(labels.AKS_SPOT_LABEL) != labels.AKS_SPOT_VALUE:
            yield Finding.error(
                name, r, pool.path(f"nodeLabels.{labels.AKS_SPOT_LABEL}"), node_labels.get(labels.AKS_SPOT_LABEL),
                f"{labels.AKS_SPOT_VALUE!r} (AKS adds it; undeclared it is a perpetual diff)",
            )
        surge = (pool.get("upgradeSettings") or {}).get("maxSurge")
        if surge is not None:
            yield Finding.error(name, r, pool.path("upgradeSettings.maxSurge"), surge, "unset (AKS rejects maxSurge on spot pools)")
        price = pool.get("spotMaxPrice")
        if price is None:
            yield Finding.error(name, r, pool.path("spotMaxPrice"), None, "-1 set explicitly (immutable after creation)")
        elif price != -1:
            yield Finding.warning(
                name, r, pool.path("spotMaxPrice"), price,
                "-1 (pay up to on-demand: evicted only for capacity, never for price)",
            )


@register_check("guardrail:gpu-pool", applies=_is_aks)
def gpu_pool(plan: Any) -> Iterator[Finding]:
    """The GPU pool is spot, autoscaled, can reach zero, and carries the GPU label and taint."""
    name = "guardrail:gpu-pool"
    gpu = [p for p in pools(plan) if p.role == labels.POOL_GPU_SPOT]
    if not gpu:
        mc = (plan.of_type(MANAGED_CLUSTER) or plan.of_type(AGENT_POOL))[0]
        yield Finding.error(
            name, mc, f"nodeLabels.{labels.POOL_LABEL}", None,
            f"one pool labelled {labels.POOL_LABEL}={labels.POOL_GPU_SPOT} (the workers' spot GPU pool)",
        )
        return
    for pool in gpu:
        r = pool.resource
        if pool.is_profile:
            yield Finding.error(name, r, pool.path("name"), pool.name, "a separate AgentPool, not a profile inside the ManagedCluster")
        if not pool.spot:
            yield Finding.error(name, r, pool.path("scaleSetPriority"), pool.get("scaleSetPriority"), "'Spot' (the GPU workers' pool)")
        if pool.get("enableAutoScaling") is not True:
            yield Finding.error(name, r, pool.path("enableAutoScaling"), pool.get("enableAutoScaling"), "True (the autoscaler adds and removes GPU nodes)")
        if pool.get("minCount") != 0:
            yield Finding.error(name, r, pool.path("minCount"), pool.get("minCount"), "0 (the GPU pool must be able to scale to zero)")
        max_count = pool.get("maxCount")
        if not isinstance(max_count, int) or max_count < 1:
            yield Finding.error(name, r, pool.path("maxCount"), max_count, "a whole number >= 1")
        node_labels = pool.get("nodeLabels") or {}
        if node_labels.get(labels.NVIDIA_GPU_PRESENT_LABEL) != "true":
            yield Finding.error(
                name, r, pool.path(f"nodeLabels.{labels.NVIDIA_GPU_PRESENT_LABEL}"), node_labels.get(labels.NVIDIA_GPU_PRESENT_LABEL),
                "'true' (the NVIDIA device plugin's node affinity selects it; without it GPUs are never advertised)",
            )
        if labels.GPU_TAINT.aks() not in _taints(pool):
            yield Finding.error(
                name, r, pool.path("nodeTaints"), pool.get("nodeTaints"),
                f"to contain {labels.GPU_TAINT.aks()!r} (only GPU workloads on GPU nodes)",
            )


@register_check("guardrail:on-demand-pools", applies=_is_aks)
def on_demand_pools(plan: Any) -> Iterator[Finding]:
    """System pools and our CPU / system pools never run on spot capacity."""
    name = "guardrail:on-demand-pools"
    for pool in pools(plan):
        if not pool.spot:
            continue
        if pool.system:
            yield Finding.error(name, pool.resource, pool.path("scaleSetPriority"), pool.get("scaleSetPriority"),
                                "'Regular' (a System pool cannot be spot; it hosts AKS's own add-ons)")
        elif pool.role in (labels.POOL_CPU, labels.POOL_SYSTEM):
            yield Finding.error(name, pool.resource, pool.path("scaleSetPriority"), pool.get("scaleSetPriority"),
                                f"'Regular' (the {pool.role} pool hosts etcd, the operator and launchers: on-demand)")
    if not any(p.role == labels.POOL_CPU for p in pools(plan)):
        r = (plan.of_type(MANAGED_CLUSTER) or plan.of_type(AGENT_POOL))[0]
        yield Finding.error(name, r, f"nodeLabels.{labels.POOL_LABEL}", None,
                            f"one on-demand pool labelled {labels.POOL_LABEL}={labels.POOL_CPU} (etcd, operator, launchers)")


@register_check("guardrail:autoscaled-count", applies=_is_aks)
def autoscaled_count(plan: Any) -> Iterator[Finding]:
    """An autoscaled AgentPool ignores `count`, or every `pulumi up` fights the autoscaler."""
    for r in plan.of_type(AGENT_POOL):
        if r.inputs.get("enableAutoScaling") is True and "count" not in r.ignore_changes:
            yield Finding.error("guardrail:autoscaled-count", r, "options.ignore_changes", r.ignore_changes,
                                "to contain 'count' (the cluster autoscaler owns the node count)")


# --------------------------------------------------------------------------- cluster


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


@register_check("guardrail:cluster-features", applies=lambda plan: bool(plan.of_type(MANAGED_CLUSTER)))
def cluster_features(plan: Any) -> Iterator[Finding]:
    """Blob CSI driver (checkpoints), OIDC issuer and workload identity (storage access) are on."""
    name = "guardrail:cluster-features"
    for r in plan.of_type(MANAGED_CLUSTER):
        for path, why in (
            (("storageProfile", "blobCSIDriver", "enabled"), "the AKS-managed Blob CSI driver mounts checkpoints"),
            (("oidcIssuerProfile", "enabled"), "workload identity needs the cluster's OIDC issuer"),
            (("securityProfile", "workloadIdentity", "enabled"), "training pods reach storage through workload identity"),
        ):
            value = _dig(r.inputs, *path)
            if value is not True:
                yield Finding.error(name, r, ".".join(path), value, f"True ({why})")


# AKS network policy engines (ContainerServiceNetworkProfile.networkPolicy, API 2025-09-01):
# "none" (or unset) means NetworkPolicy objects are accepted and never enforced.
POLICY_ENGINES = ("cilium", "azure", "calico")


@register_check("guardrail:network-policy", applies=lambda plan: bool(plan.of_type(MANAGED_CLUSTER)))
def network_policy(plan: Any) -> Iterator[Finding]:
    """The cluster enforces NetworkPolicies (the platform's etcd policy): a policy engine is set."""
    name = "guardrail:network-policy"
    for r in plan.of_type(MANAGED_CLUSTER):
        profile = r.inputs.get("networkProfile") or {}
        policy = profile.get("networkPolicy") if isinstance(profile, dict) else None
        dataplane = profile.get("networkDataplane") if isinstance(profile, dict) else None
        if not isinstance(policy, str) or policy.lower() not in POLICY_ENGINES:
            yield Finding.error(
                name, r, "networkProfile.networkPolicy", policy,
                "a network policy engine, 'cilium' (with networkDataplane 'cilium'); without one AKS "
                "stores NetworkPolicy objects and enforces none, e.g. the etcd rendezvous policy",
            )
        elif policy.lower() == "cilium" and (not isinstance(dataplane, str) or dataplane.lower() != "cilium"):
            yield Finding.error(
                name, r, "networkProfile.networkDataplane", dataplane,
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


@register_check(
    "guardrail:storage-outside-node-rg",
    applies=lambda plan: bool(plan.of_type(MANAGED_CLUSTER)) and bool(plan.of_type(STORAGE_ACCOUNT)),
)
def storage_outside_node_rg(plan: Any) -> Iterator[Finding]:
    """Checkpoint storage must outlive the cluster: not in the node resource group."""
    groups = {g.lower(): g for g in node_resource_groups(plan)}
    for r in plan.of_type(STORAGE_ACCOUNT):
        rg = r.inputs.get("resourceGroupName")
        if not isinstance(rg, str):
            continue
        if rg.lower() in groups or rg.upper().startswith("MC_"):
            yield Finding.error(
                "guardrail:storage-outside-node-rg", r, "resourceGroupName", rg,
                f"a resource group of our own, not the node resource group {groups.get(rg.lower(), rg)!r} "
                "(AKS deletes it, and the checkpoints, with the cluster)",
            )


# --------------------------------------------------------------------------- secrets

SENSITIVE_KEY = re.compile(
    r"(?i)(kube_?config|password|passwd|secret|token$|connection_?string|credentials?$|"
    r"(access|account|primary|secondary|private|storage|shared|admin|client|api)_?keys?$|sas_?(token|url|uri)$)"
)
# A bare `key` / `value` is only a secret when it looks like key material (a taint's `key` is not).
KEY_MATERIAL = re.compile(r"^[A-Za-z0-9+/]{40,}={0,2}$")
SENSITIVE_VALUE = [
    (re.compile(r"(?s)apiVersion:\s*v1.*kind:\s*Config|kind:\s*Config.*apiVersion:\s*v1"), "a kubeconfig"),
    (re.compile(r"AccountKey=|SharedAccessSignature=|[?&]sig=[A-Za-z0-9%]{20,}"), "a storage key or SAS"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
]


def _sensitive(key: str, value: Any) -> str | None:
    if isinstance(value, str):
        for pattern, what in SENSITIVE_VALUE:
            if pattern.search(value):
                return what
    last = key.rsplit(".", 1)[-1]
    if SENSITIVE_KEY.search(last) and value not in (None, "", [], {}):
        return f"a value named like a secret ({last!r})"
    if last.lower() in ("key", "keys", "value") and isinstance(value, str) and KEY_MATERIAL.match(value):
        return f"key material under {last!r}"
    return None


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}.{i}")


def _covered(path: str, secret_paths: Iterable[str]) -> bool:
    return any(path == s or path.startswith(s + ".") or s == "" for s in secret_paths)


@register_check("guardrail:no-plain-secrets")
def no_plain_secrets(plan: Any) -> Iterator[Finding]:
    """No kubeconfig, key, token or connection string in a plain (non-secret) output or provider input."""
    name = "guardrail:no-plain-secrets"
    for key, value in plan.outputs.items():
        if key in plan.secret_outputs:
            continue
        for path, v in _walk(value, key):
            what = _sensitive(path, v)
            if what:
                yield Finding.error(name, f"stack output {key!r}", path, "<redacted>", f"a secret output (this is {what}; wrap it in pulumi.Output.secret)")
                break
    for r in plan.resources:
        if r.outputs:
            for path, v in _walk(r.outputs, ""):
                if path and not _covered(path, r.secret_outputs):
                    what = _sensitive(path, v)
                    if what:
                        yield Finding.error(name, r, f"outputs.{path}", "<redacted>", f"a secret (this is {what})")
        if r.type.startswith("pulumi:providers:"):
            for path, v in _walk(r.inputs, ""):
                if path and not _covered(path, r.secret_inputs):
                    what = _sensitive(path, v)
                    if what:
                        yield Finding.error(name, r, f"inputs.{path}", "<redacted>", f"a secret (this is {what}; provider inputs are stored in state)")

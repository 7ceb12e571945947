"""An AKS plan's node pools, seen alike whether declared as separate AgentPools or as
profiles inside the ManagedCluster (the system pool)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.vocab import pools as labels

MANAGED_CLUSTER = "azure-native:containerservice:ManagedCluster"
AGENT_POOL = "azure-native:containerservice:AgentPool"
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"


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
    """Every pool of the plan: the AgentPools, then each ManagedCluster's profiles."""
    out = [PoolView(r, "", r.inputs) for r in plan.of_type(AGENT_POOL)]
    for mc in plan.of_type(MANAGED_CLUSTER):
        for i, profile in enumerate(mc.inputs.get("agentPoolProfiles") or []):
            if isinstance(profile, dict):
                out.append(PoolView(mc, f"agentPoolProfiles[{i}].", profile))
    return out

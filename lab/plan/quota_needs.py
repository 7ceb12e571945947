"""The vCPU quota a recorded plan needs (lab/vocab/quota.py): read from its pools (AKS) or node
groups (EKS) at their largest, each GPU rank apart. `elastic-lab plan` shows it offline;
`check` and `up` ask the cloud's quota API for it (lab/stacks/quota.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lab.plan.aks_pools import MANAGED_CLUSTER, pools
from lab.plan.cost import node_count
from lab.vocab.capacity import rank_in
from lab.vocab.pools import POOL_LABEL
from lab.vocab.quota import PoolDemand, QuotaNeed, aws_needs, azure_needs, unknown_sizes

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
AWS_PROVIDER = "pulumi:providers:aws"


@dataclass(frozen=True)
class StackQuota:
    """What a plan needs of its cloud's quotas, and the sizes whose vCPUs are not known here."""

    cloud: str  # azure | aws
    region: str
    needs: list[QuotaNeed] = field(default_factory=list)
    unknown_sizes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cloud": self.cloud,
            "region": self.region,
            "needs": [
                {
                    "quota": n.quota,
                    "name": n.name,
                    "region": n.region,
                    "vcpus": n.vcpus,
                    "for": list(n.pools),
                    "required": n.required,
                }
                for n in self.needs
            ],
            "unknown_sizes": self.unknown_sizes,
        }


def stack_quota(plan: Any) -> StackQuota | None:
    """The plan's quota needs; None for a plan with no cloud node pools (byo)."""
    if plan.of_type(NODE_GROUP):
        region = next((str(p.inputs["region"]) for p in plan.of_type(AWS_PROVIDER) if p.inputs.get("region")), "")
        demands = []
        for g in plan.of_type(NODE_GROUP):
            node_labels = g.inputs.get("labels") or {}
            demands.append(
                PoolDemand(
                    str(g.inputs.get("nodeGroupName") or g.name),
                    tuple(str(t) for t in g.inputs.get("instanceTypes") or []),
                    g.inputs.get("capacityType") == "SPOT",
                    node_count((g.inputs.get("scalingConfig") or {}).get("maxSize")),
                    rank_in(node_labels) if node_labels.get(POOL_LABEL) else None,
                )
            )
        return StackQuota("aws", region, aws_needs(demands, region), unknown_sizes(demands, "aws"))
    views = pools(plan)
    if not views:
        return None
    region = next((str(c.inputs["location"]) for c in plan.of_type(MANAGED_CLUSTER) if c.inputs.get("location")), "")
    demands = [
        PoolDemand(
            view.name,
            (str(view.get("vmSize")),),
            view.spot,
            node_count(view.get("maxCount") if view.get("enableAutoScaling") is True else view.get("count")),
            rank_in(view.get("nodeLabels")),
        )
        for view in views
    ]
    return StackQuota("azure", region, azure_needs(demands, region), unknown_sizes(demands, "azure"))


def quota_lines(quota: StackQuota | None) -> list[str]:
    if quota is None:
        return ["  (no cloud node pools in this plan)"]
    source = "Azure compute usages" if quota.cloud == "azure" else "AWS Service Quotas, ec2"
    lines = [
        f"  vCPUs at every pool's largest, per quota ({source}); `elastic-lab check` / `up` compare them with the "
        "account's limits:"
    ]
    for need in quota.needs:
        lines.append(f"  {need.line()}")
    if quota.unknown_sizes:
        lines.append(
            f"  note: not counted, vCPUs unknown here: {', '.join(quota.unknown_sizes)} (add them to "
            "lab/vocab/machine_shapes.py)"
        )
    return lines

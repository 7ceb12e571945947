"""The Pulumi program's body: stack config -> cluster component -> (platform) -> exports.

`__main__.py` calls `main()`; `elastic-lab plan` runs the same under mocks. To add a
component, declare it in `compose()` after the cluster and export its outputs there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from components import config as config_mod


class UnsupportedCloud(ValueError):
    pass


@dataclass
class Stack:
    """What `compose()` declared, for exports and for tests."""

    config: config_mod.StackConfig
    cluster: Any = None  # AksCluster (or a future EksCluster / ByoCluster)
    components: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)


def build_cluster(cfg: config_mod.StackConfig) -> Any:
    if cfg.cloud == "aks":
        from components.aks import AksCluster

        return AksCluster("aks", cfg.aks_args())
    raise UnsupportedCloud(
        f"{config_mod.qualified('cloud')}={cfg.cloud!r} has no cluster component yet: expected aks"
    )


def compose(cfg: config_mod.StackConfig) -> Stack:
    """Declare every component of the stack, in order. Returns what was declared."""
    stack = Stack(config=cfg)
    stack.cluster = build_cluster(cfg)
    stack.components["cluster"] = stack.cluster
    stack.outputs.update(stack.cluster.outputs())

    # --- Training platform (issue 4) goes here. It takes the cluster's cloud-neutral facts:
    #   info = stack.cluster.info            # components.cluster_info.ClusterInfo
    #   info.provider                        # Kubernetes provider of the new cluster
    #   info.pool_labels / info.pool_taints  # keyed by components.labels.POOL_*
    #   info.node_resource_group             # AKS node resource group (eviction drill)
    #   info.storage                         # account, container, resource_group, client_id, ...
    # e.g.
    #   platform = TrainingPlatform("platform", PlatformArgs.from_cluster(info, cfg),
    #                               opts=pulumi.ResourceOptions(providers=[info.provider]))
    #   stack.components["platform"] = platform
    #   stack.outputs.update(platform.outputs())
    return stack


def main() -> Stack:
    """Entry point of the Pulumi program: validate all config first, then declare."""
    cfg = config_mod.load()
    stack = compose(cfg)
    for name, value in stack.outputs.items():
        pulumi.export(name, value)
    return stack

"""The Pulumi program's body: stack config -> cluster component -> training platform -> exports.

`__main__.py` calls `main()`; `elastic-lab plan` runs the same under mocks. Every config
problem is reported by `config.load()` before the first resource is declared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

import pulumi

from components import config
from components.aks import AksCluster, AksClusterArgs
from components.byo import ByoCluster, ByoClusterArgs
from components.eks import EksCluster, EksClusterArgs
from components.platform import TrainingPlatform


@dataclass(frozen=True)
class Stack:
    """What the program declared: the stack's config, its cluster and its platform."""

    config: config.StackConfig
    cluster: AksCluster | EksCluster | ByoCluster
    platform: TrainingPlatform


def main() -> Stack:
    cfg = config.load()

    cluster: AksCluster | EksCluster | ByoCluster
    match cfg.cluster:  # the arguments of the stack's `cloud`
        case AksClusterArgs():
            cluster = AksCluster("aks", cfg.cluster)
        case EksClusterArgs():
            cluster = EksCluster("eks", cfg.cluster)
        case ByoClusterArgs():
            cluster = ByoCluster("byo", cfg.cluster)
        case _:
            assert_never(cfg.cluster)

    platform = TrainingPlatform(
        "platform", cfg.platform, cluster.info, opts=pulumi.ResourceOptions(depends_on=[cluster])
    )

    for name, value in cluster.outputs().items():
        pulumi.export(name, value)
    pulumi.export("platformNamespace", platform.namespace)
    pulumi.export("etcdHost", platform.etcd_host)
    pulumi.export("checkpointClaim", platform.checkpoint_claim)
    return Stack(cfg, cluster, platform)

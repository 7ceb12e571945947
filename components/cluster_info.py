"""What a cluster component hands to the training platform: the seam between the two.

Every cluster component (AKS now, EKS or bring-your-own later) exposes a `ClusterInfo` as
`.info`, so the platform component never needs to know which cloud it runs on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from components.labels import Taint


@dataclass(frozen=True)
class CheckpointStorageInfo:
    """Checkpoint storage that lives outside the cluster (survives cluster deletion).

    For AKS: a blob container in our own storage account, mounted statically with the Blob
    CSI driver (`driver: blob.csi.azure.com`, volumeAttributes `storageaccount`,
    `containerName`, `resourcegroup`, `clientID`; plus `mountWithWorkloadIdentityToken:
    "true"` when `mount_with_token`). Pods must run as `service_account` in `namespace`.
    """

    kind: str  # "azure-blob"
    account: pulumi.Output[str]
    container: pulumi.Output[str]
    resource_group: pulumi.Output[str]
    client_id: pulumi.Output[str]  # workload identity (user-assigned managed identity) client id
    namespace: str
    service_account: str
    mount_with_token: bool = False


@dataclass(frozen=True)
class ClusterInfo:
    """Cluster facts for the platform component.

    provider: Kubernetes provider for the new cluster (pass as `providers=[...]`).
    kubeconfig: the cluster's kubeconfig, a secret Output.
    pool_labels: pool name (components.labels.POOL_*) -> node labels of that pool.
    pool_taints: pool name -> taints of that pool; workers must tolerate exactly
        `pool_taints[POOL_GPU_SPOT]` (our GPU taint plus the cloud's spot taint).
    node_resource_group: AKS's node resource group (for the eviction drill), if any.
    storage: checkpoint storage (see CheckpointStorageInfo).
    """

    cloud: str
    provider: Any  # pulumi_kubernetes.Provider
    kubeconfig: pulumi.Output[str]
    cluster_name: pulumi.Output[str]
    pool_labels: dict[str, dict[str, str]]
    pool_taints: dict[str, list[Taint]]
    storage: CheckpointStorageInfo
    node_resource_group: pulumi.Output[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

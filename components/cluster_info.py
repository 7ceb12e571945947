"""What a cluster component hands to the training platform: the typed seam between the two.

Every cluster component (AKS, bring-your-own) exposes a `ClusterInfo` as `.info`. The
platform reads its cloud's facts from it (pool placement with the cloud's spot labels, the
eviction notice, where checkpoints live, which service account the storage trusts) and
never asks which cloud it runs on. `kubernetes_provider` is the provider a cloud's cluster
component hands over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import pulumi
import pulumi_kubernetes as k8s

from lab.vocab.checkpoint_location import BLOB_SCHEME, S3_SCHEME
from lab.vocab.job import CheckpointWrites
from lab.vocab.platform_facts import DEFAULT_EVICTION_NOTICE_S
from lab.vocab.pools import PoolPlacement


@dataclass(frozen=True)
class AzureBlobCheckpoint:
    """A blob container outside the node resource group (that one dies with the cluster),
    mounted statically by the Blob CSI driver with the workload identity federated to the
    jobs' service account.

    `mount_with_token` is the cluster's `checkpointAuth`:
    - False (`workload-identity-key`, the driver's GA path): the driver uses the pods'
      identity to fetch the account key at mount time (the identity needs `Storage Blob Data
      Contributor` on the container and `Storage Account Contributor` on the account).
    - True (`workload-identity-token`): the volume gets `mountWithWorkloadIdentityToken:
      "true"` and the driver mounts with the identity's token only (`Storage Blob Data
      Contributor` on the container; the account can turn shared keys off).
    """

    storage_account: pulumi.Input[str]
    container: pulumi.Input[str]
    resource_group: pulumi.Input[str]
    client_id: pulumi.Input[str]
    mount_with_token: bool = False
    writes: ClassVar[CheckpointWrites] = CheckpointWrites.RENAME

    def client_url(self) -> pulumi.Output[str] | None:
        """The container as the pods' Blob clients reach it (their workload identity)."""
        return pulumi.Output.concat(BLOB_SCHEME, self.storage_account, "/", self.container)

    def client_env(self) -> dict[str, pulumi.Input[str]]:
        return {}


@dataclass(frozen=True)
class S3Checkpoint:
    """A bucket outside the cluster via the Mountpoint for S3 CSI driver (static volumes
    only). Mountpoint cannot rename or overwrite: jobs write each checkpoint once."""

    bucket: pulumi.Input[str]
    region: pulumi.Input[str] | None = None
    writes: ClassVar[CheckpointWrites] = CheckpointWrites.WRITE_ONCE

    def client_url(self) -> pulumi.Output[str] | None:
        """The bucket as the pods' S3 clients reach it (their Pod Identity role)."""
        return pulumi.Output.concat(S3_SCHEME, self.bucket)

    def client_env(self) -> dict[str, pulumi.Input[str]]:
        """The bucket's region for the pods' S3 clients (EKS Pod Identity sets none)."""
        return {"AWS_REGION": self.region} if self.region is not None else {}


@dataclass(frozen=True)
class StorageClassCheckpoint:
    """A claim on an existing StorageClass of the cluster (bring-your-own clusters)."""

    storage_class: str
    access_mode: str = "ReadWriteMany"
    writes: ClassVar[CheckpointWrites] = CheckpointWrites.RENAME

    def client_url(self) -> pulumi.Output[str] | None:
        """None: a volume only, no object-store URL."""
        return None

    def client_env(self) -> dict[str, pulumi.Input[str]]:
        return {}


CheckpointStorage = AzureBlobCheckpoint | S3Checkpoint | StorageClassCheckpoint


@dataclass(frozen=True)
class TrainingIdentity:
    """The service account a cluster's checkpoint storage trusts: the platform's jobs run as
    it (a different one would mount nothing), annotated as the cluster's identity
    federation needs; `pod_labels`: what the jobs' pods carry for their own clients to get
    the identity's credentials (AKS: the workload identity webhook's label)."""

    namespace: str
    service_account: str
    annotations: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    # Trust one more service account (a team's): trust(resource name, namespace, service account,
    # resources to wait for) declares what the cloud needs and returns it; None: the cloud
    # cannot (only the one service account mounts the storage).
    trust: Callable[[str, str, str, Sequence[pulumi.Resource]], pulumi.Resource] | None = None
    # How many service accounts besides its own the identity can trust; None: no limit known.
    trust_limit: int | None = None


@dataclass(frozen=True)
class ClusterInfo:
    """Cluster facts for the platform component.

    provider: Kubernetes provider for the cluster (the platform passes it to its resources).
    kubeconfig: the cluster's kubeconfig (or its path), a secret Output.
    placement: the CPU and GPU spot pools' labels and taints, and the labels spot nodes carry.
    checkpoint: where checkpoints live, outside the nodes (and, in a cloud, the cluster).
    eviction_notice_s: the cloud's spot eviction notice; workers must save within it.
    identity: the service account the checkpoint storage trusts, if the storage needs one.
    node_image_ships_device_plugin: the node image runs its own NVIDIA device plugin.
    notice_from_scheduled_events: spot nodes learn of their eviction only from the metadata
      service's Scheduled Events (Azure) and nothing turns that into pod evictions: the
      platform installs its spot-notice handler on the GPU spot pool. False where the cloud
      drains spot nodes itself (EKS managed node groups) or the cluster's owner does.
    """

    provider: k8s.Provider
    kubeconfig: pulumi.Output[str]
    placement: PoolPlacement
    checkpoint: CheckpointStorage
    eviction_notice_s: int = DEFAULT_EVICTION_NOTICE_S
    identity: TrainingIdentity | None = None
    node_image_ships_device_plugin: bool = False
    notice_from_scheduled_events: bool = False


def kubernetes_provider(
    name: str, kubeconfig: pulumi.Output[str], *, parent: pulumi.Resource, after: Sequence[pulumi.Resource]
) -> k8s.Provider:
    """The Kubernetes provider of a cluster the component declares (`<name>-k8s`), applying
    server-side, after `after`: the node pools and add-ons the platform's pods need."""
    return k8s.Provider(
        f"{name}-k8s",
        kubeconfig=kubeconfig,
        enable_server_side_apply=True,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after)),
    )

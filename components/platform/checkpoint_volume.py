"""The checkpoint volume's specs, pure: a static CSI volume on a cloud's object storage (Azure
Blob through the Blob CSI driver, S3 through Mountpoint for S3) and the claim bound to it, or
a claim on the cluster's StorageClass. TrainingPlatform declares them."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.cluster_info import AzureBlobCheckpoint, S3Checkpoint, StorageClassCheckpoint
from components.platform.settings import PlatformSettings
from lab.vocab.checkpoint_location import BLOB_CSI_DRIVER, S3_CSI_DRIVER


@dataclass(frozen=True)
class VolumeSource:
    """What a static checkpoint volume takes from the object storage behind it."""

    csi: k8s.core.v1.CSIPersistentVolumeSourceArgsDict
    mount_options: list[pulumi.Input[str]]
    annotations: dict[str, str] = field(default_factory=dict)


def volume_source(checkpoint: AzureBlobCheckpoint | S3Checkpoint, default_region: str) -> VolumeSource:
    """The CSI source of a Blob container or an S3 bucket (`default_region`: the bucket's
    region when the cluster does not say)."""
    if isinstance(checkpoint, AzureBlobCheckpoint):
        return blob_source(checkpoint)
    return s3_source(checkpoint, default_region)


def blob_source(checkpoint: AzureBlobCheckpoint) -> VolumeSource:
    """A Blob container through the Blob CSI driver (blobfuse), with the training identity."""
    attributes: dict[str, pulumi.Input[str]] = {
        "storageaccount": checkpoint.storage_account,
        "containerName": checkpoint.container,
        "resourcegroup": checkpoint.resource_group,
        "clientID": checkpoint.client_id,
    }
    if checkpoint.mount_with_token:
        attributes["mountWithWorkloadIdentityToken"] = "true"
    csi: k8s.core.v1.CSIPersistentVolumeSourceArgsDict = {
        "driver": BLOB_CSI_DRIVER,
        # Unique per container in the cluster: {resource group}#{account}#{container}.
        "volume_handle": pulumi.Output.concat(
            checkpoint.resource_group, "#", checkpoint.storage_account, "#", checkpoint.container
        ),
        "volume_attributes": attributes,
    }
    return VolumeSource(
        csi,
        mount_options=["-o allow_other", "--file-cache-timeout-in-seconds=120"],
        annotations={"pv.kubernetes.io/provisioned-by": BLOB_CSI_DRIVER},
    )


def s3_source(checkpoint: S3Checkpoint, default_region: str) -> VolumeSource:
    """An S3 bucket through the Mountpoint for S3 CSI driver."""
    csi: k8s.core.v1.CSIPersistentVolumeSourceArgsDict = {
        "driver": S3_CSI_DRIVER,
        "volume_handle": pulumi.Output.concat("s3-", checkpoint.bucket),
        "volume_attributes": {"bucketName": checkpoint.bucket},
    }
    # allow-delete: old checkpoints are pruned; no overwrite, no rename (write-once).
    mount_options: list[pulumi.Input[str]] = ["allow-delete"]
    region = checkpoint.region or default_region
    if region:
        mount_options.append(pulumi.Output.concat("region ", region))
    return VolumeSource(csi, mount_options)


def folder_source(checkpoint: AzureBlobCheckpoint | S3Checkpoint, source: VolumeSource, folder: str) -> VolumeSource:
    """`source` mounting only `folder` of its container or bucket (blobfuse2's subdirectory,
    Mountpoint's prefix), under a volume handle of its own (handles are unique in a cluster;
    the Blob CSI driver allows no '/' in one)."""
    blob = isinstance(checkpoint, AzureBlobCheckpoint)
    option = f"--subdirectory={folder}" if blob else f"prefix {folder}/"
    handle = pulumi.Output.concat(source.csi["volume_handle"], "#" if blob else "-", folder.replace("/", "-"))
    csi: k8s.core.v1.CSIPersistentVolumeSourceArgsDict = {**source.csi, "volume_handle": handle}
    return VolumeSource(csi, [*source.mount_options, option], dict(source.annotations))


def checkpoint_volume_name(settings: PlatformSettings, namespace: str | None = None) -> str:
    """The static volume's name: volumes are cluster-wide, so it carries the jobs' namespace
    [the platform's]."""
    return f"{namespace or settings.namespace}-{settings.checkpoint.claim_name}"


def static_volume_spec(
    settings: PlatformSettings, source: VolumeSource, namespace: str | None = None
) -> k8s.core.v1.PersistentVolumeSpecArgsDict:
    """A volume that keeps its data when released, bound only to the jobs' claim in
    `namespace` [the platform's]."""
    return {
        "capacity": {"storage": settings.checkpoint.size},
        "access_modes": ["ReadWriteMany"],
        "persistent_volume_reclaim_policy": "Retain",
        # Static volume: no StorageClass, bound only to our claim.
        "storage_class_name": "",
        "claim_ref": {"namespace": namespace or settings.namespace, "name": settings.checkpoint.claim_name},
        "mount_options": source.mount_options,
        "csi": source.csi,
    }


def static_claim_spec(volume_name: str, size: str) -> k8s.core.v1.PersistentVolumeClaimSpecArgsDict:
    """The claim on the static volume `volume_name`."""
    return {
        "access_modes": ["ReadWriteMany"],
        "storage_class_name": "",
        "volume_name": volume_name,
        "resources": {"requests": {"storage": size}},
    }


def storage_class_claim_spec(
    checkpoint: StorageClassCheckpoint, size: str
) -> k8s.core.v1.PersistentVolumeClaimSpecArgsDict:
    """A claim the cluster's StorageClass provisions."""
    return {
        "access_modes": [checkpoint.access_mode],
        "storage_class_name": checkpoint.storage_class,
        "resources": {"requests": {"storage": size}},
    }

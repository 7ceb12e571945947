"""From a cluster component's facts (components.cluster_info.ClusterInfo) to the
platform's inputs: pool placement, checkpoint binding, and settings that agree with the
identity the cluster federated (namespace, service account)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from components.platform.component import AzureBlobCheckpoint, Checkpoint, S3Checkpoint
from components.platform.settings import PlatformConfigError, PlatformSettings
from lab.k8s.scheduling import PoolPlacement

POOL_CPU = "cpu"
POOL_GPU_SPOT = "gpu-spot"
CAPACITY_LABEL = "elastic-spot-lab/capacity"
# Labels the clouds themselves put on spot nodes.
CLOUD_SPOT_LABELS = {
    "aks": {"kubernetes.azure.com/scalesetpriority": "spot"},
    "eks": {"eks.amazonaws.com/capacityType": "SPOT"},
}


def placement_from_cluster(info: Any) -> PoolPlacement:
    """Pools as the cluster declared them: the platform selects and tolerates exactly these."""
    labels = info.pool_labels
    taints = info.pool_taints
    for pool in (POOL_CPU, POOL_GPU_SPOT):
        if pool not in labels:
            raise PlatformConfigError(f"cluster pool {pool!r} is missing: the platform needs the {POOL_CPU} and {POOL_GPU_SPOT} pools")
    gpu_labels = dict(labels[POOL_GPU_SPOT])
    spot = dict(CLOUD_SPOT_LABELS.get(info.cloud, {}))
    if gpu_labels.get(CAPACITY_LABEL) == "spot":
        spot[CAPACITY_LABEL] = "spot"
    return PoolPlacement(
        cpu_labels=dict(labels[POOL_CPU]),
        cpu_taints=tuple(taints.get(POOL_CPU, ())),
        gpu_labels=gpu_labels,
        gpu_taints=tuple(taints[POOL_GPU_SPOT]),
        spot_labels=spot,
    )


def checkpoint_from_cluster(info: Any) -> Checkpoint:
    storage = info.storage
    kind = getattr(storage, "kind", None)
    if kind == "azure-blob":
        return AzureBlobCheckpoint(
            storage_account=storage.account,
            container=storage.container,
            resource_group=storage.resource_group,
            client_id=storage.client_id,
        )
    if kind == "s3":
        return S3Checkpoint(bucket=storage.bucket, region=getattr(storage, "region", None))
    raise PlatformConfigError(f"cluster storage kind={kind!r} is invalid: expected azure-blob or s3")


def settings_for_cluster(raw: Any, info: Any, *, kubernetes_version: str) -> PlatformSettings:
    """Platform settings whose namespace and service account are the ones the cluster's
    workload identity trusts (a different name would mount nothing)."""
    storage = info.storage
    given = dict(raw or {}) if not isinstance(raw, str) else raw
    settings = PlatformSettings.from_config(given, cloud=info.cloud, kubernetes_version=kubernetes_version)
    want = {"namespace": getattr(storage, "namespace", None), "serviceAccount": getattr(storage, "service_account", None)}
    changes: dict[str, Any] = {}
    for key, attr in (("namespace", "namespace"), ("serviceAccount", "service_account")):
        if want[key] is None:
            continue
        if isinstance(given, dict) and key in given and given[key] != want[key]:
            raise PlatformConfigError(
                f"platform.{key}={given[key]!r} is invalid: expected {want[key]!r}, the one the cluster's "
                f"workload identity trusts (set it on the cluster: trainingNamespace / trainingServiceAccount)"
            )
        changes[attr] = want[key]
    if getattr(storage, "mount_with_token", None) is not None:
        changes["checkpoint"] = replace(settings.checkpoint, workload_identity_token=bool(storage.mount_with_token))
    return replace(settings, **changes)

"""From a cluster component's facts (components.cluster_info.ClusterInfo) to the
platform's inputs: pool placement, checkpoint binding, and settings that agree with the
identity the cluster federated (namespace, service account) and with the way it mounts
checkpoints (checkpointAuth)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from components.labels import AKS_SPOT_LABEL, AKS_SPOT_VALUE, CAPACITY_LABEL, CAPACITY_SPOT, POOL_CPU, POOL_GPU_SPOT
from components.platform.component import AzureBlobCheckpoint, Checkpoint, S3Checkpoint
from components.platform.settings import PlatformConfigError, PlatformSettings
from lab.k8s.scheduling import PoolPlacement

# Labels the clouds themselves put on spot nodes (EKS: ../shared/FACTS.md, EKS).
CLOUD_SPOT_LABELS = {
    "aks": {AKS_SPOT_LABEL: AKS_SPOT_VALUE},
    "eks": {"eks.amazonaws.com/capacityType": "SPOT"},
}
# The cluster's `checkpointAuth` (components/aks/args.py CHECKPOINT_AUTH_MODES) for each
# value of ClusterInfo.storage.mount_with_token.
CHECKPOINT_AUTH = {False: "workload-identity-key", True: "workload-identity-token"}
TOKEN_KEY = "platform.checkpoint.workloadIdentityToken"


def placement_from_cluster(info: Any) -> PoolPlacement:
    """Pools as the cluster declared them: the platform selects and tolerates exactly these."""
    labels = info.pool_labels
    taints = info.pool_taints
    for pool in (POOL_CPU, POOL_GPU_SPOT):
        if pool not in labels:
            raise ValueError(f"cluster pool {pool!r} is missing: the platform needs the {POOL_CPU} and {POOL_GPU_SPOT} pools")
    gpu_labels = dict(labels[POOL_GPU_SPOT])
    spot = dict(CLOUD_SPOT_LABELS.get(info.cloud, {}))
    if gpu_labels.get(CAPACITY_LABEL) == CAPACITY_SPOT:
        spot[CAPACITY_LABEL] = CAPACITY_SPOT
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
            mount_with_token=bool(getattr(storage, "mount_with_token", False)),
        )
    if kind == "s3":
        return S3Checkpoint(bucket=storage.bucket, region=getattr(storage, "region", None))
    raise ValueError(f"cluster storage kind={kind!r} is invalid: expected azure-blob or s3")


def token_conflict(given: Any, mount_with_token: bool) -> PlatformConfigError | None:
    """The error when `platform.checkpoint.workloadIdentityToken` was set explicitly and
    disagrees with the cluster's `checkpointAuth` (None when it agrees or is unset)."""
    if given is None or given == mount_with_token:
        return None
    mode = CHECKPOINT_AUTH[mount_with_token]
    other = CHECKPOINT_AUTH[bool(given)]
    how = "with the workload identity token" if mount_with_token else "with the account key it fetches with the identity"
    return PlatformConfigError(
        TOKEN_KEY, given,
        f"{str(mount_with_token).lower()}: the cluster's elastic-spot-lab:checkpointAuth={mode!r} mounts checkpoints {how}; "
        f"make the two agree (elastic-spot-lab:checkpointAuth: {other} for {str(bool(given)).lower()}), "
        f"or leave {TOKEN_KEY} unset to follow the cluster",
    )


def settings_for_cluster(raw: Any, info: Any, *, kubernetes_version: str) -> PlatformSettings:
    """Platform settings whose namespace and service account are the ones the cluster's
    workload identity trusts (a different name would mount nothing), and whose checkpoint
    mount mode is the cluster's checkpointAuth (an explicit conflicting value is an error)."""
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
                f"platform.{key}", given[key],
                f"{want[key]!r}, the one the cluster's workload identity trusts "
                "(set it on the cluster: trainingNamespace / trainingServiceAccount)",
            )
        changes[attr] = want[key]
    token = getattr(storage, "mount_with_token", None)
    if token is not None:
        conflict = token_conflict(settings.checkpoint.workload_identity_token, bool(token))
        if conflict is not None:
            raise conflict
        changes["checkpoint"] = replace(settings.checkpoint, workload_identity_token=bool(token))
    return replace(settings, **changes)

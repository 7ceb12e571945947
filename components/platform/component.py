"""TrainingPlatform: what elastic PyTorch jobs need on any Kubernetes cluster.

PriorityClasses, the NVIDIA device plugin, the Kubeflow training operator v1.9.4, an etcd
3.5 rendezvous server (charts/etcd-rendezvous), the jobs' namespace and service account,
and a checkpoint volume that outlives nodes: a static Blob CSI volume on AKS (workload
identity), an S3 Mountpoint volume on EKS, a claim on a StorageClass on `byo` clusters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

import pulumi
import pulumi_kubernetes as k8s

from components.platform.settings import (
    DEVICE_PLUGIN_CHART,
    DEVICE_PLUGIN_REPO,
    DEVICE_PLUGIN_VERSION,
    PlatformConfigError,
    PlatformSettings,
)
from components.platform.values import (
    device_plugin_values,
    etcd_values,
    operator_pod_patch,
    operator_skeleton,
    patch_workload,
)
from lab.k8s.job_values import ETCD_CHART, REPO_ROOT, PlatformFacts, facts_to_dict
from lab.k8s.scheduling import PoolPlacement

COMPONENT_TYPE = "elastic-spot-lab:platform:TrainingPlatform"
PART_OF = {"app.kubernetes.io/part-of": "elastic-spot-lab"}
BLOB_CSI_DRIVER = "blob.csi.azure.com"
S3_CSI_DRIVER = "s3.csi.aws.com"
WORKLOAD_IDENTITY_CLIENT_ID = "azure.workload.identity/client-id"
# Relative to the project directory, where Pulumi runs the program: the same in every clone.
ETCD_CHART_PATH = ETCD_CHART.relative_to(REPO_ROOT).as_posix()


@dataclass
class AzureBlobCheckpoint:
    """The stack's own storage container (not the node resource group's: that one dies
    with the cluster), mounted with the identity federated to the jobs' service account.

    How the Blob CSI driver mounts it is the cluster's `checkpointAuth`, here `mount_with_token`:
    - False (`workload-identity-key`, the cluster's default and the driver's GA path): the
      driver uses the pods' identity to fetch the account key at mount time. The identity
      needs `Storage Blob Data Contributor` on the container and `Storage Account
      Contributor` on the account (to read the key); the account allows shared-key access.
    - True (`workload-identity-token`): the volume gets `mountWithWorkloadIdentityToken:
      "true"` and the driver mounts with the identity's token only. The identity needs
      `Storage Blob Data Contributor` on the container, nothing on the account; the account
      can turn shared keys off.
    The cluster component grants exactly these (components/aks/storage.py)."""

    storage_account: pulumi.Input[str]
    container: pulumi.Input[str]
    resource_group: pulumi.Input[str]
    client_id: pulumi.Input[str]
    mount_with_token: bool = False


@dataclass
class S3Checkpoint:
    """A bucket outside the cluster via the Mountpoint for S3 CSI driver (EKS add-on,
    static volumes only). Mountpoint cannot rename: jobs write each checkpoint once."""

    bucket: pulumi.Input[str]
    region: Optional[pulumi.Input[str]] = None


@dataclass
class StorageClassCheckpoint:
    """byo: a claim on an existing StorageClass (platform.checkpoint.storageClass)."""


Checkpoint = Union[AzureBlobCheckpoint, S3Checkpoint, StorageClassCheckpoint]


def operator_transform(settings: PlatformSettings, pools: PoolPlacement):
    """A Pulumi transform for the operator's kustomize children: its Deployment goes to the
    on-demand CPU pool with the preserved priority."""
    return transform_for(operator_pod_patch(settings, pools))


def transform_for(pod_patch: dict[str, Any]):
    """The transform that merges `pod_patch` into every Deployment it sees."""

    def transform(args: pulumi.ResourceTransformArgs) -> Optional[pulumi.ResourceTransformResult]:
        if args.type_ != "kubernetes:apps/v1:Deployment":
            return None
        return pulumi.ResourceTransformResult(props=patch_workload(args.props, pod_patch), opts=args.opts)

    return transform


class TrainingPlatform(pulumi.ComponentResource):
    """Install the training platform with `provider` onto a cluster whose pools are `pools`."""

    namespace: pulumi.Output[str]
    etcd_host: pulumi.Output[str]
    checkpoint_claim: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        settings: PlatformSettings,
        *,
        provider: k8s.Provider,
        checkpoint: Checkpoint,
        pools: PoolPlacement | None = None,
        node_image_ships_device_plugin: bool = False,
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, None, opts)
        self.settings = settings
        self.pools = pools or settings.pools
        if self.pools is None:
            raise ValueError("TrainingPlatform needs the pools' labels and taints (pools=, or platform.pools on byo)")
        self.facts: PlatformFacts = settings.facts(self.pools)
        _check_checkpoint(settings.cloud, checkpoint, settings)

        custom = pulumi.ResourceOptions(parent=self, provider=provider)
        remote = pulumi.ResourceOptions(parent=self, providers=[provider])

        # 1. Priorities: preserved > inference > preemptible; only inference preempts (workers).
        self.priority_classes = [
            k8s.scheduling.v1.PriorityClass(
                f"{name}-pc-{role}",
                metadata={"name": pc.name, "labels": PART_OF},
                value=pc.value,
                preemption_policy=policy,
                global_default=False,
                description=_PC_DESCRIPTIONS[role],
                opts=custom,
            )
            for role, pc, policy in settings.priorities.items()
        ]

        # 2. The jobs' namespace and service account (federated to the checkpoint identity on AKS).
        self.namespace_resource = k8s.core.v1.Namespace(
            f"{name}-ns", metadata={"name": settings.namespace, "labels": PART_OF}, opts=custom
        )
        ns_opts = pulumi.ResourceOptions.merge(custom, pulumi.ResourceOptions(depends_on=[self.namespace_resource]))
        sa_annotations: dict[str, Any] = {}
        if isinstance(checkpoint, AzureBlobCheckpoint):
            sa_annotations[WORKLOAD_IDENTITY_CLIENT_ID] = checkpoint.client_id
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata={
                "name": settings.service_account,
                "namespace": settings.namespace,
                "labels": PART_OF,
                "annotations": sa_annotations or None,
            },
            opts=ns_opts,
        )

        # 3. Checkpoint storage that outlives nodes (and, on AKS/EKS, the cluster).
        self.checkpoint_resources = self._checkpoint(name, settings, checkpoint, custom, ns_opts)

        # 4. NVIDIA device plugin, on GPU nodes only, tolerating the spot and GPU taints.
        self.device_plugin = None
        if settings.device_plugin_enabled(node_image_ships_device_plugin):
            self.device_plugin = k8s.helm.v4.Chart(
                f"{name}-nvidia-device-plugin",
                chart=DEVICE_PLUGIN_CHART,
                version=DEVICE_PLUGIN_VERSION,
                repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=DEVICE_PLUGIN_REPO),
                namespace="kube-system",
                values=device_plugin_values(self.pools),
                opts=remote,
            )

        # 5. Kubeflow training operator v1 (elastic PyTorchJob), pinned, on the CPU pool.
        # Its Deployment comes from a remote kustomize overlay, placed by a transform that
        # runs only at deployment. So that the plan can check the placement, the component
        # also runs the very transforms it hands the Directory on the operator's Deployment
        # skeleton and registers the resulting pod spec as its `operatorPlacement` output.
        operator_opts = pulumi.ResourceOptions(
            depends_on=self.priority_classes,
            transforms=[operator_transform(settings, self.pools)],
        )
        self.operator = k8s.kustomize.v2.Directory(
            f"{name}-training-operator",
            directory=settings.operator_directory,
            opts=pulumi.ResourceOptions.merge(remote, operator_opts),
        )
        self.operator_placement = operator_placement(operator_opts.transforms or [])

        # 6. etcd 3.5 with the v2 API: the rendezvous server, on the CPU pool.
        self.etcd = k8s.helm.v4.Chart(
            f"{name}-etcd",
            chart=ETCD_CHART_PATH,
            name="etcd-rendezvous",
            namespace=settings.namespace,
            values=etcd_values(settings, self.pools),
            opts=pulumi.ResourceOptions.merge(
                remote, pulumi.ResourceOptions(depends_on=[self.namespace_resource, *self.priority_classes])
            ),
        )

        self.namespace = pulumi.Output.from_input(settings.namespace)
        self.etcd_host = pulumi.Output.from_input(self.facts.etcd_host)
        self.checkpoint_claim = pulumi.Output.from_input(settings.checkpoint.claim_name)
        self.register_outputs(
            {
                "cloud": settings.cloud,
                "kubernetesVersion": settings.kubernetes_version,
                "namespace": self.namespace,
                "serviceAccount": settings.service_account,
                "etcdHost": self.etcd_host,
                "checkpointClaim": self.checkpoint_claim,
                "priorityClasses": {role: pc.name for role, pc, _ in settings.priorities.items()},
                # The operator's pod spec after the transforms (lab/k8s/checks.py checks it).
                "operatorPlacement": self.operator_placement,
                # Everything a job needs to know (elastic-lab submit reads it back).
                "jobFacts": facts_to_dict(self.facts),
            }
        )

    # ------------------------------------------------------------------ storage
    def _checkpoint(
        self,
        name: str,
        s: PlatformSettings,
        checkpoint: Checkpoint,
        custom: pulumi.ResourceOptions,
        ns_opts: pulumi.ResourceOptions,
    ) -> list[pulumi.CustomResource]:
        claim = s.checkpoint.claim_name
        pv_name = f"{s.namespace}-{claim}"
        resources: list[pulumi.CustomResource] = []
        if isinstance(checkpoint, StorageClassCheckpoint):
            resources.append(
                k8s.core.v1.PersistentVolumeClaim(
                    f"{name}-checkpoints",
                    metadata={"name": claim, "namespace": s.namespace, "labels": PART_OF},
                    spec={
                        "accessModes": [s.checkpoint.access_mode],
                        "storageClassName": s.checkpoint.storage_class,
                        "resources": {"requests": {"storage": s.checkpoint.size}},
                    },
                    opts=ns_opts,
                )
            )
            return resources
        if isinstance(checkpoint, AzureBlobCheckpoint):
            attributes: dict[str, Any] = {
                "storageaccount": checkpoint.storage_account,
                "containerName": checkpoint.container,
                "resourcegroup": checkpoint.resource_group,
                "clientID": checkpoint.client_id,
            }
            if checkpoint.mount_with_token:
                attributes["mountWithWorkloadIdentityToken"] = "true"
            csi = {
                "driver": BLOB_CSI_DRIVER,
                # Unique per container in the cluster: {resource group}#{account}#{container}.
                "volumeHandle": pulumi.Output.concat(
                    checkpoint.resource_group, "#", checkpoint.storage_account, "#", checkpoint.container
                ),
                "volumeAttributes": attributes,
            }
            mount_options = ["-o allow_other", "--file-cache-timeout-in-seconds=120"]
            annotations = {"pv.kubernetes.io/provisioned-by": BLOB_CSI_DRIVER}
        else:
            csi = {
                "driver": S3_CSI_DRIVER,
                "volumeHandle": pulumi.Output.concat("s3-", checkpoint.bucket),
                "volumeAttributes": {"bucketName": checkpoint.bucket},
            }
            # allow-delete: old checkpoints are pruned; no overwrite, no rename (write-once).
            mount_options = ["allow-delete"]
            if checkpoint.region or s.checkpoint.region:
                mount_options.append(pulumi.Output.concat("region ", checkpoint.region or s.checkpoint.region))
            annotations = {}
        pv = k8s.core.v1.PersistentVolume(
            f"{name}-checkpoints-pv",
            metadata={"name": pv_name, "labels": PART_OF, "annotations": annotations or None},
            spec={
                "capacity": {"storage": s.checkpoint.size},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                # Static volume: no StorageClass, bound only to our claim.
                "storageClassName": "",
                "claimRef": {"namespace": s.namespace, "name": claim},
                "mountOptions": mount_options,
                "csi": csi,
            },
            opts=custom,
        )
        pvc = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-checkpoints",
            metadata={"name": claim, "namespace": s.namespace, "labels": PART_OF},
            spec={
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": pv_name,
                "resources": {"requests": {"storage": s.checkpoint.size}},
            },
            opts=pulumi.ResourceOptions.merge(ns_opts, pulumi.ResourceOptions(depends_on=[pv])),
        )
        return [pv, pvc]


_PC_DESCRIPTIONS = {
    "preserved": "Training infrastructure (etcd, operator, c10d stores): above inference, so never preempted by it; evicts nobody.",
    "inference": "Inference: preempts lower priorities (the elastic training workers) when capacity runs out.",
    "preemptible": "Elastic training workers: the first to give way, evict nobody.",
}


def operator_placement(transforms: list[Any]) -> dict[str, Any]:
    """The operator Deployment's pod spec after `transforms`, as they will run on the real
    one: the data behind the plan's check that the operator lands on the CPU pool."""
    props: dict[str, Any] = operator_skeleton()
    for transform in transforms:
        args = pulumi.ResourceTransformArgs(True, "kubernetes:apps/v1:Deployment", "training-operator", props, pulumi.ResourceOptions())
        result = transform(args)
        if result is not None:
            props = dict(result.props)
    return ((props.get("spec") or {}).get("template") or {}).get("spec") or {}


def _check_checkpoint(cloud: str, checkpoint: Checkpoint, settings: PlatformSettings) -> None:
    wanted = {"aks": AzureBlobCheckpoint, "eks": S3Checkpoint, "byo": StorageClassCheckpoint}[cloud]
    if not isinstance(checkpoint, wanted):
        raise ValueError(f"checkpoint={type(checkpoint).__name__} is invalid for cloud={cloud!r}: expected {wanted.__name__}")
    token = settings.checkpoint.workload_identity_token
    if isinstance(checkpoint, AzureBlobCheckpoint) and token is not None and token != checkpoint.mount_with_token:
        raise PlatformConfigError(
            "platform.checkpoint.workloadIdentityToken", token,
            f"{str(checkpoint.mount_with_token).lower()}, as the checkpoint binding mounts "
            f"(mount_with_token={checkpoint.mount_with_token}: the cluster's checkpointAuth)",
        )

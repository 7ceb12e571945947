"""TrainingPlatform: what elastic PyTorch jobs need on any Kubernetes cluster.

PriorityClasses, the NVIDIA device plugin, the Kubeflow training operator v1.9.4, an etcd
3.5 rendezvous server (charts/etcd-rendezvous), the jobs' namespace and service account,
and a checkpoint volume that outlives nodes, of the kind the cluster's storage is: a static
Blob CSI volume (Azure Blob, workload identity), an S3 Mountpoint volume (S3), or a claim on
a StorageClass (bring-your-own clusters). Everything it knows of the cluster comes from the
cluster component's `ClusterInfo`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.charts import project_relative
from components.cluster_info import AzureBlobCheckpoint, ClusterInfo, S3Checkpoint, StorageClassCheckpoint
from components.platform.settings import (
    DEVICE_PLUGIN_CHART,
    DEVICE_PLUGIN_REPO,
    DEVICE_PLUGIN_VERSION,
    PlatformSettings,
)
from components.platform.values import (
    device_plugin_values,
    etcd_values,
    notice_handler_values,
    operator_pod_patch,
    operator_skeleton,
    patch_workload,
)
from lab.vocab.layout import ETCD_CHART, NOTICE_CHART
from lab.vocab.names import PLATFORM_TYPE, PROJECT
from lab.vocab.platform_facts import PlatformFacts
from lab.vocab.pools import PoolPlacement
from lab.vocab.problems import InvalidInput

PART_OF = {"app.kubernetes.io/part-of": PROJECT}
BLOB_CSI_DRIVER = "blob.csi.azure.com"
S3_CSI_DRIVER = "s3.csi.aws.com"

Transform = Callable[[pulumi.ResourceTransformArgs], pulumi.ResourceTransformResult | None]


def operator_transform(settings: PlatformSettings, pools: PoolPlacement) -> Transform:
    """A Pulumi transform for the operator's kustomize children: its Deployment goes to the
    on-demand CPU pool with the preserved priority."""
    return transform_for(operator_pod_patch(settings, pools))


def transform_for(pod_patch: dict[str, Any]) -> Transform:
    """The transform that merges `pod_patch` into every Deployment it sees."""

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if args.type_ != "kubernetes:apps/v1:Deployment":
            return None
        return pulumi.ResourceTransformResult(props=patch_workload(args.props, pod_patch), opts=args.opts)

    return transform


class TrainingPlatform(pulumi.ComponentResource):
    """Install the training platform described by `settings` on the cluster `cluster` describes."""

    namespace: pulumi.Output[str]
    etcd_host: pulumi.Output[str]
    checkpoint_claim: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        settings: PlatformSettings,
        cluster: ClusterInfo,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        identity = cluster.identity
        mount = cluster.checkpoint.mount_with_token if isinstance(cluster.checkpoint, AzureBlobCheckpoint) else None
        if problems := settings.cluster_problems(identity, mount):
            raise InvalidInput(problems, "platform settings for this cluster")
        super().__init__(PLATFORM_TYPE, name, None, opts)
        self.settings = settings
        self.pools = cluster.placement
        self.facts: PlatformFacts = settings.facts(
            cluster.placement, writes=cluster.checkpoint.writes, eviction_notice_s=cluster.eviction_notice_s
        )

        custom = pulumi.ResourceOptions(parent=self, provider=cluster.provider)
        remote = pulumi.ResourceOptions(parent=self, providers=[cluster.provider])

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

        # 2. The jobs' namespace and service account (federated to the checkpoint storage's
        # identity where the cluster says so).
        self.namespace_resource = k8s.core.v1.Namespace(
            f"{name}-ns", metadata={"name": settings.namespace, "labels": PART_OF}, opts=custom
        )
        ns_opts = pulumi.ResourceOptions.merge(custom, pulumi.ResourceOptions(depends_on=[self.namespace_resource]))
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata={
                "name": settings.service_account,
                "namespace": settings.namespace,
                "labels": PART_OF,
                "annotations": dict(identity.annotations) if identity and identity.annotations else None,
            },
            opts=ns_opts,
        )

        # 3. Checkpoint storage that outlives nodes (and, in a cloud, the cluster).
        self.checkpoint_resources = self._checkpoint(name, settings, cluster.checkpoint, custom, ns_opts)

        # 4. NVIDIA device plugin, on GPU nodes only, tolerating the spot and GPU taints.
        self.device_plugin = None
        if settings.device_plugin_enabled(cluster.node_image_ships_device_plugin):
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
        in_namespace = pulumi.ResourceOptions.merge(
            remote, pulumi.ResourceOptions(depends_on=[self.namespace_resource, *self.priority_classes])
        )
        self.etcd = self._project_chart(
            f"{name}-etcd", ETCD_CHART, "etcd-rendezvous", etcd_values(settings, self.pools), in_namespace
        )

        # 7. The spot-notice handler, where nothing else turns the cloud's eviction notice into
        # pod evictions (AKS: Scheduled Events are read by nobody, its own drain is best effort).
        self.notice_handler = None
        if settings.notice_handler_enabled(cluster.notice_from_scheduled_events):
            self.notice_handler = self._project_chart(
                f"{name}-spot-notice-handler",
                NOTICE_CHART,
                "spot-notice-handler",
                notice_handler_values(settings, self.pools),
                in_namespace,
            )

        self.namespace = pulumi.Output.from_input(settings.namespace)
        self.etcd_host = pulumi.Output.from_input(self.facts.etcd_host)
        self.checkpoint_claim = pulumi.Output.from_input(settings.checkpoint.claim_name)
        self.register_outputs(
            {
                "kubernetesVersion": settings.kubernetes_version,
                "namespace": self.namespace,
                "serviceAccount": settings.service_account,
                "etcdHost": self.etcd_host,
                "checkpointClaim": self.checkpoint_claim,
                "priorityClasses": {role: pc.name for role, pc, _ in settings.priorities.items()},
                # The operator's pod spec after the transforms (the plan's checks read it).
                "operatorPlacement": self.operator_placement,
                # Everything a job needs to know (elastic-lab submit reads it back).
                "jobFacts": self.facts.as_dict(),
            }
        )

    # ------------------------------------------------------------------ storage
    def _project_chart(
        self, resource: str, chart: Path, release: str, values: dict[str, Any], opts: pulumi.ResourceOptions
    ) -> k8s.helm.v4.Chart:
        """One of the project's own charts (charts/), released into the jobs' namespace."""
        return k8s.helm.v4.Chart(
            resource,
            chart=project_relative(chart),
            name=release,
            namespace=self.settings.namespace,
            values=values,
            opts=opts,
        )

    def _checkpoint(
        self,
        name: str,
        s: PlatformSettings,
        checkpoint: AzureBlobCheckpoint | S3Checkpoint | StorageClassCheckpoint,
        custom: pulumi.ResourceOptions,
        ns_opts: pulumi.ResourceOptions,
    ) -> list[pulumi.CustomResource]:
        claim = s.checkpoint.claim_name
        pv_name = f"{s.namespace}-{claim}"
        claim_meta: k8s.meta.v1.ObjectMetaArgsDict = {"name": claim, "namespace": s.namespace, "labels": PART_OF}
        if isinstance(checkpoint, StorageClassCheckpoint):
            dynamic: k8s.core.v1.PersistentVolumeClaimSpecArgsDict = {
                "access_modes": [checkpoint.access_mode],
                "storage_class_name": checkpoint.storage_class,
                "resources": {"requests": {"storage": s.checkpoint.size}},
            }
            return [
                k8s.core.v1.PersistentVolumeClaim(
                    f"{name}-checkpoints", metadata=claim_meta, spec=dynamic, opts=ns_opts
                )
            ]
        csi: k8s.core.v1.CSIPersistentVolumeSourceArgsDict
        annotations: dict[str, str] = {}
        if isinstance(checkpoint, AzureBlobCheckpoint):
            attributes: dict[str, pulumi.Input[str]] = {
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
                "volume_handle": pulumi.Output.concat(
                    checkpoint.resource_group, "#", checkpoint.storage_account, "#", checkpoint.container
                ),
                "volume_attributes": attributes,
            }
            mount_options: list[pulumi.Input[str]] = ["-o allow_other", "--file-cache-timeout-in-seconds=120"]
            annotations = {"pv.kubernetes.io/provisioned-by": BLOB_CSI_DRIVER}
        else:
            csi = {
                "driver": S3_CSI_DRIVER,
                "volume_handle": pulumi.Output.concat("s3-", checkpoint.bucket),
                "volume_attributes": {"bucketName": checkpoint.bucket},
            }
            # allow-delete: old checkpoints are pruned; no overwrite, no rename (write-once).
            mount_options = ["allow-delete"]
            region = checkpoint.region or s.checkpoint.region
            if region:
                mount_options.append(pulumi.Output.concat("region ", region))
        pv_spec: k8s.core.v1.PersistentVolumeSpecArgsDict = {
            "capacity": {"storage": s.checkpoint.size},
            "access_modes": ["ReadWriteMany"],
            "persistent_volume_reclaim_policy": "Retain",
            # Static volume: no StorageClass, bound only to our claim.
            "storage_class_name": "",
            "claim_ref": {"namespace": s.namespace, "name": claim},
            "mount_options": mount_options,
            "csi": csi,
        }
        pv_meta: k8s.meta.v1.ObjectMetaArgsDict = {"name": pv_name, "labels": PART_OF}
        if annotations:
            pv_meta["annotations"] = annotations
        pv = k8s.core.v1.PersistentVolume(f"{name}-checkpoints-pv", metadata=pv_meta, spec=pv_spec, opts=custom)
        static: k8s.core.v1.PersistentVolumeClaimSpecArgsDict = {
            "access_modes": ["ReadWriteMany"],
            "storage_class_name": "",
            "volume_name": pv_name,
            "resources": {"requests": {"storage": s.checkpoint.size}},
        }
        pvc = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-checkpoints",
            metadata=claim_meta,
            spec=static,
            opts=pulumi.ResourceOptions.merge(ns_opts, pulumi.ResourceOptions(depends_on=[pv])),
        )
        return [pv, pvc]


_PC_DESCRIPTIONS = {
    "preserved": (
        "Training infrastructure (etcd, operator, c10d stores): above inference, so never preempted by it; "
        "evicts nobody."
    ),
    "inference": "Inference: preempts lower priorities (the elastic training workers) when capacity runs out.",
    "preemptible": "Elastic training workers: the first to give way, evict nobody.",
}


def operator_placement(transforms: list[Any]) -> dict[str, Any]:
    """The operator Deployment's pod spec after `transforms`, as they will run on the real
    one: the data behind the plan's check that the operator lands on the CPU pool."""
    props: dict[str, Any] = operator_skeleton()
    for transform in transforms:
        args = pulumi.ResourceTransformArgs(
            True, "kubernetes:apps/v1:Deployment", "training-operator", props, pulumi.ResourceOptions()
        )
        result = transform(args)
        if result is not None:
            props = dict(result.props)
    return ((props.get("spec") or {}).get("template") or {}).get("spec") or {}

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
from dataclasses import replace
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.charts import project_relative
from components.cluster_info import (
    AzureBlobCheckpoint,
    ClusterInfo,
    S3Checkpoint,
    StorageClassCheckpoint,
    TrainingIdentity,
)
from components.platform.checkpoint_volume import (
    checkpoint_volume_name,
    folder_source,
    static_claim_spec,
    static_volume_spec,
    storage_class_claim_spec,
    volume_source,
)
from components.platform.quota import GpuQuota
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
from lab.vocab.platform_facts import (
    GPU_REQUESTS,
    NOTICE_HANDLER_INSTALLED,
    NOTICE_HANDLER_NOT_INSTALLED,
    NOTICE_HANDLER_WAITS,
    TEAM_LABEL,
    PlatformFacts,
    team_folder,
)
from lab.vocab.pools import PoolPlacement
from lab.vocab.problems import InvalidInput, Problem

PART_OF = {"app.kubernetes.io/part-of": PROJECT}

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
        if problems := cluster_disagreements(settings, cluster):
            raise InvalidInput(problems, "platform settings for this cluster")
        super().__init__(PLATFORM_TYPE, name, None, opts)
        self.settings = settings
        self.pools = cluster.placement
        self.facts: PlatformFacts = settings.facts(
            cluster.placement, writes=cluster.checkpoint.writes, eviction_notice_s=cluster.eviction_notice_s
        )
        self.job_facts = job_facts(self.facts, cluster)
        # Kubernetes objects take the cluster's provider; the Helm and kustomize components
        # (remote) hand it on to the objects they render.
        custom = pulumi.ResourceOptions(parent=self, provider=cluster.provider)
        remote = pulumi.ResourceOptions(parent=self, providers=[cluster.provider])

        self.priority_classes = self._priority_classes(name, custom)
        own = settings.namespace
        self.namespace_resource = self._namespace(name, own, custom)
        in_namespace = after(custom, self.namespace_resource)
        self.service_account = self._service_account(name, own, cluster.identity, in_namespace)
        self.pod_reader = self._pod_reader(name, own, in_namespace)
        self.quotas = self._quotas(
            name, own, settings.quota, after(custom, self.namespace_resource, *self.priority_classes)
        )
        self.checkpoint_resources = self._checkpoint(name, own, cluster.checkpoint, custom, in_namespace)
        self.team_resources = self._teams(name, cluster, custom)
        self.device_plugin = self._device_plugin(name, cluster.node_image_ships_device_plugin, remote)
        self.operator, self.operator_placement = self._operator(name, remote)
        charts_in_namespace = after(remote, self.namespace_resource, *self.priority_classes)
        self.etcd = self._etcd(name, charts_in_namespace)
        self.notice_handler = self._notice_handler(name, cluster.notice_from_scheduled_events, charts_in_namespace)
        self.notice_handler_state = notice_handler_state(self.settings, cluster.notice_from_scheduled_events)

        self.namespace = pulumi.Output.from_input(settings.namespace)
        self.etcd_host = pulumi.Output.from_input(self.facts.etcd_host)
        self.checkpoint_claim = pulumi.Output.from_input(settings.checkpoint.claim_name)
        self.register_outputs(self._outputs())

    # ------------------------------------------------------------ cluster-wide
    def _priority_classes(self, name: str, opts: pulumi.ResourceOptions) -> list[k8s.scheduling.v1.PriorityClass]:
        """Priorities: preserved > inference > preemptible; only inference preempts (workers)."""
        return [
            k8s.scheduling.v1.PriorityClass(
                f"{name}-pc-{role}",
                metadata={"name": pc.name, "labels": PART_OF},
                value=pc.value,
                preemption_policy=policy,
                global_default=False,
                description=_PC_DESCRIPTIONS[role],
                opts=opts,
            )
            for role, pc, policy in self.settings.priorities.items()
        ]

    def _device_plugin(
        self, name: str, node_image_ships_plugin: bool, opts: pulumi.ResourceOptions
    ) -> k8s.helm.v4.Chart | None:
        """The NVIDIA device plugin, on GPU nodes only, tolerating the spot and GPU taints; none
        where the settings turn it off (by default: no GPUs, or a node image that ships one)."""
        if not self.settings.device_plugin_enabled(node_image_ships_plugin):
            return None
        return k8s.helm.v4.Chart(
            f"{name}-nvidia-device-plugin",
            chart=DEVICE_PLUGIN_CHART,
            version=DEVICE_PLUGIN_VERSION,
            repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=DEVICE_PLUGIN_REPO),
            namespace="kube-system",
            values=device_plugin_values(self.pools),
            opts=opts,
        )

    def _operator(self, name: str, opts: pulumi.ResourceOptions) -> tuple[k8s.kustomize.v2.Directory, dict[str, Any]]:
        """The Kubeflow training operator v1 (elastic PyTorchJob), pinned, on the CPU pool, and
        its pod spec as placed.

        Its Deployment comes from a remote kustomize overlay, placed by a transform that runs
        only at deployment. So that the plan can check the placement, the component also runs
        the very transforms it hands the Directory on the operator's Deployment skeleton; the
        resulting pod spec is the `operatorPlacement` output."""
        operator_opts = pulumi.ResourceOptions(
            depends_on=self.priority_classes,
            transforms=[operator_transform(self.settings, self.pools)],
        )
        directory = k8s.kustomize.v2.Directory(
            f"{name}-training-operator",
            directory=self.settings.operator_directory,
            opts=pulumi.ResourceOptions.merge(opts, operator_opts),
        )
        return directory, operator_placement(operator_opts.transforms or [])

    # ------------------------------------------------------------ the jobs' namespaces
    def _namespace(
        self, name: str, namespace: str, opts: pulumi.ResourceOptions, team: str = ""
    ) -> k8s.core.v1.Namespace:
        """A namespace of jobs (their service account, the checkpoint claim; the platform's also
        holds etcd), labelled with its team where it is one's."""
        labels = {**PART_OF, TEAM_LABEL: team} if team else PART_OF
        return k8s.core.v1.Namespace(f"{name}-ns", metadata={"name": namespace, "labels": labels}, opts=opts)

    def _service_account(
        self, name: str, namespace: str, identity: TrainingIdentity | None, opts: pulumi.ResourceOptions
    ) -> k8s.core.v1.ServiceAccount:
        """The jobs' service account, federated to the checkpoint storage's identity where the
        cluster says so (its annotations)."""
        return k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata={
                "name": self.settings.service_account,
                "namespace": namespace,
                "labels": PART_OF,
                "annotations": dict(identity.annotations) if identity and identity.annotations else None,
            },
            opts=opts,
        )

    def _pod_reader(
        self, name: str, namespace: str, opts: pulumi.ResourceOptions
    ) -> tuple[k8s.rbac.v1.Role, k8s.rbac.v1.RoleBinding]:
        """`get` on pods in the jobs' namespace, for their service account: a worker that gets
        SIGTERM reads its own pod's deletion time, to train on until its eviction's grace period
        ends (lab.runtime.pod_deadline)."""
        reader = f"{self.settings.service_account}-pod-reader"
        metadata: k8s.meta.v1.ObjectMetaArgsDict = {
            "name": reader,
            "namespace": namespace,
            "labels": PART_OF,
        }
        role = k8s.rbac.v1.Role(
            f"{name}-pod-reader",
            metadata=metadata,
            rules=[k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["pods"], verbs=["get"])],
            opts=opts,
        )
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-pod-reader",
            metadata=metadata,
            role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=reader),
            subjects=[
                k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=self.settings.service_account, namespace=namespace)
            ],
            opts=opts,
        )
        return role, binding

    def _quotas(
        self, name: str, namespace: str, quota: GpuQuota, opts: pulumi.ResourceOptions
    ) -> list[k8s.core.v1.ResourceQuota]:
        """A team's GPUs in its namespace, where `quota` caps them: one ResourceQuota on
        `requests.nvidia.com/gpu` per PriorityClass (the workers', the borrowed workers')."""
        return [
            k8s.core.v1.ResourceQuota(
                f"{name}-quota-{role}",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=quota_name, namespace=namespace, labels=PART_OF),
                spec=k8s.core.v1.ResourceQuotaSpecArgs(**quota_spec(gpus, priority_class)),
                opts=opts,
            )
            for role, quota_name, gpus, priority_class in self.settings.quota_items(quota)
        ]

    def _teams(self, name: str, cluster: ClusterInfo, custom: pulumi.ResourceOptions) -> list[pulumi.Resource]:
        """Each team's namespace, with the platform's service account and pod reader, its
        quotas, its checkpoint claim on its own folder of the storage, and the storage
        identity's trust of its service account (declared one after another: a cloud may refuse
        concurrent changes of one identity)."""
        out: list[pulumi.Resource] = []
        trusted: list[pulumi.Resource] = []
        for team in self.settings.teams:
            at = f"{name}-team-{team.name}"
            namespace = self._namespace(at, team.namespace, custom, team.name)
            inside = after(custom, namespace)
            out += [namespace, self._service_account(at, team.namespace, cluster.identity, inside)]
            out += self._pod_reader(at, team.namespace, inside)
            out += self._quotas(at, team.namespace, team.quota, after(inside, *self.priority_classes))
            out += self._checkpoint(at, team.namespace, cluster.checkpoint, custom, inside, team_folder(team.name))
            if cluster.identity is not None and cluster.identity.trust is not None:
                trusted = [cluster.identity.trust(team.name, team.namespace, self.settings.service_account, trusted)]
                out += trusted
        return out

    def _etcd(self, name: str, opts: pulumi.ResourceOptions) -> k8s.helm.v4.Chart:
        """etcd 3.5 with the v2 API: the rendezvous server, on the CPU pool."""
        return self._project_chart(
            f"{name}-etcd", ETCD_CHART, "etcd-rendezvous", etcd_values(self.settings, self.pools), opts
        )

    def _notice_handler(
        self, name: str, notice_from_scheduled_events: bool, opts: pulumi.ResourceOptions
    ) -> k8s.helm.v4.Chart | None:
        """The spot-notice handler, where nothing else turns the cloud's eviction notice into pod
        evictions (AKS: Scheduled Events are read by nobody, its own drain is best effort)."""
        if not self.settings.notice_handler_enabled(notice_from_scheduled_events):
            return None
        return self._project_chart(
            f"{name}-spot-notice-handler",
            NOTICE_CHART,
            "spot-notice-handler",
            notice_handler_values(self.settings, self.pools),
            opts,
        )

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

    # ------------------------------------------------------------ storage
    def _checkpoint(
        self,
        name: str,
        namespace: str,
        checkpoint: AzureBlobCheckpoint | S3Checkpoint | StorageClassCheckpoint,
        custom: pulumi.ResourceOptions,
        in_namespace: pulumi.ResourceOptions,
        folder: str = "",
    ) -> list[pulumi.CustomResource]:
        """Checkpoint storage that outlives nodes (and, in a cloud, the cluster): a claim on the
        cluster's StorageClass, or a static volume on the cloud's object storage (only `folder`
        of it, where given: a team's) and the jobs' claim in `namespace` bound to it."""
        size = self.settings.checkpoint.size
        if isinstance(checkpoint, StorageClassCheckpoint):
            return [self._checkpoint_claim(name, namespace, storage_class_claim_spec(checkpoint, size), in_namespace)]
        volume = self._checkpoint_volume(name, namespace, checkpoint, custom, folder)
        volume_name = checkpoint_volume_name(self.settings, namespace)
        claim = self._checkpoint_claim(
            name, namespace, static_claim_spec(volume_name, size), after(in_namespace, volume)
        )
        return [volume, claim]

    def _checkpoint_volume(
        self,
        name: str,
        namespace: str,
        checkpoint: AzureBlobCheckpoint | S3Checkpoint,
        opts: pulumi.ResourceOptions,
        folder: str,
    ) -> k8s.core.v1.PersistentVolume:
        """The static volume on the cloud's object storage, cluster-wide."""
        source = volume_source(checkpoint, self.settings.checkpoint.region)
        if folder:
            source = folder_source(checkpoint, source, folder)
        metadata: k8s.meta.v1.ObjectMetaArgsDict = {
            "name": checkpoint_volume_name(self.settings, namespace),
            "labels": PART_OF,
        }
        if source.annotations:
            metadata["annotations"] = source.annotations
        spec = static_volume_spec(self.settings, source, namespace)
        return k8s.core.v1.PersistentVolume(f"{name}-checkpoints-pv", metadata=metadata, spec=spec, opts=opts)

    def _checkpoint_claim(
        self,
        name: str,
        namespace: str,
        spec: k8s.core.v1.PersistentVolumeClaimSpecArgsDict,
        opts: pulumi.ResourceOptions,
    ) -> k8s.core.v1.PersistentVolumeClaim:
        """The jobs' checkpoint claim, in their namespace."""
        metadata: k8s.meta.v1.ObjectMetaArgsDict = {
            "name": self.settings.checkpoint.claim_name,
            "namespace": namespace,
            "labels": PART_OF,
        }
        return k8s.core.v1.PersistentVolumeClaim(f"{name}-checkpoints", metadata=metadata, spec=spec, opts=opts)

    # ------------------------------------------------------------ outputs
    def _outputs(self) -> dict[str, Any]:
        settings = self.settings
        return {
            "kubernetesVersion": settings.kubernetes_version,
            "namespace": self.namespace,
            "serviceAccount": settings.service_account,
            "etcdHost": self.etcd_host,
            "checkpointClaim": self.checkpoint_claim,
            "priorityClasses": {role: pc.name for role, pc, _ in settings.priorities.items()},
            # The operator's pod spec after the transforms (the plan's checks read it).
            "operatorPlacement": self.operator_placement,
            # Everything a job needs to know (elastic-lab submit reads it back).
            "jobFacts": self.job_facts,
            "noticeHandler": self.notice_handler_state,
        }


def quota_spec(gpus: int, priority_class: str) -> dict[str, Any]:
    """A ResourceQuota's spec, as the Pulumi args take it: `gpus` GPUs requested in all by the
    pods of `priority_class` (a pod's GPU limit is its request: extended resources are not
    overcommitted)."""
    return {
        "hard": {GPU_REQUESTS: str(gpus)},
        "scope_selector": k8s.core.v1.ScopeSelectorArgs(
            match_expressions=[
                k8s.core.v1.ScopedResourceSelectorRequirementArgs(
                    scope_name="PriorityClass", operator="In", values=[priority_class]
                )
            ]
        ),
    }


def notice_handler_state(settings: PlatformSettings, notice_from_scheduled_events: bool) -> str:
    if settings.notice_handler_enabled(notice_from_scheduled_events):
        return NOTICE_HANDLER_INSTALLED
    if settings.notice_handler_waits(notice_from_scheduled_events):
        return NOTICE_HANDLER_WAITS
    return NOTICE_HANDLER_NOT_INSTALLED


def job_facts(facts: PlatformFacts, cluster: ClusterInfo) -> pulumi.Output[dict[str, Any]]:
    """`facts` as the `jobFacts` output, with what only the deployed storage knows: its URL
    for the pods' own clients (a bucket's generated name), the variables those clients need,
    and the labels that give the pods the storage's identity."""
    url = cluster.checkpoint.client_url()
    labels = dict(cluster.identity.pod_labels) if cluster.identity else {}
    return pulumi.Output.all(
        url=url if url is not None else "", env=pulumi.Output.from_input(cluster.checkpoint.client_env())
    ).apply(lambda got: replace(facts, checkpoint_url=got["url"], pod_labels=labels, pod_env=got["env"]).as_dict())


def cluster_disagreements(settings: PlatformSettings, cluster: ClusterInfo) -> list[Problem]:
    """Where `settings` disagree with the cluster: the service account its checkpoint storage
    trusts, and whether it mounts checkpoints with the workload identity token."""
    checkpoint = cluster.checkpoint
    mount_with_token = checkpoint.mount_with_token if isinstance(checkpoint, AzureBlobCheckpoint) else None
    return settings.cluster_problems(cluster.identity, mount_with_token)


def after(opts: pulumi.ResourceOptions, *resources: pulumi.Resource) -> pulumi.ResourceOptions:
    """`opts`, depending on `resources` as well."""
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(resources)))


_PC_DESCRIPTIONS = {
    "preserved": (
        "Training infrastructure (etcd, operator, c10d stores): above inference, so never preempted by it; "
        "evicts nobody."
    ),
    "inference": "Inference: preempts lower priorities (the elastic training workers) when capacity runs out.",
    "preemptible": "Elastic training workers: give way to inference, evict nobody.",
    "borrowed": (
        "The burst workers of an elastic job, on capacity other teams own: below the workers, so any work "
        "that preempts takes them first; evict nobody."
    ),
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

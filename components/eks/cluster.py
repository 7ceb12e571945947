"""`EksCluster`: the AWS lab's cluster as one Pulumi component.

Children (all parented to the component): a VPC over two or more zones (or an existing one);
the cluster and node IAM roles; the EKS cluster (API access entries, the creator and the
listed principals as admins); the `eks-pod-identity-agent`, `aws-mountpoint-s3-csi-driver` and
`metrics-server` add-ons; the CPU node group (on-demand) and the GPU node group (spot, tainted, scales to
zero) with Cluster Autoscaler's node-template tags; the checkpoint bucket and the driver's Pod
Identity role; the FIS spot-interruption template of the eviction drill; a Kubernetes
provider for the cluster and Cluster Autoscaler.

Outputs (`register_outputs` and attributes): kubeconfig (secret), clusterName, region, vpcId,
nodeGroupNames, poolLabels, gpuTaints, checkpointBucket, fisTemplateId, fisRoleArn,
autoscaler; `.info` is the cloud-neutral `ClusterInfo` the platform component takes.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.capacity import eks_auto_scaling_group, pool_resource_name, priority_expander
from components.cluster_info import ClusterInfo, S3Checkpoint, TrainingIdentity, kubernetes_provider
from components.eks import autoscaler as autoscaler_mod
from components.eks import fis as fis_mod
from components.eks import iam, network, node_groups, storage
from components.eks.args import EksClusterArgs
from lab.vocab import pools as labels
from lab.vocab.aws_tags import CLUSTER_TAG
from lab.vocab.names import EKS_CLUSTER_TYPE
from lab.vocab.problems import InvalidInput, Problem
from lab.vocab.versions import (
    METRICS_SERVER_ADDON,
    METRICS_SERVER_MIN,
    MOUNTPOINT_S3_CSI_ADDON,
    MOUNTPOINT_S3_CSI_MIN,
    add_on_release,
)

VPC_CNI_ADDON = "vpc-cni"
# The VPC CNI's own setting for its network policy agent (add-on configuration schema).
VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}

# AWS gives 2 minutes' notice of a spot interruption.
EVICTION_NOTICE_S = 120
CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"


def kubeconfig(cluster: str, region: str, endpoint: str, ca_data: str) -> str:
    """A kubeconfig that gets its token from `aws eks get-token` (no credentials inside)."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": cluster, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
            "users": [
                {
                    "name": cluster,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "aws",
                            "args": ["eks", "get-token", "--cluster-name", cluster, "--region", region],
                            "interactiveMode": "Never",
                        }
                    },
                }
            ],
            "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": cluster}}],
            "current-context": cluster,
        },
        indent=2,
    )


def _exec_kubeconfig(cluster: aws.eks.Cluster, region: str) -> pulumi.Output[str]:
    """The `kubeconfig` of a declared cluster, as a secret (it names the endpoint)."""
    return pulumi.Output.secret(
        pulumi.Output.all(cluster.name, cluster.endpoint, cluster.certificate_authority.data).apply(
            lambda v: kubeconfig(v[0], region, v[1], v[2])
        )
    )


class EksCluster(pulumi.ComponentResource):
    """EKS with an on-demand CPU node group and an autoscaled GPU spot node group, S3
    checkpoints through Mountpoint, and an FIS template for the eviction drill.

    The constructor declares the children in order, one step each; the steps read the args
    and the group specs from `self` and take the resources they build on as arguments."""

    kubeconfig: pulumi.Output[str]
    info: ClusterInfo

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None):
        args.validate()  # nothing is declared from invalid args
        # The stack's region, not the machine's AWS_REGION: every child (and invoke) uses it.
        self.aws_provider = aws.Provider(f"{name}-aws", region=args.region)
        scoped = pulumi.ResourceOptions(providers={"aws": self.aws_provider})
        super().__init__(EKS_CLUSTER_TYPE, name, None, pulumi.ResourceOptions.merge(opts, scoped))
        self.args = args
        self.group_specs = node_groups.group_specs(args)
        self.gpu_rank_specs = node_groups.gpu_rank_specs(args)
        tags = {CLUSTER_TAG: args.cluster_name, **args.tags}

        self.network = network.vpc(f"{name}-net", args, tags=tags, parent=self)
        cluster_role_parts, node_role_parts = self._roles(name, tags)
        self.cluster = self._eks_cluster(name, self.network, self.cluster_role, cluster_role_parts, tags)
        self._admin_access_entries(name, self.cluster, tags)
        self.vpc_cni = self._vpc_cni(name, self.cluster, tags)
        self.cpu_group, self.gpu_groups, self.template_tags = self._node_groups(
            name, self.cluster, self.network, self.node_role, node_role_parts, tags
        )
        self.gpu_group = self.gpu_groups[0]
        self._checkpoint_storage(name, tags)
        self.metrics_server = self._metrics_server(name, self.cluster, after=self.cpu_group, tags=tags)
        self.training_role, self.training_identity = storage.training_role(
            f"{name}-training-role",
            self.bucket,
            cluster=self.cluster,
            namespace=args.training_namespace,
            service_account=args.training_service_account,
            tags=tags,
            parent=self,
            depends_on=[self.pod_identity_agent],
        )
        self.fis_template, self.fis_role = fis_mod.spot_interruption_template(
            f"{name}-spot-interruption", args, tags=tags, parent=self
        )
        self.registry = self._trainer_registry(name, tags)
        self.kubeconfig = _exec_kubeconfig(self.cluster, args.region)
        self.k8s_provider = kubernetes_provider(
            name,
            self.kubeconfig,
            parent=self,
            after=[self.cpu_group, *self.gpu_groups, self.s3_csi_driver, self.vpc_cni],
        )
        self._autoscaling(name, tags)
        self.info = self._cluster_info(name, tags)
        self.register_outputs(self.outputs())

    # ------------------------------------------------------------------ steps
    def _roles(self, name: str, tags: dict[str, str]) -> tuple[list[pulumi.Resource], list[pulumi.Resource]]:
        """The control plane's role and the nodes' role, with the parts (policy attachments)
        that must exist before what assumes them."""
        self.cluster_role, cluster_role_parts = iam.role(
            f"{name}-cluster-role",
            service="eks.amazonaws.com",
            managed=iam.EKS_CLUSTER_POLICIES,
            tags=tags,
            parent=self,
        )
        self.node_role, node_role_parts = iam.role(
            f"{name}-node-role", service="ec2.amazonaws.com", managed=iam.EKS_NODE_POLICIES, tags=tags, parent=self
        )
        return cluster_role_parts, node_role_parts

    def _checkpoint_storage(self, name: str, tags: dict[str, str]) -> None:
        """The checkpoint bucket, the S3 CSI driver's role, and the add-ons that mount it."""
        self.bucket, self.bucket_settings = storage.checkpoint_bucket(
            f"{name}-checkpoints", self.args, tags=tags, parent=self
        )
        self.driver_role, driver_role_parts = storage.driver_role(
            f"{name}-s3-csi-role", self.bucket, tags=tags, parent=self
        )
        self.pod_identity_agent, self.s3_csi_driver = self._storage_addons(
            name, self.cluster, self.driver_role, driver_role_parts, after=self.cpu_group, tags=tags
        )

    def _trainer_registry(self, name: str, tags: dict[str, str]) -> aws.ecr.Repository:
        """The training image's repository: `elastic-lab image` pushes there; the nodes' role
        pulls with AmazonEC2ContainerRegistryReadOnly. Tags are immutable: a job names an image
        that cannot change under it. ECR refuses to delete a repository that holds images
        (RepositoryNotEmptyException) unless forced: without force_delete, `pulumi destroy` stops
        at the first pushed image and deletes nothing after it (the control plane, the NAT)."""
        return aws.ecr.Repository(
            f"{name}-trainer-images",
            name=f"{self.args.cluster_name}/trainer",
            force_delete=True,
            image_tag_mutability="IMMUTABLE",
            image_scanning_configuration=aws.ecr.RepositoryImageScanningConfigurationArgs(scan_on_push=True),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _autoscaling(self, name: str, tags: dict[str, str]) -> None:
        """Cluster Autoscaler and its GPU rank priorities, where the stack turns it on."""
        self.autoscaler = None
        self.capacity_priorities = None
        if not self.args.cluster_autoscaler:
            return
        self.capacity_priorities = priority_expander(
            f"{name}-gpu-priorities",
            [spec.gpu_rank() for spec in self.gpu_rank_specs],
            pattern=eks_auto_scaling_group,
            provider=self.k8s_provider,
            parent=self,
        )
        self.autoscaler = self._cluster_autoscaler(
            name,
            self.cluster,
            self.k8s_provider,
            after=[self.pod_identity_agent, *self.template_tags, self.capacity_priorities],
            tags=tags,
        )

    def _eks_cluster(
        self,
        name: str,
        vpc: network.Network,
        role: aws.iam.Role,
        role_parts: list[pulumi.Resource],
        tags: dict[str, str],
    ) -> aws.eks.Cluster:
        """The control plane in the VPC's subnets, administered through access entries."""
        return aws.eks.Cluster(
            name,
            name=self.args.cluster_name,
            role_arn=role.arn,
            version=self.args.kubernetes_version,
            vpc_config={
                "subnet_ids": [*vpc.private_subnet_ids, *vpc.public_subnet_ids],
                "endpoint_private_access": True,
                "endpoint_public_access": True,
                "public_access_cidrs": list(self.args.endpoint_public_access_cidrs),
            },
            # Access entries only (no aws-auth ConfigMap); whoever runs `pulumi up` is admin.
            access_config={"authentication_mode": "API", "bootstrap_cluster_creator_admin_permissions": True},
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=role_parts),
        )

    def _admin_access_entries(self, name: str, cluster: aws.eks.Cluster, tags: dict[str, str]) -> None:
        """Cluster-admin for each listed principal: an access entry, then its policy."""
        for i, arn in enumerate(self.args.admin_principal_arns):
            entry = aws.eks.AccessEntry(
                f"{name}-admin-{i}",
                cluster_name=cluster.name,
                principal_arn=arn,
                type="STANDARD",
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self),
            )
            aws.eks.AccessPolicyAssociation(
                f"{name}-admin-{i}",
                cluster_name=cluster.name,
                principal_arn=arn,
                policy_arn=CLUSTER_ADMIN_POLICY,
                access_scope={"type": "cluster"},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[entry]),
            )

    def _node_groups(
        self,
        name: str,
        cluster: aws.eks.Cluster,
        vpc: network.Network,
        node_role: aws.iam.Role,
        node_role_parts: list[pulumi.Resource],
        tags: dict[str, str],
    ) -> tuple[aws.eks.NodeGroup, list[aws.eks.NodeGroup], list[aws.autoscaling.Tag]]:
        """The CPU group, then each GPU capacity rank's group after the one before: one node
        group operation at a time keeps updates orderly, and the platform's control plane (etcd,
        the operator) has somewhere to run first. Then each GPU group's node-template tags,
        which let Cluster Autoscaler scale it up from zero."""

        def group(resource: str, spec: node_groups.GroupSpec, after: list[pulumi.Resource]) -> aws.eks.NodeGroup:
            return node_groups.node_group(
                resource,
                spec,
                self.args,
                cluster=cluster,
                node_role=node_role,
                subnet_ids=vpc.private_subnet_ids,
                tags=tags,
                parent=self,
                depends_on=[*node_role_parts, *after],
            )

        cpu = group(f"{name}-{labels.POOL_CPU}", self.group_specs[labels.POOL_CPU], [])
        gpus: list[aws.eks.NodeGroup] = []
        template_tags: list[aws.autoscaling.Tag] = []
        for spec in self.gpu_rank_specs:
            resource = pool_resource_name(name, spec.role, spec.rank)
            gpus.append(group(resource, spec, [gpus[-1] if gpus else cpu]))
            template_tags += node_groups.autoscaler_template_tags(f"{resource}-template", gpus[-1], spec, parent=self)
        return cpu, gpus, template_tags

    def _vpc_cni(self, name: str, cluster: aws.eks.Cluster, tags: dict[str, str]) -> aws.eks.Addon:
        """The VPC CNI as a managed add-on with its network policy agent on: EKS enforces no
        NetworkPolicy otherwise, and etcd's (only job pods may reach it) would be decoration.
        The cluster's self-managed CNI is taken over (OVERWRITE: its settings become these)."""
        return aws.eks.Addon(
            f"{name}-vpc-cni",
            cluster_name=cluster.name,
            addon_name=VPC_CNI_ADDON,
            configuration_values=json.dumps(VPC_CNI_CONFIGURATION),
            resolve_conflicts_on_create="OVERWRITE",
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _storage_addons(
        self,
        name: str,
        cluster: aws.eks.Cluster,
        driver_role: aws.iam.Role,
        driver_role_parts: list[pulumi.Resource],
        *,
        after: pulumi.Resource,
        tags: dict[str, str],
    ) -> tuple[aws.eks.Addon, aws.eks.Addon]:
        """Pod Identity, then the Mountpoint driver with its bucket-limited role; both after
        `after` (the CPU group): an add-on's pods need a node to run on."""
        pod_identity_agent = aws.eks.Addon(
            f"{name}-pod-identity-agent",
            cluster_name=cluster.name,
            addon_name="eks-pod-identity-agent",
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[after]),
        )
        s3_csi_driver = aws.eks.Addon(
            f"{name}-s3-csi-driver",
            cluster_name=cluster.name,
            addon_name=MOUNTPOINT_S3_CSI_ADDON,
            # A pinned release (an add-on left to EKS's default may predate 2.5.0, whose pods
            # block scale-down); a newer one is taken only by a later `up`.
            addon_version=self._newest_release(MOUNTPOINT_S3_CSI_ADDON).apply(mountpoint_release),
            pod_identity_associations=[
                {"role_arn": driver_role.arn, "service_account": storage.S3_CSI_SERVICE_ACCOUNT}
            ],
            # Its node plugin must run on the tainted GPU spot nodes, where the jobs mount.
            configuration_values=json.dumps({"node": {"tolerateAllTaints": True}}),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[after, pod_identity_agent, *driver_role_parts]),
        )
        return pod_identity_agent, s3_csi_driver

    def _newest_release(self, addon: str) -> pulumi.Output[str]:
        """The newest release of an EKS add-on for the stack's Kubernetes version."""
        return aws.eks.get_addon_version_output(
            addon_name=addon,
            kubernetes_version=self.args.kubernetes_version,
            most_recent=True,
            opts=pulumi.InvokeOutputOptions(parent=self),
        ).version

    def _metrics_server(
        self, name: str, cluster: aws.eks.Cluster, *, after: pulumi.Resource, tags: dict[str, str]
    ) -> aws.eks.Addon:
        """metrics-server, EKS's community add-on: the resource metrics API (metrics.k8s.io)
        without which the HPA of `submit --autoscale-cpu` never reads a metric (EKS installs
        none by default). A pinned release, after `after` (the CPU group): its Deployment runs
        there, as it tolerates neither taint of the GPU groups, the only other nodes."""
        return aws.eks.Addon(
            f"{name}-metrics-server",
            cluster_name=cluster.name,
            addon_name=METRICS_SERVER_ADDON,
            addon_version=self._newest_release(METRICS_SERVER_ADDON).apply(metrics_server_release),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[after]),
        )

    def _cluster_autoscaler(
        self,
        name: str,
        cluster: aws.eks.Cluster,
        provider: k8s.Provider,
        *,
        after: list[pulumi.Resource],
        tags: dict[str, str],
    ) -> tuple[aws.iam.Role, aws.eks.PodIdentityAssociation, k8s.helm.v4.Chart]:
        return autoscaler_mod.cluster_autoscaler(
            f"{name}-cluster-autoscaler",
            self.args,
            cluster=cluster,
            cpu_labels=self.group_specs[labels.POOL_CPU].node_labels,
            startup_taints=node_groups.startup_taint_keys([self.group_specs[labels.POOL_CPU], *self.gpu_rank_specs]),
            provider=provider,
            tags=tags,
            parent=self,
            depends_on=after,
        )

    def _cluster_info(self, name: str, tags: dict[str, str]) -> ClusterInfo:
        """What the platform takes: the cloud-neutral view of this cluster."""
        return ClusterInfo(
            provider=self.k8s_provider,
            kubeconfig=self.kubeconfig,
            placement=node_groups.placement(self.group_specs, self.gpu_rank_specs),
            checkpoint=S3Checkpoint(bucket=self.bucket.bucket, region=self.args.region),
            eviction_notice_s=EVICTION_NOTICE_S,
            # The service account the training role is associated with (no annotation: Pod
            # Identity maps it on the EKS side).
            identity=TrainingIdentity(
                namespace=self.args.training_namespace,
                service_account=self.args.training_service_account,
                trust=storage.team_association(
                    f"{name}-training-role", self.training_role, cluster=self.cluster, tags=tags, parent=self
                ),
            ),
            # Bottlerocket's NVIDIA variants run their own device plugin.
            node_image_ships_device_plugin=self.args.gpu_ami_type.startswith("BOTTLEROCKET"),
            # Managed node groups drain spot nodes on the notice themselves.
            notice_from_scheduled_events=False,
        )

    def outputs(self) -> dict[str, pulumi.Input[Any]]:
        """Everything worth exporting; kubeconfig as a secret (it names the cluster's endpoint)."""
        return {
            "kubeconfig": self.kubeconfig,
            "clusterName": self.cluster.name,
            "region": self.args.region,
            "vpcId": self.network.vpc_id,
            "nodeGroupNames": {role: spec.name for role, spec in self.group_specs.items()},
            "poolLabels": {role: dict(spec.node_labels) for role, spec in self.group_specs.items()},
            "gpuTaints": [t.text() for t in node_groups.placement(self.group_specs, self.gpu_rank_specs).gpu_taints],
            "gpuRanks": [
                {
                    "rank": s.rank,
                    "group": s.name,
                    "instanceTypes": list(s.instance_types),
                    "capacity": s.gpu_rank().capacity,
                }
                for s in self.gpu_rank_specs
            ],
            "checkpointBucket": self.bucket.bucket,
            "fisTemplateId": self.fis_template.id,
            "fisRoleArn": self.fis_role.arn,
            "imageRegistry": self.registry.repository_url,
            "autoscaler": "cluster-autoscaler" if self.autoscaler else "none",
            "trainingServiceAccount": f"{self.args.training_namespace}/{self.args.training_service_account}",
        }


def mountpoint_release(version: str) -> str:
    """`version` (`v2.7.0-eksbuild.1`) when it is at least MOUNTPOINT_S3_CSI_MIN."""
    return _release_at_least(
        MOUNTPOINT_S3_CSI_ADDON, version, MOUNTPOINT_S3_CSI_MIN, "older releases keep GPU nodes from scaling down"
    )


def metrics_server_release(version: str) -> str:
    """`version` (`v0.8.0-eksbuild.2`) when it is at least METRICS_SERVER_MIN."""
    return _release_at_least(
        METRICS_SERVER_ADDON, version, METRICS_SERVER_MIN, "older lines are upstream's for Kubernetes before 1.31"
    )


def _release_at_least(addon: str, version: str, minimum: tuple[int, int, int], why: str) -> str:
    """`version` of add-on `addon` when it is at least `minimum`; InvalidInput saying `why` not."""
    release = add_on_release(version)
    if release is None or release < minimum:
        raise InvalidInput(
            [
                Problem(
                    f"the {addon} add-on's newest release for this Kubernetes version",
                    version,
                    f"v{'.'.join(map(str, minimum))} or newer ({why}): choose a newer kubernetesVersion",
                )
            ]
        )
    return version

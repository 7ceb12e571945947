"""`AksCluster`: the Azure lab's cluster as one Pulumi component.

Children (all parented to the component):
  resource group; control-plane identity; ManagedCluster (system pool, Azure CNI Overlay
  with the Cilium dataplane and network policy, Blob CSI driver, OIDC issuer, workload
  identity); CPU pool (on-demand); GPU spot pool; training workload identity + federated
  credential; checkpoint storage account + container + role assignments; a Kubernetes
  provider for the new cluster.

Known limitation, the inline system pool: AKS needs one system pool at creation, so it is
declared inside the ManagedCluster (`agentPoolProfiles`), not as an AgentPool. Editing it
there (VM size, count, labels, taints, max surge) makes azure-native PUT the whole
ManagedCluster, and AKS then puts every node pool, our separate CPU and GPU pools
included, into the `Scaling` provisioning state while it reconciles
(pulumi/pulumi-azure-native#4264, closed as won't fix: it is how the ARM PUT works).
Change the system pool in a quiet window, not while a training job runs, and expect the
other pools to be busy until it is done. Our two user pools are separate AgentPool
resources, so editing one of them touches only that pool. (A second inline pool cannot be
added to an existing cluster at all: new pools go in as AgentPool resources.)

Outputs (`register_outputs` and attributes): kubeconfig (secret), cluster_name,
resource_group_name, node_resource_group, oidc_issuer_url, pool_names, storage_account_name,
storage_container_name, workload_identity_client_id; `.info` is the cloud-neutral
`ClusterInfo` the platform component takes.
"""

from __future__ import annotations

import base64
from typing import Any

import pulumi
from pulumi_azure_native import authorization, containerservice, managedidentity, resources

from components.aks import identity as identity_mod
from components.aks import maintenance as maintenance_mod
from components.aks import node_pools
from components.aks import registry as registry_mod
from components.aks import storage as storage_mod
from components.aks.args import AksClusterArgs
from components.capacity import aks_scale_set, pool_resource_name, priority_expander
from components.cluster_info import AzureBlobCheckpoint, ClusterInfo, TrainingIdentity, kubernetes_provider
from lab.vocab import pools as labels
from lab.vocab.azure_tags import CLUSTER_TAG
from lab.vocab.capacity import PROVISION_TIMEOUT_MIN
from lab.vocab.names import AKS_CLUSTER_TYPE

# Azure gives 30 s notice of a spot eviction (Scheduled Events, `Preempt`).
EVICTION_NOTICE_S = 30
# The annotation that federates a service account to a user-assigned identity.
WORKLOAD_IDENTITY_CLIENT_ID = "azure.workload.identity/client-id"
# The pod label the workload identity webhook acts on.
WORKLOAD_IDENTITY_USE = "azure.workload.identity/use"


def _decode_kubeconfig(result: containerservice.ListManagedClusterUserCredentialsResult) -> str:
    if not result.kubeconfigs:
        raise ValueError("listManagedClusterUserCredentials returned no kubeconfig")
    return base64.b64decode(result.kubeconfigs[0].value).decode()


def _network_profile() -> containerservice.ContainerServiceNetworkProfileArgs:
    """Azure CNI Overlay powered by Cilium: the Cilium (eBPF) dataplane enforces Kubernetes
    NetworkPolicies (the platform's etcd policy among them). Without a policy engine AKS
    accepts NetworkPolicy objects and enforces none of them. networkPolicy cilium requires
    networkDataplane cilium. Both are fixed at creation: changing them later re-creates or
    migrates the cluster."""
    return containerservice.ContainerServiceNetworkProfileArgs(
        network_plugin=containerservice.NetworkPlugin.AZURE,
        network_plugin_mode=containerservice.NetworkPluginMode.OVERLAY,
        network_dataplane=containerservice.NetworkDataplane.CILIUM,
        network_policy=containerservice.NetworkPolicy.CILIUM,
    )


class AksCluster(pulumi.ComponentResource):
    """AKS with an on-demand system pool, an on-demand CPU pool and an autoscaled GPU spot
    pool, plus checkpoint storage reachable through workload identity.

    The constructor declares the children in order, one step each; the steps read the args
    and the pool specs from `self` and take the resources they build on as arguments."""

    kubeconfig: pulumi.Output[str]
    info: ClusterInfo

    def __init__(self, name: str, args: AksClusterArgs, opts: pulumi.ResourceOptions | None = None):
        args.validate()  # nothing is declared from invalid args
        super().__init__(AKS_CLUSTER_TYPE, name, None, opts)
        self.args = args
        self.pool_specs = node_pools.pool_specs(args)
        self.gpu_rank_specs = node_pools.gpu_rank_specs(args)
        tags = {CLUSTER_TAG: args.cluster_name, **args.tags}
        # The subscription the checkpoint storage's role assignments are scoped to.
        client = authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=self))

        self.resource_group = self._resource_group(name, tags)
        rg_name = self.resource_group.name
        self.control_plane_identity = identity_mod.user_assigned_identity(
            name, "control-plane", args, resource_group=rg_name, tags=tags, parent=self
        )
        self.cluster = self._managed_cluster(name, rg_name, self.control_plane_identity, tags)
        self.cpu_pool, self.gpu_pools = self._user_pools(name, rg_name, self.cluster)
        self.gpu_pool = self.gpu_pools[0]
        self.maintenance = maintenance_mod.maintenance_windows(
            f"{name}-maintenance", args, resource_group=rg_name, cluster=self.cluster, parent=self
        )
        self.oidc_issuer_url = self.cluster.oidc_issuer_profile.apply(lambda p: p.issuer_url if p else None)
        # The identity the training pods act as, federated to their service account.
        self.training_identity, self.training_federation = identity_mod.workload_identity(
            name, args, resource_group=rg_name, issuer_url=self.oidc_issuer_url, tags=tags, parent=self
        )
        self.storage_account, self.storage_container, self.role_assignments = storage_mod.checkpoint_storage(
            f"{name}-checkpoints",
            args,
            resource_group=rg_name,
            subscription_id=client.subscription_id,
            principal_id=self.training_identity.principal_id,
            parent=self,
        )
        self.registry, self.registry_pull = registry_mod.image_registry(
            f"{name}-registry",
            args,
            resource_group=rg_name,
            cluster=self.cluster,
            subscription_id=client.subscription_id,
            tags=tags,
            parent=self,
        )
        self.kubeconfig = self._user_kubeconfig(rg_name, self.cluster)
        # Pools first: the platform's pods need somewhere to run.
        self.k8s_provider = kubernetes_provider(
            name, self.kubeconfig, parent=self, after=[self.cpu_pool, *self.gpu_pools]
        )
        self.capacity_priorities = priority_expander(
            f"{name}-gpu-priorities",
            [node_pools.rank_of(spec) for spec in self.gpu_rank_specs],
            pattern=aks_scale_set,
            provider=self.k8s_provider,
            parent=self,
        )

        self.node_resource_group = self.cluster.node_resource_group.apply(lambda v: v or args.node_resource_group_name)
        self.pool_names = {role: spec.name for role, spec in self.pool_specs.items()}
        self.info = self._cluster_info(name, rg_name)
        self.register_outputs(self.outputs())

    # ------------------------------------------------------------------ steps
    def _resource_group(self, name: str, tags: dict[str, str]) -> resources.ResourceGroup:
        """The checkpoints' resource group: kept on destroy with them unless the stack lets them go."""
        return resources.ResourceGroup(
            f"{name}-rg",
            resource_group_name=self.args.resource_group_name,
            location=self.args.location,
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self,
                retain_on_delete=self.args.keeps_checkpoints,
                import_=self.args.adopt_checkpoints.get("resourceGroup"),  # kept by a destroy: taken back
            ),
        )

    def _managed_cluster(
        self,
        name: str,
        resource_group: pulumi.Input[str],
        identity: managedidentity.UserAssignedIdentity,
        tags: dict[str, str],
    ) -> containerservice.ManagedCluster:
        """The cluster with its inline system pool (see the module's note on editing it)."""
        args = self.args
        return containerservice.ManagedCluster(
            name,
            resource_group_name=resource_group,
            resource_name_=args.cluster_name,
            location=args.location,
            dns_prefix=args.cluster_name,
            kubernetes_version=args.kubernetes_version,
            sku=containerservice.ManagedClusterSKUArgs(
                name=containerservice.ManagedClusterSKUName.BASE, tier=args.sku_tier
            ),
            identity=containerservice.ManagedClusterIdentityArgs(
                type=containerservice.ResourceIdentityType.USER_ASSIGNED,
                user_assigned_identities=[identity.id],
            ),
            node_resource_group=args.node_resource_group_name,
            enable_rbac=True,
            agent_pool_profiles=[node_pools.system_pool_profile(args, self.pool_specs[labels.POOL_SYSTEM])],
            network_profile=_network_profile(),
            oidc_issuer_profile=containerservice.ManagedClusterOIDCIssuerProfileArgs(enabled=True),
            security_profile=containerservice.ManagedClusterSecurityProfileArgs(
                workload_identity=containerservice.ManagedClusterSecurityProfileWorkloadIdentityArgs(enabled=True),
            ),
            storage_profile=containerservice.ManagedClusterStorageProfileArgs(
                # The AKS-managed Blob CSI driver; do not also install the upstream chart.
                blob_csi_driver=containerservice.ManagedClusterStorageProfileBlobCSIDriverArgs(enabled=True),
            ),
            # Upgrades drain the CPU pool (etcd, the operator): they wait for the maintenance
            # window the constructor declares after the pools.
            auto_upgrade_profile=containerservice.ManagedClusterAutoUpgradeProfileArgs(
                upgrade_channel=args.upgrade_channel,
                node_os_upgrade_channel=args.node_os_upgrade_channel,
            ),
            # GPU capacity ranks: the priority expander scales up the highest-ranked pool that
            # can take the pending workers (its ConfigMap is declared with the Kubernetes
            # provider); a rank whose node never registers is given up on sooner than 15 min.
            auto_scaler_profile=containerservice.ManagedClusterPropertiesAutoScalerProfileArgs(
                expander=containerservice.Expander.PRIORITY,
                max_node_provision_time=f"{PROVISION_TIMEOUT_MIN}m",
            ),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _user_pools(
        self, name: str, resource_group: pulumi.Input[str], cluster: containerservice.ManagedCluster
    ) -> tuple[containerservice.AgentPool, list[containerservice.AgentPool]]:
        """The CPU pool, then the GPU pool of each capacity rank, each after the one before."""
        pools: list[containerservice.AgentPool] = []
        for spec in (self.pool_specs[labels.POOL_CPU], *self.gpu_rank_specs):
            pools.append(
                node_pools.user_pool(
                    pool_resource_name(name, spec.role, spec.rank),
                    self.args,
                    spec,
                    resource_group=resource_group,
                    cluster=cluster,
                    parent=self,
                    after=pools[-1] if pools else None,
                )
            )
        return pools[0], pools[1:]

    def _user_kubeconfig(
        self, resource_group: pulumi.Input[str], cluster: containerservice.ManagedCluster
    ) -> pulumi.Output[str]:
        """The cluster user's kubeconfig, as a secret."""
        credentials = containerservice.list_managed_cluster_user_credentials_output(
            resource_group_name=resource_group,
            resource_name=cluster.name,
            opts=pulumi.InvokeOutputOptions(parent=self),
        )
        return pulumi.Output.secret(credentials.apply(_decode_kubeconfig))

    def _cluster_info(self, name: str, resource_group: pulumi.Input[str]) -> ClusterInfo:
        """What the platform takes: the cloud-neutral view of this cluster."""
        return ClusterInfo(
            provider=self.k8s_provider,
            kubeconfig=self.kubeconfig,
            placement=node_pools.placement(self.pool_specs, self.gpu_rank_specs),
            checkpoint=AzureBlobCheckpoint(
                storage_account=self.storage_account.name,
                container=self.storage_container.name,
                resource_group=resource_group,
                client_id=self.training_identity.client_id,
                mount_with_token=self.args.mounts_checkpoints_with_token,
            ),
            eviction_notice_s=EVICTION_NOTICE_S,
            # AKS's own drain on a Preempt event is best effort and misses spot nodes
            # (Azure/AKS#3528): the platform's handler reads Scheduled Events instead.
            notice_from_scheduled_events=True,
            identity=TrainingIdentity(
                namespace=self.args.training_namespace,
                service_account=self.args.training_service_account,
                annotations={WORKLOAD_IDENTITY_CLIENT_ID: self.training_identity.client_id},
                # The webhook then gives the pods the identity's token and AZURE_* variables, so
                # their own Blob clients (DefaultAzureCredential) write checkpoints as it.
                pod_labels={WORKLOAD_IDENTITY_USE: "true"},
                trust=identity_mod.team_federation(
                    name,
                    self.training_identity,
                    resource_group=resource_group,
                    issuer_url=self.oidc_issuer_url,
                    parent=self,
                ),
                trust_limit=identity_mod.TEAM_TRUST_LIMIT,
            ),
        )

    def outputs(self) -> dict[str, pulumi.Input[Any]]:
        """Everything worth exporting; no keys, kubeconfig as a secret."""
        return {
            "kubeconfig": self.kubeconfig,
            "clusterName": self.cluster.name,
            "resourceGroupName": self.resource_group.name,
            "nodeResourceGroup": self.node_resource_group,
            "oidcIssuerUrl": self.oidc_issuer_url,
            "poolNames": self.pool_names,
            "poolLabels": {role: dict(spec.node_labels) for role, spec in self.pool_specs.items()},
            "gpuTaints": [t.text() for t in node_pools.placement(self.pool_specs, self.gpu_rank_specs).gpu_taints],
            "gpuRanks": [
                {"rank": s.rank, "pool": s.name, "vmSize": s.vm_size, "capacity": node_pools.rank_of(s).capacity}
                | ({"zones": list(s.zones)} if s.zones else {})
                for s in self.gpu_rank_specs
            ],
            "storageAccountName": self.storage_account.name,
            "storageContainerName": self.storage_container.name,
            "storageResourceGroup": self.resource_group.name,
            "workloadIdentityClientId": self.training_identity.client_id,
            "trainingServiceAccount": f"{self.args.training_namespace}/{self.args.training_service_account}",
            "checkpointAuth": self.args.checkpoint_auth,
            "imageRegistry": self.registry.login_server,
        }

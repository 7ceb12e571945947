"""Realistic mock outputs for the offline plan.

Under `pulumi.runtime.set_mocks` every resource's outputs come from `PlanMocks.new_resource`
and every invoke from `PlanMocks.call`. They return what Azure would: ARM ids, the names a
resource was given, a node resource group, an OIDC issuer URL, managed-identity client ids,
a base64 kubeconfig, so that code downstream of those outputs runs as it would for real.
Values are deterministic (derived from names), so plans are stable across runs.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Iterable
from typing import Any

import pulumi

from lab.vocab.checkpoint_location import KEPT_ROLES
from lab.vocab.versions import METRICS_SERVER_ADDON, MOUNTPOINT_S3_CSI_ADDON

MOCK_SUBSCRIPTION = "00000000-0000-4000-8000-000000000001"
MOCK_TENANT = "00000000-0000-4000-8000-0000000000aa"
MOCK_CLIENT = "00000000-0000-4000-8000-0000000000cc"
MOCK_ACCOUNT = "123456789012"
# What EKS's DescribeAddonVersions answers for the Mountpoint driver's newest release (the driver's
# tags reach v2.7.0); a test that models an older answer sets `mountpoint_release`.
MOCK_MOUNTPOINT_RELEASE = "v2.7.0-eksbuild.1"
# ... and for metrics-server's community add-on.
MOCK_METRICS_SERVER_RELEASE = "v0.8.0-eksbuild.2"
# What a destroy keeps and a cloud refuses to create twice: the checkpoint storage.
KEPT_TYPES = frozenset(KEPT_ROLES)


def _uuid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "/".join(parts)))


def _suffix(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:8]


# type token -> (ARM provider path template, input holding the resource's own name).
# `{rg}`, `{parent}`, `{name}` and `{account}` are filled from inputs.
_ARM = {
    "azure-native:resources:ResourceGroup": ("/subscriptions/{sub}/resourceGroups/{name}", "resourceGroupName"),
    "azure-native:managedidentity:UserAssignedIdentity": (
        "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{name}",
        "resourceName",
    ),
    "azure-native:managedidentity:FederatedIdentityCredential": (
        "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{parent}"
        "/federatedIdentityCredentials/{name}",
        "federatedIdentityCredentialResourceName",
    ),
    "azure-native:containerservice:ManagedCluster": (
        "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.ContainerService/managedClusters/{name}",
        "resourceName",
    ),
    "azure-native:containerservice:AgentPool": (
        "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.ContainerService/managedClusters/{parent}"
        "/agentPools/{name}",
        "agentPoolName",
    ),
    "azure-native:storage:StorageAccount": (
        "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Storage/storageAccounts/{name}",
        "accountName",
    ),
    "azure-native:containerregistry:Registry": (
        "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.ContainerRegistry/registries/{name}",
        "registryName",
    ),
    "azure-native:storage:BlobContainer": (
        "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Storage/storageAccounts/{account}"
        "/blobServices/default/containers/{name}",
        "containerName",
    ),
    "azure-native:authorization:RoleAssignment": (
        "{scope}/providers/Microsoft.Authorization/roleAssignments/{name}",
        "roleAssignmentName",
    ),
}


def mock_kubeconfig(cluster: str, server: str) -> str:
    """A well-formed kubeconfig with placeholder credentials (never a real secret)."""
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: {cluster}\n  cluster:\n    server: {server}\n"
        "    certificate-authority-data: TU9DSy1DQQ==\n"
        f"users:\n- name: clusterUser_{cluster}\n  user:\n    token: mock-token-not-a-secret\n"
        f"contexts:\n- name: {cluster}\n  context:\n    cluster: {cluster}\n    user: clusterUser_{cluster}\n"
        f"current-context: {cluster}\n"
    )


class PlanMocks(pulumi.runtime.Mocks):
    """Mocks that answer like Azure (and like any other provider: echo inputs, stable ids)."""

    def __init__(self, cloud: Iterable[str] | None = None) -> None:
        self.unknown_calls: list[str] = []
        self.mountpoint_release = MOCK_MOUNTPOINT_RELEASE
        # Ids of what the cloud already holds (storage a destroy kept): creating one again is
        # refused, as azure-native and S3 refuse it; importing one takes it back. None: the
        # cloud is not modelled, and an import (real ids, from a real state) is taken as it is.
        self.cloud = None if cloud is None else set(cloud)
        self.imported: list[tuple[str, str]] = []  # (type, id) of each resource taken back

    # ------------------------------------------------------------------ resources
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        if args.typ not in KEPT_TYPES:
            if args.resource_id:
                self.imported.append((args.typ, args.resource_id))
            return self._new_resource(args)
        if self.cloud is None:
            rid, state = self._new_resource(args)
            if args.resource_id:
                self.imported.append((args.typ, args.resource_id))
                return args.resource_id, {**state, "id": args.resource_id}
            return rid, state
        if args.resource_id:
            if args.resource_id not in self.cloud:
                raise RuntimeError(f"{args.typ} {args.resource_id!r} does not exist: nothing to import")
            rid, state = self._new_resource(args)
            if rid != args.resource_id:
                raise RuntimeError(
                    f"{args.typ} {args.name!r}: the inputs describe {rid!r}, not the imported {args.resource_id!r}"
                )
            self.imported.append((args.typ, rid))
            return rid, state
        rid, state = self._new_resource(args)
        if rid in self.cloud and args.typ == "aws:s3/bucket:Bucket" and not args.inputs.get("bucket"):
            rid = state["bucket"] = f"{rid}x"  # a prefixed name: S3 picks another, the kept one is left alone
            state["arn"] = f"arn:aws:s3:::{rid}"
        elif rid in self.cloud:
            raise RuntimeError(
                f"{args.typ} {rid!r} already exists (a destroy kept it): the cloud refuses to create it again; "
                "import it"
            )
        return rid, state

    def _new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        inputs = dict(args.inputs)
        typ = args.typ
        state: dict[str, Any] = dict(inputs)
        identity = inputs.get("identity")
        if (
            typ.startswith("azure-native:")
            and isinstance(identity, dict)
            and isinstance(identity.get("userAssignedIdentities"), list)
        ):
            # azure-native takes a list of identity ids and returns ARM's map id -> details.
            state["identity"] = {
                **identity,
                "userAssignedIdentities": {
                    i: {"clientId": _uuid("client", str(i)), "principalId": _uuid("principal", str(i))}
                    for i in identity["userAssignedIdentities"]
                },
            }
        if typ in _ARM:
            template, name_key = _ARM[typ]
            own = inputs.get(name_key)
            if typ == "azure-native:authorization:RoleAssignment" and not own:
                own = _uuid(args.name, str(inputs.get("scope")), str(inputs.get("roleDefinitionId")))
            if not own:  # azure-native autonaming: logical name + random suffix
                own = f"{args.name}{_suffix(args.name)}"
            state[name_key] = own
            state["name"] = own
            rid = template.format(
                sub=MOCK_SUBSCRIPTION,
                rg=inputs.get("resourceGroupName", "rg"),
                name=own,
                parent=inputs.get("resourceName", "parent"),
                account=inputs.get("accountName", "account"),
                scope=inputs.get("scope", f"/subscriptions/{MOCK_SUBSCRIPTION}"),
            )
            state["id"] = rid
            state.update(self._extra_outputs(typ, own, inputs))
            return rid, state
        if typ.startswith("pulumi:providers:"):
            return f"{args.name}-provider-id", state
        if typ.startswith("aws:"):
            rid, extra = self._aws(typ, args.name, inputs)
            state.update(extra)
            return rid, state
        return f"{args.name}-id", state

    @staticmethod
    def _aws(typ: str, name: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """(id, outputs) as AWS would give them: ARNs, generated names, a cluster endpoint,
        a node group's Auto Scaling group."""
        region = "us-east-1"
        suffix = _suffix(name)
        if typ == "aws:iam/role:Role":
            role = inputs.get("name") or f"{name}-{suffix}"
            return role, {"name": role, "arn": f"arn:aws:iam::{MOCK_ACCOUNT}:role/{role}", "uniqueId": f"AROA{suffix}"}
        if typ == "aws:s3/bucket:Bucket":
            bucket = inputs.get("bucket") or f"{inputs.get('bucketPrefix', name)}{suffix}"
            return bucket, {"bucket": bucket, "arn": f"arn:aws:s3:::{bucket}", "region": region}
        if typ == "aws:ecr/repository:Repository":
            repo = inputs.get("name") or f"{name}-{suffix}"
            return repo, {
                "name": repo,
                "arn": f"arn:aws:ecr:{region}:{MOCK_ACCOUNT}:repository/{repo}",
                "registryId": MOCK_ACCOUNT,
                "repositoryUrl": f"{MOCK_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/{repo}",
            }
        if typ == "aws:eks/cluster:Cluster":
            cluster = inputs.get("name") or name
            return cluster, {
                "name": cluster,
                "arn": f"arn:aws:eks:{region}:{MOCK_ACCOUNT}:cluster/{cluster}",
                "endpoint": f"https://{suffix.upper()}.gr7.{region}.eks.amazonaws.com",
                "certificateAuthority": {"data": "TU9DSy1DQQ=="},
                "status": "ACTIVE",
            }
        if typ == "aws:eks/nodeGroup:NodeGroup":
            group = inputs.get("nodeGroupName") or name
            asg = f"eks-{group}-{_uuid('asg', name)}"
            return f"{inputs.get('clusterName')}:{group}", {
                "nodeGroupName": group,
                "arn": f"arn:aws:eks:{region}:{MOCK_ACCOUNT}:nodegroup/{inputs.get('clusterName')}/{group}/{suffix}",
                "resources": [{"autoscalingGroups": [{"name": asg}], "remoteAccessSecurityGroupId": ""}],
                "status": "ACTIVE",
            }
        if typ == "aws:fis/experimentTemplate:ExperimentTemplate":
            return f"EXT{suffix.upper()}", {}
        if typ.startswith("aws:ec2/"):
            kind = typ.split("/")[1].split(":")[0].lower()
            prefix = {
                "vpc": "vpc",
                "subnet": "subnet",
                "internetgateway": "igw",
                "natgateway": "nat",
                "eip": "eipalloc",
                "routetable": "rtb",
            }.get(kind, kind)
            return f"{prefix}-{suffix}{suffix[:9]}", {}
        return f"{name}-id", {}

    @staticmethod
    def _extra_outputs(typ: str, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
        location = inputs.get("location", "eastus")
        if typ == "azure-native:managedidentity:UserAssignedIdentity":
            return {
                "clientId": _uuid("client", name),
                "principalId": _uuid("principal", name),
                "tenantId": MOCK_TENANT,
                "type": "Microsoft.ManagedIdentity/userAssignedIdentities",
            }
        if typ == "azure-native:containerservice:ManagedCluster":
            rg = inputs.get("resourceGroupName", "rg")
            fqdn = f"{inputs.get('dnsPrefix', name)}-{_suffix(name)}.hcp.{location}.azmk8s.io"
            return {
                "nodeResourceGroup": inputs.get("nodeResourceGroup") or f"MC_{rg}_{name}_{location}",
                "fqdn": fqdn,
                "oidcIssuerProfile": {
                    **(inputs.get("oidcIssuerProfile") or {}),
                    "issuerURL": f"https://{location}.oic.prod-aks.azure.com/{MOCK_TENANT}/{_uuid('oidc', name)}/",
                },
                "identityProfile": {
                    "kubeletidentity": {
                        "clientId": _uuid("kubelet-client", name),
                        "objectId": _uuid("kubelet-object", name),
                        "resourceId": f"/subscriptions/{MOCK_SUBSCRIPTION}/resourceGroups/MC_{rg}_{name}_{location}"
                        f"/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{name}-agentpool",
                    }
                },
                "provisioningState": "Succeeded",
                "powerState": {"code": "Running"},
                "currentKubernetesVersion": inputs.get("kubernetesVersion"),
            }
        if typ == "azure-native:containerservice:AgentPool":
            return {"provisioningState": "Succeeded", "nodeImageVersion": "AKSUbuntu-2204gen2containerd-mock"}
        if typ == "azure-native:storage:StorageAccount":
            return {
                "primaryEndpoints": {"blob": f"https://{name}.blob.core.windows.net/"},
                "provisioningState": "Succeeded",
            }
        if typ == "azure-native:containerregistry:Registry":
            return {"loginServer": f"{name}.azurecr.io", "provisioningState": "Succeeded"}
        if typ == "azure-native:resources:ResourceGroup":
            return {"properties": {"provisioningState": "Succeeded"}}
        return {}

    # ------------------------------------------------------------------ invokes
    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        token, a = args.token, dict(args.args)
        if token == "azure-native:authorization:getClientConfig":
            return {
                "clientId": MOCK_CLIENT,
                "objectId": _uuid("object", MOCK_CLIENT),
                "subscriptionId": MOCK_SUBSCRIPTION,
                "tenantId": MOCK_TENANT,
            }, []
        if token in (
            "azure-native:containerservice:listManagedClusterUserCredentials",
            "azure-native:containerservice:listManagedClusterAdminCredentials",
        ):
            cluster = a.get("resourceName", "cluster")
            server = f"https://{cluster}-{_suffix(cluster)}.hcp.eastus.azmk8s.io:443"
            value = base64.b64encode(mock_kubeconfig(cluster, server).encode()).decode()
            return {"kubeconfigs": [{"name": "clusterUser", "value": value}]}, []
        if token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            names = [f"us-east-1{z}" for z in "abcdef"]
            return {"names": names, "zoneIds": [f"use1-az{i}" for i in range(1, 7)], "id": "us-east-1"}, []
        if token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {
                "accountId": MOCK_ACCOUNT,
                "arn": f"arn:aws:iam::{MOCK_ACCOUNT}:user/mock",
                "userId": "AIDAMOCK",
            }, []
        if token == "aws:eks/getAddonVersion:getAddonVersion":
            newest = {
                MOUNTPOINT_S3_CSI_ADDON: self.mountpoint_release,
                METRICS_SERVER_ADDON: MOCK_METRICS_SERVER_RELEASE,
            }
            version = newest.get(str(a.get("addonName")), "v1.0.0-eksbuild.1")
            return {
                "addonName": a.get("addonName"),
                "kubernetesVersion": a.get("kubernetesVersion"),
                "mostRecent": a.get("mostRecent"),
                "version": version,
                "id": a.get("addonName"),
            }, []
        self.unknown_calls.append(token)
        return {}, []

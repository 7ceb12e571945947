"""Checkpoint storage: our own storage account and blob container, outside the node resource group.

Why our own account: dynamic Blob CSI volumes create their account
in the node resource group, which AKS deletes with the cluster. Checkpoints must survive
the cluster, so the account lives in our resource group and is mounted statically.

Access is through the training pods' workload identity, never through keys we hand out:
- "Storage Blob Data Contributor" on the container (data access with Azure AD tokens);
- with checkpoint_auth "workload-identity-key" (the driver's GA path) also "Storage Account
  Contributor" on the account: the Blob CSI driver uses the pods' identity to fetch the
  account key at mount time (blob-csi-driver docs/workload-identity-static-pv-mount.md).
  The key never appears in our outputs or state.
"""

from __future__ import annotations

import functools
import hashlib

import pulumi
from pulumi_azure_native import authorization, storage

from components.aks.args import AksClusterArgs

# Built-in Azure role definition ids (the same GUID in every subscription).
ROLE_STORAGE_BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
ROLE_STORAGE_ACCOUNT_CONTRIBUTOR = "17d1049b-9a84-46fb-8f53-869881c3d3ab"


def role_definition_id(subscription_id: str, role_guid: str) -> str:
    return f"/subscriptions/{subscription_id}/providers/Microsoft.Authorization/roleDefinitions/{role_guid}"


def derived_account_name(subscription_id: str, resource_group: str, cluster: str) -> str:
    """`eslck` + 16 hex characters: stable for one subscription / group / cluster, and
    unlikely to clash in Azure's global storage-account namespace."""
    digest = hashlib.sha256(f"{subscription_id}/{resource_group}/{cluster}".encode()).hexdigest()
    return "eslck" + digest[:16]


def checkpoint_storage(
    name: str,
    args: AksClusterArgs,
    *,
    resource_group: pulumi.Input[str],
    subscription_id: pulumi.Output[str],
    principal_id: pulumi.Input[str],
    parent: pulumi.Resource,
) -> tuple[storage.StorageAccount, storage.BlobContainer, list[authorization.RoleAssignment]]:
    """Storage account + private container + the training identity's role assignments.

    The account and container outlive the cluster: with `checkpoints_on_destroy` "keep"
    (the default) `pulumi destroy` deletes everything else and leaves them, and their
    resource group, in Azure. The role assignments go with the identity they grant."""
    key_mode = args.checkpoint_auth == "workload-identity-key"
    account = _account(name, args, resource_group, subscription_id, key_mode, parent)
    container = storage.BlobContainer(
        f"{name}-container",
        resource_group_name=resource_group,
        account_name=account.name,
        container_name=args.checkpoint_container,
        public_access=storage.PublicAccess.NONE,
        opts=_kept(args, "container", parent),
    )
    grants = [("blob-data", ROLE_STORAGE_BLOB_DATA_CONTRIBUTOR, container.id)]
    if key_mode:
        grants.append(("account-key", ROLE_STORAGE_ACCOUNT_CONTRIBUTOR, account.id))
    opts = pulumi.ResourceOptions(parent=parent)
    assignments = [
        authorization.RoleAssignment(
            f"{name}-{suffix}",
            principal_id=principal_id,
            principal_type=authorization.PrincipalType.SERVICE_PRINCIPAL,
            role_definition_id=subscription_id.apply(functools.partial(role_definition_id, role_guid=guid)),
            scope=scope,
            opts=opts,
        )
        for suffix, guid, scope in grants
    ]
    return account, container, assignments


def _kept(args: AksClusterArgs, role: str, parent: pulumi.Resource) -> pulumi.ResourceOptions:
    """Storage a destroy keeps (per `checkpoints_on_destroy`), and one it kept taken back under
    the same parent (its URN unchanged)."""
    return pulumi.ResourceOptions(
        parent=parent, retain_on_delete=args.keeps_checkpoints, import_=args.adopt_checkpoints.get(role)
    )


def _account(
    name: str,
    args: AksClusterArgs,
    resource_group: pulumi.Input[str],
    subscription_id: pulumi.Output[str],
    key_mode: bool,
    parent: pulumi.Resource,
) -> storage.StorageAccount:
    """The checkpoint storage account: private, TLS 1.2, HTTPS only; shared keys only where
    the driver mounts with the account key (`key_mode`)."""
    account_name: pulumi.Input[str] = args.storage_account_name or subscription_id.apply(
        lambda sub: derived_account_name(sub, args.resource_group_name, args.cluster_name)
    )
    return storage.StorageAccount(
        name,
        resource_group_name=resource_group,  # ours, never the node resource group
        account_name=account_name,
        location=args.location,
        kind=storage.Kind.STORAGE_V2,
        sku=storage.SkuArgs(name=args.storage_sku),
        access_tier=storage.AccessTier.HOT,
        allow_blob_public_access=False,
        minimum_tls_version=storage.MinimumTlsVersion.TLS1_2,
        enable_https_traffic_only=True,
        # The driver's GA workload-identity path mounts with the account key it fetches with
        # the pods' identity; the token-only path lets us turn shared keys off entirely.
        allow_shared_key_access=key_mode,
        default_to_o_auth_authentication=True,
        tags=args.tags,
        opts=_kept(args, "account", parent),
    )

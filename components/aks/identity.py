"""Managed identities: the cluster's control-plane identity and the training pods' workload identity."""

from __future__ import annotations

import pulumi
from pulumi_azure_native import managedidentity

# The audience Azure AD expects in federated service-account tokens.
TOKEN_EXCHANGE_AUDIENCE = "api://AzureADTokenExchange"


def user_assigned_identity(
    name: str,
    *,
    resource_group: pulumi.Input[str],
    location: str,
    identity_name: str,
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> managedidentity.UserAssignedIdentity:
    """A user-assigned identity: the AKS control plane's (stable across cluster re-creation),
    and the base of the training pods' workload identity."""
    return managedidentity.UserAssignedIdentity(
        name,
        resource_group_name=resource_group,
        resource_name_=identity_name,
        location=location,
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )


def workload_identity(
    name: str,
    *,
    resource_group: pulumi.Input[str],
    location: str,
    identity_name: str,
    issuer_url: pulumi.Input[str],
    subject: str,
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> tuple[managedidentity.UserAssignedIdentity, managedidentity.FederatedIdentityCredential]:
    """Identity the training pods act as, trusted for tokens of one service account.

    The federated credential binds the cluster's OIDC issuer and
    `system:serviceaccount:<namespace>:<name>`; pods of that service account (labelled
    `azure.workload.identity/use: "true"`) get Azure AD tokens for this identity, and the
    Blob CSI driver mounts checkpoint volumes with it.
    """
    identity = user_assigned_identity(
        name, resource_group=resource_group, location=location, identity_name=identity_name, tags=tags, parent=parent
    )
    credential = managedidentity.FederatedIdentityCredential(
        f"{name}-federation",
        resource_group_name=resource_group,
        resource_name_=identity.name,
        federated_identity_credential_resource_name="training-pods",
        issuer=issuer_url,
        subject=subject,
        audiences=[TOKEN_EXCHANGE_AUDIENCE],
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return identity, credential

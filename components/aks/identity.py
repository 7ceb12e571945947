"""Managed identities: the cluster's control-plane identity and the training pods' workload identity."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pulumi
from pulumi_azure_native import managedidentity

from components.aks.args import AksClusterArgs

# The audience Azure AD expects in federated service-account tokens.
TOKEN_EXCHANGE_AUDIENCE = "api://AzureADTokenExchange"
# Entra ID takes at most 20 federated credentials on one user-assigned identity: the platform's
# service account and at most 19 teams'.
MOST_FEDERATED_CREDENTIALS = 20
TEAM_TRUST_LIMIT = MOST_FEDERATED_CREDENTIALS - 1


def user_assigned_identity(
    component: str,
    purpose: str,
    args: AksClusterArgs,
    *,
    resource_group: pulumi.Input[str],
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> managedidentity.UserAssignedIdentity:
    """A user-assigned identity for `purpose`: the AKS control plane's (stable across cluster
    re-creation), and the base of the training pods' workload identity. Named
    `<component>-<purpose>` in the stack and `<cluster>-<purpose>` in Azure."""
    return managedidentity.UserAssignedIdentity(
        f"{component}-{purpose}",
        resource_group_name=resource_group,
        resource_name_=f"{args.cluster_name}-{purpose}",
        location=args.location,
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )


def workload_identity(
    component: str,
    args: AksClusterArgs,
    *,
    resource_group: pulumi.Input[str],
    issuer_url: pulumi.Input[str],
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
        component, "training", args, resource_group=resource_group, tags=tags, parent=parent
    )
    credential = managedidentity.FederatedIdentityCredential(
        f"{component}-training-federation",
        resource_group_name=resource_group,
        resource_name_=identity.name,
        federated_identity_credential_resource_name="training-pods",
        issuer=issuer_url,
        subject=args.workload_identity_subject,
        audiences=[TOKEN_EXCHANGE_AUDIENCE],
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return identity, credential


def team_federation(
    component: str,
    identity: managedidentity.UserAssignedIdentity,
    *,
    resource_group: pulumi.Input[str],
    issuer_url: pulumi.Input[str],
    parent: pulumi.Resource,
) -> Callable[[str, str, str, Sequence[pulumi.Resource]], pulumi.Resource]:
    """The training identity's trust of one more service account (a team's): a federated
    credential named after its namespace. Entra ID refuses concurrent writes of credentials on
    one identity, so each waits for the resources it is handed (the one declared before it)."""

    def trust(name: str, namespace: str, service_account: str, after: Sequence[pulumi.Resource]) -> pulumi.Resource:
        credential: pulumi.Resource = managedidentity.FederatedIdentityCredential(
            f"{component}-{name}-federation",
            resource_group_name=resource_group,
            resource_name_=identity.name,
            federated_identity_credential_resource_name=f"pods-{namespace}",
            issuer=issuer_url,
            subject=f"system:serviceaccount:{namespace}:{service_account}",
            audiences=[TOKEN_EXCHANGE_AUDIENCE],
            opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after)),
        )
        return credential

    return trust

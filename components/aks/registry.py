"""The stack's container registry: where `elastic-lab image` pushes the training image, and
where the cluster's nodes pull it from.

An Azure Container Registry (Basic: one registry per stack, no geo-replication) with its admin
user off: nodes pull with the cluster's kubelet identity, which holds AcrPull on the registry
(what `az aks update --attach-acr` grants), and people push with their own Azure login
(`az acr login`). Its name is global in Azure: derived from the subscription, resource group and
cluster, as the checkpoint account's is.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import pulumi
from pulumi_azure_native import authorization, containerregistry, containerservice

from components.aks.args import AksClusterArgs
from components.aks.storage import role_definition_id

# Built-in role: pull images from a registry (the same GUID in every subscription).
ROLE_ACR_PULL = "7f951dda-4ed3-4680-a7ca-43fe172d538d"


def derived_registry_name(subscription_id: str, resource_group: str, cluster: str) -> str:
    """`eslacr` + 16 hex characters: ACR names are 5-50 letters and digits, unique in Azure."""
    digest = hashlib.sha256(f"{subscription_id}/{resource_group}/{cluster}".encode()).hexdigest()
    return "eslacr" + digest[:16]


def _kubelet_object_id(profile: Any) -> str | None:
    identity = (profile or {}).get("kubeletidentity") if isinstance(profile, dict) else None
    if identity is None:
        return None
    return identity.get("object_id") if isinstance(identity, dict) else getattr(identity, "object_id", None)


def image_registry(
    name: str,
    args: AksClusterArgs,
    *,
    resource_group: pulumi.Input[str],
    cluster: containerservice.ManagedCluster,
    subscription_id: pulumi.Output[str],
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> tuple[containerregistry.Registry, authorization.RoleAssignment]:
    """The registry and the kubelet identity's AcrPull on it."""
    opts = pulumi.ResourceOptions(parent=parent)
    registry = containerregistry.Registry(
        name,
        registry_name=subscription_id.apply(
            functools.partial(derived_registry_name, resource_group=args.resource_group_name, cluster=args.cluster_name)
        ),
        resource_group_name=resource_group,
        location=args.location,
        sku=containerregistry.SkuArgs(name=containerregistry.SkuName.BASIC),
        admin_user_enabled=False,
        tags=tags,
        opts=opts,
    )
    pull = authorization.RoleAssignment(
        f"{name}-kubelet-pull",
        principal_id=cluster.identity_profile.apply(_kubelet_object_id),
        principal_type=authorization.PrincipalType.SERVICE_PRINCIPAL,
        role_definition_id=subscription_id.apply(functools.partial(role_definition_id, role_guid=ROLE_ACR_PULL)),
        scope=registry.id,
        opts=opts,
    )
    return registry, pull

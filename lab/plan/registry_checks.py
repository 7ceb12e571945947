"""The stack's image registry: the training image has somewhere to go that the nodes can pull
from, with no shared secret.

AKS: an Azure Container Registry with its admin user off, and AcrPull on it for the cluster's
kubelet identity (the identity the nodes pull with; without it every image pull from the
registry is refused and pods sit in ImagePullBackOff). EKS: an ECR repository with immutable
tags (a job's image cannot change under it), pulled by the node role's
AmazonEC2ContainerRegistryReadOnly.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from components.aks.registry import ROLE_ACR_PULL
from lab.plan.aks_pools import MANAGED_CLUSTER
from lab.plan.eks_guardrails import ECR, NODE_GROUP
from lab.plan.findings import Finding
from lab.vocab.names import PLATFORM_TYPE
from lab.vocab.platform_facts import NOTICE_HANDLER_WAITS

CHECK = "guardrail:image-registry"
TRAINER_IMAGE_CHECK = "platform:trainer-image"
ACR = "azure-native:containerregistry:Registry"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
ECR_READ = (
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
)


def applies(plan: Any) -> bool:
    return bool(plan.of_type(MANAGED_CLUSTER) or plan.of_type(NODE_GROUP))


def image_registry(plan: Any) -> Iterator[Finding]:
    if plan.of_type(MANAGED_CLUSTER):
        yield from _acr(plan)
    if plan.of_type(NODE_GROUP):
        yield from _ecr(plan)


def _acr(plan: Any) -> Iterator[Finding]:
    cluster = plan.of_type(MANAGED_CLUSTER)[0]
    registries = plan.of_type(ACR)
    if not registries:
        yield Finding.error(
            CHECK, cluster, "registry", None, "an Azure Container Registry the nodes pull the image from"
        )
        return
    kubelet = ((cluster.state.get("identityProfile") or {}).get("kubeletidentity") or {}).get("objectId")
    for registry in registries:
        if registry.inputs.get("adminUserEnabled") is not False:
            yield Finding.error(
                CHECK,
                registry,
                "adminUserEnabled",
                registry.inputs.get("adminUserEnabled"),
                "False (nodes pull with the kubelet identity, people push with their Azure login: no shared password)",
            )
        pulls = [
            r
            for r in plan.of_type(ROLE_ASSIGNMENT)
            if r.inputs.get("scope") == registry.state.get("id")
            and str(r.inputs.get("roleDefinitionId", "")).endswith(f"/roleDefinitions/{ROLE_ACR_PULL}")
        ]
        if not any(r.inputs.get("principalId") == kubelet for r in pulls):
            yield Finding.error(
                CHECK,
                registry,
                "roleAssignments",
                sorted(str(r.inputs.get("principalId")) for r in pulls),
                f"AcrPull ({ROLE_ACR_PULL}) for the cluster's kubelet identity {kubelet!r}: without it every pull "
                "of the training image is refused (ImagePullBackOff)",
            )


def _ecr(plan: Any) -> Iterator[Finding]:
    groups = plan.of_type(NODE_GROUP)
    repositories = plan.of_type(ECR)
    if not repositories:
        yield Finding.error(CHECK, groups[0], "registry", None, "an ECR repository the nodes pull the image from")
        return
    for repository in repositories:
        if repository.inputs.get("imageTagMutability") != "IMMUTABLE":
            yield Finding.error(
                CHECK,
                repository,
                "imageTagMutability",
                repository.inputs.get("imageTagMutability"),
                "'IMMUTABLE' (a pushed tag never names another image: a job's image cannot change under it)",
            )
    attached = {(str(a.inputs.get("role")), str(a.inputs.get("policyArn"))) for a in plan.of_type(POLICY_ATTACHMENT)}
    for group in groups:
        role_arn = str(group.inputs.get("nodeRoleArn", ""))
        role = role_arn.rsplit("/", 1)[-1]
        if not any((role, policy) in attached for policy in ECR_READ):
            yield Finding.error(
                CHECK,
                group,
                "nodeRoleArn",
                role_arn,
                f"a node role with {ECR_READ[0].rsplit('/', 1)[-1]} attached: the nodes pull the image with it",
            )


def has_platform(plan: Any) -> bool:
    return bool(plan.of_type(PLATFORM_TYPE))


def trainer_image(plan: Any) -> Iterator[Finding]:
    """A platform whose cluster needs the spot-notice handler (AKS) but has no trainer image to
    run it from yet: the handler is left out (never installed with an image nothing publishes),
    and until it is installed a notice reaches no worker. A warning that counts, with the way on."""
    for platform in plan.of_type(PLATFORM_TYPE):
        state = (platform.outputs or {}).get("noticeHandler")
        if state == NOTICE_HANDLER_WAITS:
            yield Finding.warning(
                TRAINER_IMAGE_CHECK,
                platform,
                "noticeHandler",
                state,
                "the spot-notice handler installed: push the training image to the stack's registry (the "
                "imageRegistry output), set elastic-spot-lab:trainerImage to it and run `elastic-lab up` again; "
                "until then a spot notice reaches no worker (they are killed without saving)",
            )

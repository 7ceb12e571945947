"""IAM for the EKS stack: policy documents (pure data, checked offline) and the roles built on them.

Trust policies:
  cluster role      eks.amazonaws.com
  node role         ec2.amazonaws.com
  Pod Identity      pods.eks.amazonaws.com, with sts:TagSession (EKS Pod Identity tags sessions)
  FIS               fis.amazonaws.com
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_aws as aws

VERSION = "2012-10-17"
EKS_CLUSTER_POLICIES = ("arn:aws:iam::aws:policy/AmazonEKSClusterPolicy",)
EKS_NODE_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
)
POD_IDENTITY_SERVICE = "pods.eks.amazonaws.com"


def trust_policy(service: str) -> str:
    """A role trust policy letting `service` assume the role (Pod Identity also tags sessions)."""
    actions: str | list[str] = "sts:AssumeRole"
    if service == POD_IDENTITY_SERVICE:
        actions = ["sts:AssumeRole", "sts:TagSession"]
    return json.dumps(
        {
            "Version": VERSION,
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": actions}],
        }
    )


def policy(statements: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps({"Version": VERSION, "Statement": list(statements)})


def pod_identity(
    name: str,
    *,
    association: str,
    cluster: aws.eks.Cluster,
    namespace: str,
    service_account: str,
    inline: Mapping[str, pulumi.Input[str]],
    tags: Mapping[str, str],
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource] = (),
) -> tuple[aws.iam.Role, aws.eks.PodIdentityAssociation]:
    """A role with `inline` policies that pods of `namespace/service_account` act as (EKS Pod
    Identity), and the association named `association` that maps them to it."""
    created, parts = role(name, service=POD_IDENTITY_SERVICE, inline=inline, tags=tags, parent=parent)
    associated = aws.eks.PodIdentityAssociation(
        association,
        cluster_name=cluster.name,
        namespace=namespace,
        service_account=service_account,
        role_arn=created.arn,
        tags=dict(tags),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[*parts, *depends_on]),
    )
    return created, associated


def role(
    name: str,
    *,
    service: str,
    managed: Sequence[str] = (),
    inline: Mapping[str, pulumi.Input[str]] | None = None,
    tags: Mapping[str, str],
    parent: pulumi.Resource,
) -> tuple[aws.iam.Role, list[pulumi.Resource]]:
    """A role `service` may assume, with AWS managed policies attached and inline policies; the
    role and every attachment (depend on those, not on the role alone, before using it)."""
    here = pulumi.ResourceOptions(parent=parent)
    created = aws.iam.Role(name, assume_role_policy=trust_policy(service), tags=dict(tags), opts=here)
    parts: list[pulumi.Resource] = []
    for arn in managed:
        short = arn.rsplit("/", 1)[-1]
        parts.append(aws.iam.RolePolicyAttachment(f"{name}-{short}", role=created.name, policy_arn=arn, opts=here))
    for policy_name, document in (inline or {}).items():
        parts.append(
            aws.iam.RolePolicy(f"{name}-{policy_name}", role=created.id, name=policy_name, policy=document, opts=here)
        )
    return created, parts

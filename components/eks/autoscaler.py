"""Cluster Autoscaler for the EKS node groups: the chart on the CPU group, with a Pod Identity
role that may resize only this cluster's Auto Scaling groups.

EKS tags a managed node group's Auto Scaling group `k8s.io/cluster-autoscaler/enabled` and
`k8s.io/cluster-autoscaler/<cluster>` itself; the autoscaler discovers the groups by those
tags. Scaling the GPU group up from zero relies on the node-template tags (node_groups.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.eks import iam
from components.eks.args import EksClusterArgs
from lab.vocab.capacity import PROVISION_TIMEOUT_MIN
from lab.vocab.versions import CLUSTER_AUTOSCALER_CHART, CLUSTER_AUTOSCALER_REPO

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"


def autoscaler_policy(cluster: str) -> str:
    return iam.policy(
        [
            {
                "Sid": "Discover",
                "Effect": "Allow",
                "Action": [
                    "autoscaling:DescribeAutoScalingGroups",
                    "autoscaling:DescribeAutoScalingInstances",
                    "autoscaling:DescribeLaunchConfigurations",
                    "autoscaling:DescribeScalingActivities",
                    "autoscaling:DescribeTags",
                    "ec2:DescribeImages",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplateVersions",
                    "ec2:GetInstanceTypesFromInstanceRequirements",
                    "eks:DescribeNodegroup",
                ],
                "Resource": "*",
            },
            {
                "Sid": "ResizeThisClustersGroups",
                "Effect": "Allow",
                "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
                "Resource": "*",
                "Condition": {"StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster}": "owned"}},
            },
        ]
    )


def values(args: EksClusterArgs, cpu_labels: Mapping[str, str], startup_taints: Sequence[str] = ()) -> dict[str, Any]:
    # The chart repeats a flag for keys that differ only after an underscore (startup-taint_2).
    startup = {("startup-taint" if i == 0 else f"startup-taint_{i + 1}"): key for i, key in enumerate(startup_taints)}
    return {
        "cloudProvider": "aws",
        "awsRegion": args.region,
        "autoDiscovery": {"clusterName": args.cluster_name},
        "image": {"tag": args.autoscaler_image_tag},
        "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
        "nodeSelector": dict(cpu_labels),  # never on a spot node it might remove
        "extraArgs": {
            # Spot GPU types of one group count as one pool; nodes with emptyDir scale down.
            "balance-similar-node-groups": True,
            "skip-nodes-with-local-storage": False,
            # GPU capacity ranks by the priority ConfigMap (components/capacity.py); within a
            # rank, the group that wastes least. A node that never registers fails its scale-up
            # sooner than the 15 min default, so the next rank is tried.
            "expander": "priority,least-waste",
            "max-node-provision-time": f"{PROVISION_TIMEOUT_MIN}m0s",
            # Taints new nodes lose once ready (Mountpoint's agent-not-ready): a new node with one
            # still counts as able to take the pending pods, so no extra node is added for them.
            **startup,
        },
    }


def cluster_autoscaler(
    name: str,
    args: EksClusterArgs,
    *,
    cluster: aws.eks.Cluster,
    cpu_labels: Mapping[str, str],
    startup_taints: Sequence[str],
    provider: k8s.Provider,
    tags: Mapping[str, str],
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource],
) -> tuple[aws.iam.Role, aws.eks.PodIdentityAssociation, k8s.helm.v4.Chart]:
    role, association = iam.pod_identity(
        f"{name}-role",
        association=f"{name}-identity",
        cluster=cluster,
        namespace=NAMESPACE,
        service_account=SERVICE_ACCOUNT,
        inline={"resize-node-groups": autoscaler_policy(args.cluster_name)},
        tags=tags,
        parent=parent,
    )
    chart = k8s.helm.v4.Chart(
        name,
        chart=CLUSTER_AUTOSCALER_CHART,
        version=args.autoscaler_chart_version,
        repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=CLUSTER_AUTOSCALER_REPO),
        namespace=NAMESPACE,
        values=values(args, cpu_labels, startup_taints),
        opts=pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=[association, *depends_on]),
    )
    return role, association, chart

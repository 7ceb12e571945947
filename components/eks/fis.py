"""The eviction drill's AWS side: an FIS experiment template that sends a spot interruption
(rebalance recommendation at once, the interruption after the notice) to one running
instance of the GPU spot node group, and the role FIS runs it as.

The target is chosen by the `eks:nodegroup-name` tag EKS puts on the group's instances, so
no CPU node can be hit; the role may interrupt only instances carrying both that tag and
this cluster's `eks:cluster-name` (a same-named group of another cluster is refused).
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_aws as aws

from components.eks import iam
from components.eks.args import EksClusterArgs
from lab.vocab.aws_tags import EKS_CLUSTER_NAME_TAG, EKS_NODEGROUP_TAG, FIS_SPOT_INTERRUPTION

SPOT_INTERRUPTION = FIS_SPOT_INTERRUPTION
NODEGROUP_TAG = EKS_NODEGROUP_TAG
CLUSTER_TAG = EKS_CLUSTER_NAME_TAG
TARGET = "gpu-spot-instance"


def fis_policy(cluster: str, gpu_group: str) -> str:
    """Interrupt only instances of this cluster's GPU group (both tags must match)."""
    return iam.policy(
        [
            {
                "Sid": "InterruptGpuSpotInstances",
                "Effect": "Allow",
                "Action": ["ec2:SendSpotInstanceInterruptions"],
                "Resource": "arn:aws:ec2:*:*:instance/*",
                "Condition": {
                    "StringEquals": {
                        f"aws:ResourceTag/{NODEGROUP_TAG}": gpu_group,
                        f"aws:ResourceTag/{CLUSTER_TAG}": cluster,
                    }
                },
            },
            {"Sid": "FindThem", "Effect": "Allow", "Action": ["ec2:DescribeInstances"], "Resource": "*"},
        ]
    )


def spot_interruption_template(
    name: str, args: EksClusterArgs, *, tags: Mapping[str, str], parent: pulumi.Resource
) -> tuple[aws.fis.ExperimentTemplate, aws.iam.Role]:
    role, parts = iam.role(
        f"{name}-role",
        service="fis.amazonaws.com",
        inline={"interrupt-gpu-spot": fis_policy(args.cluster_name, args.gpu_group_name)},
        tags=tags,
        parent=parent,
    )
    template = aws.fis.ExperimentTemplate(
        name,
        description=(
            f"Spot interruption of one {args.gpu_group_name} node of {args.cluster_name}"
            f" ({args.interruption_notice} notice)"
        ),
        role_arn=role.arn,
        stop_conditions=[{"source": "none"}],
        actions=[
            {
                "name": "interrupt-one-gpu-spot-node",
                "action_id": SPOT_INTERRUPTION,
                "parameters": [{"key": "durationBeforeInterruption", "value": args.interruption_notice}],
                "target": {"key": "SpotInstances", "value": TARGET},
            }
        ],
        targets=[
            {
                "name": TARGET,
                "resource_type": "aws:ec2:spot-instance",
                "selection_mode": "COUNT(1)",
                # The group's name and the cluster's, both on the instance (FIS selects instances
                # with every tag listed): every stack's GPU group has the same default name, and
                # the group's tag alone would reach another cluster's nodes in the account.
                "resource_tags": [
                    {"key": NODEGROUP_TAG, "value": args.gpu_group_name},
                    {"key": CLUSTER_TAG, "value": args.cluster_name},
                ],
                "filters": [{"path": "State.Name", "values": ["running"]}],
            }
        ],
        tags=dict(tags),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=parts),
    )
    return template, role

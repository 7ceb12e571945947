"""EKS managed node groups: the on-demand CPU group and the spot GPU group, their labels and
taints, and the Auto Scaling group tags Cluster Autoscaler needs to scale the GPU group from zero.

What EKS requires and does:
- capacity types `ON_DEMAND` / `SPOT`; spot groups take several instance types (one type's
  spot capacity often runs out) of the same architecture as the AMI type;
- EKS labels spot nodes `eks.amazonaws.com/capacityType: SPOT` but taints nothing: the GPU
  group carries our spot taint and the GPU taint itself;
- taint effects are spelled `NO_SCHEDULE`, ...; scaling_config needs min, max and desired,
  and `ignore_changes` on the desired size leaves it to the autoscaler;
- managed node groups drain spot nodes on the rebalance recommendation / 2-minute notice;
- a group at zero nodes has no node for Cluster Autoscaler to read its labels and taints
  from: the `k8s.io/cluster-autoscaler/node-template/...` tags on its Auto Scaling group say
  what a new node would carry (Kubernetes effect spelling), so pending GPU pods scale it up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.eks.args import EksClusterArgs
from components.eks.catalogue import ACCELERATOR_LABEL, accelerator, instance_family
from lab.vocab import pools as labels
from lab.vocab.capacity import RANK_LABEL, GpuRank
from lab.vocab.pools import PoolPlacement, Taint

EKS_CAPACITY_LABEL = "eks.amazonaws.com/capacityType"
EKS_SPOT_VALUE = "SPOT"
NODE_TEMPLATE = "k8s.io/cluster-autoscaler/node-template"


@dataclass(frozen=True)
class GroupSpec:
    """One node group as the platform sees it."""

    role: str  # labels.POOL_*
    name: str
    instance_types: tuple[str, ...]
    ami_type: str
    spot: bool
    min_nodes: int
    max_nodes: int
    node_labels: dict[str, str]
    taints: tuple[Taint, ...]  # what the group's pods tolerate
    # Taints a new node starts with and loses once it is ready (its agents remove them): on the
    # group, never in the autoscaler's scale-from-zero template, and known to the autoscaler.
    startup_taints: tuple[Taint, ...] = ()
    rank: int = 0  # GPU capacity rank (1 = tried first); 0 for the CPU group

    def gpu_rank(self) -> GpuRank:
        return GpuRank(self.rank, self.name, self.instance_types, self.spot)


def cpu_ami_type(instance_type: str) -> str:
    """AL2023 for the CPU group, ARM for Graviton families (a 'g' among the attributes: m7g, c6gn)."""
    family = instance_family(instance_type) or ""
    attributes = family.lstrip("abcdefghijklmnopqrstuvwxyz").lstrip("0123456789")
    return "AL2023_ARM_64_STANDARD" if "g" in attributes else "AL2023_x86_64_STANDARD"


def gpu_rank_spec(args: EksClusterArgs, rank: GpuRank) -> GroupSpec:
    """The node group of one GPU capacity rank: the workers' pool label, the GPU taint and the
    Mountpoint startup taint on every rank; our spot taint on spot ranks (EKS taints none)."""
    return GroupSpec(
        labels.POOL_GPU_SPOT,
        rank.name,
        rank.sizes,
        args.gpu_ami_type,
        rank.spot,
        args.gpu_min_nodes if rank.rank == 1 else 0,
        args.gpu_max_nodes,
        {
            **labels.pool_labels(labels.POOL_GPU_SPOT, spot=rank.spot),
            labels.NVIDIA_GPU_PRESENT_LABEL: "true",
            ACCELERATOR_LABEL: accelerator(rank.sizes),
            RANK_LABEL: str(rank.rank),
        },
        (labels.SPOT_TAINT, labels.GPU_TAINT) if rank.spot else (labels.GPU_TAINT,),
        # The jobs mount the checkpoint bucket on GPU nodes only.
        startup_taints=(labels.MOUNTPOINT_STARTUP_TAINT,),
        rank=rank.rank,
    )


def gpu_rank_specs(args: EksClusterArgs) -> tuple[GroupSpec, ...]:
    """Every GPU capacity rank's node group, rank 1 (the GPU spot group) first."""
    return tuple(gpu_rank_spec(args, rank) for rank in args.gpu_ranks())


def group_specs(args: EksClusterArgs) -> dict[str, GroupSpec]:
    """The CPU group and rank 1 of the GPU capacity, keyed by role."""
    return {
        labels.POOL_CPU: GroupSpec(
            labels.POOL_CPU,
            args.cpu_group_name,
            (args.cpu_instance_type,),
            cpu_ami_type(args.cpu_instance_type),
            False,
            args.cpu_min_nodes,
            args.cpu_max_nodes,
            labels.pool_labels(labels.POOL_CPU, spot=False),
            (),
        ),
        labels.POOL_GPU_SPOT: gpu_rank_specs(args)[0],
    }


def startup_taint_keys(specs: Sequence[GroupSpec]) -> list[str]:
    """Every group's startup taints, for the autoscaler's `--startup-taint`."""
    return sorted({t.key for spec in specs for t in spec.startup_taints})


def placement(specs: Mapping[str, GroupSpec], ranks: Sequence[GroupSpec]) -> PoolPlacement:
    """The groups as the platform selects and tolerates them (`PoolPlacement.over_ranks`): the
    GPU ranks differ by their rank label and by the accelerator label (one per instance type);
    every spot node carries EKS's capacity-type label and our capacity label."""
    return PoolPlacement.over_ranks(
        specs[labels.POOL_CPU],
        ranks,
        rank_labels=(RANK_LABEL, ACCELERATOR_LABEL),
        spot_labels={EKS_CAPACITY_LABEL: EKS_SPOT_VALUE, labels.CAPACITY_LABEL: labels.CAPACITY_SPOT},
    )


def node_group(
    name: str,
    spec: GroupSpec,
    args: EksClusterArgs,
    *,
    cluster: aws.eks.Cluster,
    node_role: aws.iam.Role,
    subnet_ids: Sequence[pulumi.Input[str]],
    tags: Mapping[str, str],
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource],
) -> aws.eks.NodeGroup:
    return aws.eks.NodeGroup(
        name,
        cluster_name=cluster.name,
        node_group_name=spec.name,
        node_role_arn=node_role.arn,
        subnet_ids=list(subnet_ids),
        capacity_type="SPOT" if spec.spot else "ON_DEMAND",
        instance_types=list(spec.instance_types),
        ami_type=spec.ami_type,
        disk_size=args.gpu_disk_size_gb if spec.role == labels.POOL_GPU_SPOT else None,
        scaling_config=aws.eks.NodeGroupScalingConfigArgs(
            min_size=spec.min_nodes, max_size=spec.max_nodes, desired_size=spec.min_nodes
        ),
        # One node at a time: the CPU group hosts etcd, whose budget allows one eviction.
        update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
        labels=dict(spec.node_labels),
        taints=[aws.eks.NodeGroupTaintArgs(**t.eks()) for t in (*spec.taints, *spec.startup_taints)] or None,
        tags=dict(tags),
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=list(depends_on),
            # The autoscaler owns the size once the group exists.
            ignore_changes=["scalingConfig.desiredSize"],
        ),
    )


def autoscaler_template_tags(
    name: str, group: aws.eks.NodeGroup, spec: GroupSpec, parent: pulumi.Resource
) -> list[aws.autoscaling.Tag]:
    """Tags on the group's Auto Scaling group describing its nodes' labels and taints, so
    Cluster Autoscaler can scale it up from zero for pods that select and tolerate them."""
    asg = group.resources.apply(lambda rs: (rs[0].autoscaling_groups or [])[0].name)
    entries = {f"{NODE_TEMPLATE}/label/{k}": v for k, v in spec.node_labels.items()}
    entries.update({f"{NODE_TEMPLATE}/taint/{t.key}": f"{t.value}:{t.effect}" for t in spec.taints})
    return [
        aws.autoscaling.Tag(
            f"{name}-{i}",
            autoscaling_group_name=asg,
            tag={"key": key, "value": value, "propagate_at_launch": False},
            opts=pulumi.ResourceOptions(parent=parent),
        )
        for i, (key, value) in enumerate(sorted(entries.items()))
    ]

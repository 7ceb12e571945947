"""`EksClusterArgs`: every knob of the EKS stack, typed and validated before anything is declared.

Each field carries the stack-config key it is read from (`metadata["key"]`, read by
components/config.py), so an error names the key the user wrote. `problems()` collects every
problem at once; each names the field, the bad value and what is expected.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from components.eks.catalogue import (
    ARM_GPU_FAMILIES,
    GPU_AMI_TYPES,
    INSTANCE_TYPE,
    botocore_version,
    ec2_instance_types,
    eks_regions,
    gpu_type_expected,
    instance_family,
    is_accelerated_instance,
)
from components.field_problems import (
    Check,
    ClusterArgs,
    FieldProblems,
    RankRules,
    adopt_checkpoints_field,
    adopted_checkpoints,
    gpu_fallback,
    is_int,
    kubernetes_version,
    meta,
    node_bounds,
    string_list,
    training_identity,
    training_namespace_field,
    training_service_account_field,
)
from lab.vocab.aws_tags import tag_problems
from lab.vocab.capacity import GpuRank
from lab.vocab.checkpoint_location import EKS_KEPT
from lab.vocab.machine_shapes import AWS as AWS_SHAPES
from lab.vocab.problems import Problem
from lab.vocab.versions import (
    CLUSTER_AUTOSCALER_CHARTS,
    DEFAULT_KUBERNETES_VERSION,
)

# --------------------------------------------------------------------------- value rules

# AWS region codes: us-east-1, eu-central-2, us-gov-west-1, ap-southeast-4, ...
_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d{1,2}$")
_K8S_VERSION = re.compile(r"^1\.(\d+)$")  # EKS takes a minor version only
MIN_K8S_MINOR = 30
_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")  # eks CreateCluster's pattern
_GROUP_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,62}$")
# Bucket names: 3-63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_ISO_MINUTES = re.compile(r"^PT(\d+)M$")
CHECKPOINTS_ON_DESTROY = ("keep", "delete")
MAX_GROUP_NODES = 1000  # scaling_config maxSize limit of a managed node group
_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$")


def _rank_types_problems(types: Any, key: str) -> list[Problem]:
    if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
        return [Problem(key, types, "a non-empty list of NVIDIA GPU instance types, e.g. [g5.2xlarge]")]
    if len(set(types)) != len(types):
        return [Problem(key, types, "each instance type once")]
    return [Problem(key, t, e) for t in types if (e := gpu_type_expected(t)) is not None]


def _rank_name_problem(name: Any) -> str | None:
    ok = isinstance(name, str) and _GROUP_NAME.match(name)
    return None if ok else "1-63 letters, digits, '-' or '_', starting with a letter or digit"


# A fallback rank: several instance types, the subnets' zones, a group name of at most 63 characters.
_RANKS = RankRules(
    sizes_key="instanceTypes",
    size_problems=_rank_types_problems,
    name_problem=_rank_name_problem,
    zones_allowed=None,
    shapes=AWS_SHAPES,
    limit=63,
    separator="-",
)


# --------------------------------------------------------------------------- args


@dataclass(frozen=True)
class EksClusterArgs(ClusterArgs):
    """Arguments of `EksCluster`. Defaults are the lab's; the stack file sets the usual ones."""

    described_as: ClassVar[str] = "EKS cluster arguments"
    rank_rules: ClassVar[RankRules] = _RANKS

    region: str = field(metadata=meta("region", "str", "AWS region code, e.g. us-east-1"))
    cluster_name: str = field(metadata=meta("clusterName", "str", "EKS cluster name"))
    kubernetes_version: str = field(
        default=DEFAULT_KUBERNETES_VERSION, metadata=meta("kubernetesVersion", "str", "Kubernetes version 1.<minor>")
    )
    # Network: a new VPC over `availabilityZoneCount` zones, or an existing one.
    vpc_cidr: str = field(default="10.40.0.0/16", metadata=meta("vpcCidr", "str", "CIDR of the new VPC (/16-/20)"))
    availability_zone_count: int = field(
        default=2, metadata=meta("availabilityZoneCount", "int", "zones the new VPC spans (2-4)")
    )
    existing_vpc_id: str | None = field(
        default=None, metadata=meta("existingVpcId", "str", "use this VPC instead of creating one")
    )
    existing_private_subnet_ids: list[str] = field(
        default_factory=list,
        metadata=meta("existingPrivateSubnetIds", "list", "with existingVpcId: private subnets in 2+ zones"),
    )
    endpoint_public_access_cidrs: list[str] = field(
        default_factory=lambda: ["0.0.0.0/0"],
        metadata=meta("endpointPublicAccessCidrs", "list", "CIDRs that may reach the public API endpoint"),
    )
    admin_principal_arns: list[str] = field(
        default_factory=list,
        metadata=meta("adminPrincipalArns", "list", "IAM roles/users given cluster-admin (access entries)"),
    )
    # CPU node group: etcd rendezvous, training operator, launchers, the autoscaler. On-demand.
    cpu_group_name: str = field(default="cpu", metadata=meta("cpuGroupName", "str", "CPU node group name"))
    cpu_instance_type: str = field(
        default="m6i.xlarge", metadata=meta("cpuInstanceType", "str", "CPU node group instance type")
    )
    cpu_min_nodes: int = field(default=1, metadata=meta("cpuMinNodes", "int", "CPU node group minimum"))
    cpu_max_nodes: int = field(default=2, metadata=meta("cpuMaxNodes", "int", "CPU node group maximum"))
    # GPU node group: elastic workers. Spot, several instance types, scales to zero.
    gpu_group_name: str = field(default="gpu-spot", metadata=meta("gpuGroupName", "str", "GPU spot node group name"))
    gpu_instance_types: list[str] = field(
        default_factory=lambda: ["g4dn.xlarge", "g5.xlarge", "g6.xlarge"],
        metadata=meta("gpuInstanceTypes", "list", "GPU spot instance types (several: spot capacity varies)"),
    )
    gpu_ami_type: str = field(
        default="AL2023_x86_64_NVIDIA", metadata=meta("gpuAmiType", "str", "NVIDIA AMI type of the GPU group")
    )
    gpu_disk_size_gb: int = field(default=100, metadata=meta("gpuDiskSizeGb", "int", "GPU node disk in GiB"))
    gpu_min_nodes: int = field(default=0, metadata=meta("gpuMinNodes", "int", "GPU group minimum (0: scale to zero)"))
    gpu_max_nodes: int = field(default=3, metadata=meta("gpuMaxNodes", "int", "GPU group maximum"))
    # Further GPU capacity, tried in order when the ranks above it have none (lab/vocab/capacity.py).
    gpu_fallback: list[dict[str, Any]] = field(
        default_factory=list,
        metadata=meta(
            "gpuFallback",
            "list",
            "GPU capacity tried after the GPU spot group, in order: each {instanceTypes, capacity: spot | on-demand, "
            "name}; an on-demand rank only last",
        ),
    )
    # Checkpoints: an S3 bucket mounted by Mountpoint for S3.
    checkpoint_bucket: str | None = field(
        default=None, metadata=meta("checkpointBucket", "str", "checkpoint bucket name [generated, unique]")
    )
    checkpoints_on_destroy: str = field(
        default="keep",
        metadata=meta("checkpointsOnDestroy", "str", "keep: `pulumi destroy` leaves the bucket; delete: removes it"),
    )
    # The eviction drill: FIS sends this notice before interrupting the instance.
    interruption_notice: str = field(
        default="PT2M", metadata=meta("interruptionNotice", "str", "FIS notice before the interruption, PT2M-PT15M")
    )
    cluster_autoscaler: bool = field(
        default=True, metadata=meta("clusterAutoscaler", "bool", "install Cluster Autoscaler (scales the groups)")
    )
    cluster_autoscaler_image_tag: str | None = field(
        default=None,
        metadata=meta("clusterAutoscalerImageTag", "str", "Cluster Autoscaler image tag [v<kubernetes minor>.0]"),
    )
    training_namespace: str = training_namespace_field()
    training_service_account: str = training_service_account_field()
    tags: dict[str, str] = field(default_factory=dict, metadata=meta("tags", "map", "AWS tags on every resource"))
    adopt_checkpoints: dict[str, str] = adopt_checkpoints_field()  # noqa: RUF009 - a Field, a new dict each

    # ------------------------------------------------------------------ derived
    @property
    def creates_vpc(self) -> bool:
        return self.existing_vpc_id is None

    @property
    def gpu_is_arm(self) -> bool:
        return "_ARM_" in self.gpu_ami_type

    @property
    def autoscaler_chart_version(self) -> str:
        """The Cluster Autoscaler chart for this cluster's minor (validation refuses others)."""
        return CLUSTER_AUTOSCALER_CHARTS[self.kubernetes_version][0]

    @property
    def autoscaler_image_tag(self) -> str:
        """The image the chart was released with, unless the stack names a patch release of it."""
        if self.cluster_autoscaler_image_tag:
            return self.cluster_autoscaler_image_tag
        return f"v{CLUSTER_AUTOSCALER_CHARTS[self.kubernetes_version][1]}"

    def first_rank(self) -> GpuRank:
        """The GPU spot group. A group spans every zone of its subnets: its Auto Scaling group
        tries each zone itself."""
        return GpuRank(1, self.gpu_group_name, tuple(self.gpu_instance_types), True)

    # ------------------------------------------------------------------ validation
    def checks(self) -> tuple[Check, ...]:
        """The checks below, in the order `problems()` runs them."""
        return _CHECKS


# --------------------------------------------------------------------------- checks
# Each check adds the problems of a few fields; `EksClusterArgs.problems` runs them in order.
# A field is read once through `found.text` or `found.strings`, which report a value of
# another type.


def _region(args: EksClusterArgs, found: FieldProblems) -> None:
    if (region := found.text("region")) is None:
        return
    if not _REGION.match(region):
        found.bad("region", "an AWS region code such as us-east-1 or eu-west-2")
    elif region not in eks_regions():
        found.bad(
            "region",
            f"a region where EKS runs (botocore {botocore_version()} lists {len(eks_regions())}, e.g. us-east-1, "
            "eu-west-2; `aws ec2 describe-regions`)",
        )


def _kubernetes_version(args: EksClusterArgs, found: FieldProblems) -> None:
    kubernetes_version(
        found,
        _K8S_VERSION,
        MIN_K8S_MINOR,
        f"a Kubernetes minor version 1.<minor> as EKS takes it, e.g. {DEFAULT_KUBERNETES_VERSION}",
        "older versions are out of EKS standard support",
    )


def _cluster_and_group_names(args: EksClusterArgs, found: FieldProblems) -> None:
    if (name := found.text("cluster_name")) is not None and not _CLUSTER_NAME.match(name):
        found.bad("cluster_name", "1-100 letters, digits, '-' or '_', starting with a letter or digit")
    for g in ("cpu_group_name", "gpu_group_name"):
        if (v := found.text(g)) is not None and not _GROUP_NAME.match(v):
            found.bad(g, "1-63 letters, digits, '-' or '_', starting with a letter or digit")
    if args.cpu_group_name == args.gpu_group_name:
        found.bad("gpu_group_name", f"a name other than cpu_group_name ({args.cpu_group_name!r})")


def _vpc(args: EksClusterArgs, found: FieldProblems) -> None:
    if args.creates_vpc:
        _new_vpc(args, found)
    else:
        _existing_vpc(args, found)


def _new_vpc(args: EksClusterArgs, found: FieldProblems) -> None:
    try:
        net = ipaddress.ip_network(args.vpc_cidr, strict=True)
        if net.version != 4 or not 16 <= net.prefixlen <= 20:
            raise ValueError
    except (TypeError, ValueError):
        found.bad("vpc_cidr", "an IPv4 network with a /16 to /20 prefix (VPC limits; room for 2x zones subnets)")
    if not is_int(args.availability_zone_count) or not 2 <= args.availability_zone_count <= 4:
        found.bad("availability_zone_count", "a whole number in 2..4 (EKS needs subnets in at least two zones)")
    if args.existing_private_subnet_ids:
        found.bad("existing_private_subnet_ids", "no subnets unless existing_vpc_id is set")


def _existing_vpc(args: EksClusterArgs, found: FieldProblems) -> None:
    if (vpc := found.text("existing_vpc_id")) is not None and not re.match(r"^vpc-[0-9a-f]{8,17}$", vpc):
        found.bad("existing_vpc_id", "a VPC id such as vpc-0a1b2c3d4e5f67890")
    subnets = found.strings("existing_private_subnet_ids")
    if len(subnets) < 2 or not all(re.match(r"^subnet-[0-9a-f]{8,17}$", s) for s in subnets):
        found.bad("existing_private_subnet_ids", "two or more subnet ids (subnet-...) in different zones")


def _api_access(args: EksClusterArgs, found: FieldProblems) -> None:
    """Who may reach the public API endpoint, and who is cluster-admin."""
    for cidr in found.strings("endpoint_public_access_cidrs"):
        try:
            ipaddress.ip_network(cidr, strict=True)
        except ValueError:
            found.bad("endpoint_public_access_cidrs", "IPv4 networks such as 203.0.113.0/24", cidr)
    for arn in found.strings("admin_principal_arns"):
        if not _ARN.match(arn):
            found.bad("admin_principal_arns", "IAM role or user ARNs (arn:aws:iam::<account>:role/<name>)", arn)


def _cpu_instance_type(args: EksClusterArgs, found: FieldProblems) -> None:
    if (cpu := found.text("cpu_instance_type")) is None:
        return
    if not INSTANCE_TYPE.match(cpu) or cpu not in ec2_instance_types():
        found.bad(
            "cpu_instance_type", f"an EC2 instance type (botocore {botocore_version()}'s list) such as m6i.xlarge"
        )
    elif is_accelerated_instance(cpu):
        found.bad("cpu_instance_type", "a CPU instance type (this group runs no GPU work), e.g. m6i.xlarge")


def _gpu_instance_types(args: EksClusterArgs, found: FieldProblems) -> None:
    gpus = found.strings("gpu_instance_types")
    if not gpus and isinstance(args.gpu_instance_types, list):
        found.bad("gpu_instance_types", "at least one NVIDIA GPU instance type, e.g. g4dn.xlarge")
    if len(set(gpus)) != len(gpus):
        found.bad("gpu_instance_types", "each instance type once")
    for t in gpus:
        if (expected := gpu_type_expected(t)) is not None:
            found.bad("gpu_instance_types", expected, t)


def _gpu_ranks(args: EksClusterArgs, found: FieldProblems) -> None:
    """The fallback ranks: instance types, capacity, distinct group names, and the autoscaler
    that chooses between them."""
    names_ok = bool(args.gpu_fallback) and isinstance(args.gpu_group_name, str)
    if gpu_fallback(args, found, other_pools=(args.cpu_group_name,), names_ok=names_ok) and (
        args.cluster_autoscaler is False
    ):
        found.bad("gpu_fallback", "no fallback ranks while cluster_autoscaler is off: the autoscaler chooses the rank")


def _gpu_ami_type(args: EksClusterArgs, found: FieldProblems) -> None:
    """An NVIDIA AMI type whose architecture fits every GPU instance type (a bad list of types
    is reported by `_gpu_instance_types`; here it counts as none)."""
    if (ami := found.text("gpu_ami_type")) is None:
        return
    if ami not in GPU_AMI_TYPES:
        found.bad("gpu_ami_type", "an NVIDIA AMI type: " + ", ".join(GPU_AMI_TYPES))
        return
    gpus = list(string_list(args.gpu_instance_types) or [])
    for entry in args.gpu_fallback if isinstance(args.gpu_fallback, list) else []:
        gpus += string_list(entry.get("instanceTypes") if isinstance(entry, dict) else None) or []
    arm = [t for t in gpus if instance_family(t) in ARM_GPU_FAMILIES]
    if arm and not args.gpu_is_arm:
        found.bad("gpu_ami_type", f"an ARM NVIDIA AMI type for Graviton instance types ({', '.join(arm)})")
    if args.gpu_is_arm and len(arm) != len(gpus):
        found.bad("gpu_ami_type", "an x86_64 NVIDIA AMI type: some GPU instance types are x86_64")


def _gpu_disk_size(args: EksClusterArgs, found: FieldProblems) -> None:
    if not is_int(args.gpu_disk_size_gb) or not 30 <= args.gpu_disk_size_gb <= 16384:
        found.bad("gpu_disk_size_gb", "a whole number of GiB in 30..16384 (CUDA images are large)")


def _group_sizes(args: EksClusterArgs, found: FieldProblems) -> None:
    for lo, hi, floor, why in (
        ("cpu_min_nodes", "cpu_max_nodes", 1, "the CPU group hosts etcd and the operator, so it never scales to zero"),
        ("gpu_min_nodes", "gpu_max_nodes", 0, "0 lets the spot group scale to zero"),
    ):
        node_bounds(args, found, lo, hi, most=MAX_GROUP_NODES, floor=floor, why=why)


def _checkpoint_storage(args: EksClusterArgs, found: FieldProblems) -> None:
    b = args.checkpoint_bucket
    if b is not None and (not isinstance(b, str) or not _BUCKET.match(b) or ".." in b or b.startswith("xn--")):
        found.bad(
            "checkpoint_bucket",
            "3-63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit",
        )
    if (keep := found.text("checkpoints_on_destroy")) is not None and keep not in CHECKPOINTS_ON_DESTROY:
        found.bad("checkpoints_on_destroy", "one of " + ", ".join(CHECKPOINTS_ON_DESTROY))


def _interruption_notice(args: EksClusterArgs, found: FieldProblems) -> None:
    if (notice := found.text("interruption_notice")) is None:
        return
    m = _ISO_MINUTES.match(notice)
    if not m or not 2 <= int(m.group(1)) <= 15:
        found.bad("interruption_notice", "an ISO 8601 duration in whole minutes from PT2M to PT15M (FIS's range)")


def _cluster_autoscaler(args: EksClusterArgs, found: FieldProblems) -> None:
    if not isinstance(args.cluster_autoscaler, bool):
        found.bad("cluster_autoscaler", "true or false")
    tag = args.cluster_autoscaler_image_tag
    if tag is not None and (not isinstance(tag, str) or not re.match(r"^v1\.\d+\.\d+$", tag)):
        found.bad("cluster_autoscaler_image_tag", "a Cluster Autoscaler release tag such as v1.35.0")
        return
    if args.cluster_autoscaler is not True or any(p.key == "kubernetes_version" for p in found):
        return  # a version that is no version is said once, by _kubernetes_version
    chart = CLUSTER_AUTOSCALER_CHARTS.get(args.kubernetes_version)
    if chart is None:
        found.bad(
            "kubernetes_version",
            f"one of {', '.join(sorted(CLUSTER_AUTOSCALER_CHARTS))} while cluster_autoscaler is on: the autoscaler's "
            "chart and image must match the cluster's minor, and no chart for this one is pinned here "
            "(or set cluster_autoscaler false and run your own)",
        )
    elif tag is not None and tag.split(".")[:2] != f"v{chart[1]}".split(".")[:2]:
        found.bad(
            "cluster_autoscaler_image_tag",
            f"a v{chart[1].rsplit('.', 1)[0]}.x release: the pinned chart {chart[0]} carries {chart[1]}, "
            "and an image newer than its chart watches what the chart's RBAC does not grant",
        )


def _tags(args: EksClusterArgs, found: FieldProblems) -> None:
    found.extend(tag_problems(args.tags, "tags", reserved=1))


# The checks of `EksClusterArgs.problems`, in the order they run.
_CHECKS = (
    _region,
    _kubernetes_version,
    _cluster_and_group_names,
    _vpc,
    _api_access,
    _cpu_instance_type,
    _gpu_instance_types,
    _gpu_ranks,
    _gpu_ami_type,
    _gpu_disk_size,
    _group_sizes,
    _checkpoint_storage,
    _interruption_notice,
    _cluster_autoscaler,
    training_identity,
    _tags,
    adopted_checkpoints(EKS_KEPT),
)

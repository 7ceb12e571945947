"""`EksClusterArgs`: every knob of the EKS stack, typed and validated before anything is declared.

Each field carries the stack-config key it is read from (`metadata["key"]`, read by
components/config.py), so an error names the key the user wrote. `problems()` collects every
problem at once; each names the field, the bad value and what is expected.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from lab.vocab.aws_tags import tag_problems
from lab.vocab.names import DNS_LABEL
from lab.vocab.problems import InvalidInput, Problem
from lab.vocab.versions import DEFAULT_KUBERNETES_VERSION

# --------------------------------------------------------------------------- value rules

# AWS region codes: us-east-1, eu-central-2, us-gov-west-1, ap-southeast-4, ...
_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d{1,2}$")
_K8S_VERSION = re.compile(r"^1\.(\d+)$")  # EKS takes a minor version only
MIN_K8S_MINOR = 30
_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")  # eks CreateCluster's pattern
_GROUP_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,62}$")
# EC2 instance types: family (with generation and attributes), a dot, a size.
_INSTANCE_TYPE = re.compile(r"^([a-z]+)(\d+)([a-z-]*)\.([a-z0-9]+)$")
# Families with NVIDIA GPUs; AWS's other accelerated families (g4ad: AMD, inf/trn: Neuron,
# dl1: Gaudi, f: FPGA, vt: video) cannot run CUDA.
_NVIDIA_FAMILIES = {
    "g4dn",
    "g5",
    "g5g",
    "g6",
    "g6e",
    "g6f",
    "gr6",
    "g7e",
    "p3",
    "p3dn",
    "p4d",
    "p4de",
    "p5",
    "p5e",
    "p5en",
    "p6",
}
_OTHER_ACCELERATORS = re.compile(r"^(g4ad|g3|g3s|inf\d|trn\d|dl\d|f\d|vt\d)")
_ARM_GPU_FAMILIES = {"g5g"}  # Graviton hosts: need an ARM AMI type
# The NVIDIA AMI types of managed node groups (botocore's eks model, AMITypes).
GPU_AMI_TYPES = (
    "AL2023_x86_64_NVIDIA",
    "AL2023_ARM_64_NVIDIA",
    "BOTTLEROCKET_x86_64_NVIDIA",
    "BOTTLEROCKET_ARM_64_NVIDIA",
)
CPU_AMI_TYPES = ("AL2023_x86_64_STANDARD", "AL2023_ARM_64_STANDARD", "BOTTLEROCKET_x86_64", "BOTTLEROCKET_ARM_64")
# Bucket names: 3-63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_ISO_MINUTES = re.compile(r"^PT(\d+)M$")
CHECKPOINTS_ON_DESTROY = ("keep", "delete")
MAX_GROUP_NODES = 1000  # scaling_config maxSize limit of a managed node group
_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$")


def instance_family(instance_type: str) -> str | None:
    m = _INSTANCE_TYPE.match(instance_type)
    return f"{m.group(1)}{m.group(2)}{m.group(3)}" if m else None


def is_nvidia_instance(instance_type: str) -> bool:
    return instance_family(instance_type) in _NVIDIA_FAMILIES


def is_accelerated_instance(instance_type: str) -> bool:
    family = instance_family(instance_type) or ""
    return family in _NVIDIA_FAMILIES or bool(_OTHER_ACCELERATORS.match(family))


def _meta(key: str, kind: str, doc: str) -> dict[str, str]:
    return {"key": key, "kind": kind, "doc": doc}


# --------------------------------------------------------------------------- args


@dataclass(frozen=True)
class EksClusterArgs:
    """Arguments of `EksCluster`. Defaults are the lab's; the stack file sets the usual ones."""

    region: str = field(metadata=_meta("region", "str", "AWS region code, e.g. us-east-1"))
    cluster_name: str = field(metadata=_meta("clusterName", "str", "EKS cluster name"))
    kubernetes_version: str = field(
        default=DEFAULT_KUBERNETES_VERSION, metadata=_meta("kubernetesVersion", "str", "Kubernetes version 1.<minor>")
    )
    # Network: a new VPC over `availabilityZoneCount` zones, or an existing one.
    vpc_cidr: str = field(default="10.40.0.0/16", metadata=_meta("vpcCidr", "str", "CIDR of the new VPC (/16-/20)"))
    availability_zone_count: int = field(
        default=2, metadata=_meta("availabilityZoneCount", "int", "zones the new VPC spans (2-4)")
    )
    existing_vpc_id: str | None = field(
        default=None, metadata=_meta("existingVpcId", "str", "use this VPC instead of creating one")
    )
    existing_private_subnet_ids: list[str] = field(
        default_factory=list,
        metadata=_meta("existingPrivateSubnetIds", "list", "with existingVpcId: private subnets in 2+ zones"),
    )
    endpoint_public_access_cidrs: list[str] = field(
        default_factory=lambda: ["0.0.0.0/0"],
        metadata=_meta("endpointPublicAccessCidrs", "list", "CIDRs that may reach the public API endpoint"),
    )
    admin_principal_arns: list[str] = field(
        default_factory=list,
        metadata=_meta("adminPrincipalArns", "list", "IAM roles/users given cluster-admin (access entries)"),
    )
    # CPU node group: etcd rendezvous, training operator, launchers, the autoscaler. On-demand.
    cpu_group_name: str = field(default="cpu", metadata=_meta("cpuGroupName", "str", "CPU node group name"))
    cpu_instance_type: str = field(
        default="m6i.xlarge", metadata=_meta("cpuInstanceType", "str", "CPU node group instance type")
    )
    cpu_min_nodes: int = field(default=1, metadata=_meta("cpuMinNodes", "int", "CPU node group minimum"))
    cpu_max_nodes: int = field(default=2, metadata=_meta("cpuMaxNodes", "int", "CPU node group maximum"))
    # GPU node group: elastic workers. Spot, several instance types, scales to zero.
    gpu_group_name: str = field(default="gpu-spot", metadata=_meta("gpuGroupName", "str", "GPU spot node group name"))
    gpu_instance_types: list[str] = field(
        default_factory=lambda: ["g4dn.xlarge", "g5.xlarge", "g6.xlarge"],
        metadata=_meta("gpuInstanceTypes", "list", "GPU spot instance types (several: spot capacity varies)"),
    )
    gpu_ami_type: str = field(
        default="AL2023_x86_64_NVIDIA", metadata=_meta("gpuAmiType", "str", "NVIDIA AMI type of the GPU group")
    )
    gpu_disk_size_gb: int = field(default=100, metadata=_meta("gpuDiskSizeGb", "int", "GPU node disk in GiB"))
    gpu_min_nodes: int = field(default=0, metadata=_meta("gpuMinNodes", "int", "GPU group minimum (0: scale to zero)"))
    gpu_max_nodes: int = field(default=3, metadata=_meta("gpuMaxNodes", "int", "GPU group maximum"))
    # Checkpoints: an S3 bucket mounted by Mountpoint for S3.
    checkpoint_bucket: str | None = field(
        default=None, metadata=_meta("checkpointBucket", "str", "checkpoint bucket name [generated, unique]")
    )
    checkpoints_on_destroy: str = field(
        default="keep",
        metadata=_meta("checkpointsOnDestroy", "str", "keep: `pulumi destroy` leaves the bucket; delete: removes it"),
    )
    # The eviction drill: FIS sends this notice before interrupting the instance.
    interruption_notice: str = field(
        default="PT2M", metadata=_meta("interruptionNotice", "str", "FIS notice before the interruption, PT2M-PT15M")
    )
    cluster_autoscaler: bool = field(
        default=True, metadata=_meta("clusterAutoscaler", "bool", "install Cluster Autoscaler (scales the groups)")
    )
    cluster_autoscaler_image_tag: str | None = field(
        default=None,
        metadata=_meta("clusterAutoscalerImageTag", "str", "Cluster Autoscaler image tag [v<kubernetes minor>.0]"),
    )
    training_namespace: str = field(
        default="training", metadata=_meta("trainingNamespace", "str", "namespace of the training pods")
    )
    training_service_account: str = field(
        default="trainer", metadata=_meta("trainingServiceAccount", "str", "service account of the training pods")
    )
    tags: dict[str, str] = field(default_factory=dict, metadata=_meta("tags", "map", "AWS tags on every resource"))

    # ------------------------------------------------------------------ derived
    @property
    def keeps_checkpoints(self) -> bool:
        return self.checkpoints_on_destroy == "keep"

    @property
    def creates_vpc(self) -> bool:
        return self.existing_vpc_id is None

    @property
    def gpu_is_arm(self) -> bool:
        return "_ARM_" in self.gpu_ami_type

    @property
    def autoscaler_image_tag(self) -> str:
        return self.cluster_autoscaler_image_tag or f"v{self.kubernetes_version}.0"

    @property
    def notice_minutes(self) -> int:
        m = _ISO_MINUTES.match(self.interruption_notice)
        return int(m.group(1)) if m else 2

    def replace(self, **changes: Any) -> EksClusterArgs:
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ validation
    def problems(self) -> list[Problem]:
        """Every invalid value, as (field, value, expected); empty when all is well."""
        out: list[Problem] = []

        def bad(name: str, expected: str, value: Any = None) -> None:
            out.append(Problem(name, getattr(self, name) if value is None else value, expected))

        def is_int(value: Any) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        def text(name: str) -> str | None:
            value = getattr(self, name)
            if not isinstance(value, str):
                bad(name, "a string")
                return None
            return value

        def strings(name: str) -> list[str]:
            value = getattr(self, name)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                bad(name, "a list of strings")
                return []
            return value

        if (region := text("region")) is not None and not _REGION.match(region):
            bad("region", "an AWS region code such as us-east-1 or eu-west-2")
        if (ver := text("kubernetes_version")) is not None:
            m = _K8S_VERSION.match(ver)
            if not m:
                bad(
                    "kubernetes_version",
                    f"a Kubernetes minor version 1.<minor> as EKS takes it, e.g. {DEFAULT_KUBERNETES_VERSION}",
                )
            elif int(m.group(1)) < MIN_K8S_MINOR:
                bad(
                    "kubernetes_version", f"1.{MIN_K8S_MINOR} or newer (older versions are out of EKS standard support)"
                )
        if (name := text("cluster_name")) is not None and not _CLUSTER_NAME.match(name):
            bad("cluster_name", "1-100 letters, digits, '-' or '_', starting with a letter or digit")
        for g in ("cpu_group_name", "gpu_group_name"):
            if (v := text(g)) is not None and not _GROUP_NAME.match(v):
                bad(g, "1-63 letters, digits, '-' or '_', starting with a letter or digit")
        if self.cpu_group_name == self.gpu_group_name:
            bad("gpu_group_name", f"a name other than cpu_group_name ({self.cpu_group_name!r})")

        # Network.
        if self.creates_vpc:
            try:
                net = ipaddress.ip_network(self.vpc_cidr, strict=True)
                if net.version != 4 or not 16 <= net.prefixlen <= 20:
                    raise ValueError
            except (TypeError, ValueError):
                bad("vpc_cidr", "an IPv4 network with a /16 to /20 prefix (VPC limits; room for 2x zones subnets)")
            if not is_int(self.availability_zone_count) or not 2 <= self.availability_zone_count <= 4:
                bad("availability_zone_count", "a whole number in 2..4 (EKS needs subnets in at least two zones)")
            if self.existing_private_subnet_ids:
                bad("existing_private_subnet_ids", "no subnets unless existing_vpc_id is set")
        else:
            if (vpc := text("existing_vpc_id")) is not None and not re.match(r"^vpc-[0-9a-f]{8,17}$", vpc):
                bad("existing_vpc_id", "a VPC id such as vpc-0a1b2c3d4e5f67890")
            subnets = strings("existing_private_subnet_ids")
            if len(subnets) < 2 or not all(re.match(r"^subnet-[0-9a-f]{8,17}$", s) for s in subnets):
                bad("existing_private_subnet_ids", "two or more subnet ids (subnet-...) in different zones")
        for cidr in strings("endpoint_public_access_cidrs"):
            try:
                ipaddress.ip_network(cidr, strict=True)
            except ValueError:
                bad("endpoint_public_access_cidrs", "IPv4 networks such as 203.0.113.0/24", cidr)
        for arn in strings("admin_principal_arns"):
            if not _ARN.match(arn):
                bad("admin_principal_arns", "IAM role or user ARNs (arn:aws:iam::<account>:role/<name>)", arn)

        # Instance types and AMI.
        if (cpu := text("cpu_instance_type")) is not None:
            if not _INSTANCE_TYPE.match(cpu):
                bad("cpu_instance_type", "an EC2 instance type such as m6i.xlarge")
            elif is_accelerated_instance(cpu):
                bad("cpu_instance_type", "a CPU instance type (this group runs no GPU work), e.g. m6i.xlarge")
        gpus = strings("gpu_instance_types")
        if not gpus and isinstance(self.gpu_instance_types, list):
            bad("gpu_instance_types", "at least one NVIDIA GPU instance type, e.g. g4dn.xlarge")
        if len(set(gpus)) != len(gpus):
            bad("gpu_instance_types", "each instance type once")
        for t in gpus:
            if not _INSTANCE_TYPE.match(t):
                bad("gpu_instance_types", "EC2 instance types such as g4dn.xlarge", t)
            elif not is_nvidia_instance(t):
                what = "an accelerator CUDA cannot use" if is_accelerated_instance(t) else "no GPU"
                bad(
                    "gpu_instance_types",
                    f"NVIDIA GPU instance types (g4dn, g5, g6, g6e, p4d, p5, ...); {t} has {what}",
                    t,
                )
        if (ami := text("gpu_ami_type")) is not None:
            if ami not in GPU_AMI_TYPES:
                bad("gpu_ami_type", "an NVIDIA AMI type: " + ", ".join(GPU_AMI_TYPES))
            else:
                arm = [t for t in gpus if instance_family(t) in _ARM_GPU_FAMILIES]
                if arm and not self.gpu_is_arm:
                    bad("gpu_ami_type", f"an ARM NVIDIA AMI type for Graviton instance types ({', '.join(arm)})")
                if self.gpu_is_arm and len(arm) != len(gpus):
                    bad("gpu_ami_type", "an x86_64 NVIDIA AMI type: some GPU instance types are x86_64")
        if not is_int(self.gpu_disk_size_gb) or not 30 <= self.gpu_disk_size_gb <= 16384:
            bad("gpu_disk_size_gb", "a whole number of GiB in 30..16384 (CUDA images are large)")

        # Sizes.
        for lo, hi, floor, why in (
            (
                "cpu_min_nodes",
                "cpu_max_nodes",
                1,
                "the CPU group hosts etcd and the operator, so it never scales to zero",
            ),
            ("gpu_min_nodes", "gpu_max_nodes", 0, "0 lets the spot group scale to zero"),
        ):
            vlo, vhi = getattr(self, lo), getattr(self, hi)
            ok_hi = is_int(vhi) and 1 <= vhi <= MAX_GROUP_NODES
            if not ok_hi:
                bad(hi, f"a whole number in 1..{MAX_GROUP_NODES}")
            if not is_int(vlo) or vlo < floor:
                bad(lo, f"a whole number >= {floor} ({why})")
            elif ok_hi and vlo > vhi:
                bad(lo, f"<= {hi} ({vhi})")

        # Storage, drill, names.
        if self.checkpoint_bucket is not None:
            b = self.checkpoint_bucket
            if not isinstance(b, str) or not _BUCKET.match(b) or ".." in b or b.startswith("xn--"):
                bad(
                    "checkpoint_bucket",
                    "3-63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit",
                )
        if (keep := text("checkpoints_on_destroy")) is not None and keep not in CHECKPOINTS_ON_DESTROY:
            bad("checkpoints_on_destroy", "one of " + ", ".join(CHECKPOINTS_ON_DESTROY))
        if (notice := text("interruption_notice")) is not None:
            m = _ISO_MINUTES.match(notice)
            if not m or not 2 <= int(m.group(1)) <= 15:
                bad("interruption_notice", "an ISO 8601 duration in whole minutes from PT2M to PT15M (FIS's range)")
        if not isinstance(self.cluster_autoscaler, bool):
            bad("cluster_autoscaler", "true or false")
        tag = self.cluster_autoscaler_image_tag
        if tag is not None and (not isinstance(tag, str) or not re.match(r"^v1\.\d+\.\d+$", tag)):
            bad("cluster_autoscaler_image_tag", "a Cluster Autoscaler release tag such as v1.35.0")
        for n in ("training_namespace", "training_service_account"):
            if (v := text(n)) is not None and not DNS_LABEL.match(v):
                bad(n, "a DNS-1123 label: 1-63 lower-case letters, digits and '-'")
        out.extend(tag_problems(self.tags, "tags", reserved=1))
        return out

    def validate(self) -> EksClusterArgs:
        if problems := self.problems():
            raise InvalidInput(problems, "EKS cluster arguments")
        return self


def config_fields() -> list[dataclasses.Field[Any]]:
    """The args fields that stack config can set (all of them), with their key metadata."""
    return [f for f in dataclasses.fields(EksClusterArgs) if "key" in f.metadata]

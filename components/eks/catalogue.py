"""What AWS offers as the EKS args check it: EC2 instance types (botocore's list), their GPUs
and accelerators, the NVIDIA AMI types of managed node groups, and the regions where EKS runs."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from lab.vocab.versions import MIN_GPU_ARCHITECTURE, TORCH_CUDA_BUILD

# EC2 instance types: family (with generation and attributes), a dot, a size.
INSTANCE_TYPE = re.compile(r"^([a-z]+)(\d+)([a-z-]*)\.([a-z0-9]+)$")
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
# Cluster Autoscaler's AWS provider counts a node as a GPU node by this label. Without it a node of
# a group scaled from zero counts as GPU-less until the device plugin advertises its GPUs, and the
# autoscaler adds more nodes meanwhile (its AWS README, "Special note on GPU instances").
ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"
# The values it knows (cloudprovider/aws availableGPUTypes), by instance family; other NVIDIA
# families get "nvidia": the label's presence is what marks a GPU node.
_ACCELERATOR_BY_FAMILY = {
    "p3": "nvidia-tesla-v100",
    "p3dn": "nvidia-tesla-v100",
    "g4dn": "nvidia-tesla-t4",
    "p4d": "nvidia-tesla-a100",
    "p4de": "nvidia-tesla-a100",
    "g5": "nvidia-a10g",
}
# NVIDIA families older than the image's CUDA build runs on (lab.vocab.versions): their GPU.
_PRE_TURING_FAMILIES = {"p2": "K80", "p3": "V100", "p3dn": "V100"}
_OTHER_ACCELERATORS = re.compile(r"^(g4ad|g3|g3s|inf\d|trn\d|dl\d|f\d|vt\d)")
ARM_GPU_FAMILIES = {"g5g"}  # Graviton hosts: need an ARM AMI type
# The NVIDIA AMI types of managed node groups (botocore's eks model, AMITypes).
GPU_AMI_TYPES = (
    "AL2023_x86_64_NVIDIA",
    "AL2023_ARM_64_NVIDIA",
    "BOTTLEROCKET_x86_64_NVIDIA",
    "BOTTLEROCKET_ARM_64_NVIDIA",
)
CPU_AMI_TYPES = ("AL2023_x86_64_STANDARD", "AL2023_ARM_64_STANDARD", "BOTTLEROCKET_x86_64", "BOTTLEROCKET_ARM_64")


def instance_family(instance_type: str) -> str | None:
    m = INSTANCE_TYPE.match(instance_type)
    return f"{m.group(1)}{m.group(2)}{m.group(3)}" if m else None


def accelerator(instance_types: Sequence[str]) -> str:
    """The GPU group's ACCELERATOR_LABEL value: its first instance type's GPU as the autoscaler
    names it, else "nvidia"."""
    for instance_type in instance_types:
        known = _ACCELERATOR_BY_FAMILY.get(instance_family(instance_type) or "")
        if known:
            return known
    return "nvidia"


def is_nvidia_instance(instance_type: str) -> bool:
    return instance_family(instance_type) in _NVIDIA_FAMILIES


def is_accelerated_instance(instance_type: str) -> bool:
    family = instance_family(instance_type) or ""
    return family in _NVIDIA_FAMILIES or bool(_OTHER_ACCELERATORS.match(family))


@functools.cache
def eks_regions() -> frozenset[str]:
    """The regions of every partition that botocore's endpoint data lists for EKS."""
    import botocore.session

    session = botocore.session.get_session()
    return frozenset(
        region
        for partition in session.get_available_partitions()
        for region in session.get_available_regions("eks", partition_name=partition)
    )


@functools.cache
def ec2_instance_types() -> frozenset[str]:
    """The instance types botocore's EC2 model knows (its InstanceType enum)."""
    import botocore.session

    return frozenset(botocore.session.get_session().get_service_model("ec2").shape_for("InstanceType").enum)


def botocore_version() -> str:
    import botocore

    return str(botocore.__version__)


def gpu_type_expected(t: str) -> str | None:
    """What a GPU instance type should be instead, or None when the image runs on `t`."""
    if not INSTANCE_TYPE.match(t) or t not in ec2_instance_types():
        return f"EC2 instance types (botocore {botocore_version()}'s list) such as g4dn.xlarge"
    if (old := _PRE_TURING_FAMILIES.get(instance_family(t) or "")) is not None:
        return (
            f"GPUs the trainer image can run: {t} has a {old}, and {TORCH_CUDA_BUILD} has no kernels for GPUs "
            f"before {MIN_GPU_ARCHITECTURE} (g4dn, g5, g6, g6e, p4d, p5, ...)"
        )
    if not is_nvidia_instance(t):
        what = "an accelerator CUDA cannot use" if is_accelerated_instance(t) else "no GPU"
        return f"NVIDIA GPU instance types (g4dn, g5, g6, g6e, p4d, p5, ...); {t} has {what}"
    return None

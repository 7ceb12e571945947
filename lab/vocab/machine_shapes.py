"""What a VM size or instance type is made of, for the sizes the stacks use: vCPUs (what the
clouds' quotas count), GPUs and memory per GPU (the capacity ranks' rule), the quota it
counts against, its memory, and what of it a node leaves to pods (`node_room`: what `submit`
checks a worker's requests against).

Sources: Azure's size pages (learn.microsoft.com, virtual-machines/sizes: ncast4v3-series,
nca100v4-series, ncadsh100v5-series, nvadsa10v5-series, dsv5-series) and AWS's instance type
pages (accelerated computing, general purpose). Azure's quota family names (`usage.list`'s
`name.value`) are as `az vm list-usage` prints them; Azure writes their case inconsistently,
so they are compared without case and spaces (`same_family`), and `elastic-lab check` reads
the family of each size from Azure's resource SKUs where it can. A size missing here is
not checked offline: add it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """vCPUs, GPUs, memory per GPU (GiB; 0 for CPU sizes), the quota family (Azure: the usage
    name of its family's vCPUs; AWS: the instance family), the VM's memory (GiB), and on AWS
    the pods a node may hold (the VPC CNI's ENI limit, amazon-eks-ami's eni-max-pods.txt:
    ENIs x (IPv4 addresses per ENI - 1) + 2)."""

    vcpus: int
    gpus: int
    gpu_memory_gib: float
    family: str
    memory_gib: float
    max_pods: int | None = None


AZURE = {
    "Standard_D2s_v5": Shape(2, 0, 0, "standardDSv5Family", 8),
    "Standard_D4s_v5": Shape(4, 0, 0, "standardDSv5Family", 16),
    "Standard_D8s_v5": Shape(8, 0, 0, "standardDSv5Family", 32),
    "Standard_D16s_v5": Shape(16, 0, 0, "standardDSv5Family", 64),
    "Standard_NC4as_T4_v3": Shape(4, 1, 16, "standardNCASv3_T4Family", 28),
    "Standard_NC8as_T4_v3": Shape(8, 1, 16, "standardNCASv3_T4Family", 56),
    "Standard_NC16as_T4_v3": Shape(16, 1, 16, "standardNCASv3_T4Family", 110),
    "Standard_NC64as_T4_v3": Shape(64, 4, 16, "standardNCASv3_T4Family", 440),
    "Standard_NV36ads_A10_v5": Shape(36, 1, 24, "standardNVADSA10v5Family", 440),
    "Standard_NC24ads_A100_v4": Shape(24, 1, 80, "standardNCADSA100v4Family", 220),
    "Standard_NC48ads_A100_v4": Shape(48, 2, 80, "standardNCADSA100v4Family", 440),
    "Standard_NC96ads_A100_v4": Shape(96, 4, 80, "standardNCADSA100v4Family", 880),
    "Standard_NC40ads_H100_v5": Shape(40, 1, 94, "standardNCadsH100v5Family", 320),
    "Standard_NC80adis_H100_v5": Shape(80, 2, 94, "standardNCadsH100v5Family", 640),
}

AWS = {
    "m6i.large": Shape(2, 0, 0, "m6i", 8, 29),
    "m6i.xlarge": Shape(4, 0, 0, "m6i", 16, 58),
    "m6i.2xlarge": Shape(8, 0, 0, "m6i", 32, 58),
    "g4dn.xlarge": Shape(4, 1, 16, "g4dn", 16, 29),
    "g4dn.2xlarge": Shape(8, 1, 16, "g4dn", 32, 29),
    "g4dn.4xlarge": Shape(16, 1, 16, "g4dn", 64, 29),
    "g4dn.12xlarge": Shape(48, 4, 16, "g4dn", 192, 234),
    "g5.xlarge": Shape(4, 1, 24, "g5", 16, 58),
    "g5.2xlarge": Shape(8, 1, 24, "g5", 32, 58),
    "g5.4xlarge": Shape(16, 1, 24, "g5", 64, 234),
    "g5.12xlarge": Shape(48, 4, 24, "g5", 192, 737),
    "g6.xlarge": Shape(4, 1, 24, "g6", 16, 58),
    "g6.2xlarge": Shape(8, 1, 24, "g6", 32, 58),
    "g6.4xlarge": Shape(16, 1, 24, "g6", 64, 234),
    "g6e.xlarge": Shape(4, 1, 48, "g6e", 32, 58),
    "g6e.2xlarge": Shape(8, 1, 48, "g6e", 64, 58),
    "p4d.24xlarge": Shape(96, 8, 40, "p4d", 1152, 737),
    "p5.48xlarge": Shape(192, 8, 80, "p5", 2048, 100),
}


def same_family(a: str, b: str) -> bool:
    """Azure family names compared as Azure writes them: any case, with or without spaces."""
    return "".join(a.split()).lower() == "".join(b.split()).lower()


# ------------------------------------------------------------------ what a node leaves to pods
@dataclass(frozen=True)
class NodeRoom:
    """What one node of a size leaves to pods (its allocatable): CPU in millicores, memory in MiB."""

    size: str
    cpu_millis: int
    memory_mib: int


# AKS's kube-reserved CPU by the host's cores (learn.microsoft.com, aks/node-resource-reservations).
# A size between two rows takes the lower row's reservation: the room is then never under-stated.
_AKS_CPU_RESERVED_MILLIS = ((1, 60), (2, 100), (4, 140), (8, 180), (16, 260), (32, 420), (64, 740))
# The pods an AKS node holds unless its pool sets maxPods: 250 with Azure CNI Overlay, the
# network plugin our AKS clusters use.
AKS_DEFAULT_MAX_PODS = 250
# The kubelet's hard eviction threshold, memory.available < 100Mi, on AKS 1.29+ and on EKS AL2023
# (amazon-eks-ami nodeadm, kubelet config.go: evictionHard).
EVICTION_HARD_MIB = 100


def _aks_reserved(shape: Shape, max_pods: int) -> tuple[int, int]:
    """(millicores, MiB) AKS 1.29+ reserves: the CPU table above; memory the lesser of 20 MB per
    pod the node may hold + 50 MB and 25% of the VM's memory, plus the eviction threshold."""
    cpu = max((millis for cores, millis in _AKS_CPU_RESERVED_MILLIS if cores <= shape.vcpus), default=60)
    memory = min(20 * max_pods + 50, int(shape.memory_gib * 1024 * 0.25))
    return cpu, memory + EVICTION_HARD_MIB


def _eks_reserved(shape: Shape, max_pods: int) -> tuple[int, int]:
    """(millicores, MiB) an EKS AL2023 node reserves (amazon-eks-ami nodeadm, kubelet config.go):
    6% of the first core, 1% of the second, 0.5% of the third and fourth, 0.25% of the rest;
    11 MiB per pod it may hold + 255 MiB, plus the eviction threshold."""
    millis = shape.vcpus * 1000
    cpu = 0
    for start, end, hundredths_of_percent in ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, millis, 25)):
        if millis > start:
            cpu += (min(millis, end) - start) * hundredths_of_percent // 10000
    return cpu, 11 * max_pods + 255 + EVICTION_HARD_MIB


def node_room(cloud: str, size: str, max_pods: int | None = None) -> NodeRoom | None:
    """What a node of `size` on `cloud` (aks, eks) leaves to pods after the kubelet's and the
    system's reservations; None for a size or cloud not known here (nothing is guessed).
    DaemonSets (the device plugin, the CNI, CSI node plugins) take a little more of it."""
    if cloud == "aks" and size in AZURE:
        shape = AZURE[size]
        cpu, memory = _aks_reserved(shape, max_pods or AKS_DEFAULT_MAX_PODS)
    elif cloud == "eks" and size in AWS and AWS[size].max_pods:
        shape = AWS[size]
        cpu, memory = _eks_reserved(shape, max_pods or shape.max_pods or 0)
    else:
        return None
    return NodeRoom(size, shape.vcpus * 1000 - cpu, int(shape.memory_gib * 1024) - memory)

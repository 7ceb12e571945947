"""What a VM size or instance type is made of, for the sizes the stacks use: vCPUs (what the
clouds' quotas count), GPUs and memory per GPU (the capacity ranks' rule), and the quota it
counts against.

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
    """vCPUs, GPUs, memory per GPU (GiB; 0 for CPU sizes), and the quota family (Azure: the
    usage name of its family's vCPUs; AWS: the instance family)."""

    vcpus: int
    gpus: int
    gpu_memory_gib: float
    family: str


AZURE = {
    "Standard_D2s_v5": Shape(2, 0, 0, "standardDSv5Family"),
    "Standard_D4s_v5": Shape(4, 0, 0, "standardDSv5Family"),
    "Standard_D8s_v5": Shape(8, 0, 0, "standardDSv5Family"),
    "Standard_D16s_v5": Shape(16, 0, 0, "standardDSv5Family"),
    "Standard_NC4as_T4_v3": Shape(4, 1, 16, "standardNCASv3_T4Family"),
    "Standard_NC8as_T4_v3": Shape(8, 1, 16, "standardNCASv3_T4Family"),
    "Standard_NC16as_T4_v3": Shape(16, 1, 16, "standardNCASv3_T4Family"),
    "Standard_NC64as_T4_v3": Shape(64, 4, 16, "standardNCASv3_T4Family"),
    "Standard_NV36ads_A10_v5": Shape(36, 1, 24, "standardNVADSA10v5Family"),
    "Standard_NC24ads_A100_v4": Shape(24, 1, 80, "standardNCADSA100v4Family"),
    "Standard_NC48ads_A100_v4": Shape(48, 2, 80, "standardNCADSA100v4Family"),
    "Standard_NC96ads_A100_v4": Shape(96, 4, 80, "standardNCADSA100v4Family"),
    "Standard_NC40ads_H100_v5": Shape(40, 1, 94, "standardNCadsH100v5Family"),
    "Standard_NC80adis_H100_v5": Shape(80, 2, 94, "standardNCadsH100v5Family"),
}

AWS = {
    "m6i.large": Shape(2, 0, 0, "m6i"),
    "m6i.xlarge": Shape(4, 0, 0, "m6i"),
    "m6i.2xlarge": Shape(8, 0, 0, "m6i"),
    "g4dn.xlarge": Shape(4, 1, 16, "g4dn"),
    "g4dn.2xlarge": Shape(8, 1, 16, "g4dn"),
    "g4dn.4xlarge": Shape(16, 1, 16, "g4dn"),
    "g4dn.12xlarge": Shape(48, 4, 16, "g4dn"),
    "g5.xlarge": Shape(4, 1, 24, "g5"),
    "g5.2xlarge": Shape(8, 1, 24, "g5"),
    "g5.4xlarge": Shape(16, 1, 24, "g5"),
    "g5.12xlarge": Shape(48, 4, 24, "g5"),
    "g6.xlarge": Shape(4, 1, 24, "g6"),
    "g6.2xlarge": Shape(8, 1, 24, "g6"),
    "g6.4xlarge": Shape(16, 1, 24, "g6"),
    "g6e.xlarge": Shape(4, 1, 48, "g6e"),
    "g6e.2xlarge": Shape(8, 1, 48, "g6e"),
    "p4d.24xlarge": Shape(96, 8, 40, "p4d"),
    "p5.48xlarge": Shape(192, 8, 80, "p5"),
}


def same_family(a: str, b: str) -> bool:
    """Azure family names compared as Azure writes them: any case, with or without spaces."""
    return "".join(a.split()).lower() == "".join(b.split()).lower()

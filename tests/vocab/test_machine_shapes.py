"""Machine shapes (lab/vocab/machine_shapes.py): what a VM is, and what a node of it leaves to pods."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import moto
import pytest

from lab.vocab.machine_shapes import AWS, node_room


def _ec2_instance_types() -> dict:
    """EC2's DescribeInstanceTypes answers, as moto carries them."""
    return json.loads(
        gzip.decompress((Path(moto.__file__).parent / "ec2/resources/instance_types.json.gz").read_bytes())
    )


def test_aws_shapes_are_the_ec2_instance_types_moto_carries():
    """vCPUs, GPUs and memory as EC2's DescribeInstanceTypes reports them (moto's copy of it)."""
    data = _ec2_instance_types()
    for name, shape in AWS.items():
        ec2 = data[name]
        gpus = sum(g["Count"] for g in (ec2.get("GpuInfo") or {}).get("Gpus", []))
        assert (shape.vcpus, shape.gpus) == (ec2["VCpuInfo"]["DefaultVCpus"], gpus), name
        assert shape.memory_gib * 1024 == ec2["MemoryInfo"]["SizeInMiB"], name


def test_aws_max_pods_follow_the_vpc_cnis_rule():
    """ENIs x (IPv4 addresses per ENI - 1) + 2 (amazon-eks-ami eni-max-pods.txt), on the default
    network card; p4d and p5 have several cards, and the file counts the first alone."""
    data = _ec2_instance_types()
    for name, shape in AWS.items():
        if name in ("p4d.24xlarge", "p5.48xlarge"):
            continue
        network = data[name]["NetworkInfo"]
        assert shape.max_pods == network["MaximumNetworkInterfaces"] * (network["Ipv4AddressesPerInterface"] - 1) + 2


@pytest.mark.parametrize(
    "cloud,size,cpu_millis,memory_mib",
    [
        # AKS 1.29+: 140m for 4 cores; min(20 x 250 pods + 50, 25% of 28 GiB) = 5050 MiB, + 100Mi eviction.
        ("aks", "Standard_NC4as_T4_v3", 4000 - 140, 28 * 1024 - 5050 - 100),
        # 24 cores: the 16-core row (260m), the smaller reservation of the two rows around it.
        ("aks", "Standard_NC24ads_A100_v4", 24000 - 260, 220 * 1024 - 5050 - 100),
        # EKS AL2023: 60 + 10 + 10 = 80m of 4 cores; 11 x 29 pods + 255 = 574 MiB, + 100Mi eviction.
        ("eks", "g4dn.xlarge", 4000 - 80, 16 * 1024 - 574 - 100),
        ("eks", "g5.xlarge", 4000 - 80, 16 * 1024 - (11 * 58 + 255) - 100),
        # 8 cores: 80m + 0.25% of the 4 cores above 4 (10m).
        ("eks", "g6.2xlarge", 8000 - 90, 32 * 1024 - (11 * 58 + 255) - 100),
    ],
)
def test_a_node_leaves_its_size_less_what_the_kubelet_and_the_system_reserve(cloud, size, cpu_millis, memory_mib):
    room = node_room(cloud, size)
    assert room is not None and (room.cpu_millis, room.memory_mib) == (cpu_millis, memory_mib)


def test_the_aks_documentations_example_and_a_pools_own_max_pods():
    """learn.microsoft.com aks/node-resource-reservations: 30 pods -> 20 MB x 30 + 50 MB = 650 MB."""
    room = node_room("aks", "Standard_D2s_v5", max_pods=30)
    assert room is not None and room.memory_mib == 8 * 1024 - 650 - 100


def test_a_size_or_cloud_not_known_here_is_not_guessed():
    assert node_room("aks", "Standard_Unknown_v9") is None
    assert node_room("eks", "Standard_NC4as_T4_v3") is None
    assert node_room("byo", "g4dn.xlarge") is None

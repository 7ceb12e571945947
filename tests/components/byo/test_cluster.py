"""The bring-your-own cluster: its arguments from the stack config, and what it hands the platform."""

from __future__ import annotations

import pytest

from components.byo import ByoCluster, ByoClusterArgs
from components.cluster_info import StorageClassCheckpoint
from lab.program.harness import run_program
from lab.vocab.names import BYO_CLUSTER_TYPE
from lab.vocab.pools import Taint
from lab.vocab.problems import InvalidInput

POOLS = {
    "gpuSpot": {
        "taints": ["elastic-spot-lab/spot=true:NoSchedule"],
        "spotLabels": {"elastic-spot-lab/capacity": "spot"},
    }
}


def test_args_from_the_stack_config():
    args = ByoClusterArgs.from_config(
        "kube.yaml", {"pools": POOLS, "checkpoint": {"storageClass": "standard", "accessMode": "ReadWriteOnce"}}
    )
    assert (args.kubeconfig_path, args.storage_class, args.access_mode) == ("kube.yaml", "standard", "ReadWriteOnce")
    assert args.placement.gpu_taints == (Taint("elastic-spot-lab/spot", "true", "NoSchedule"),)
    assert args.placement.cpu_labels == {"elastic-spot-lab/pool": "cpu"}  # left out: our own pool label


BAD = {
    "no-kubeconfig": (None, {"pools": POOLS, "checkpoint": {"storageClass": "standard"}}, ["kubeconfig"]),
    "no-storage-class": ("k", {"pools": POOLS}, ["platform.checkpoint.storageClass"]),
    "no-pools": ("k", {"checkpoint": {"storageClass": "standard"}}, ["platform.pools"]),
    "no-gpu-taint": (
        "k",
        {"pools": {"gpuSpot": {"taints": []}}, "checkpoint": {"storageClass": "standard"}},
        ["platform.pools.gpuSpot.taints"],
    ),
    "cpu-pool-looks-spot": (
        "k",
        {
            "pools": {"cpu": {"labels": {"elastic-spot-lab/capacity": "spot"}}},
            "checkpoint": {"storageClass": "standard"},
        },
        ["platform.pools.cpu.labels"],
    ),
    "bad-taint-and-access-mode": (
        "k",
        {
            "pools": {"gpuSpot": {"taints": ["x=y:Sometimes"]}},
            "checkpoint": {"storageClass": "standard", "accessMode": "All"},
        },
        ["platform.pools.gpuSpot.taints", "platform.checkpoint.accessMode"],
    ),
    "everything": (None, {}, ["platform.pools", "kubeconfig", "platform.checkpoint.storageClass"]),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_arguments_are_all_reported(case):
    kubeconfig, platform, keys = BAD[case]
    with pytest.raises(InvalidInput) as info:
        ByoClusterArgs.from_config(kubeconfig, platform)
    assert [p.key for p in info.value.problems] == keys
    assert all("is invalid: expected" in str(p) for p in info.value.problems)


def test_the_cluster_hands_its_storage_class_and_pools_to_the_platform():
    seen = {}
    args = ByoClusterArgs.from_config("kube.yaml", {"pools": POOLS, "checkpoint": {"storageClass": "standard"}})

    def program():
        seen["info"] = ByoCluster("byo", args).info

    plan = run_program("byo", program=program)
    info = seen["info"]
    assert info.checkpoint == StorageClassCheckpoint("standard", "ReadWriteMany")
    assert info.placement == args.placement and info.identity is None and info.eviction_notice_s == 30
    provider = plan.one("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == "kube.yaml" and "kubeconfig" in provider.secret_inputs
    assert plan.one(BYO_CLUSTER_TYPE).secret_outputs == ["kubeconfigPath"]

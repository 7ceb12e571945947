"""Stack config: typed, validated, every bad value named with its key, value and expectation,
before any resource is declared."""

from __future__ import annotations

import json

import pytest

from components import config as config_mod
from components.aks.args import AksClusterArgs, is_gpu_size, is_nvidia_gpu_size
from lab.program.harness import run_program
from lab.program.stack_files import read_stack_config
from lab.vocab.problems import InvalidInput

DIGEST = "sha256:" + "ab" * 32
# What `elastic-lab image` records, and the other pinned references a stack takes.
PINNED_TRAINER_IMAGES = [
    f"eslacr636ed551d34ae649.azurecr.io/elastic-spot-lab/trainer:0123abcd4567@{DIGEST}",
    f"eslacr636ed551d34ae649.azurecr.io/elastic-spot-lab/trainer@{DIGEST}",
    "eslacr636ed551d34ae649.azurecr.io/elastic-spot-lab/trainer:0123abcd4567",
]


def _load(**overrides):
    values, _ = read_stack_config("aks-dev")
    for k, v in overrides.items():
        full = config_mod.qualified(k)
        if v is None:
            values.pop(full, None)
        else:
            values[full] = v
    return config_mod.load(values, stack="aks-dev")


def test_stack_file_gives_typed_args():
    args = _load().cluster
    assert isinstance(args, AksClusterArgs)
    assert args.location == "eastus"
    assert args.gpu_vm_size == "Standard_NC4as_T4_v3"
    assert (args.gpu_min_nodes, args.gpu_max_nodes) == (0, 3)
    assert isinstance(args.gpu_max_nodes, int) and args.gpu_spot_max_price == -1.0
    assert args.tags == {"project": "elastic-spot-lab", "environment": "dev"}
    assert args.cluster_name == "esl-aks-dev" and args.resource_group_name == "esl-aks-dev-rg"
    assert args.node_resource_group_name == "MC_esl-aks-dev-rg_esl-aks-dev_eastus"


BAD_VALUES = [
    # key, raw value (as Pulumi hands it over: a string), words the "expected" part must
    # contain[, the value as the message shows it: typed once it parsed, e.g. 3 not '3']
    ("location", "East US", "did you mean 'eastus'"),
    ("location", "", "Azure region name"),
    ("kubernetesVersion", "v1.30", "1.<minor>"),
    ("kubernetesVersion", "latest", "1.<minor>"),
    ("kubernetesVersion", "1.27", "1.29 or newer"),
    ("gpuVmSize", "Standard_D4s_v5", "NVIDIA GPU VM size"),
    ("gpuVmSize", "Standard_NV8as_v4", "AMD GPU"),
    ("gpuVmSize", "Standard_NC6s_v3", "has a V100, and torch 2.13.0 (a CUDA 13 build) has no kernels"),
    ("gpuVmSize", "Standard_ND40rs_v2", "has a V100"),
    ("gpuVmSize", "Standard_NC12s_v2", "has a P100"),
    ("gpuVmSize", "Standard_NV12s_v3", "has a M60"),
    ("gpuVmSize", "nc4as_t4", "NVIDIA GPU VM size"),
    ("cpuVmSize", "Standard_NC4as_T4_v3", "a CPU VM size"),
    ("systemVmSize", "D2s_v5", "an Azure VM size"),
    ("cpuMinNodes", "3", "<= cpuMaxNodes (2)", 3),
    ("cpuMinNodes", "0", ">= 1", 0),
    ("gpuMinNodes", "4", "<= gpuMaxNodes (3)", 4),
    ("gpuMaxNodes", "0", "0 would leave the pool unable to run anything", 0),
    ("gpuMaxNodes", "three", "a whole number"),
    ("gpuMaxNodes", "1001", "1..1000", 1001),
    ("gpuSpotMaxPrice", "0", "-1", 0.0),
    ("gpuSpotMaxPrice", "cheap", "a number"),
    ("gpuSpotMaxPrice", "0.1234567", "5 decimal places", 0.1234567),
    ("systemNodeCount", "0", "1..100", 0),
    ("storageAccountName", "Bad_Name", "3-24 lower-case letters and digits"),
    ("checkpointContainer", "Checkpoints", "lower-case"),
    ("checkpointContainer", "a--b", "single '-'"),
    ("clusterName", "-bad", "letter or digit"),
    ("resourceGroupName", "rg.", "not ending with '.'"),
    ("skuTier", "Gold", "Free, Standard, Premium"),
    ("storageSku", "Premium_LRS", "StorageV2"),
    ("checkpointAuth", "sas", "workload-identity-key"),
    ("trainingNamespace", "Training", "DNS-1123"),
    ("gpuPoolName", "gpu-spot", "AKS Linux pool name"),
    ("gpuPoolName", "cpu", "differ from each other"),
    ("nodeResourceGroup", "esl-aks-dev-rg", "other than resourceGroupName"),
    ("tags", "[1, 2]", "a mapping"),
    ("cloud", "gcp", "one of aks, eks, byo"),
    ("gpuMaxNode", "4", "did you mean 'elastic-spot-lab:gpuMaxNodes'"),
    ("trainerImage", "acr.azurecr.io/elastic-spot-lab/trainer", "a pinned container image reference"),
    ("trainerImage", "acr.azurecr.io/elastic-spot-lab/trainer:latest", "by its tag (not latest)"),
    ("trainerImage", f"acr.azurecr.io/elastic-spot-lab/trainer:latest@{DIGEST}", "a pinned container image"),
    ("trainerImage", "acr.azurecr.io/elastic-spot-lab/trainer:1@sha256:abc", "a pinned container image"),
    ("trainerImage", "ACR.io/Trainer:1", "lower-case path"),
    ("trainerImage", f"ghcr.io/elastic-spot-lab/trainer@{DIGEST}", "which nothing publishes"),
]


@pytest.mark.parametrize(
    "key,value,expected,shown", [(*b, b[1])[:4] for b in BAD_VALUES], ids=[f"{b[0]}={b[1]}" for b in BAD_VALUES]
)
def test_each_bad_value_is_named_with_key_value_and_expectation(key, value, expected, shown):
    with pytest.raises(InvalidInput) as info:
        _load(**{key: value})
    problems = [p for p in info.value.problems if p.key == f"elastic-spot-lab:{key}"]
    assert problems, f"no problem names {key}: {info.value}"
    assert [p.value for p in problems] == [shown]
    message = str(info.value)
    assert f"elastic-spot-lab:{key}={shown!r} is invalid: expected" in message, message
    assert expected in message, message
    assert "is invalid: expected" in message


@pytest.mark.parametrize("image", PINNED_TRAINER_IMAGES, ids=["tag-and-digest", "digest-alone", "tag"])
def test_a_pinned_trainer_image_is_the_handlers_image_as_given(image):
    """What the config takes, the platform's settings take too: the trainer image is the
    spot-notice handler's unless that is set."""
    platform = _load(trainerImage=image).platform
    assert platform.notice_handler_image == image
    assert str(platform.notice_handler_reference) == image


@pytest.mark.parametrize("key", ["cloud", "location"])
def test_required_keys(key):
    with pytest.raises(InvalidInput, match=f"elastic-spot-lab:{key}=None is invalid"):
        _load(**{key: None})


def test_all_problems_reported_at_once():
    with pytest.raises(InvalidInput) as info:
        _load(gpuVmSize="Standard_D4s_v5", gpuMaxNodes="0", location="East US", gpuMaxNode="4", cpuMinNodes="x")
    keys = {p.key.split(":")[1] for p in info.value.problems}
    assert keys == {"gpuVmSize", "gpuMaxNodes", "location", "gpuMaxNode", "cpuMinNodes"}
    assert "5 problem(s)" in str(info.value)


def test_errors_raised_before_any_resource_is_declared():
    with pytest.raises(InvalidInput) as info:
        run_program("aks-dev", {"gpuVmSize": "Standard_D4s_v5"})
    assert info.value.recorded_resources == []


def test_keys_are_typed():
    cfg = _load(gpuMaxNodes="5", gpuSpotMaxPrice="0.25")
    assert cfg.cluster.gpu_max_nodes == 5 and cfg.cluster.gpu_spot_max_price == 0.25
    assert cfg.kubernetes_version == "1.35" and cfg.platform.kubernetes_version == "1.35"


def test_every_key_is_documented_and_sectioned():
    assert {"cloud", "platform", "kubeconfig", "location", "gpuMaxNodes"} <= set(config_mod.KEYS)
    assert all(k.doc and k.section in ("common", "platform", "byo", "aks", "eks") for k in config_mod.KEYS.values())


def test_args_validate_names_fields():
    args = AksClusterArgs(
        location="eastus", resource_group_name="rg", cluster_name="c", gpu_min_nodes=5, gpu_max_nodes=2
    )
    with pytest.raises(InvalidInput, match=r"gpu_min_nodes=5 is invalid: expected <= gpu_max_nodes \(2\)"):
        args.validate()


@pytest.mark.parametrize(
    "size,gpu,nvidia",
    [
        ("Standard_NC4as_T4_v3", True, True),
        ("Standard_NC24ads_A100_v4", True, True),
        ("Standard_NC40ads_H100_v5", True, True),
        ("Standard_ND96isr_H100_v5", True, True),
        ("Standard_NV36ads_A10_v5", True, True),
        ("Standard_NC6s_v3", True, True),
        ("Standard_NV8as_v4", True, False),
        ("Standard_ND96isr_MI300X_v5", True, False),
        ("Standard_D4s_v5", False, False),
        ("Standard_E8as_v5", False, False),
    ],
)
def test_gpu_size_recognition(size, gpu, nvidia):
    assert is_gpu_size(size) is gpu
    assert is_nvidia_gpu_size(size) is nvidia


@pytest.mark.parametrize(
    ("platform", "key"),
    [
        pytest.param({"pools": {"bogus": 1}}, "elastic-spot-lab:platform.pools.bogus", id="unknown-pool"),
        pytest.param(
            {"checkpoint": {"accessMode": "Nope"}}, "elastic-spot-lab:platform.checkpoint.accessMode", id="access-mode"
        ),
        pytest.param(
            {"checkpoint": {"storageClass": "Not A Class"}},
            "elastic-spot-lab:platform.checkpoint.storageClass",
            id="storage-class",
        ),
    ],
)
def test_keys_describing_a_byo_cluster_are_checked_on_other_clouds_too(platform, key):
    with pytest.raises(InvalidInput) as info:
        _load(platform=json.dumps(platform))
    assert [p.key for p in info.value.problems] == [key]


def test_platform_problems_are_reported_even_without_a_cloud():
    with pytest.raises(InvalidInput) as info:
        _load(cloud=None, platform=json.dumps({"etcd": {"tag": "latest"}}))
    assert {p.key for p in info.value.problems} == {"elastic-spot-lab:cloud", "elastic-spot-lab:platform.etcd.tag"}


@pytest.mark.parametrize(
    "size",
    [
        "Standard_NC4as_T4_v3",
        "Standard_NC64as_T4_v3",
        "Standard_NV36adms_A10_v5",
        "Standard_NC96ads_A100_v4",
        "Standard_ND96amsr_A100_v4",
        "Standard_NC40ads_H100_v5",
        "Standard_NC80adis_H100_v5",
        "Standard_ND96isr_H200_v5",
    ],
)
def test_the_gpu_pool_takes_every_known_nvidia_size(size):
    AksClusterArgs(location="eastus", resource_group_name="rg", cluster_name="c", gpu_vm_size=size).validate()


@pytest.mark.parametrize("size", ["Standard_NC999_fake", "Standard_NC4as_T4_v9", "Standard_NV6ads_A10_v4"])
def test_an_nvidia_looking_size_azure_does_not_offer_is_refused(size):
    args = AksClusterArgs(location="eastus", resource_group_name="rg", cluster_name="c", gpu_vm_size=size)
    with pytest.raises(InvalidInput, match=r"expected an NVIDIA GPU size Azure offers and the trainer image runs on"):
        args.validate()

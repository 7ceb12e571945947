"""EKS stack config: typed, validated, every bad value named with its key, value and
expectation, before any resource is declared."""

from __future__ import annotations

import pytest

from components import config as config_mod
from components.eks.args import EksClusterArgs
from lab.program.harness import run_program
from lab.program.stack_files import read_stack_config
from lab.vocab.problems import InvalidInput


def _load(**overrides):
    values, _ = read_stack_config("eks-dev")
    for k, v in overrides.items():
        full = config_mod.qualified(k)
        if v is None:
            values.pop(full, None)
        else:
            values[full] = v
    return config_mod.load(values, stack="eks-dev")


def test_stack_file_gives_typed_args():
    cfg = _load()
    args = cfg.cluster
    assert isinstance(args, EksClusterArgs)
    assert args.region == "us-east-1" and args.cluster_name == "esl-eks-dev"
    assert args.gpu_instance_types == ["g4dn.xlarge", "g5.xlarge", "g6.xlarge"]
    assert (args.gpu_min_nodes, args.gpu_max_nodes, args.cpu_min_nodes) == (0, 3, 1)
    assert args.keeps_checkpoints and args.creates_vpc and args.autoscaler_image_tag == "v1.35.0"


BAD_VALUES = [
    # key, value, fragment of the expectation[, the value as reported]
    ("region", "US East", "an AWS region code"),
    ("region", "useast1", "an AWS region code"),
    ("kubernetesVersion", "1.35.2", "a Kubernetes minor version 1.<minor> as EKS takes it"),
    ("kubernetesVersion", "1.27", "1.30 or newer"),
    ("clusterName", "-bad", "starting with a letter or digit"),
    ("vpcCidr", "10.0.0.0/8", "/16 to /20"),
    ("vpcCidr", "10.0.0.1/16", "/16 to /20"),
    ("availabilityZoneCount", "1", "at least two zones", 1),
    (
        "existingPrivateSubnetIds",
        '["subnet-0123456789abcdef0"]',
        "unless existingVpcId is set",
        ["subnet-0123456789abcdef0"],
    ),
    ("endpointPublicAccessCidrs", '["everyone"]', "IPv4 networks", "everyone"),
    ("adminPrincipalArns", '["alice"]', "IAM role or user ARNs", "alice"),
    ("cpuInstanceType", "g5.xlarge", "a CPU instance type"),
    ("cpuInstanceType", "big", "an EC2 instance type"),
    ("gpuInstanceTypes", '["m6i.xlarge"]', "m6i.xlarge has no GPU", "m6i.xlarge"),
    ("gpuInstanceTypes", '["g4ad.xlarge"]', "an accelerator CUDA cannot use", "g4ad.xlarge"),
    ("gpuInstanceTypes", '["inf2.xlarge"]', "an accelerator CUDA cannot use", "inf2.xlarge"),
    ("gpuInstanceTypes", '["g5.xlarge", "p3.2xlarge"]', "p3.2xlarge has a V100", "p3.2xlarge"),
    ("gpuInstanceTypes", '["p3dn.24xlarge"]', "no kernels for GPUs before Turing (sm_75)", "p3dn.24xlarge"),
    ("gpuInstanceTypes", "[]", "at least one NVIDIA GPU instance type", []),
    ("gpuAmiType", "AL2_x86_64_GPU", "an NVIDIA AMI type: AL2023_x86_64_NVIDIA"),
    ("gpuAmiType", "AL2023_ARM_64_NVIDIA", "an x86_64 NVIDIA AMI type"),
    ("gpuDiskSizeGb", "10", "30..16384", 10),
    ("gpuMinNodes", "-1", "0 lets the spot group scale to zero", -1),
    ("gpuMaxNodes", "0", "1..1000", 0),
    ("cpuMinNodes", "0", "never scales to zero", 0),
    ("gpuMinNodes", "5", "<= gpuMaxNodes (3)", 5),
    ("checkpointBucket", "My_Bucket", "lower-case letters"),
    ("checkpointsOnDestroy", "maybe", "keep, delete"),
    ("interruptionNotice", "PT1M", "PT2M to PT15M"),
    ("interruptionNotice", "2 minutes", "ISO 8601"),
    ("clusterAutoscalerImageTag", "latest", "v1.35.0"),
    ("clusterAutoscalerImageTag", "v1.36.0", "a v1.35.x release: the pinned chart 9.54.0 carries 1.35.0"),
    ("kubernetesVersion", "1.34", "one of 1.35 while clusterAutoscaler is on"),
    ("trainingNamespace", "Training", "DNS-1123"),
    ("gpuGroupName", "cpu", "a name other than cpuGroupName"),
    ("clusterAutoscaler", "false", "no fallback ranks while clusterAutoscaler is off", None, "gpuFallback"),
    (
        "gpuFallback",
        '[{"instanceTypes": ["g4dn.xlarge"], "capacity": "on-demand"}, {"instanceTypes": ["g5.xlarge"]}]',
        "only the last rank may be on-demand",
        "on-demand",
    ),
    ("gpuFallback", '[{"instanceTypes": ["p3.2xlarge"]}]', "p3.2xlarge has a V100", "p3.2xlarge"),
    ("gpuFallback", '[{"instanceTypes": "g5.xlarge"}]', "a non-empty list of NVIDIA GPU instance types", "g5.xlarge"),
    ("gpuFallback", '[{"instanceTypes": ["g5.xlarge"], "name": "cpu"}]', "cpu repeats", None),
    (
        "gpuFallback",
        '[{"instanceTypes": ["g5.xlarge"], "zones": ["a"]}]',
        "one of capacity, instanceTypes, name",
        ["a"],
    ),
    ("tags", '{"aws:owner": "me"}', "not starting with 'aws:'", "aws:owner"),
    ("location", "eastus", "'location' belongs to cloud aks"),
]


def _case(bad):
    """(key, value, expected, shown, named): `shown` defaults to the value as written (None: any
    value), `named` (the key the problem names) to the key set."""
    key, value, expected, *rest = bad
    shown = rest[0] if rest else value
    named = rest[1] if len(rest) > 1 else key
    return key, value, expected, shown, named


@pytest.mark.parametrize(
    "key,value,expected,shown,named", [_case(b) for b in BAD_VALUES], ids=[f"{b[0]}={b[1]}" for b in BAD_VALUES]
)
def test_each_bad_value_is_named_with_key_value_and_expectation(key, value, expected, shown, named):
    with pytest.raises(InvalidInput) as info:
        _load(**{key: value})
    problems = [p for p in info.value.problems if p.key.startswith(f"elastic-spot-lab:{named}")]
    assert problems, f"no problem names {named}: {info.value}"
    assert any(expected in p.expected and (shown is None or p.value == shown) for p in problems), problems


def test_the_autoscaler_image_is_its_charts_release():
    args = _load().cluster
    assert (args.autoscaler_chart_version, args.autoscaler_image_tag) == ("9.54.0", "v1.35.0")
    assert _load(clusterAutoscalerImageTag="v1.35.3").cluster.autoscaler_image_tag == "v1.35.3"  # a patch release
    # Without the stack's autoscaler, any supported minor is the user's choice.
    no_ranks = _load(kubernetesVersion="1.34", clusterAutoscaler="false", gpuFallback="[]")
    assert no_ranks.cluster.kubernetes_version == "1.34"


def test_region_is_required():
    with pytest.raises(InvalidInput, match="elastic-spot-lab:region=None is invalid: expected an AWS region code"):
        _load(region=None)


def test_all_problems_at_once_and_nothing_declared():
    with pytest.raises(InvalidInput) as info:
        run_program("eks-dev", {"gpuInstanceTypes": '["m5.large"]', "gpuMaxNodes": "0", "region": "mars"})
    keys = {p.key.split(":")[1] for p in info.value.problems}
    assert keys == {"gpuInstanceTypes", "gpuMaxNodes", "region"}
    assert info.value.recorded_resources == []


def test_graviton_gpu_types_need_an_arm_ami():
    with pytest.raises(InvalidInput) as info:
        _load(gpuInstanceTypes='["g5g.xlarge"]')
    [problem] = info.value.problems
    assert problem.key == "elastic-spot-lab:gpuAmiType" and problem.value == "AL2023_x86_64_NVIDIA"
    assert "an ARM NVIDIA AMI type for Graviton instance types (g5g.xlarge)" in problem.expected
    arm = _load(gpuInstanceTypes='["g5g.xlarge"]', gpuAmiType="AL2023_ARM_64_NVIDIA", gpuFallback="[]")
    assert arm.cluster.gpu_is_arm
    # Every rank runs the group's AMI: a Graviton rank below an x86_64 one is refused.
    with pytest.raises(InvalidInput, match="an x86_64 NVIDIA AMI type"):
        _load(gpuInstanceTypes='["g5g.xlarge"]', gpuAmiType="AL2023_ARM_64_NVIDIA")


def test_a_fallback_rank_holds_what_rank_one_does():
    """The job is sized for rank 1: L40S (48 GiB) first, then A10G (24 GiB) cannot hold it."""
    with pytest.raises(InvalidInput) as info:
        _load(gpuInstanceTypes='["g6e.xlarge"]', gpuFallback='[{"instanceTypes": ["g6e.2xlarge", "g5.2xlarge"]}]')
    [problem] = info.value.problems
    assert (problem.key, problem.value) == ("elastic-spot-lab:gpuFallback[0].instanceTypes", "g5.2xlarge")
    assert "at least 48 GiB per GPU, as rank 1 has (g5.2xlarge has 24)" in problem.expected

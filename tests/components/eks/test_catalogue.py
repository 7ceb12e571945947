"""What AWS offers as the EKS args check it: instance types' GPUs, accelerators, regions."""

from __future__ import annotations

import pytest

from components.eks.catalogue import accelerator, gpu_type_expected, instance_family, is_nvidia_instance


@pytest.mark.parametrize(
    "instance,nvidia",
    [
        ("g4dn.xlarge", True),
        ("g6e.12xlarge", True),
        ("p5.48xlarge", True),
        ("g4ad.xlarge", False),
        ("m7g.large", False),
    ],
)
def test_nvidia_instance_recognition(instance, nvidia):
    assert is_nvidia_instance(instance) is nvidia


def test_instance_family_and_the_autoscalers_accelerator_name():
    assert instance_family("g6e.12xlarge") == "g6e"
    assert instance_family("not-a-type") is None
    assert accelerator(["g4dn.xlarge", "g5.xlarge"]) == "nvidia-tesla-t4"
    assert accelerator(["g6.xlarge"]) == "nvidia"  # the label's presence marks a GPU node


@pytest.mark.parametrize(
    "instance,says",
    [
        ("g5.2xlarge", None),
        ("p3.2xlarge", "has a V100"),
        ("m7g.large", "has no GPU"),
        ("g4ad.xlarge", "an accelerator CUDA cannot use"),
        ("g9z.huge", "botocore"),
    ],
)
def test_what_a_gpu_instance_type_should_be(instance, says):
    expected = gpu_type_expected(instance)
    assert expected is None if says is None else says in expected

"""vCPU needs per quota from pools at their largest: classes, shared families, unknown sizes."""

from __future__ import annotations

from lab.vocab.machine_shapes import same_family
from lab.vocab.quota import PoolDemand, aws_class, aws_needs, azure_needs, unknown_sizes


def test_ec2_classes_as_the_vcpu_quotas_count_them():
    assert [aws_class(t) for t in ("g4dn.xlarge", "vt1.3xlarge", "p4d.24xlarge", "p5.48xlarge", "m6i.xlarge")] == [
        "G",
        "G",
        "P",
        "P5",
        "Standard",
    ]


def test_a_group_of_several_types_counts_at_its_largest_and_unknown_types_are_named():
    pools = [
        PoolDemand("gpu", ("g4dn.xlarge", "g5.2xlarge"), True, 2, 1),
        PoolDemand("big", ("p5.48xlarge",), True, 1, 2),
    ]
    needs = aws_needs(pools, "eu-west-1")
    assert [(n.quota, n.vcpus, n.required) for n in needs] == [("L-3819A6DF", 16, True), ("L-C4BD4855", 192, False)]
    assert needs[0].pools == ("rank 1 gpu: 2 x g5.2xlarge (8 vCPUs)",)
    assert unknown_sizes([PoolDemand("x", ("g9.huge",), True, 1, 1)], "aws") == ["g9.huge"]
    assert aws_needs([PoolDemand("x", ("g9.huge", "g5.xlarge"), True, 1, 1)], "r") == []  # not guessed


def test_azure_on_demand_pools_of_one_family_share_its_quota_and_the_regional_total():
    pools = [
        PoolDemand("system", ("Standard_D2s_v5",), False, 1),
        PoolDemand("cpu", ("Standard_D4s_v5",), False, 3),
        PoolDemand("gpuspot", ("Standard_NC24ads_A100_v4",), True, 2, 1),
    ]
    needs = {(n.quota, n.vcpus) for n in azure_needs(pools, "westeurope")}
    assert needs == {("standardDSv5Family", 14), ("cores", 14), ("lowPriorityCores", 48)}
    assert same_family("Standard NCASv3_T4 Family", "standardNCASv3_T4Family")

"""Pools, taints and placement: one Taint, one toleration rule, every bad value at once."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from lab.vocab import pools
from lab.vocab.pools import GPU_TAINT, SPOT_TAINT, PoolPlacement, Taint, parse_taint
from lab.vocab.problems import InvalidInput


def test_taint_forms():
    assert GPU_TAINT.text() == "nvidia.com/gpu=present:NoSchedule"
    assert Taint("gpu-only", "", "NoSchedule").text() == "gpu-only:NoSchedule"
    assert GPU_TAINT.eks() == {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}
    assert Taint("k", "v", "NoExecute").eks()["effect"] == "NO_EXECUTE"
    assert GPU_TAINT.toleration() == {
        "key": "nvidia.com/gpu",
        "operator": "Equal",
        "value": "present",
        "effect": "NoSchedule",
    }
    assert GPU_TAINT.as_dict() == {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    "given", ["nvidia.com/gpu=present:NoSchedule", {"key": "nvidia.com/gpu", "value": "present"}, GPU_TAINT]
)
def test_parse_taint_reads_every_form(given):
    assert parse_taint(given) == GPU_TAINT


BAD_TAINTS = {
    "no-effect": ("x=y", "a taint: key=value:Effect"),
    "unknown-effect": ("x=y:Sometimes", "a taint effect NoSchedule, PreferNoSchedule, NoExecute"),
    "bad-key": ("-x=y:NoSchedule", "a taint whose key is a Kubernetes label key"),
    "bad-value": ("x=y z:NoSchedule", "a taint whose value is a label value"),
    "extra-field": ({"key": "x", "operator": "Exists"}, "a taint with keys key, value, effect"),
}


@pytest.mark.parametrize("case", BAD_TAINTS)
def test_bad_taints_name_the_key(case):
    given, expected = BAD_TAINTS[case]
    with pytest.raises(InvalidInput) as info:
        parse_taint(given, "pools.gpuSpot.taints")
    [problem] = info.value.problems
    assert problem.key == "pools.gpuSpot.taints" and problem.value == given and expected in problem.expected


def test_pool_labels():
    assert pools.pool_labels(pools.POOL_CPU, spot=False) == {
        "elastic-spot-lab/pool": "cpu",
        "elastic-spot-lab/capacity": "on-demand",
    }
    with pytest.raises(InvalidInput, match="pool='gpu' is invalid"):
        pools.pool_labels("gpu", spot=True)


def test_placement_defaults_are_cloud_neutral():
    placement = PoolPlacement()
    assert placement.cpu_labels == {"elastic-spot-lab/pool": "cpu"}
    assert placement.gpu_labels == {"elastic-spot-lab/pool": "gpu-spot"}
    assert placement.gpu_taints == (GPU_TAINT,)
    assert placement.spot_labels == {"elastic-spot-lab/capacity": "spot"}
    assert PoolPlacement.from_mapping(placement.as_mapping()) == placement


def test_every_bad_placement_value_is_reported_at_once():
    with pytest.raises(InvalidInput) as info:
        PoolPlacement.from_mapping(
            {
                "cpu": {"labels": {"Bad Key": "x"}, "taints": ["x=y:Sometimes"]},
                "gpuSpot": {"labels": {}, "taints": "x=y:NoSchedule", "zone": "a"},
                "system": {},
            }
        )
    assert [p.key for p in info.value.problems] == [
        "pools.system",
        "pools.gpuSpot.zone",
        "pools.cpu.labels.Bad Key",
        "pools.gpuSpot.labels",
        "pools.gpuSpot.taints",
        "pools.cpu.taints",
    ]  # the shape's and the values' together
    with pytest.raises(InvalidInput) as info:
        PoolPlacement.from_mapping(
            {
                "cpu": {"labels": {"Bad Key": "x"}, "taints": ["x=y:Sometimes"]},
                "gpuSpot": {"labels": {}, "taints": "x=y:NoSchedule"},
            }
        )
    assert [p.key for p in info.value.problems] == [
        "pools.cpu.labels.Bad Key",
        "pools.gpuSpot.labels",
        "pools.gpuSpot.taints",
        "pools.cpu.taints",
    ]


@pytest.mark.parametrize(
    ("placement", "key", "expected"),
    [
        pytest.param(
            {"gpuSpot": {"taints": []}}, "pools.gpuSpot.taints", "at least one taint", id="untainted-gpu-pool"
        ),
        pytest.param(
            {"cpu": {"labels": {"elastic-spot-lab/capacity": "spot"}}},
            "pools.cpu.labels",
            "labels no spot node carries",
            id="cpu-pool-selects-spot",
        ),
        pytest.param(
            {"gpuSpot": {"taints": ["a=b:NoSchedule", "a=c:NoExecute"]}},
            "pools.gpuSpot.taints",
            "one taint per key",
            id="two-taints-one-key",
        ),
    ],
)
def test_placement_rules(placement, key, expected):
    with pytest.raises(InvalidInput) as info:
        PoolPlacement.from_mapping(placement)
    [problem] = info.value.problems
    assert problem.key == key and expected in problem.expected


def test_required_affinity_requires_every_label():
    affinity = pools.required_affinity({"b": "2", "a": "1"})
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "a", "operator": "In", "values": ["1"]},
                {"key": "b", "operator": "In", "values": ["2"]},
            ]
        }
    ]


def test_rules_between_pools_are_checked_beside_bad_values():
    with pytest.raises(InvalidInput) as info:
        PoolPlacement.from_mapping(
            {
                "cpu": {"labels": {"elastic-spot-lab/capacity": "spot", "bad key!": "x"}},
                "gpuSpot": {"taints": []},
            }
        )
    assert sorted(p.key for p in info.value.problems) == [
        "pools.cpu.labels",
        "pools.cpu.labels.bad key!",
        "pools.gpuSpot.taints",
    ]


@dataclass(frozen=True)
class _Pool:
    """A pool as a cloud's spec gives it to `PoolPlacement.over_ranks`."""

    node_labels: dict[str, str]
    taints: tuple[Taint, ...]
    max_nodes: int


def test_a_placement_over_ranks_selects_what_every_rank_carries_and_tolerates_what_any_carries():
    cpu = _Pool({"pool": "cpu", "capacity": "on-demand"}, (), 2)
    spot = _Pool({"pool": "gpu", "capacity": "spot", "rank": "1", "type": "g5"}, (SPOT_TAINT, GPU_TAINT), 3)
    on_demand = _Pool({"pool": "gpu", "capacity": "on-demand", "rank": "2", "type": "g5"}, (GPU_TAINT,), 5)

    placement = PoolPlacement.over_ranks(
        cpu, [spot, on_demand], rank_labels=("rank", "type"), spot_labels={"cloud/spot": "yes"}
    )

    assert placement == PoolPlacement(
        cpu_labels={"pool": "cpu", "capacity": "on-demand"},
        cpu_taints=(),
        gpu_labels={"pool": "gpu"},  # capacity differs between the ranks; rank and type tell them apart
        gpu_taints=(SPOT_TAINT, GPU_TAINT),
        gpu_max_nodes=5,
        spot_labels={"cloud/spot": "yes"},
    )
    # One rank: its labels but those that tell ranks apart.
    assert PoolPlacement.over_ranks(cpu, [spot], rank_labels=("rank",), spot_labels={}).gpu_labels == {
        "pool": "gpu",
        "capacity": "spot",
        "type": "g5",
    }

"""GPU capacity ranks: the priority expander's table and its text, and fallback entries."""

from __future__ import annotations

import yaml

from lab.vocab.capacity import (
    GpuRank,
    default_rank_name,
    expander_priorities,
    fallback_problems,
    priorities_text,
    rank_of_group,
)
from lab.vocab.pools import GPU_TAINT, SPOT_TAINT, all_taints, common_labels
from lab.vocab.problems import Problem

RANKS = (
    GpuRank(1, "gpuspot", ("Standard_NC4as_T4_v3",), True),
    GpuRank(2, "gpuspot2", ("Standard_NC8as_T4_v3",), True, ("1", "2")),
    GpuRank(3, "gpuondemand", ("Standard_NC4as_T4_v3",), False),
)


def test_rank_one_gets_the_highest_priority_and_every_other_group_the_lowest():
    table = expander_priorities(RANKS, lambda name: f"^x-{name}$")
    assert table == {30: ["^x-gpuspot$"], 20: ["^x-gpuspot2$"], 10: ["^x-gpuondemand$"], 1: [".*"]}
    # The text the ConfigMap holds reads back as the same table (patterns quoted for YAML).
    assert yaml.safe_load(priorities_text(table)) == table
    assert [rank_of_group(table, g) for g in ("x-gpuspot", "x-gpuspot2", "x-gpuondemand", "x-cpu")] == [30, 20, 10, 1]


def test_patterns_match_anywhere_in_the_id_as_the_autoscaler_matches_them():
    """Go's FindStringIndex: an unanchored pool name is found in a longer one's scale set."""
    assert rank_of_group({10: ["gpuspot"]}, "aks-gpuspot2-12345678-vmss") == 10
    assert rank_of_group({10: ["^aks-gpuspot-[0-9]+-vmss$"]}, "aks-gpuspot2-12345678-vmss") is None


def test_a_pattern_with_quotes_survives_the_text():
    table = {5: ["it's"], 1: [".*"]}
    assert yaml.safe_load(priorities_text(table)) == table


def test_fallback_names_say_rank_and_capacity_within_the_limit():
    assert default_rank_name("gpuspot", 2, True, limit=12) == "gpuspot2"
    assert default_rank_name("averylongpool", 3, True, limit=12) == "averylongpo3"
    assert default_rank_name("gpuspot", 3, False, limit=12) == "gpuondemand"
    assert default_rank_name("gpu-spot", 2, True, limit=63, separator="-") == "gpu-spot-2"
    assert default_rank_name("gpu-spot", 3, False, limit=63, separator="-") == "gpu-on-demand"
    assert RANKS[1].describe() == "rank 2: gpuspot2 (Standard_NC8as_T4_v3, spot in zone(s) 1, 2)"


def test_fallback_problems_name_each_entry():
    def sizes(value, key):
        return [] if value == "ok" else [Problem(key, value, "ok")]

    def check(entries):
        return fallback_problems(
            entries,
            "gpu_fallback",
            sizes_key="size",
            size_problems=sizes,
            name_problem=lambda name: None,
            zones_allowed=("1", "2", "3"),
        )

    found = check([{"size": "ok", "capacity": "on-demand"}, {"size": "bad", "zones": ["9"]}, "x"])
    assert [p.key for p in found] == [
        "gpu_fallback[0].capacity",
        "gpu_fallback[1].size",
        "gpu_fallback[1].zones",
        "gpu_fallback[2]",
    ]
    assert check(None) == [] and check([{"size": "ok"}]) == []
    assert [p.key for p in check([{"capacity": "spot"}])] == ["gpu_fallback[0].size"]
    assert "at most 5 fallback ranks" in check([{"size": "ok"}] * 6)[0].expected


def test_workers_select_what_every_rank_carries_and_tolerate_what_any_carries():
    spot = {"pool": "gpu", "capacity": "spot", "rank": "1"}
    on_demand = {"pool": "gpu", "capacity": "on-demand", "rank": "2"}
    assert common_labels([spot, on_demand], leave_out=("rank",)) == {"pool": "gpu"}
    assert common_labels([spot], leave_out=("rank",)) == {"pool": "gpu", "capacity": "spot"}
    assert all_taints([(SPOT_TAINT, GPU_TAINT), (GPU_TAINT,)]) == (SPOT_TAINT, GPU_TAINT)

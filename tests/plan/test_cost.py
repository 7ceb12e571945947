"""Hourly cost estimate: from the plan's pools and a dated, sourced price table."""

from __future__ import annotations

import pytest
import yaml

from lab.plan import cost
from lab.program.harness import run_program
from lab.program.stack_files import read_stack_config

from .conftest import AKS_STACKS


def test_price_table_is_dated_and_sourced():
    table = cost.load_prices()
    assert table["currency"] == "USD" and str(table["as_of"])[:4].isdigit()
    for region, sizes in table["azure"]["vm"].items():
        for size, entry in sizes.items():
            assert entry.get("source"), f"{region}/{size} has no source"
            assert entry["on_demand"] > entry["spot"] > 0, f"{region}/{size}: spot must be cheaper than on-demand"
    for tier, entry in table["azure"]["aks_control_plane"].items():
        assert "price" in entry and entry.get("source"), tier


RETAIL_API = "https://prices.azure.com/api/retail/prices?$filter="


def test_every_price_names_the_query_that_returns_it():
    """No vague "public cost tools": each VM price names the Azure Retail Prices API query
    for exactly its size and region, and says it is an estimate copied on the table's date."""
    table = cost.load_prices()
    for region, sizes in table["azure"]["vm"].items():
        for size, entry in sizes.items():
            query = entry.get("query", "")
            assert query.startswith(RETAIL_API), f"{region}/{size}: query {query!r}"
            for clause in (
                f"armSkuName eq '{size}'",
                f"armRegionName eq '{region}'",
                "serviceName eq 'Virtual Machines'",
                "priceType eq 'Consumption'",
            ):
                assert clause in query, f"{region}/{size}: {clause} not in {query!r}"
            assert entry["source"].startswith(f"estimate, copied {table['as_of']}, not re-checked"), entry["source"]
            assert "public cost tools" not in entry["source"]
    for tier, entry in table["azure"]["aks_control_plane"].items():
        assert "public cost tools" not in entry["source"] and "commonly quoted" not in entry["source"], tier
        if entry["price"]:
            assert (
                entry["query"].startswith(RETAIL_API) and "serviceName eq 'Azure Kubernetes Service'" in entry["query"]
            )


def test_estimate_carries_each_price_query(aks_plan):
    est = cost.estimate(aks_plan)
    for pool in est.pools:
        assert f"armSkuName eq '{pool.vm_size}'" in pool.query
    assert "query" in est.to_dict()["pools"][0]


@pytest.mark.parametrize("stack", AKS_STACKS)
def test_every_aks_stack_has_prices_for_its_sizes(stack):
    values, _ = read_stack_config(stack)
    table = cost.load_prices()["azure"]["vm"]
    region = values.get("elastic-spot-lab:location")
    sizes = table.get(region) or table[cost.load_prices()["default_region"]]
    for key in ("systemVmSize", "cpuVmSize", "gpuVmSize"):
        size = values.get(f"elastic-spot-lab:{key}")
        if size:
            assert size in sizes, f"{stack}: no price for {key}={size} in lab/plan/prices.yaml"


def test_estimate_of_aks_dev(aks_plan):
    est = cost.estimate(aks_plan)
    by_pool = {p.pool: p for p in est.pools}
    prices = cost.load_prices()["azure"]["vm"]["eastus"]
    gpu = by_pool["gpuspot"]
    assert gpu.spot and (gpu.min_nodes, gpu.max_nodes) == (0, 3)
    assert gpu.price == prices["Standard_NC4as_T4_v3"]["spot"] and gpu.at_min == 0
    assert gpu.at_max == pytest.approx(3 * prices["Standard_NC4as_T4_v3"]["spot"])
    assert gpu.at_max_on_demand == pytest.approx(3 * prices["Standard_NC4as_T4_v3"]["on_demand"])
    idle = prices["Standard_D2s_v5"]["on_demand"] + prices["Standard_D4s_v5"]["on_demand"]
    assert est.hourly_min == pytest.approx(idle)
    assert est.hourly_max == pytest.approx(idle + prices["Standard_D4s_v5"]["on_demand"] + gpu.at_max)
    assert est.hourly_max_on_demand > est.hourly_max and 0 < est.spot_saving < 1
    assert est.control_plane["tier"] == "Free" and est.control_plane["price"] == 0
    assert est.notes == []


def test_a_fallback_rank_is_priced_for_as_long_as_a_worker_keeps_it(aks_plan):
    """The cluster autoscaler keeps a GPU node whose GPU a worker holds: each fallback rank says
    until when, and what it costs over rank 1 a node-hour and, at its maximum, a week."""
    est = cost.estimate(aks_plan)
    prices = cost.load_prices()["azure"]["vm"]["eastus"]
    t4, t4_large = prices["Standard_NC4as_T4_v3"], prices["Standard_NC8as_T4_v3"]
    first, spot, on_demand = est.ranks
    assert (first.kept_until, first.extra_per_node, first.extra_per_week) == (None, None, None)
    assert spot.kept_until == "until the job ends, the worker is moved or the node is evicted"
    assert spot.extra_per_node == round(t4_large["spot"] - t4["spot"], 4)
    assert on_demand.capacity == "on-demand" and est.on_demand_rank is on_demand
    assert on_demand.kept_until == "until the job ends or the worker is moved"
    assert on_demand.extra_per_node == round(t4["on_demand"] - t4["spot"], 4)
    assert on_demand.extra_per_week == round(3 * (t4["on_demand"] - t4["spot"]) * 24 * 7, 2)
    assert on_demand.extra_per_week == round(on_demand.extra * 24 * 7, 2)


def test_a_stack_without_an_on_demand_rank_has_none_to_keep():
    plan = run_program("aks-dev", {"gpuFallback": '[{"vmSize": "Standard_NC8as_T4_v3"}]'})
    est = cost.estimate(plan)
    assert [r.capacity for r in est.ranks] == ["spot", "spot"] and est.on_demand_rank is None


def test_estimate_follows_the_plan_not_the_config():
    plan = run_program("aks-dev", {"gpuMaxNodes": 5, "skuTier": "Standard"})
    est = cost.estimate(plan)
    gpu = next(p for p in est.pools if p.spot)
    assert gpu.max_nodes == 5 and est.control_plane["price"] == 0.10


def test_missing_prices_are_reported_not_guessed(tmp_path, aks_plan):
    table = cost.load_prices()
    del table["azure"]["vm"]["eastus"]["Standard_NC4as_T4_v3"]
    table["azure"]["vm"]["westeurope"] = table["azure"]["vm"].pop("eastus")
    path = tmp_path / "prices.yaml"
    path.write_text(yaml.safe_dump(table))
    est = cost.estimate(aks_plan, path)
    assert est.hourly_max is None and est.hourly_min is None
    assert any("no prices for region 'eastus'" in n for n in est.notes)
    assert any("no spot price for Standard_NC4as_T4_v3" in n for n in est.notes)


def test_no_pools_no_estimate():
    def program():
        import pulumi

        pulumi.export("x", 1)

    assert cost.estimate(run_program("aks-dev", program=program)) is None


def test_eks_prices_are_dated_and_sourced():
    table = cost.load_prices()["aws"]
    for region, types in table["ec2"].items():
        for name, entry in types.items():
            assert entry.get("source") and entry.get("query"), f"{region}/{name}"
            assert entry["on_demand"] > entry["spot"] > 0, f"{region}/{name}: spot must be cheaper than on-demand"
    assert table["eks_control_plane"]["price"] > 0 and table["nat_gateway"]["source"]


def test_estimate_of_eks_dev(eks_plan):
    est = cost.estimate(eks_plan)
    assert est is not None and est.region == "us-east-1" and not est.notes
    cpu, gpu, *fallback = est.pools
    assert [(f.pool, f.rank, f.spot, f.min_nodes) for f in fallback] == [
        ("gpu-spot-2", 2, True, 0),
        ("gpu-on-demand", 3, False, 0),
    ]
    # A fallback rank is priced too, and costs the cluster only in rank 1's place.
    assert fallback[1].price == 0.526 and est.ranks[2].extra == round(3 * 0.526 - 3 * 0.42, 4)
    assert (cpu.pool, cpu.spot, cpu.min_nodes, cpu.max_nodes, cpu.price) == ("cpu", False, 1, 2, 0.192)
    # A group of several spot types is priced at its dearest (g5.xlarge in the table).
    assert (gpu.pool, gpu.spot, gpu.min_nodes, gpu.max_nodes) == ("gpu-spot", True, 0, 3)
    assert gpu.vm_size == "g5.xlarge (+2 more)" and gpu.price == 0.42 and gpu.at_min == 0
    assert est.control_plane["price"] == round(0.10 + 0.045, 4)
    assert est.hourly_min == round(0.192 + 0.145, 4)
    assert est.hourly_max == round(0.384 + 3 * 0.42 + 0.145, 4)
    assert est.hourly_max_on_demand == round(0.384 + 3 * 1.006 + 0.145, 4)


def test_eks_types_missing_from_the_table_are_reported(eks_plan):
    plan = run_program("eks-dev", {"gpuInstanceTypes": '["g6e.xlarge", "g5.xlarge"]', "gpuFallback": "[]"})
    est = cost.estimate(plan)
    assert est is not None and est.hourly_max is None
    assert est.notes == ["no price for g6e.xlarge: node group gpu-spot not counted"]

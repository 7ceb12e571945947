"""The pools a saving is priced for, their prices per node-hour, and what `plan` says of them:
shared by the saving at an eviction band and the saving over a trace window."""

from __future__ import annotations

import pytest

from lab.plan.cost import CostEstimate, PoolCost
from lab.plan.saving import PricedPool, priced_spot_pools, saving_text


def _pool(name: str, *, spot: bool, price: float | None, on_demand: float | None, nodes=(1, 4), rank=None):
    return PoolCost(name, None, "vm", spot, nodes[0], nodes[1], price, on_demand, "table", rank=rank)


def _estimate(*pools: PoolCost) -> CostEstimate:
    return CostEstimate("USD", "2025-01", "r", "prices", {"price": 0.1}, list(pools), None, None, None)


def test_a_saving_is_priced_for_the_first_spot_rank_with_both_prices_and_a_node():
    cpu = _pool("cpu", spot=False, price=0.2, on_demand=0.2, nodes=(2, 3))
    gpu = _pool("gpu", spot=True, price=1.0, on_demand=3.0, nodes=(0, 4), rank=1)
    unpriced = _pool("nodemand", spot=True, price=1.0, on_demand=None)
    fallback = _pool("gpu-rank2", spot=True, price=1.5, on_demand=3.0, rank=2)
    empty = _pool("none", spot=True, price=1.0, on_demand=3.0, nodes=(0, 0))
    pools = priced_spot_pools(_estimate(cpu, gpu, unpriced, fallback, empty))
    # The rest of the cluster: the control plane's 0.1 and every other pool at its minimum
    # (the CPU pool's 2 x 0.2, the others' 1 x 1.0, 1 x 1.5 and 0 x 1.0).
    assert pools == [PricedPool("gpu", 4, 1.0, 3.0, pytest.approx(0.1 + 0.4 + 1.0 + 1.5))]
    assert priced_spot_pools(None) == []


def test_a_row_prices_a_useful_spot_node_hour_against_a_node_hour_on_demand():
    pool = PricedPool("gpu", 4, 1.0, 3.0, fixed=2.0)
    assert pool.on_demand_per_node_hour == pytest.approx(3.5)  # (3 x 4 + 2) / 4
    assert pool.prices(1.75) == {"spot_per_useful_node_hour": 1.75, "on_demand_per_node_hour": 3.5, "saving": 0.5}
    assert pool.prices(float("inf"))["saving"] == float("-inf")  # a mode that never trains saves nothing


def test_no_rows_say_there_is_no_priced_pool_without_asking_for_the_head():
    def head() -> str:
        raise AssertionError("the head of no rows is never written")

    assert saving_text([], head, str) == ["  (no priced spot pool in this plan)"]
    assert saving_text([{"a": 1}, {"a": 2}], lambda: "head", lambda r: f"row {r['a']}") == ["head", "row 1", "row 2"]

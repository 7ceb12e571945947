"""What spot saves against on demand at one monthly eviction band, per fault-tolerance mode:
the price of a useful node-hour (an hour of one node's training that the job keeps) on the
stack's spot GPU pool at its largest, against the same nodes on demand (`elastic-lab plan
--band`). Goodput comes from lab.vocab.spot_goodput's model and its measured figures."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lab.plan.cost import CostEstimate, PoolCost
from lab.vocab.checkpoint_interval import band_share, job_mtbf_s
from lab.vocab.spot_goodput import MODES, REPLACEMENT_S, MeasuredCosts, goodput


def rest_of_the_cluster(cost: CostEstimate, pool: PoolCost) -> float:
    """The hourly price of everything but `pool`: the control plane and the other pools at
    their minimum."""
    control = float(cost.control_plane.get("price") or 0.0)
    return control + sum((p.price or 0.0) * p.min_nodes for p in cost.pools if p is not pool)


@dataclass(frozen=True)
class PricedPool:
    """A spot pool a saving is priced for, at its largest: its prices per node-hour on spot and on
    demand, and the hourly price of the rest of the cluster (`fixed`)."""

    pool: str
    nodes: int
    spot_price: float
    on_demand_price: float
    fixed: float

    @property
    def on_demand_per_node_hour(self) -> float:
        """A node-hour of the pool on demand, the cluster's fixed part shared over its nodes."""
        return (self.on_demand_price * self.nodes + self.fixed) / self.nodes

    def prices(self, spot_per_useful_node_hour: float) -> dict[str, float]:
        """A row's prices: a useful node-hour on spot against a node-hour on demand, and the saving."""
        on_demand = self.on_demand_per_node_hour
        return {
            "spot_per_useful_node_hour": round(spot_per_useful_node_hour, 4),
            "on_demand_per_node_hour": round(on_demand, 4),
            "saving": round(1 - spot_per_useful_node_hour / on_demand, 4),
        }


def priced_spot_pools(cost: CostEstimate | None) -> list[PricedPool]:
    """The pools a saving is priced for: spot, rank 1 of the GPU capacity (a fallback rank runs
    only when it has none), a node at least, and priced both on spot and on demand."""
    if cost is None:
        return []
    return [
        PricedPool(pool.pool, pool.max_nodes, pool.price, pool.on_demand_price, rest_of_the_cluster(cost, pool))
        for pool in cost.pools
        if pool.spot
        and not pool.fallback
        and pool.max_nodes >= 1
        and pool.price is not None
        and pool.on_demand_price is not None
    ]


def saving_text(
    rows: list[dict[str, Any]], head: Callable[[], str], line: Callable[[dict[str, Any]], str]
) -> list[str]:
    """What `plan` says of a saving's rows: `head()`, then a line per row; one line saying there
    is no priced spot pool when there are no rows."""
    if not rows:
        return ["  (no priced spot pool in this plan)"]
    return [head(), *map(line, rows)]


def saving_rows(cost: CostEstimate | None, band: str, costs: MeasuredCosts | None = None) -> list[dict[str, Any]]:
    """Per spot pool with prices and per mode: goodput at `band`, the price of a useful
    node-hour on spot and on demand (the cluster's fixed part shared over the pool's nodes),
    and the saving."""
    share = band_share(band)
    costs = costs or MeasuredCosts()
    rows: list[dict[str, Any]] = []
    for priced in priced_spot_pools(cost):
        nodes = priced.nodes
        mtbf = job_mtbf_s(share, nodes)
        for mode in MODES:
            g = goodput(mode, nodes, mtbf, costs, REPLACEMENT_S)
            spot = (priced.spot_price * nodes + priced.fixed) / (nodes * g) if g else float("inf")
            rows.append(
                {
                    "pool": priced.pool,
                    "nodes": nodes,
                    "band": band,
                    "mode": mode,
                    "goodput": round(g, 6),
                    **priced.prices(spot),
                }
            )
    return rows


def saving_lines(cost: CostEstimate | None, band: str) -> list[str]:
    def head() -> str:
        currency = cost.currency if cost else ""
        return (
            f"  at the {band} band, per fault-tolerance mode: the share of the time the job trains / {currency} per "
            f"useful node-hour on spot against on demand (the saving); a replacement node after {REPLACEMENT_S:g} s "
            "(a guess), the rest from measured drills (lab/vocab/spot_goodput.py)"
        )

    return saving_text(saving_rows(cost, band), head, _row_line)


def _row_line(r: dict[str, Any]) -> str:
    return (
        f"  {r['pool']} at {r['nodes']} node(s), {r['mode']}: {100 * r['goodput']:.2f} % / "
        f"{r['spot_per_useful_node_hour']:.4f} against {r['on_demand_per_node_hour']:.4f} "
        f"({100 * r['saving']:.1f} % saved)"
    )

"""What spot saves against on demand at one monthly eviction band, per fault-tolerance mode:
the price of a useful node-hour (an hour of one node's training that the job keeps) on the
stack's spot GPU pool at its largest, against the same nodes on demand (`elastic-lab plan
--band`). Goodput comes from lab.vocab.spot_goodput's model and its measured figures."""

from __future__ import annotations

from typing import Any

from lab.plan.cost import CostEstimate, PoolCost
from lab.vocab.checkpoint_interval import band_share, job_mtbf_s
from lab.vocab.spot_goodput import MODES, REPLACEMENT_S, MeasuredCosts, goodput


def rest_of_the_cluster(cost: CostEstimate, pool: PoolCost) -> float:
    """The hourly price of everything but `pool`: the control plane and the other pools at
    their minimum."""
    control = float(cost.control_plane.get("price") or 0.0)
    return control + sum((p.price or 0.0) * p.min_nodes for p in cost.pools if p is not pool)


def saving_rows(cost: CostEstimate | None, band: str, costs: MeasuredCosts | None = None) -> list[dict[str, Any]]:
    """Per spot pool with prices and per mode: goodput at `band`, the price of a useful
    node-hour on spot and on demand (the cluster's fixed part shared over the pool's nodes),
    and the saving."""
    share = band_share(band)
    costs = costs or MeasuredCosts()
    rows: list[dict[str, Any]] = []
    if cost is None:
        return rows
    for pool in cost.pools:
        if not pool.spot or pool.fallback or pool.max_nodes < 1 or pool.price is None or pool.on_demand_price is None:
            continue
        nodes = pool.max_nodes
        fixed = rest_of_the_cluster(cost, pool)
        on_demand = (pool.on_demand_price * nodes + fixed) / nodes
        mtbf = job_mtbf_s(share, nodes)
        for mode in MODES:
            g = goodput(mode, nodes, mtbf, costs, REPLACEMENT_S)
            spot = (pool.price * nodes + fixed) / (nodes * g) if g else float("inf")
            rows.append(
                {
                    "pool": pool.pool,
                    "nodes": nodes,
                    "band": band,
                    "mode": mode,
                    "goodput": round(g, 6),
                    "spot_per_useful_node_hour": round(spot, 4),
                    "on_demand_per_node_hour": round(on_demand, 4),
                    "saving": round(1 - spot / on_demand, 4),
                }
            )
    return rows


def saving_lines(cost: CostEstimate | None, band: str) -> list[str]:
    rows = saving_rows(cost, band)
    if not rows:
        return ["  (no priced spot pool in this plan)"]
    currency = cost.currency if cost else ""
    lines = [
        f"  at the {band} band, per fault-tolerance mode: the share of the time the job trains / {currency} per "
        f"useful node-hour on spot against on demand (the saving); a replacement node after {REPLACEMENT_S:g} s "
        "(a guess), the rest from measured drills (lab/vocab/spot_goodput.py)"
    ]
    for r in rows:
        lines.append(
            f"  {r['pool']} at {r['nodes']} node(s), {r['mode']}: {100 * r['goodput']:.2f} % / "
            f"{r['spot_per_useful_node_hour']:.4f} against {r['on_demand_per_node_hour']:.4f} "
            f"({100 * r['saving']:.1f} % saved)"
        )
    return lines

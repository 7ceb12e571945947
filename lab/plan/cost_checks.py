"""Checks on what the stack costs: every pool priced (a price the table lacks is a warning that
counts, never a silent fallback), and no spot price cap below the spot price itself.

An AKS spot pool with `spotMaxPrice` below the VM size's current spot price gets no node: Azure
allocates spot VMs only while the market price is within the cap. The price table's spot price
is the best offline knowledge of that price (see lab/plan/prices.yaml, and its `query` for the
current one).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lab.plan import cost
from lab.plan.aks_pools import MANAGED_CLUSTER, pools
from lab.plan.findings import Finding

CHECK = "cost:priced"


def applies(plan: Any) -> bool:
    return bool(plan.of_type(cost.NODE_GROUP) or pools(plan))


def priced(plan: Any) -> Iterator[Finding]:
    estimate = cost.estimate(plan, plan.prices)
    if estimate is None:
        return
    where = (plan.of_type(MANAGED_CLUSTER) or plan.of_type(cost.NODE_GROUP) or ["stack"])[0]
    for note in estimate.notes:
        yield Finding.warning(
            CHECK,
            where,
            "price",
            note,
            "a price for every pool and region in lab/plan/prices.yaml (or --prices FILE): without it the "
            "cost shown is not this stack's",
        )
    by_name = {p.pool: p for p in estimate.pools}
    for pool in pools(plan):
        cap = pool.get("spotMaxPrice")
        priced_pool = by_name.get(pool.name)
        if not pool.spot or priced_pool is None or priced_pool.price is None:
            continue
        if isinstance(cap, (int, float)) and not isinstance(cap, bool) and cap != -1 and cap < priced_pool.price:
            yield Finding.error(
                CHECK,
                pool.resource,
                pool.path("spotMaxPrice"),
                cap,
                f"-1 (pay up to the on-demand price) or at least {priced_pool.price} {estimate.currency}/h, the spot "
                f"price of {priced_pool.vm_size} in the price table: below the spot price the pool gets no node",
            )

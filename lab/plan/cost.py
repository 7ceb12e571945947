"""Hourly cost estimate of a plan's node pools, spot vs on-demand, from lab/plan/prices.yaml.

The estimate reads the recorded resources (not the config): each pool's VM size, priority
and autoscaler range, and the cluster's region and tier. It gives the hourly cost with
every pool at its minimum (idle: the GPU pool at zero), at its maximum, and at the maximum
with the GPU pool on on-demand capacity instead of spot. Every price carries its source
and, where the table has one, the Azure Retail Prices API query that returns today's price.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lab.plan.aks_pools import MANAGED_CLUSTER, pools

PRICES = Path(__file__).with_name("prices.yaml")


@dataclass
class PoolCost:
    pool: str
    role: str | None
    vm_size: str
    spot: bool
    min_nodes: int
    max_nodes: int
    price: float | None  # per node-hour at the pool's priority
    on_demand_price: float | None
    source: str
    query: str | None = None  # Azure Retail Prices API request that returns the current price
    at_min: float | None = None
    at_max: float | None = None
    at_max_on_demand: float | None = None


@dataclass
class CostEstimate:
    currency: str
    as_of: str
    region: str | None
    prices_file: str
    control_plane: dict[str, Any]
    pools: list[PoolCost]
    hourly_min: float | None
    hourly_max: float | None
    hourly_max_on_demand: float | None
    notes: list[str] = field(default_factory=list)

    @property
    def spot_saving(self) -> float | None:
        if not self.hourly_max or not self.hourly_max_on_demand:
            return None
        return 1 - self.hourly_max / self.hourly_max_on_demand

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spot_saving"] = self.spot_saving
        return d


def load_prices(path: Path | str | None = None) -> dict[str, Any]:
    path = Path(path) if path else PRICES
    doc = yaml.safe_load(path.read_text()) or {}
    for key in ("currency", "as_of", "azure"):
        if key not in doc:
            raise ValueError(f"{path}: missing {key!r} (see lab/plan/prices.yaml for the layout)")
    return doc


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def estimate(plan: Any, prices_path: Path | str | None = None) -> CostEstimate | None:
    """Hourly estimate for an AKS plan; None when the plan has no Azure pools."""
    views = pools(plan)
    clusters = plan.of_type(MANAGED_CLUSTER)
    if not views:
        return None
    table = load_prices(prices_path)
    azure = table.get("azure") or {}
    region = next((c.inputs.get("location") for c in clusters if c.inputs.get("location")), None)
    notes: list[str] = []
    by_region = azure.get("vm") or {}
    region_prices = by_region.get(region or "", None)
    if region_prices is None:
        fallback = table.get("default_region", "eastus")
        region_prices = by_region.get(fallback, {})
        notes.append(f"no prices for region {region!r} in the table: {fallback} prices used")

    tier = next(((c.inputs.get("sku") or {}).get("tier") for c in clusters), None) or "Free"
    cp = (azure.get("aks_control_plane") or {}).get(tier)
    control = {
        "tier": tier,
        "price": cp.get("price") if cp else None,
        "source": cp.get("source") if cp else "not in the table",
        "query": cp.get("query") if cp else None,
    }
    if not cp:
        notes.append(f"no control-plane price for tier {tier!r}")

    costs: list[PoolCost] = []
    order = {"system": 0, "cpu": 1, "gpu-spot": 2}
    for view in sorted(views, key=lambda v: (order.get(str(v.role), 9), v.name)):
        size = str(view.get("vmSize"))
        autoscale = view.get("enableAutoScaling") is True
        lo = _count(view.get("minCount")) if autoscale else _count(view.get("count"))
        hi = _count(view.get("maxCount")) if autoscale else _count(view.get("count"))
        entry = region_prices.get(size) or {}
        on_demand = entry.get("on_demand")
        price = entry.get("spot") if view.spot else on_demand
        source = entry.get("source", "not in the price table: add it to prices.yaml")
        if price is None:
            notes.append(f"no {'spot' if view.spot else 'on-demand'} price for {size}: pool {view.name} not counted")
        pc = PoolCost(view.name, view.role, size, view.spot, lo, hi, price, on_demand, source, entry.get("query"))
        if price is not None:
            pc.at_min, pc.at_max = round(price * lo, 4), round(price * hi, 4)
        if on_demand is not None:
            pc.at_max_on_demand = round(on_demand * hi, 4)
        costs.append(pc)

    def total(attr: str) -> float | None:
        values = [getattr(c, attr) for c in costs]
        if any(v is None for v in values) or control["price"] is None:
            return None
        return round(sum(values) + control["price"], 4)

    return CostEstimate(
        currency=table["currency"],
        as_of=str(table["as_of"]),
        region=region,
        prices_file=str(prices_path or PRICES),
        control_plane=control,
        pools=costs,
        hourly_min=total("at_min"),
        hourly_max=total("at_max"),
        hourly_max_on_demand=total("at_max_on_demand"),
        notes=notes,
    )

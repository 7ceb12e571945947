"""Hourly cost estimate of a plan's node pools, spot vs on-demand, from lab/plan/prices.yaml.

The estimate reads the recorded resources (not the config): each AKS pool's VM size,
priority and autoscaler range and the cluster's region and tier; or each EKS node group's
instance types, capacity type and scaling range, the provider's region, and the NAT gateway.
It gives the hourly cost with every pool at its minimum (idle: the GPU pool at zero), at its maximum, and at the maximum
with the GPU pool on on-demand capacity instead of spot. Every price carries its source
and, where the table has one, the query (Azure Retail Prices API, AWS CLI) that returns
today's price. A spot group of several instance types is priced at its dearest type.

GPU capacity ranks (lab/vocab/capacity.py) are alternatives, not additions: the totals count
rank 1 (the GPU spot pool), and `ranks` gives each rank's cost at the GPU maximum and what
the whole cluster costs an hour while the job runs on that rank instead.

A worker placed on a fallback rank stays there: the cluster autoscaler removes a GPU node only
when less than half of its GPUs are requested (`--scale-down-gpu-utilization-threshold`, 0.5:
"utilization calculation only cares about gpu resource for accelerator node", its FAQ), so a
node whose GPU a worker holds is never a candidate, and nothing in it moves a running pod to a
node of a higher priority (the priority expander picks only which pool to scale up). So each
fallback rank also carries what it costs over rank 1 for as long as it is kept: a node an
hour, and the rank at its maximum for a week. The on-demand rank is kept until the job ends
or the worker is moved (`elastic-lab rebalance`, lab/cluster/rebalance.py); a spot rank's node also
ends at its eviction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lab.plan.aks_pools import MANAGED_CLUSTER, pools
from lab.program.yaml_files import read_mapping
from lab.vocab.capacity import rank_in
from lab.vocab.pools import POOL_LABEL
from lab.vocab.problems import InvalidInput, Problem

PRICES = Path(__file__).with_name("prices.yaml")
# What a kept fallback node is priced over: a week of a job's life.
HOURS_PER_WEEK = 24 * 7
# Until when a worker keeps a fallback rank's node (RankCost.kept_until).
KEPT_ON_DEMAND = "until the job ends or the worker is moved"
KEPT_SPOT = "until the job ends, the worker is moved or the node is evicted"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
NAT_GATEWAY = "aws:ec2/natGateway:NatGateway"
AWS_PROVIDER = "pulumi:providers:aws"


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
    query: str | None = None  # the request (Azure Retail Prices API, AWS CLI) that returns the current price
    at_min: float | None = None
    at_max: float | None = None
    at_max_on_demand: float | None = None
    rank: int | None = None  # GPU capacity rank (1 = tried first); None for other pools

    @property
    def fallback(self) -> bool:
        """A GPU rank below the first: used only when the ranks above have no capacity."""
        return self.rank is not None and self.rank > 1

    def priced(self) -> PoolCost:
        """This pool with its hourly costs at its minimum and maximum sizes, where priced."""
        if self.price is not None:
            self.at_min, self.at_max = round(self.price * self.min_nodes, 4), round(self.price * self.max_nodes, 4)
        if self.on_demand_price is not None:
            self.at_max_on_demand = round(self.on_demand_price * self.max_nodes, 4)
        return self


@dataclass
class RankCost:
    """One GPU capacity rank at the GPU maximum: its hourly cost, and the whole cluster's while
    the job runs there instead of on rank 1 (`extra`: the difference). A rank below the first
    also says how long a worker keeps its node there (`kept_until`) and what that costs over
    rank 1: a node an hour (`extra_per_node`) and the rank at its maximum for a week."""

    rank: int
    pool: str
    vm_size: str
    capacity: str
    nodes: int
    at_max: float | None
    cluster_at_max: float | None
    extra: float | None
    extra_per_node: float | None = None
    extra_per_week: float | None = None
    kept_until: str | None = None


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
    ranks: list[RankCost] = field(default_factory=list)

    @property
    def spot_saving(self) -> float | None:
        if not self.hourly_max or not self.hourly_max_on_demand:
            return None
        return 1 - self.hourly_max / self.hourly_max_on_demand

    @property
    def on_demand_rank(self) -> RankCost | None:
        """The on-demand GPU rank (the last, when a stack has one): the fallback kept for the
        job's whole life."""
        return next((r for r in self.ranks if r.rank > 1 and r.capacity == "on-demand"), None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spot_saving"] = self.spot_saving
        return d


def load_prices(path: Path | str | None = None) -> dict[str, Any]:
    path = Path(path) if path else PRICES
    expected = "a price table laid out as lab/plan/prices.yaml (currency, as_of, azure, aws)"
    doc = read_mapping(path, "--prices", expected)
    missing = [key for key in ("currency", "as_of", "azure") if key not in doc]
    if missing:
        raise InvalidInput([Problem("--prices", str(path), f"the keys {missing} too: {expected}")])
    return doc


def node_count(value: Any) -> int:
    """A recorded node count (0 where the plan holds none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def estimate(plan: Any, prices_path: Path | str | None = None) -> CostEstimate | None:
    """Hourly estimate for an AKS or EKS plan; None when the plan has no node pools."""
    if plan.of_type(NODE_GROUP):
        return _eks_estimate(plan, prices_path)
    return _aks_estimate(plan, prices_path)


def _aks_estimate(plan: Any, prices_path: Path | str | None) -> CostEstimate | None:
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
        "label": f"AKS control plane ({tier})",
        "tier": tier,
        "price": cp.get("price") if cp else None,
        "source": cp.get("source") if cp else "not in the table",
        "query": cp.get("query") if cp else None,
    }
    if not cp:
        notes.append(f"no control-plane price for tier {tier!r}")

    costs: list[PoolCost] = []
    order = {"system": 0, "cpu": 1, "gpu-spot": 2}
    for view in sorted(
        views,
        key=lambda v: (order.get(str(v.role), 9), rank_in(v.get("nodeLabels")) or 0, v.name),
    ):
        size = str(view.get("vmSize"))
        autoscale = view.get("enableAutoScaling") is True
        lo = node_count(view.get("minCount")) if autoscale else node_count(view.get("count"))
        hi = node_count(view.get("maxCount")) if autoscale else node_count(view.get("count"))
        entry = region_prices.get(size) or {}
        on_demand = entry.get("on_demand")
        price = entry.get("spot") if view.spot else on_demand
        source = entry.get("source", "not in the price table: add it to prices.yaml")
        if price is None:
            notes.append(f"no {'spot' if view.spot else 'on-demand'} price for {size}: pool {view.name} not counted")
        pc = PoolCost(view.name, view.role, size, view.spot, lo, hi, price, on_demand, source, entry.get("query"))
        pc.rank = rank_in(view.get("nodeLabels"))
        costs.append(pc.priced())

    return _totals(table, region, prices_path, control, costs, notes)


def _eks_estimate(plan: Any, prices_path: Path | str | None) -> CostEstimate:
    table = load_prices(prices_path)
    aws = table.get("aws") or {}
    region = next((p.inputs.get("region") for p in plan.of_type(AWS_PROVIDER) if p.inputs.get("region")), None)
    notes: list[str] = []
    by_region = aws.get("ec2") or {}
    region_prices = by_region.get(region or "")
    if region_prices is None:
        fallback = "us-east-1"
        region_prices = by_region.get(fallback, {})
        notes.append(f"no prices for region {region!r} in the table: {fallback} prices used")
    cp = aws.get("eks_control_plane") or {}
    nat = aws.get("nat_gateway") or {}
    nats = len(plan.of_type(NAT_GATEWAY))
    fixed = cp.get("price")
    if fixed is not None and nats:
        fixed = round(fixed + nats * (nat.get("price") or 0.0), 4)
    control = {
        "label": "EKS control plane" + (f" + {nats} NAT gateway" if nats else ""),
        "tier": "standard",
        "price": fixed,
        "source": cp.get("source", "not in the table") + (f"; NAT: {nat.get('source')}" if nats else ""),
        "query": cp.get("query"),
    }
    costs: list[PoolCost] = []
    order: dict[str | None, int] = {"cpu": 0, "gpu-spot": 1}
    groups = sorted(
        plan.of_type(NODE_GROUP),
        key=lambda g: (order.get(_role(g), 9), rank_in(g.inputs.get("labels")) or 0, g.name),
    )
    for g in groups:
        spot = g.inputs.get("capacityType") == "SPOT"
        types = [str(t) for t in g.inputs.get("instanceTypes") or []]
        scaling = g.inputs.get("scalingConfig") or {}
        lo, hi = node_count(scaling.get("minSize")), node_count(scaling.get("maxSize"))
        entries = {t: region_prices.get(t) or {} for t in types}
        missing = [t for t, e in entries.items() if "on_demand" not in e or (spot and "spot" not in e)]
        name = str(g.inputs.get("nodeGroupName") or g.name)
        if missing or not types:
            notes.append(f"no price for {', '.join(missing) or 'its instance types'}: node group {name} not counted")
            price = on_demand = None
            source, query = "not in the price table: add it to prices.yaml", None
            shown = ",".join(types)
        else:
            dearest = max(types, key=lambda t: entries[t]["spot" if spot else "on_demand"])
            price = entries[dearest]["spot" if spot else "on_demand"]
            on_demand = max(e["on_demand"] for e in entries.values())
            source, query = entries[dearest].get("source", ""), entries[dearest].get("query")
            shown = dearest + (f" (+{len(types) - 1} more)" if len(types) > 1 else "")
        pc = PoolCost(name, _role(g), shown, spot, lo, hi, price, on_demand, source, query)
        pc.rank = rank_in(g.inputs.get("labels"))
        costs.append(pc.priced())

    return _totals(table, region, prices_path, control, costs, notes)


def _totals(
    table: dict[str, Any],
    region: str | None,
    prices_path: Path | str | None,
    control: dict[str, Any],
    costs: list[PoolCost],
    notes: list[str],
) -> CostEstimate:
    """The estimate of priced pools and a control plane: hourly totals at the pools' minimum
    and maximum sizes (None when any price is missing), fallback GPU ranks left out; and each
    GPU rank's cost in rank 1's place."""

    def total(attr: str) -> float | None:
        values: list[float | None] = [getattr(c, attr) for c in costs if not c.fallback]
        priced = [v for v in values if v is not None]
        control_price: float | None = control["price"]
        if len(priced) < len(values) or control_price is None:
            return None
        return round(sum(priced) + control_price, 4)

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
        ranks=_rank_costs(costs, total("at_max")),
    )


def _rank_costs(costs: list[PoolCost], hourly_max: float | None) -> list[RankCost]:
    """Each GPU rank at the GPU maximum, in rank 1's place in the cluster's hourly maximum;
    a fallback rank also with what keeping it costs over rank 1 (see the module docstring)."""
    gpu = sorted((c for c in costs if c.rank is not None), key=lambda c: c.rank or 0)
    first = gpu[0] if gpu and gpu[0].rank == 1 else None
    out = []
    for c in gpu:
        cluster = None
        if hourly_max is not None and first is not None and first.at_max is not None and c.at_max is not None:
            cluster = round(hourly_max - first.at_max + c.at_max, 4)
        extra = None if cluster is None or hourly_max is None else round(cluster - hourly_max, 4)
        capacity = "spot" if c.spot else "on-demand"
        rank = RankCost(c.rank or 0, c.pool, c.vm_size, capacity, c.max_nodes, c.at_max, cluster, extra)
        if c.fallback:
            rank.kept_until = KEPT_SPOT if c.spot else KEPT_ON_DEMAND
            if first is not None and first.price is not None and c.price is not None:
                rank.extra_per_node = round(c.price - first.price, 4)
            if extra is not None:
                rank.extra_per_week = round(extra * HOURS_PER_WEEK, 2)
        out.append(rank)
    return out


def _role(group: Any) -> str | None:
    labels = group.inputs.get("labels") or {}
    role = labels.get(POOL_LABEL)
    return str(role) if role else None

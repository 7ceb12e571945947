"""The vCPU quota a stack needs, per quota and region, before `pulumi up` asks for any VM.

Each cloud counts vCPUs against quotas of its own (units: vCPUs):
  Azure  spot VMs of every family against one regional figure, `lowPriorityCores` ("Total
         Regional Spot vCPUs" in the portal, "Total Regional Low-priority vCPUs" in the API);
         on-demand VMs against their family's quota (`standardDSv5Family`, ...) and the
         regional total `cores` ("Total Regional vCPUs").
  AWS    Service Quotas of EC2 by instance class, spot and on-demand apart: "All G and VT Spot
         Instance Requests" (L-3819A6DF), "Running On-Demand G and VT instances" (L-DB2E81BA),
         "All P4, P3 and P2 Spot Instance Requests" (L-7212CCBC), "All P5 Spot Instance
         Requests" (L-C4BD4855), "Running On-Demand P instances" (L-417A185B), "Running
         On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances" (L-1216C47A).

GPU capacity ranks are alternatives: each rank needs its own nodes' vCPUs at the GPU maximum;
rank 1's need is required (`up` stops without it), a fallback rank's only says that rank
cannot be used. Sizes missing from lab/vocab/machine_shapes.py are named, not guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lab.vocab.machine_shapes import AWS, AZURE, Shape

AZURE_SPOT = ("lowPriorityCores", "Total Regional Spot vCPUs")
AZURE_REGIONAL = ("cores", "Total Regional vCPUs")
AWS_QUOTAS = {
    # (class, spot): (quota code, name)
    ("G", True): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("G", False): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("P", True): ("L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests"),
    ("P5", True): ("L-C4BD4855", "All P5 Spot Instance Requests"),
    ("P", False): ("L-417A185B", "Running On-Demand P instances"),
    ("P5", False): ("L-417A185B", "Running On-Demand P instances"),
    ("Standard", True): ("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
    ("Standard", False): ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
}
AZURE_QUOTA_PORTAL = "Azure portal > Quotas > Compute, filter the region, select the quota > New Quota Request"


@dataclass(frozen=True)
class PoolDemand:
    """A pool (AKS) or node group (EKS) at its largest: its sizes (a group of several types
    counts at its largest), spot or on demand, its most nodes, and its GPU rank (None: a CPU
    or system pool)."""

    pool: str
    sizes: tuple[str, ...]
    spot: bool
    max_nodes: int
    rank: int | None = None


@dataclass(frozen=True)
class QuotaNeed:
    """vCPUs one quota must leave free in `region` for `pools` (what needs them, in words).
    `required`: rank 1 or a CPU pool needs it (`up` stops without it); otherwise only a
    fallback GPU rank."""

    cloud: str  # azure | aws
    quota: str  # Azure usage name, or AWS quota code
    name: str
    region: str
    vcpus: int
    pools: tuple[str, ...]
    required: bool = True

    @property
    def title(self) -> str:
        return self.name if self.name == self.quota else f"{self.name} ({self.quota})"

    @property
    def check_name(self) -> str:
        """How `elastic-lab check` names the check of this need."""
        return f"quota {self.title} ({self.region})"

    def request(self, limit: int | None = None, subscription: str | None = None) -> str:
        """How to ask for a limit of `limit` vCPUs (default: what the stack needs)."""
        value = self.vcpus if limit is None else limit
        if self.cloud == "aws":
            return (
                f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {self.quota} "
                f"--desired-value {value} --region {self.region} (or the Service Quotas console: Amazon EC2 > "
                f"{self.name!r} > Request increase at account level)"
            )
        where = f" in subscription {subscription}" if subscription else ""
        return f"ask for a limit of {value} vCPUs of {self.title} in {self.region}{where}: {AZURE_QUOTA_PORTAL}"

    def line(self) -> str:
        kind = "" if self.required else " (fallback rank only)"
        return f"{self.title} in {self.region}: {self.vcpus} vCPUs for {', '.join(self.pools)}{kind}"


def _largest(sizes: Sequence[str], shapes: dict[str, Shape]) -> tuple[str, Shape] | None:
    known = [(s, shapes[s]) for s in sizes if s in shapes]
    return max(known, key=lambda k: k[1].vcpus) if len(known) == len(sizes) and known else None


def unknown_sizes(pools: Iterable[PoolDemand], cloud: str) -> list[str]:
    shapes = AZURE if cloud == "azure" else AWS
    return sorted({s for p in pools for s in p.sizes if s not in shapes})


def _what(pool: PoolDemand, size: str, shape: Shape) -> str:
    rank = f"rank {pool.rank} " if pool.rank else ""
    return f"{rank}{pool.pool}: {pool.max_nodes} x {size} ({shape.vcpus} vCPUs)"


def azure_needs(pools: Sequence[PoolDemand], region: str) -> list[QuotaNeed]:
    """Spot vCPUs per spot GPU rank; on-demand vCPUs per family and in the region (the CPU
    pools; with an on-demand GPU rank, again with it)."""
    out: list[QuotaNeed] = []
    on_demand: list[tuple[PoolDemand, str, Shape]] = []
    for pool in pools:
        found = _largest(pool.sizes, AZURE)
        if found is None:
            continue
        size, shape = found
        if pool.spot:
            spot, name = AZURE_SPOT
            need = pool.max_nodes * shape.vcpus
            out.append(
                QuotaNeed("azure", spot, name, region, need, (_what(pool, size, shape),), pool.rank in (None, 1))
            )
        else:
            on_demand.append((pool, size, shape))
    base = [d for d in on_demand if d[0].rank is None]
    for extra in [None, *[d for d in on_demand if d[0].rank is not None]]:
        members = base + ([extra] if extra else [])
        required = extra is None
        families: dict[str, list[tuple[PoolDemand, str, Shape]]] = {}
        for member in members:
            families.setdefault(member[2].family, []).append(member)
        for family, inside in families.items():
            if not required and not any(m is extra for m in inside):
                continue
            vcpus = sum(p.max_nodes * s.vcpus for p, _, s in inside)
            out.append(QuotaNeed("azure", family, family, region, vcpus, tuple(_what(*m) for m in inside), required))
        if members:
            code, name = AZURE_REGIONAL
            vcpus = sum(p.max_nodes * s.vcpus for p, _, s in members)
            out.append(QuotaNeed("azure", code, name, region, vcpus, tuple(_what(*m) for m in members), required))
    return out


def aws_class(instance_type: str) -> str:
    """The instance class EC2's vCPU quotas count by: G (g*, vt*), P5, P (p2-p4), or Standard."""
    family = instance_type.split(".")[0]
    if family.startswith(("g", "vt")):
        return "G"
    if family.startswith("p5"):
        return "P5"
    if family.startswith("p"):
        return "P"
    return "Standard"


def aws_needs(pools: Sequence[PoolDemand], region: str) -> list[QuotaNeed]:
    """Per pool its class's spot or on-demand quota; CPU groups of one class share theirs."""
    out: list[QuotaNeed] = []
    shared: dict[tuple[str, bool], list[tuple[PoolDemand, str, Shape]]] = {}
    for pool in pools:
        found = _largest(pool.sizes, AWS)
        if found is None:
            continue
        size, shape = found
        key = (aws_class(size), pool.spot)
        if pool.rank is None:
            shared.setdefault(key, []).append((pool, size, shape))
            continue
        code, name = AWS_QUOTAS[key]
        need = pool.max_nodes * shape.vcpus
        out.append(QuotaNeed("aws", code, name, region, need, (_what(pool, size, shape),), pool.rank == 1))
    for key, members in shared.items():
        code, name = AWS_QUOTAS[key]
        vcpus = sum(p.max_nodes * s.vcpus for p, _, s in members)
        out.append(QuotaNeed("aws", code, name, region, vcpus, tuple(_what(*m) for m in members)))
    return out

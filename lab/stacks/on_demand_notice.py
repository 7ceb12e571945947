"""What a job is told when its workers can land on the stack's on-demand GPU rank: a worker
placed there keeps that node, and its price, until the job ends or the worker is moved (the
cluster autoscaler removes no GPU node whose GPU a worker holds; lab/plan/cost.py), so the
rank is priced for the job's whole life, at the stack's prices (lab/plan/prices.yaml)."""

from __future__ import annotations

from lab.plan.display import kept_fallback_lines
from lab.stacks.target import StackTarget
from lab.vocab.job import JobSpec


def on_demand_notice(target: StackTarget, spec: JobSpec) -> list[str]:
    """The notice for `spec` on `target`: empty when the stack has no on-demand GPU rank.
    Every one of the job's workers (up to --max-nodes) may land there."""
    cost = target.cost
    if cost is None or cost.on_demand_rank is None:
        return []
    return [
        f"note: when no spot GPU rank of stack {target.stack!r} has capacity, this job's workers land on its "
        "on-demand rank, and the cluster autoscaler removes no GPU node whose GPU a worker holds "
        f"(`elastic-lab rebalance {spec.name} -s {target.stack}` moves them back when rank 1 has room; "
        f"`elastic-lab plan -s {target.stack}` prices every rank):",
        *kept_fallback_lines(cost, spec.max_nodes),
    ]

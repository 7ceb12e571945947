"""What a window of a real spot trace would give the stack's spot GPU pool, per fault-tolerance
mode (`elastic-lab plan --trace FILE|NAME --window A:B`): the window as the pool's schedule at
its largest (lab.vocab.trace_schedule's proportional rule, in the trace's own time, with the
chosen notice), the model's goodput against the capacity the window offered
(lab.vocab.trace_goodput, measured figures and a throughput per node the same at every size),
and the price of a useful node-hour on spot against on demand. Spot bills the nodes the window
offers, whether the mode trains on them or not."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from lab.plan.cost import CostEstimate
from lab.plan.saving import priced_spot_pools, saving_text
from lab.vocab.checkpoint_interval import duration
from lab.vocab.models import TINY
from lab.vocab.platform_facts import TERMINATION_GRACE_S
from lab.vocab.problems import InvalidInput
from lab.vocab.spot_goodput import MODES, MeasuredCosts, costs_for
from lab.vocab.spot_trace import SpotTrace, Window, window_text
from lab.vocab.trace_goodput import replay_prediction
from lab.vocab.trace_schedule import PROPORTIONAL, schedule
from lab.vocab.trace_stats import schedule_stats


@dataclass(frozen=True)
class TraceChoice:
    """The trace window `plan` prices: a trace read whole, its window (checked against it;
    None: all of it), the notice each loss gets (a cloud's, `none` or seconds; None: the
    stack's cloud's), and the model size whose measured costs the goodput counts."""

    trace: SpotTrace
    window: Window | None
    notice: str | None = None
    model: str = TINY


# The notice rule (NOTICE_RULES) of the cloud each kind of stack runs on; a cluster of one's
# own (byo) may be anywhere: none.
STACK_NOTICES = {"eks": "aws", "aks": "azure"}


# A cluster's worker trains through its notice until its pod's grace period ends (it reads that
# end from its pod, lab.runtime.pod_deadline): the AKS notice handler's eviction ends it before
# the VM's NotBefore, an EKS managed node group's drain gives the pod its own (the job's
# terminationGracePeriodSeconds), so of AWS's two minutes the worker trains on for the grace's.
def cluster_costs(model: str = TINY) -> MeasuredCosts:
    """`model`'s measured costs, on a cluster."""
    return replace(costs_for(model), trained_through_s=float(TERMINATION_GRACE_S))


CLUSTER_COSTS = cluster_costs()


def notice_for(choice: TraceChoice, cloud: str | None) -> str:
    """The notice rule the rows use: the one chosen, else that of the stack's cloud (`cloud`:
    the stack's kind), else none."""
    if choice.notice is not None:
        return choice.notice
    return STACK_NOTICES.get(cloud or "", "none")


def trace_rows(
    cost: CostEstimate | None, choice: TraceChoice, cloud: str | None, costs: MeasuredCosts | None = None
) -> list[dict[str, Any]]:
    """Per spot pool with prices and per mode: the window's capacity for the pool at its
    largest, the mode's goodput against it and its share of the window at full size, the price
    of a useful node-hour on spot and on demand (the cluster's fixed part shared over the pool's
    nodes), and the saving. A pool the window offers no capacity gets one row saying so."""
    rows: list[dict[str, Any]] = []
    costs = costs or cluster_costs(choice.model)
    notice = notice_for(choice, cloud)
    for priced in priced_spot_pools(cost):
        nodes = priced.nodes
        head = {"pool": priced.pool, "nodes": nodes, "notice": notice}
        try:
            window = schedule(choice.trace, nodes, choice.window, 1.0, notice, PROPORTIONAL)
        except InvalidInput as no_capacity:
            rows.append({**head, "mode": None, "problem": str(no_capacity)})
            continue
        stats = schedule_stats(window)
        # The pool's mean seconds between evictions over the window: an elastic job with a
        # derived interval starts from it when given it (--eviction-mtbf).
        if (mtbf := window.mean_s_between_losses()) is not None:
            head["mean_s_between_losses"] = round(mtbf, 1)
        span_h = stats.span_s / 3600
        offered_h = stats.capacity_share * nodes * span_h  # node-hours the window offers, all billed
        billed = priced.spot_price * offered_h + priced.fixed * span_h
        for mode in MODES:
            ratio = replay_prediction(mode, window, costs).ratio
            spot = billed / (ratio * offered_h) if ratio * offered_h > 0 else float("inf")
            rows.append(
                {
                    **head,
                    "window": window_text(window.window_s),
                    "capacity_share": round(stats.capacity_share, 6),
                    "mode": mode,
                    "goodput": round(ratio, 6),
                    "full_size_share": round(ratio * stats.capacity_share, 6),
                    **priced.prices(spot),
                }
            )
    return rows


def trace_lines(cost: CostEstimate | None, choice: TraceChoice, cloud: str | None) -> list[str]:
    rows = trace_rows(cost, choice, cloud)

    def head() -> str:
        currency = cost.currency if cost else ""
        return (
            f"  over the trace window {choice.trace.source} "
            f"{window_text(choice.trace.checked_window(choice.window))} (the pool's counts scaled to the pool at "
            f"its largest, notice {rows[0]['notice']}), per fault-tolerance mode: the share of the capacity it "
            f"offered that the job trains (of the time at full size) / {currency} per useful node-hour on spot "
            f"against on demand (the saving); the model and its figures measured at {choice.model}: "
            "lab/vocab/trace_goodput.py"
        )

    return saving_text(rows, head, _row_line)


def _row_line(r: dict[str, Any]) -> str:
    if r["mode"] is None:
        return f"  {r['pool']} at {r['nodes']} node(s): {r['problem']}"
    return (
        f"  {r['pool']} at {r['nodes']} node(s), {r['mode']}: {100 * r['goodput']:.2f} % of "
        f"{100 * r['capacity_share']:.1f} % offered ({100 * r['full_size_share']:.2f} %) / "
        f"{r['spot_per_useful_node_hour']:.4f} against {r['on_demand_per_node_hour']:.4f} "
        f"({100 * r['saving']:.1f} % saved)"
        + (
            f"; an eviction every {duration(r['mean_s_between_losses'])} of capacity: a derived checkpoint interval "
            f"starts from it with --eviction-mtbf {r['mean_s_between_losses']:.0f}"
            if r["mode"] == "elastic" and r.get("mean_s_between_losses")
            else ""
        )
    )

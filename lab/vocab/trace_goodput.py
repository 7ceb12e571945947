"""What share of a trace window's capacity bound a job trains, per fault-tolerance mode: the
goodput model of lab.vocab.spot_goodput fed with the window's capacity statistics
(lab.vocab.trace_stats) instead of single Poisson evictions, for `elastic-lab plan --trace` and
for checking the model against a replay of the window (`check_against_replay`).

The bound is the replay's (lab/drill/replay_goodput.py): the integral over the window of
min(nodes alive, N), times one node's throughput at full size. Everything below is counted in
node-seconds at that throughput, in the job's own time (the trace's seconds over the replay's
speed-up; the costs are the job's seconds, not compressed). At k nodes the job trains k x_k / x_N
of them a second, x_k being one node's throughput at k nodes (`per_node`; the same at every size
when not given). Per mode:

- elastic: trains at whatever is alive. A loss event that leaves survivors stalls them for the
  recovery (a notice's when the loss had one; nothing is redone: the survivors save the last
  completed step when a peer vanishes); a gain while some node runs stalls them for the join;
  each node given back trains only once it has started. A wipeout ends the job until capacity
  returns: the first nodes back pay the restart, and without a notice the work since the last
  checkpoint (half an interval) is redone;
- per-step: the same, with its own stalls at a loss and at a join; when it is not given its own
  throughput, every step pays the mode's overhead;
- restart-everything: trains only at full size. Each return to full pays a restart of N nodes;
  each loss from full stops all N, redoing half an interval without a notice;

and every mode pays C/(T+C) for its checkpoints. A loss with a notice costs the node told the
notice's length: it saves and leaves when told (restart-everything stops all N then). Within
an event the model takes the job's mean size while up, not the size at that moment.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from lab.vocab.checkpoint_interval import daly_interval_s
from lab.vocab.replay_schedule import LOST, ReplaySchedule
from lab.vocab.spot_goodput import MODES, MeasuredCosts
from lab.vocab.trace_stats import CapacityStats, schedule_stats

# How close the model must come to a replay's measured goodput, in points of the bound.
WITHIN_POINTS = 3.0


@dataclass(frozen=True)
class TraceGoodput:
    """A mode's predicted goodput over a window.

    bound_node_s: the capacity offered, node-seconds of the job's time.
    trained_node_s: what the nodes alive would train with no loss, at one node's full-size
      throughput (restart-everything: its time at full size only).
    lost_node_s: what each cost takes of that, by name.
    """

    mode: str
    bound_node_s: float
    trained_node_s: float
    lost_node_s: Mapping[str, float]

    @property
    def ratio(self) -> float:
        """Useful samples over the capacity bound (0 when the window offers none)."""
        if not self.bound_node_s > 0:
            return 0.0
        return max(0.0, self.trained_node_s - sum(self.lost_node_s.values())) / self.bound_node_s


def trace_goodput(
    mode: str,
    stats: CapacityStats,
    costs: MeasuredCosts | None = None,
    per_node: Mapping[int, float] | None = None,
    notice_s: float | None = None,
    speedup: float = 1.0,
    interval_s: float | None = None,
) -> TraceGoodput:
    """`mode`'s goodput over the window of `stats` (the module's docstring says how), whose
    seconds run `speedup` times faster than the job's; `notice_s`: each loss's notice in the
    window's seconds (None: none); `per_node`: samples a second of one node at each number of
    nodes, measured in this mode; `interval_s`: seconds of training between checkpoints
    (Daly's for the save's cost and the window's rate of losses that redo work by default)."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {', '.join(MODES)}")
    if not (math.isfinite(speedup) and speedup > 0):
        raise ValueError(f"speedup={speedup!r}: expected a number > 0")
    costs = costs or MeasuredCosts()
    full = stats.full
    level_s = [s / speedup for s in stats.level_s]
    rate = _rates(full, per_node, mode, costs)
    bound = sum(min(n, full) * s for n, s in enumerate(level_s))
    span = stats.span_s / speedup
    notice = None if notice_s is None else notice_s / speedup
    redoing = stats.drops_from_full if mode == "restart-everything" else stats.wipeouts
    interval = _interval(interval_s, costs.save_cost_s, span, 0 if notice is not None else redoing)
    redo = 0.0 if notice is not None else interval / 2
    if mode == "restart-everything":
        trained = level_s[full] * rate[full]
        lost = {
            "restarts": stats.returns_to_full * costs.restart_s * rate[full],
            "redone": stats.drops_from_full * redo * rate[full],
            "notices": stats.drops_from_full * (notice or 0.0) * rate[full],
        }
    else:
        trained = sum(s * rate[n] for n, s in enumerate(level_s))
        up_s = span - level_s[0]
        up_rate = trained / up_s if up_s > 0 else 0.0
        back_from_zero = stats.returns_from_zero
        elastic = mode == "elastic"
        stall = (
            (costs.elastic_notice_recovery_s if notice is not None else costs.elastic_recovery_s)
            if elastic
            else costs.per_step_stall_s
        )
        join = costs.elastic_join_stall_s if elastic else costs.per_step_join_stall_s
        lost = {
            "recovery": (stats.loss_events - stats.wipeouts) * stall * up_rate,
            "joins": (stats.gain_events - back_from_zero) * join * up_rate,
            "node starts": stats.nodes_gained * costs.node_start_s,
            "restarts": back_from_zero * costs.restart_s * up_rate,
            "redone": stats.wipeouts * redo * up_rate,
            "notices": stats.nodes_lost * (notice or 0.0),
        }
    lost["checkpoints"] = trained * costs.save_cost_s / (interval + costs.save_cost_s)
    return TraceGoodput(mode, bound, trained, lost)


def _rates(full: int, per_node: Mapping[int, float] | None, mode: str, costs: MeasuredCosts) -> list[float]:
    """What k nodes train a second, for k = 0..full, in nodes at one node's full-size
    throughput: k x_k / x_N, a size not measured taking the nearest measured size's x."""
    if not per_node:
        flat = 1 / (1 + costs.per_step_overhead) if mode == "per-step" else 1.0
        return [n * flat for n in range(full + 1)]
    measured = {n: x for n, x in per_node.items() if x > 0}
    if full not in measured:
        raise ValueError(f"per_node={dict(per_node)!r}: expected a throughput at full size ({full} nodes)")
    nearest = [measured[_nearest(measured, n)] for n in range(full + 1)]
    return [n * nearest[n] / measured[full] for n in range(full + 1)]


def _nearest(measured: Mapping[int, float], nodes: int) -> int:
    """The measured size nearest `nodes` (the larger of two as near)."""
    return min(measured, key=lambda size: (abs(size - nodes), -size))


def _interval(interval_s: float | None, save_cost_s: float, span_s: float, failures: int) -> float:
    """Seconds of training between checkpoints: `interval_s`, or Daly's for the window's mean
    time between losses that redo work (at least one in the window)."""
    if interval_s is not None:
        if not interval_s > 0:
            raise ValueError(f"interval_s={interval_s!r}: expected seconds > 0")
        return interval_s
    return daly_interval_s(save_cost_s, span_s / max(failures, 1))


def schedule_notice_s(schedule: ReplaySchedule) -> float | None:
    """The notice a schedule's losses get, in the replay's seconds: the mean of those that have
    one (trace_schedule gives every loss the same rule, shortened only where the node had
    joined later); None when none has one."""
    notices = [c.notice_s for c in schedule.changes if c.kind == LOST and c.notice_s is not None]
    return sum(notices) / len(notices) if notices else None


def replay_prediction(
    mode: str,
    schedule: ReplaySchedule,
    costs: MeasuredCosts | None = None,
    per_node: Mapping[int, float] | None = None,
    interval_s: float | None = None,
) -> TraceGoodput:
    """`mode`'s goodput over a replay of `schedule`: its slots' statistics and notices, in the
    replay's time (trace_goodput's arguments otherwise)."""
    stats = schedule_stats(schedule)
    return trace_goodput(mode, stats, costs, per_node, schedule_notice_s(schedule), 1.0, interval_s)


@dataclass(frozen=True)
class ModelCheck:
    """The model's goodput for a replayed window beside the replay's measured one."""

    mode: str
    predicted: float
    measured: float

    @property
    def points(self) -> float:
        """The model's error, in points of the capacity bound (positive: it predicted more)."""
        return 100 * (self.predicted - self.measured)

    @property
    def within(self) -> bool:
        return abs(self.points) <= WITHIN_POINTS

    def line(self) -> str:
        verdict = "within" if self.within else "NOT within"
        return (
            f"model {self.mode}: {self.predicted:.1%} of the capacity bound, replay {self.measured:.1%} "
            f"({self.points:+.1f} points, {verdict} {WITHIN_POINTS:g})"
        )


def check_against_replay(
    schedule: ReplaySchedule, report: Mapping[str, Any], costs: MeasuredCosts | None = None
) -> ModelCheck:
    """The model against a replay drill of `schedule`, from the drill's JSON report: its mode
    (`fault_tolerance`), its replay's measured goodput and one node's throughput at each size
    (`replay`), and its checkpoints' measured cost and interval (`checkpoint_advice`), which
    replace those of `costs` (the measured figures by default)."""
    replay = report.get("replay") or {}
    measured = replay.get("ratio")
    if measured is None:
        raise ValueError(
            f"replay={replay or None!r}: expected a replay's goodput against its capacity bound (a drill with "
            "--trace whose job trained at full size)"
        )
    per_node = {int(size["nodes"]): float(size["per_node"]) for size in replay["per_size"]}
    advice = report.get("checkpoint_advice") or {}
    saves = advice.get("cost") or {}
    costs = costs or MeasuredCosts()
    if saves.get("cost_s"):
        costs = replace(costs, save_cost_s=float(saves["cost_s"]))
    interval = float(advice["every_s"]) if advice.get("every_s") else None
    mode = str(report.get("fault_tolerance") or "elastic")
    predicted = replay_prediction(mode, schedule, costs, per_node, interval).ratio
    return ModelCheck(mode, predicted, float(measured))

"""What share of a trace window's capacity bound a job trains, per fault-tolerance mode: the
goodput model of lab.vocab.spot_goodput fed with a window's capacity (lab.vocab.trace_stats)
instead of single Poisson evictions, for `elastic-lab plan --trace` and for checking the model
against a replay of the window (`check_against_replay`).

The bound is the replay's (lab/drill/replay_goodput.py): the integral over the window of
min(nodes alive, N), times one node's throughput at full size. Everything here is counted in
node-seconds at that throughput, in the job's own time (the window's seconds over the replay's
speed-up; the measured costs are the job's seconds, never compressed). At k nodes the job trains
k x_k / x_N of them a second, x_k being one node's throughput at k nodes (`per_node`; the same
at every size when not given).

Real capacity changes in bursts: a loss, then the rest of the pool a minute later, then a node
back. A stall is cut short by the next change (the job starts its recovery over), so per-event
costs cannot be added up from counts: the model walks the window's changes in order
(CapacityStats.moments) and, per mode:

- elastic: trains at whatever is alive. A loss that leaves survivors stalls them for the
  recovery (a notice's when the loss had one); nothing is redone, as the survivors save the
  last completed step when a peer vanishes, except with sharded checkpoints (`loss_redoes`:
  no rank can save alone), where a loss without notice redoes the work since the last save as
  a wipeout does (and so does a loss whose notice was too short for the save: `notice_misses`).
  A node given back starts, then the others stall for its join. A wipeout stops the job until
  capacity returns; then it resumes from its newest save (`resume_s` from the first node back
  to its first step), and without a notice it redoes the work since that save: the later of
  the last change (every change saves) and the last checkpoint, at a phase it cannot know
  (E[min(w, U T)] for w trained since the change, T the interval);
- per-step: the same, with its own stalls at a loss and at a join; when it is not given its own
  throughput, every step pays the mode's overhead;
- restart-everything: trains only at full size. Each loss from full stops all N (redoing the
  work since its last save without a notice); each return to full restarts them (`restart_s`);

and every mode pays C/(T+C) for its checkpoints. A loss with a notice happens when the node
leaves: it trains through the notice (which says when it goes) for at most `trained_through_s` (a
cluster pod's grace period) and leaves `notice_lead_s` before the end of that (or at the notice,
when that is shorter), but never before the change before it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from lab.vocab.checkpoint_interval import daly_interval_s
from lab.vocab.replay_schedule import LOST, ReplaySchedule
from lab.vocab.spot_goodput import MODES, MeasuredCosts
from lab.vocab.trace_stats import CapacityStats, schedule_stats

# How close the model must come to a replay's measured goodput, in points of the bound.
WITHIN_POINTS = 3.0

RESTART_EVERYTHING = "restart-everything"


@dataclass(frozen=True)
class TraceGoodput:
    """A mode's predicted goodput over a window.

    bound_node_s: the capacity offered, node-seconds of the job's time.
    offered_node_s: what the mode could train on that capacity with no cost at all, at one
      node's full-size throughput (restart-everything: its time at full size only).
    lost_node_s: what each cost takes of that, by name: `stalls` (recoveries, joins, resumes,
      restarts), `redone`, `late and early` (nodes that leave at a notice or train only once
      started), `checkpoints`.
    """

    mode: str
    bound_node_s: float
    offered_node_s: float
    lost_node_s: Mapping[str, float]

    @property
    def ratio(self) -> float:
        """Useful samples over the capacity bound (0 when the window offers none)."""
        if not self.bound_node_s > 0:
            return 0.0
        return max(0.0, self.offered_node_s - sum(self.lost_node_s.values())) / self.bound_node_s


@dataclass(frozen=True)
class _Change:
    """A change of the nodes the job trains on, in the job's seconds: `before` to `after`."""

    t: float
    before: int
    after: int


def trace_goodput(
    mode: str,
    stats: CapacityStats,
    costs: MeasuredCosts | None = None,
    per_node: Mapping[int, float] | None = None,
    notice_s: float | None = None,
    speedup: float = 1.0,
    interval_s: float | None = None,
    saves_every_s: float | None = None,
) -> TraceGoodput:
    """`mode`'s goodput over the window of `stats` (the module's docstring says how), whose
    seconds run `speedup` times faster than the job's; `notice_s`: each loss's notice in the
    window's seconds (None: none); `per_node`: samples a second of one node at each number of
    nodes, measured in this mode; `interval_s`: seconds of training between checkpoints, as a
    failure meets them (Daly's for the save's cost and the window's rate of losses that redo
    work by default); `saves_every_s`: as the saves come, for their cost (`interval_s` by
    default; a derived interval's plain mean, where `interval_s` weighs each by its length)."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {', '.join(MODES)}")
    if not (math.isfinite(speedup) and speedup > 0):
        raise ValueError(f"speedup={speedup!r}: expected a number > 0")
    costs = costs or MeasuredCosts()
    full = stats.full
    rate = _rates(full, per_node, mode, costs)
    level_s = [s / speedup for s in stats.level_s]
    bound = sum(min(n, full) * s for n, s in enumerate(level_s))
    offered = (
        level_s[full] * rate[full] if mode == RESTART_EVERYTHING else sum(s * rate[n] for n, s in enumerate(level_s))
    )
    notice = None if notice_s is None else notice_s / speedup
    lead = None if notice is None else min(notice, max(notice - costs.trained_through_s, 0.0) + costs.notice_lead_s)
    changes = list(_job_changes(stats, speedup, lead, 0.0 if mode == RESTART_EVERYTHING else costs.node_start_s))
    loss_redoes = costs.loss_redoes and mode == "elastic"
    redoing = sum(_redoes(mode, full, c) or (loss_redoes and 0 < c.after < c.before) for c in changes)
    failures = redoing if notice is None else costs.notice_misses * redoing
    interval = _interval(interval_s, costs.save_cost_s, stats.span_s / speedup, failures)
    trained, stalled, redone = _walk(
        mode,
        stats,
        changes,
        rate,
        _stalls(mode, costs, notice),
        interval,
        speedup,
        redo_share=1.0 if notice is None else costs.notice_misses,
        loss_redoes=loss_redoes,
    )
    lost = {
        "stalls": stalled,
        "redone": redone,
        "late and early": max(0.0, offered - trained - stalled),
        "checkpoints": trained * costs.save_cost_s / ((saves_every_s or interval) + costs.save_cost_s),
    }
    return TraceGoodput(mode, bound, offered, lost)


def _job_changes(stats: CapacityStats, speedup: float, lead: float | None, start_s: float) -> Iterator[_Change]:
    """The window's moments as changes of the nodes the job trains on, in its seconds: a loss
    when its node leaves (`lead` earlier: the notice trained through, not before the moment before), a gain to a running
    job once its node has started (`start_s` later, not after the moment after); a moment that
    lost and gained, its loss first."""
    moments = [(t / speedup, lost, gained) for t, lost, gained in stats.moments]
    ends = [*(t for t, _, _ in moments), stats.span_s / speedup][1:]  # each moment's next, or the end
    level, previous = stats.alive_at_start, 0.0
    timed: list[tuple[float, int, int]] = []  # (t, lost, gained)
    for (t, lost, gained), next_t in zip(moments, ends, strict=True):
        if lost:
            timed.append((max(t - (lead or 0.0), previous), lost, 0))
        if gained:
            running = level - lost > 0
            timed.append((min(t + start_s, next_t) if running else t, 0, gained))
        level, previous = level - lost + gained, t
    level = stats.alive_at_start
    for t, lost, gained in sorted(timed, key=lambda change: change[0]):
        yield _Change(t, level, level - lost + gained)
        level = level - lost + gained


def _redoes(mode: str, full: int, change: _Change) -> bool:
    """Whether a change without notice makes `mode` redo work: a wipeout, or for
    restart-everything any loss from full."""
    if mode == RESTART_EVERYTHING:
        return change.before >= full > change.after
    return change.before > 0 == change.after


@dataclass(frozen=True)
class _Stalls:
    """Seconds the job stops training at each kind of change."""

    loss: float
    join: float
    resume: float


def _stalls(mode: str, costs: MeasuredCosts, notice: float | None) -> _Stalls:
    if mode == RESTART_EVERYTHING:
        return _Stalls(0.0, 0.0, costs.restart_s)
    if mode == "elastic":
        loss = costs.elastic_notice_recovery_s if notice is not None else costs.elastic_recovery_s
        return _Stalls(loss, costs.elastic_join_stall_s, costs.resume_s)
    return _Stalls(costs.per_step_stall_s, costs.per_step_join_stall_s, costs.resume_s)


def _walk(
    mode: str,
    stats: CapacityStats,
    changes: list[_Change],
    rate: list[float],
    stalls: _Stalls,
    interval: float,
    speedup: float,
    *,
    redo_share: float = 1.0,
    loss_redoes: bool = False,
) -> tuple[float, float, float]:
    """(trained, stalled, redone) node-seconds over the job's changes in order: between two
    changes it trains at its size once its last stall is over; a change stalls it, or stops it
    and counts the work it redoes (at a loss that leaves survivors too, with `loss_redoes`), for
    `redo_share` of the losses (1 without notices; with them, the share whose save was missed)."""
    full = stats.full
    trained = stalled = redone = 0.0
    level, since, stall_until, since_save = stats.alive_at_start, 0.0, 0.0, 0.0
    ending = _Change(stats.span_s / speedup, level, level)
    for change in [*changes, ending]:
        speed = (rate[full] if level >= full else 0.0) if mode == RESTART_EVERYTHING else rate[level]
        held = max(0.0, change.t - since)
        training = max(0.0, change.t - max(since, stall_until))
        trained += training * speed
        stalled += (held - training) * speed
        since_save += training
        if change is ending:
            break
        if _redoes(mode, full, change):
            redone += redo_share * _expected_redo(since_save, interval) * speed
            since_save = 0.0
        elif _stops_then_starts(mode, full, change):
            stall_until, since_save = change.t + stalls.resume, 0.0
        elif mode != RESTART_EVERYTHING and change.after > 0:
            lost = change.after < change.before
            if lost and loss_redoes:
                redone += redo_share * _expected_redo(since_save, interval) * speed
            stall = stalls.loss if lost else stalls.join
            stall_until, since_save = max(stall_until, change.t + stall), 0.0
        level, since = change.after, change.t
    return trained, stalled, redone


def _stops_then_starts(mode: str, full: int, change: _Change) -> bool:
    """Whether the job starts again at this change: capacity back after none, or for
    restart-everything back to full."""
    if mode == RESTART_EVERYTHING:
        return change.before < full <= change.after
    return change.before == 0 < change.after


def _expected_redo(trained_s: float, interval_s: float) -> float:
    """The work lost at a failure `trained_s` after the last change's save, checkpoints coming
    every `interval_s` at a phase unknown: E[min(w, U T)] for U uniform on [0, 1]."""
    if trained_s >= interval_s:
        return interval_s / 2
    return trained_s - trained_s**2 / (2 * interval_s)


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


def _interval(interval_s: float | None, save_cost_s: float, span_s: float, failures: float) -> float:
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
    saves_every_s: float | None = None,
) -> TraceGoodput:
    """`mode`'s goodput over a replay of `schedule`: its slots' statistics and notices, in the
    replay's time (trace_goodput's arguments otherwise)."""
    stats = schedule_stats(schedule)
    return trace_goodput(mode, stats, costs, per_node, schedule_notice_s(schedule), 1.0, interval_s, saves_every_s)


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


def report_costs(report: Mapping[str, Any], base: MeasuredCosts | None = None) -> MeasuredCosts:
    """`base` (the measured figures by default) with what a drill's JSON report measured in its
    own run, where it did: the median recovery of the evictions that left survivors (from when
    the node left: a notice trained through is not counted) and the
    median stall of the joins to a running job (as the mode's), the share of its notices whose
    emergency save was missed, and its checkpoints' cost."""
    elastic = report.get("fault_tolerance", "elastic") == "elastic"
    evictions = report.get("evictions") or ()
    # From the node's leaving: a notice trained through is training, not a stall.
    recoveries = [
        e["recovery_s"] - (e.get("trained_on_s") or 0.0)
        for e in evictions
        if e.get("world_after") and e.get("recovery_s") and not _wiped_out_within(report, e.get("t"), e["recovery_s"])
    ]
    stalls = [
        j["stall_s"]
        for j in report.get("joins") or ()
        if j.get("world_before") and j.get("stall_s") and not _wiped_out_within(report, j.get("t"), j["stall_s"])
    ]
    measured: dict[str, Any] = {}
    if recoveries:
        noticed = all(e.get("kind") == "notice" for e in evictions)
        loss_field = "elastic_notice_recovery_s" if noticed else "elastic_recovery_s"
        measured[loss_field if elastic else "per_step_stall_s"] = statistics.median(recoveries)
    if stalls:
        measured["elastic_join_stall_s" if elastic else "per_step_join_stall_s"] = statistics.median(stalls)
    notices = [e for e in evictions if e.get("kind") == "notice"]
    if notices:
        measured["notice_misses"] = sum(bool(e.get("emergency_save_missed")) for e in notices) / len(notices)
    return replace(_with_save_cost(base or MeasuredCosts(), report), **measured)


def _wiped_out_within(report: Mapping[str, Any], t: float | None, seconds: float) -> bool:
    """Whether a replay's capacity fell to no node within `seconds` of `t` (the report's clock):
    a recovery or a join's stall that spans a wipeout measures the wait for capacity, not the
    change's own cost."""
    if t is None:
        return False
    t0 = float(report.get("t0") or 0.0)
    return any(alive == 0 and t - t0 <= s <= t - t0 + seconds for s, alive in report.get("capacity_timeline") or ())


def _with_save_cost(costs: MeasuredCosts, report: Mapping[str, Any]) -> MeasuredCosts:
    """`costs` with the save cost the report measured (the job's own checkpoints), if it did."""
    saves = (report.get("checkpoint_advice") or {}).get("cost") or {}
    return replace(costs, save_cost_s=float(saves["cost_s"])) if saves.get("cost_s") else costs


def check_against_replay(
    schedule: ReplaySchedule, report: Mapping[str, Any], costs: MeasuredCosts | None = None
) -> ModelCheck:
    """The model against a replay drill of `schedule`, from the drill's JSON report: its mode
    (`fault_tolerance`), its replay's measured goodput and one node's throughput at each size
    (`replay`), its checkpoints' interval and cost; the other costs are `costs`, or by default
    the measured figures with what the report measured in its own run (report_costs)."""
    replay = report.get("replay") or {}
    measured = replay.get("ratio")
    if measured is None:
        raise ValueError(
            f"replay={replay or None!r}: expected a replay's goodput against its capacity bound (a drill with "
            "--trace whose job trained at full size)"
        )
    per_node = {int(size["nodes"]): float(size["per_node"]) for size in replay["per_size"]}
    # A derived interval: as a failure meets it (each weighted by its length) for the work redone,
    # and its plain mean for the saves' cost; else the one interval for both.
    saves = report.get("checkpoint_advice") or {}
    every_s = saves.get("typical_s") or saves.get("every_s")
    mean_s = saves.get("mean_s")
    mode = str(report.get("fault_tolerance") or "elastic")
    costs = report_costs(report) if costs is None else _with_save_cost(costs, report)
    costs = replace(costs, loss_redoes=bool(report.get("checkpoints_sharded")))
    predicted = replay_prediction(
        mode, schedule, costs, per_node, float(every_s) if every_s else None, float(mean_s) if mean_s else None
    ).ratio
    return ModelCheck(mode, predicted, float(measured))

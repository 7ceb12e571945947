"""The statistics of a window of spot capacity that a goodput model needs: how often capacity is
lost and how much at once, how bursty the losses are, how often it all goes and for how long, how
long a lost node takes to come back, and how the time splits between full, partial and no
capacity. Of a trace's pool (`window_stats`, in the trace's seconds) or of a job's replay
schedule (`schedule_stats`, its slots, in the replay's seconds).

Both read the window as moments: the times at which nodes were lost or gained (a trace's
instance events, each remove and add; a count's drop or rise; a schedule's slot changes). A
moment that loses any is a loss event: a trace tick merges every loss inside it into one, so
several nodes lost "at once" may be minutes apart.

A node lost when capacity fell from a to b is the j-th for b < j <= a; it is back when capacity
next reaches j again (a loss and a gain in one moment: back at once). One that is not back by
the window's end is not in the medians: `not_back` counts them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby, pairwise

from lab.vocab.replay_schedule import LOST, ReplaySchedule
from lab.vocab.spot_trace import INSTANCE_EVENTS, SpotTrace

# (t, nodes lost, nodes gained), in time order, one per time.
Moment = tuple[float, int, int]


@dataclass(frozen=True)
class CapacityStats:
    """A window's capacity, of `full` nodes over `span_s` seconds.

    loss_events: moments that lost nodes; nodes_lost: how many in all.
    loss_gap_mean_s, loss_gap_cv: the gaps between loss events, their mean and coefficient of
      variation (the standard deviation over the mean: 1 for a Poisson process, more for
      bursts); None with fewer than two gaps.
    wipeouts: loss events after which no node was left; zero_s: how long each stayed at 0 (to
      the window's end at most).
    back_median_s, back_p90_s: how long a lost node took to come back (None: none came back);
      not_back: lost nodes not back by the window's end.
    level_s: the seconds spent at each number of nodes, 0 to `full` (more than full counts as
      full).
    alive_at_start, moments: the nodes at the window's start and each moment's (t, lost,
      gained), t in seconds from the window's start: the sequence the figures are counted from
      (a goodput model walks it: lab.vocab.trace_goodput).
    share_full, share_partial, share_zero: the shares of the time at full, partial and no
      capacity; partial_points: the capacity offered while partial, in points of the full
      capacity over the window (100 x the integral of alive / full over that time / span);
      capacity_share: all the capacity offered, the integral of min(alive, full) / full over
      the window, over its span.
    """

    full: int
    span_s: float
    loss_events: int
    nodes_lost: int
    loss_gap_mean_s: float | None
    loss_gap_cv: float | None
    wipeouts: int
    zero_s: tuple[float, ...]
    back_median_s: float | None
    back_p90_s: float | None
    not_back: int
    level_s: tuple[float, ...]
    alive_at_start: int
    moments: tuple[Moment, ...]
    share_full: float
    share_partial: float
    share_zero: float
    partial_points: float
    capacity_share: float

    @property
    def nodes_per_loss_event(self) -> float | None:
        return self.nodes_lost / self.loss_events if self.loss_events else None

    @property
    def wipeout_share(self) -> float | None:
        """The share of loss events that left no node."""
        return self.wipeouts / self.loss_events if self.loss_events else None

    @property
    def node_mtbf_s(self) -> float | None:
        """The mean time between losses of one node: the window's span over the nodes lost."""
        return self.span_s / self.nodes_lost if self.nodes_lost else None


def window_stats(trace: SpotTrace, window: tuple[float, float] | None = None) -> CapacityStats:
    """The statistics of the trace's pool over `window` (seconds of the trace; None: all of
    it), in the trace's seconds."""
    start, end = trace.checked_window(window)
    if trace.shape == INSTANCE_EVENTS:
        moments = _grouped([(e.t_s, e.kind == "remove") for e in trace.events])
    else:
        moments = [
            (t, max(0, before - after), max(0, after - before)) for (_, before), (t, after) in pairwise(trace.capacity)
        ]
    inside = [m for m in moments if start < m[0] < end]
    return capacity_stats(trace.alive_at(start), inside, trace.pool, start, end)


def schedule_stats(schedule: ReplaySchedule) -> CapacityStats:
    """The statistics of the job's slots over a replay schedule, in the replay's seconds."""
    moments = _grouped([(c.t_s, c.kind == LOST) for c in schedule.changes])
    return capacity_stats(len(schedule.alive_at_start), moments, schedule.slots, 0.0, schedule.duration_s)


def _grouped(changes: list[tuple[float, bool]]) -> list[Moment]:
    """One moment per time of `changes`: (t, whether it lost a node or else gained one), in
    time order."""
    moments: list[Moment] = []
    for t, group in groupby(changes, key=lambda change: change[0]):
        lost = [loss for _, loss in group]
        moments.append((t, sum(lost), len(lost) - sum(lost)))
    return moments


def capacity_stats(alive: int, moments: Iterable[Moment], full: int, start: float, end: float) -> CapacityStats:
    """The statistics of a capacity of `full` nodes, `alive` at `start`, changed by `moments`
    (within the window, in time order) until `end`."""
    moments = list(moments)
    span = end - start
    losses = [(t, lost) for t, lost, _ in moments if lost]
    gaps = [b - a for (a, _), (b, _) in pairwise(losses)]
    zero_s = _wipeouts(alive, moments, end)
    back_s, not_back = _back_times(alive, moments)
    level_s = _level_s(alive, moments, full, start, end)
    partial_s = level_s[1:full]
    return CapacityStats(
        full=full,
        span_s=span,
        loss_events=len(losses),
        nodes_lost=sum(lost for _, lost in losses),
        loss_gap_mean_s=statistics.mean(gaps) if len(gaps) >= 2 else None,
        loss_gap_cv=statistics.pstdev(gaps) / statistics.mean(gaps) if len(gaps) >= 2 and sum(gaps) > 0 else None,
        wipeouts=len(zero_s),
        zero_s=tuple(zero_s),
        back_median_s=statistics.median(back_s) if back_s else None,
        back_p90_s=_p90(back_s),
        not_back=not_back,
        level_s=level_s,
        alive_at_start=alive,
        moments=tuple((t - start, lost, gained) for t, lost, gained in moments),
        share_full=level_s[full] / span,
        share_partial=sum(partial_s) / span,
        share_zero=level_s[0] / span,
        partial_points=100 * sum(n / full * s for n, s in enumerate(partial_s, 1)) / span,
        capacity_share=sum(n / full * s for n, s in enumerate(level_s)) / span,
    )


def _levels(alive: int, moments: list[Moment]) -> Iterator[tuple[float, int, int, int]]:
    """(t, nodes before, nodes lost, nodes after) at each moment."""
    level = alive
    for t, lost, gained in moments:
        yield t, level, lost, level - lost + gained
        level = level - lost + gained


def _wipeouts(alive: int, moments: list[Moment], end: float) -> list[float]:
    """How long capacity stayed at 0 after each loss event that left none (to `end` at most)."""
    out: list[float] = []
    since: float | None = None
    for t, before, lost, after in _levels(alive, moments):
        if since is not None and after > 0:
            out.append(t - since)
            since = None
        elif lost and before > 0 and after == 0:
            since = t
    return out if since is None else [*out, end - since]


def _back_times(alive: int, moments: list[Moment]) -> tuple[list[float], int]:
    """How long each lost node took to come back (the module's docstring says which node is
    which), and how many had not by the end."""
    lost_at: dict[int, float] = {}  # the j-th node -> when it was lost, while it is not back
    back: list[float] = []
    for t, before, lost, after in _levels(alive, moments):
        lost_at.update((j, t) for j in range(before - lost + 1, before + 1))
        back.extend(t - lost_at.pop(j) for j in range(before - lost + 1, after + 1) if j in lost_at)
    return back, len(lost_at)


def _level_s(alive: int, moments: list[Moment], full: int, start: float, end: float) -> tuple[float, ...]:
    """Seconds at each number of nodes, 0 to `full` (more than full counts as full)."""
    out = [0.0] * (full + 1)
    level, since = alive, start
    for t, _, _, after in [*_levels(alive, moments), (end, 0, 0, 0)]:
        out[min(max(level, 0), full)] += t - since
        level, since = after, t
    return tuple(out)


def _p90(values: list[float]) -> float | None:
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=10, method="inclusive")[8]

"""What a job's interval saves cost training, from its events, and the checkpoint interval that
cost calls for at each eviction-rate band (lab.vocab.checkpoint_interval).

A save's whole cost to training is what it blocked (`blocking_s` of its `checkpoint_saved`
event) plus what it slowed the steps that ran while it was written in the background: their
time above the median step with no save in flight.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from lab.vocab.checkpoint_interval import BandInterval, duration, intervals
from lab.vocab.events import Event

SAVE_INTERVAL = "interval"


@dataclass(frozen=True)
class SaveCost:
    saves: int
    bytes: float  # a save's bytes (rank 0's)
    blocked_s: float  # median
    save_s: float  # median, start to commit
    step_s: float  # median step with no save in flight
    step_during_save_s: float | None  # median step while one was
    cost_s: float  # blocked plus the slowdown, per save


def save_cost(events: Iterable[Mapping[str, Any]]) -> SaveCost | None:
    """The interval saves' cost to training (rank 0's events), or None without any."""
    ordered = sorted(events, key=lambda e: e["t"])
    saves = [
        e
        for e in ordered
        if e["event"] == Event.CHECKPOINT_SAVED and e.get("reason") == SAVE_INTERVAL and not e.get("already")
    ]
    if saves and "node" in saves[0]:  # one node's saves and steps (per-step groups each report theirs)
        node = saves[0]["node"]
        ordered = [e for e in ordered if e.get("node") == node]
        saves = [e for e in saves if e.get("node") == node]
    steps = [e for e in ordered if e["event"] == Event.STEP and "seconds" in e]
    if not saves or not steps:
        return None
    in_flight = []
    for s in saves:  # a background save runs from its step until it reports
        started = next((x["t"] for x in steps if x["step"] == s["step"]), None)
        if started is not None:
            in_flight.append((started, s["t"]))
    busy = [x["seconds"] for x in steps if any(a < x["t"] <= b for a, b in in_flight)]
    quiet = [x["seconds"] for x in steps if not any(a < x["t"] <= b for a, b in in_flight)]
    step_s = statistics.median(quiet) if quiet else statistics.median(busy)
    slowed = max(sum(b - step_s for b in busy) / len(saves), 0.0)
    blocked = statistics.median(float(s.get("blocking_s", s.get("seconds", 0.0))) for s in saves)
    return SaveCost(
        saves=len(saves),
        bytes=statistics.median(float(s.get("bytes", 0)) for s in saves),
        blocked_s=blocked,
        save_s=statistics.median(float(s.get("seconds", 0.0)) for s in saves),
        step_s=step_s,
        step_during_save_s=statistics.median(busy) if busy else None,
        cost_s=blocked + slowed,
    )


@dataclass(frozen=True)
class IntervalAdvice:
    """The interval this job's save cost calls for at each band, and the one it ran with."""

    cost: SaveCost
    nodes: int
    every_steps: int
    bands: list[BandInterval]
    derived: bool = False  # every_steps: the longest interval the job chose while it ran
    # Derived: the intervals it chose, their mean weighted by their length (a failure falls in a
    # long one more often than in a short one: the interval a failure meets on average), and
    # their plain mean (how often the saves came).
    typical_steps: float | None = None
    mean_steps: float | None = None

    @property
    def every_s(self) -> float:
        return self.every_steps * self.cost.step_s

    def to_dict(self) -> dict[str, Any]:
        step_s = self.cost.step_s
        typical = {"typical_s": self.typical_steps * step_s} if self.typical_steps else {}
        mean = {"mean_s": self.mean_steps * step_s} if self.mean_steps else {}
        return {**asdict(self), "every_s": self.every_s, **typical, **mean}

    def summary(self) -> str:
        rows = ", ".join(
            f"{b.band} {duration(b.interval_s)}"
            + (f" ({b.interval_steps:,} steps)" if b.interval_steps is not None else "")
            for b in self.bands
        )
        own = (
            f"derived while it ran, at most every {self.every_steps} steps ({duration(self.every_s)} here)"
            if self.derived
            else f"every {self.every_steps} steps is {duration(self.every_s)} here"
        )
        return (
            f"  checkpoints: a save costs training {self.cost.cost_s:.3f} s (median of {self.cost.saves}, "
            f"{self.cost.blocked_s:.3f} s blocked); {own}\n"
            f"    interval for {self.nodes} node(s) at each monthly eviction band (Daly): {rows}"
        )


def advice(
    events: Iterable[Mapping[str, Any]], nodes: int, every_steps: int, derived: bool = False
) -> IntervalAdvice | None:
    events = list(events)
    cost = save_cost(events)
    if cost is None or cost.cost_s <= 0 or nodes < 1:
        return None
    chosen = [int(e["steps"]) for e in events if e.get("event") == Event.CHECKPOINT_INTERVAL and e.get("steps")]
    # As chosen: an interval a restart cut short, and a start's first save, are not counted.
    typical = sum(n * n for n in chosen) / sum(chosen) if derived and chosen else None
    mean = sum(chosen) / len(chosen) if derived and chosen else None
    bands = intervals(cost.cost_s, nodes, cost.step_s)
    return IntervalAdvice(cost, nodes, every_steps, bands, derived, typical, mean)

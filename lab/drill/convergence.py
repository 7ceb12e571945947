"""Does a job trained through evictions end where it would have without them?

A drilled run is compared with uninterrupted runs of the same job (the same data, initial
weights and steps) that differ from it only in the order samples are drawn in (`--order-seed`),
and with each other. Losses are compared at the same point of training: by samples trained,
not by steps (a step at a smaller world size trains fewer samples). The level of a run is its
mean loss over the last fifth of the samples all runs reached.

The tolerance is derived from the uninterrupted runs themselves: how far apart runs end when
only incidental choices differ (the sample order; an eviction changes the batches' makeup
and the world size, which is the same kind of change) is the yardstick. It is 3 standard
deviations of the runs' levels, where the deviation counts two sources of spread: between the
baselines' levels (their sample standard deviation, with two or more), and within each run
(the standard error of a window mean, from the spread of its steps' losses around a straight
line). A run whose level is further from the baselines' mean than that did not converge like
them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lab.vocab.events import Event

WINDOW = 0.2  # the last fifth of the samples every run reached
SIGMAS = 3.0


@dataclass(frozen=True)
class Curve:
    """A run's loss by samples trained: one point per committed step, in step order."""

    samples: tuple[int, ...]  # samples trained up to and including each step
    loss: tuple[float, ...]

    @classmethod
    def of(cls, events: Iterable[Mapping[str, Any]]) -> Curve:
        """From a run's step events. A step re-done after a restart counts as the run that
        went on (its last record); in per-step mode every group reports each step: one is kept.
        Where steps were trained without their event, the data positions of the steps and of
        the checkpoints loaded between them say how far the data went."""
        by_step: dict[int, Mapping[str, Any]] = {}
        marks: dict[int, list[Mapping[str, Any]]] = {}  # step -> where the data stood after it
        for e in sorted(events, key=lambda e: e["t"]):
            if e.get("event") == Event.STEP and "loss" in e and "samples" in e:
                by_step[int(e["step"])] = e
            if e.get("event") in (Event.STEP, Event.CHECKPOINT_LOADED) and "position" in e and "epoch" in e:
                marks.setdefault(int(e["step"]), []).append(e)
        samples, loss, total, previous = [], [], 0, None
        for step in sorted(by_step):
            e = by_step[step]
            total += _samples_since(previous, e, marks)
            samples.append(total)
            previous = e
            # The exact loss where the trainer gives it (float.hex), else the rounded one.
            loss.append(float.fromhex(e["loss_hex"]) if "loss_hex" in e else float(e["loss"]))
        return cls(tuple(samples), tuple(loss))

    def window(self, start: float, end: float) -> list[tuple[int, float]]:
        return [(s, v) for s, v in zip(self.samples, self.loss, strict=True) if start < s <= end]


def _samples_since(
    previous: Mapping[str, Any] | None, e: Mapping[str, Any], marks: Mapping[int, list[Mapping[str, Any]]]
) -> int:
    """Samples trained from the step event `previous` to the step event `e`. A step can be
    trained without its event (its process left at the step's boundary, a notice's save or a
    lost peer's having kept it): from one known data position to the next (a step's or a loaded
    checkpoint's) within an epoch, the positions say how far the data went; one step into the
    next epoch trained `e`'s samples; otherwise each step missing trained as many as `e`."""
    here: Mapping[str, Any] = previous if previous is not None else {"step": 0}
    if int(e["step"]) - int(here["step"]) <= 1:
        return int(e["samples"])
    # Only the marks the run that went on left between the two events (a step re-done after a
    # restart left one from before it as well).
    after, before = float(here.get("t", float("-inf"))), float(e["t"])
    gap = range(int(here["step"]) + 1, int(e["step"]))
    kept = ([m for m in marks[s] if after < m["t"] < before] for s in sorted(marks) if s in gap)
    between = [found[-1] for found in kept if found]
    total = 0
    for mark in [*between, e]:
        steps = int(mark["step"]) - int(here["step"])
        moved = (
            int(mark["position"]) - int(here["position"])
            if "position" in here and "position" in mark and here.get("epoch") == mark.get("epoch")
            else -1
        )
        if moved >= 0:
            total += moved
        elif steps == 1 and mark is e:
            total += int(e["samples"])
        else:
            total += steps * int(e["samples"])
        here = mark
    return total


@dataclass(frozen=True)
class Level:
    """A run's mean loss in the window and that mean's standard error."""

    mean: float
    stderr: float
    points: int

    @classmethod
    def of(cls, points: list[tuple[int, float]]) -> Level:
        values = [v for _, v in points]
        if len(values) < 3:
            return cls(statistics.fmean(values) if values else math.nan, math.inf, len(values))
        # The steps' spread around the window's trend (training still improves inside it).
        xs = [float(s) for s, _ in points]
        slope, intercept = statistics.linear_regression(xs, values)
        residuals = [v - (slope * x + intercept) for x, v in zip(xs, values, strict=True)]
        spread = statistics.stdev(residuals)
        return cls(statistics.fmean(values), spread / math.sqrt(len(values)), len(values))


@dataclass
class Convergence:
    """The drilled run against the baselines (see the module's docstring)."""

    window: tuple[float, float]  # samples trained: the range compared
    drilled: Level
    baselines: list[Level] = field(default_factory=list)
    tolerance: float = math.inf
    difference: float = math.nan  # drilled level - the baselines' mean level

    @property
    def baseline_mean(self) -> float:
        return statistics.fmean(b.mean for b in self.baselines)

    @property
    def between_runs(self) -> float | None:
        """The baselines' levels' sample standard deviation (None with fewer than two)."""
        return statistics.stdev(b.mean for b in self.baselines) if len(self.baselines) > 1 else None

    @property
    def passed(self) -> bool:
        return abs(self.difference) <= self.tolerance

    def summary(self) -> str:
        lo, hi = self.window
        runs = len(self.baselines)
        between = self.between_runs
        spread = f"{between:.4f} between them" if between is not None else "one baseline: its steps' noise only"
        verdict = "within" if self.passed else "OUTSIDE"
        return (
            f"  convergence: loss over samples {lo:.0f}-{hi:.0f}: {self.drilled.mean:.4f} drilled vs "
            f"{self.baseline_mean:.4f} for {runs} uninterrupted run(s) ({spread}); difference "
            f"{self.difference:+.4f}, {verdict} the tolerance {self.tolerance:.4f} ({SIGMAS:g} sigma)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "window_samples": list(self.window),
            "drilled": vars(self.drilled),
            "baselines": [vars(b) for b in self.baselines],
            "baseline_mean": self.baseline_mean,
            "between_runs": self.between_runs,
            "difference": self.difference,
            "tolerance": self.tolerance,
            "passed": self.passed,
        }


def compare(drilled: Curve, baselines: list[Curve], fraction: float = WINDOW) -> Convergence:
    """The drilled run's level against the baselines' (at least one)."""
    if not baselines:
        raise ValueError("baselines=[] is invalid: expected at least one uninterrupted run")
    reached = min(c.samples[-1] if c.samples else 0 for c in (drilled, *baselines))
    window = (reached * (1 - fraction), float(reached))
    drilled_level = Level.of(drilled.window(*window))
    levels = [Level.of(b.window(*window)) for b in baselines]
    result = Convergence(window, drilled_level, levels)
    mean = result.baseline_mean
    between = result.between_runs or 0.0
    # Variance of (drilled level - baselines' mean): the spread between runs for the drilled
    # one and for the mean of n baselines, and each window mean's own standard error.
    n = len(levels)
    within = drilled_level.stderr**2 + sum(level.stderr**2 for level in levels) / n**2
    result.tolerance = SIGMAS * math.sqrt(between**2 * (1 + 1 / n) + within)
    result.difference = drilled_level.mean - mean
    return result

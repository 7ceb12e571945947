"""Is the model trained through evictions the one the same job trains without them?

The drilled run is set against its twin: the same job run uninterrupted, the same data, initial
weights and sample order. Under the `fixed-global` batch policy the two optimise the same
thing step by step, and differ only by the order floating-point sums are taken in while the
world is smaller; under `per-worker` a smaller world trains smaller batches at another learning
rate, and the runs drift apart.

How far apart is far comes from the uninterrupted runs themselves: runs that differ only in
the order samples are drawn in (`--order-seed`) are equally good trainings of the job, and the
largest per-step difference between them and the twin is the spread an incidental choice
makes. Parity holds when the drilled run's largest per-step difference from its twin is a small
fraction of that spread (`FRACTION`), and its mean loss over the last fifth of training is
within `FINAL_WINDOW_TOLERANCE` of the twin's. Losses are compared at the same point of
training, by samples trained (linearly between the twin's steps where the runs' steps cover
different samples).
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

from lab.drill.convergence import WINDOW, Curve

FRACTION = 0.1  # of the other orders' spread: the drilled run's largest per-step difference
FINAL_WINDOW_TOLERANCE = 0.005  # relative: the last fifth's mean loss against the twin's


def loss_at(curve: Curve, samples: float) -> float:
    """`curve`'s loss after `samples` samples, linear between its steps (nan outside them)."""
    xs = curve.samples
    i = bisect_left(xs, samples)
    if i < len(xs) and xs[i] == samples:
        return curve.loss[i]
    if i == 0 or i == len(xs):
        return math.nan
    x0, x1, y0, y1 = xs[i - 1], xs[i], curve.loss[i - 1], curve.loss[i]
    return y0 + (y1 - y0) * (samples - x0) / (x1 - x0)


def differences(run: Curve, twin: Curve) -> list[tuple[int, float]]:
    """(samples, run's loss - twin's) at each of `run`'s steps that the twin covers."""
    out = []
    for samples, loss in zip(run.samples, run.loss, strict=True):
        other = loss_at(twin, samples)
        if not math.isnan(other):
            out.append((samples, loss - other))
    return out


def _largest(diffs: list[tuple[int, float]]) -> tuple[int, float]:
    return max(diffs, key=lambda d: abs(d[1]), default=(0, math.nan))


def _window_mean(curve: Curve, reached: float) -> float:
    values = [v for _, v in curve.window(reached * (1 - WINDOW), reached)]
    return statistics.fmean(values) if values else math.nan


@dataclass
class Parity:
    """The drilled run against its twin and the twin against runs in other sample orders."""

    largest: tuple[int, float]  # (samples, drilled - twin) where it is largest
    spread: float  # the largest per-step |other order - twin| of the uninterrupted runs
    final_drilled: float  # mean loss over the last fifth of the samples all runs reached
    final_twin: float
    steps_compared: int

    @property
    def largest_fraction(self) -> float:
        """The drilled run's largest per-step difference, as a share of the spread."""
        return abs(self.largest[1]) / self.spread if self.spread > 0 else math.inf

    @property
    def final_relative(self) -> float:
        return (self.final_drilled - self.final_twin) / self.final_twin

    @property
    def holds(self) -> bool:
        return self.largest_fraction < FRACTION and abs(self.final_relative) <= FINAL_WINDOW_TOLERANCE

    def summary(self) -> str:
        samples, diff = self.largest
        verdict = "holds" if self.holds else "does NOT hold"
        largest = (
            f"the loss is bit-identical at every one of {self.steps_compared} steps"
            if diff == 0
            else f"the largest per-step loss difference is {abs(diff):.3g} (at sample {samples}, "
            f"{self.steps_compared} steps compared)"
        )
        return (
            f"  parity {verdict}: against the same job uninterrupted in the same sample order, {largest}, "
            f"{self.largest_fraction:.1%} of the {self.spread:.3g} that another sample order makes (goal < "
            f"{FRACTION:.0%}); the last fifth's mean loss {self.final_drilled:.4f} vs {self.final_twin:.4f} "
            f"({self.final_relative:+.2%}, goal within {FINAL_WINDOW_TOLERANCE:.1%})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "largest_difference": {"samples": self.largest[0], "loss": self.largest[1]},
            "spread_between_orders": self.spread,
            "largest_fraction": self.largest_fraction,
            "final_window": {"drilled": self.final_drilled, "twin": self.final_twin, "relative": self.final_relative},
            "steps_compared": self.steps_compared,
            "holds": self.holds,
        }


def parity(drilled: Curve, twin: Curve, others: list[Curve]) -> Parity:
    """`drilled` against `twin` (the same job and order, uninterrupted), with the spread of
    `others` (uninterrupted, other orders: at least one) around the twin."""
    if not others:
        raise ValueError("others=[] is invalid: expected at least one uninterrupted run in another sample order")
    diffs = differences(drilled, twin)
    spread = max(abs(_largest(differences(other, twin))[1]) for other in others)
    reached = min(c.samples[-1] if c.samples else 0 for c in (drilled, twin))
    return Parity(_largest(diffs), spread, _window_mean(drilled, reached), _window_mean(twin, reached), len(diffs))

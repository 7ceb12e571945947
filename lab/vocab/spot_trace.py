"""A real spot capacity trace: how many instances of a spot pool were running over time, as
measured by other people on real clouds.

`SpotTrace` is what each shape of trace file becomes (lab.vocab.trace_files reads them): the
pool's capacity as a step series in the trace's own seconds from its start, and the instances'
own events where the file has them. A window of it becomes a job's schedule in
lab.vocab.trace_schedule and its statistics in lab.vocab.trace_stats.

Windows are (start, end) in the trace's seconds; on the command line `A:B`, each a number of
seconds or of minutes, hours or days (`90m`, `100h:103h`), either side left out for the trace's
start or end (`:` or no window at all: the whole trace).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard, TypeVar

from lab.vocab.problems import InvalidInput, Problem

INSTANCE_EVENTS: Literal["instance-events"] = "instance-events"
TICK_COUNTS: Literal["counts-per-tick"] = "counts-per-tick"
ROUND_COUNTS: Literal["counts-per-round"] = "counts-per-round"
Shape = Literal["instance-events", "counts-per-tick", "counts-per-round"]

Steps = tuple[tuple[float, int], ...]
Window = tuple[float, float]
V = TypeVar("V", int, float)


@dataclass(frozen=True)
class InstanceEvent:
    """One instance of the pool launched (`add`) or lost (`remove`), in the trace's seconds."""

    t_s: float
    kind: Literal["add", "remove"]
    instance: str


@dataclass(frozen=True)
class SpotTrace:
    """A spot pool's capacity over time.

    source: where it came from: the file's path, or a carried trace's name with its origin.
    shape: the file's shape (INSTANCE_EVENTS, TICK_COUNTS or ROUND_COUNTS).
    pool: the pool's full size: the instances each probe round asked for, where the file says
      it, else the most that ran at once.
    resolution_s: the trace's time step: a tick, a probe round, or the events' common step.
    span_s: its length: to the end of its last tick, round or step of events.
    capacity: (t, instances running) at t=0 and at each change.
    events: instance events only: every add and remove, in the file's order.
    prices: the spot price in $/h, (t, price) at t=0 and at each change, where the file has one.
    """

    source: str
    shape: Shape
    pool: int
    resolution_s: float
    span_s: float
    capacity: Steps
    events: tuple[InstanceEvent, ...] = ()
    prices: tuple[tuple[float, float], ...] | None = None

    def alive_at(self, t_s: float) -> int:
        """The instances running at `t_s` (after every change at that time)."""
        return step_value(self.capacity, t_s)

    def price_at(self, t_s: float) -> float | None:
        """The spot price in $/h at `t_s`, None where the trace has none."""
        return None if self.prices is None else step_value(self.prices, t_s)

    def checked_window(self, window: tuple[float, float] | None) -> Window:
        """`window` as (start, end) seconds of this trace (None: all of it; an end of inf: its
        end), or InvalidInput naming it when it is empty or not within the trace."""
        start, end = (0.0, self.span_s) if window is None else window
        end = self.span_s if end == math.inf else end
        if not (finite_number(start) and finite_number(end)) or not 0 <= start < end <= self.span_s:
            raise InvalidInput([Problem("window", window, f"a window of {self.source}: {self._span_text()}")])
        return float(start), float(end)

    def _span_text(self) -> str:
        return f"start < end, both within its 0 s to {seconds_text(self.span_s)} s ({self.span_s / 3600:.1f} h)"


def finite_number(value: Any) -> TypeGuard[float]:
    """A real number (an int or a float, not a bool), and finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def step_value(steps: tuple[tuple[float, V], ...], t_s: float) -> V:
    """A step series' value at `t_s`: that of its last step at or before it."""
    value = steps[0][1]
    for t, step in steps:
        if t > t_s:
            break
        value = step
    return value


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_window(text: str) -> tuple[float, float] | None:
    """`A:B` as (A, B) seconds of a trace (see the module's docstring): None for the whole
    trace, an end of inf for the trace's end; checked against a trace by checked_window."""
    start_text, colon, end_text = text.strip().partition(":")
    start = _duration_s(start_text.strip() or "0")
    end = _duration_s(end_text.strip()) if end_text.strip() else math.inf
    if not colon or start is None or end is None:
        raise InvalidInput(
            [
                Problem(
                    "window",
                    text,
                    "A:B, seconds of the trace (or with m, h, d: 100h:103h); either side empty: its start or end",
                )
            ]
        )
    return None if start == 0 and end == math.inf else (start, end)


def window_text(window: Window) -> str:
    """A window as `A:B` in seconds, as parse_window reads it."""
    return f"{seconds_text(window[0])}:{seconds_text(window[1])}"


def seconds_text(seconds: float) -> str:
    """Seconds in plain digits, to the millisecond: 1016100, 12.5."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".")


def _duration_s(text: str) -> float | None:
    matched = _DURATION.fullmatch(text)
    return None if matched is None else float(matched[1]) * _UNIT_S[matched[2]]

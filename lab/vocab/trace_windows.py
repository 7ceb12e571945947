"""Named windows of real spot traces for the replay benchmark: three hours each, picked from the
data with lab.vocab.trace_stats (the figures in `why` are its own: the pool's, then a job of 3
slots under the proportional rule). Each starts with the job at full size and ends with every
lost slot back, so that a replay has the window's whole story and a wipeout its return.

The 4-node AWS trace has no licence, so the project does not carry it: it is read from a
folder the caller names (the benchmark and the tests: the public traces beside the checkout).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.vocab.problems import InvalidInput, Problem
from lab.vocab.spot_trace import SpotTrace, Window, window_text
from lab.vocab.trace_files import CARRIED_TRACES, load_trace


@dataclass(frozen=True)
class NamedWindow:
    """name: what the benchmark calls it; trace: a carried trace's name, or the name of a file
    the project does not carry; window_s: (start, end) in the trace's seconds; why: what its statistics
    show."""

    name: str
    trace: str
    window_s: Window
    why: str


NAMED_WINDOWS = (
    NamedWindow(
        "bamboo-p3-partial",
        "bamboo-p3-32",
        (7800.0, 18600.0),
        "partly available, no wipeout: the pool of 32 below full 72 % of the time (58 points of capacity offered "
        "while partial, the whole trace's 54), 23 loss events of 53 instances, each back within the window; "
        "3 slots: 5 losses, partial 46 % of the time, 0.85 of full capacity",
    ),
    NamedWindow(
        "aws-4node-wipeouts",
        "spot-traces-preemption-4node-aws-us-west-2c-v100.json",
        (1016100.0, 1026900.0),
        "wipeout-heavy: 4 of its 8 loss events (15 nodes) take the pool of 4 to zero, for 15, 5, 45 and 10 min; "
        "zero 42 % of the time, 0.47 of full capacity; all 4 back at the end; 3 slots: 12 losses, 4 wipeouts",
    ),
    NamedWindow(
        "h100-mixed",
        "skynomad-gcp-h100-16-us-east4-a",
        (1203300.0, 1214100.0),
        "the 2025 H100 zone's mix: full and partial 47 % of the time each, one 10-min wipeout, 8 loss events "
        "(68 instances of the 16, 8.5 an event); 0.75 of full capacity, as over the whole trace; 3 slots: 13 "
        "losses in 8 events",
    ),
)


def named_window(name: str) -> NamedWindow:
    """The named window `name`, or InvalidInput listing the names."""
    for window in NAMED_WINDOWS:
        if window.name == name:
            return window
    raise InvalidInput([Problem("window", name, "one of " + ", ".join(w.name for w in NAMED_WINDOWS))])


def load_window(name: str, uncarried: Path) -> tuple[SpotTrace, Window]:
    """The trace of the named window `name`, read, and its window. A trace the project does not
    carry is read from the folder `uncarried` (the benchmark and the tests pass the public traces' folder);
    InvalidInput says so where it is not there."""
    window = named_window(name)
    if window.trace in CARRIED_TRACES:
        return load_trace(window.trace), window.window_s
    path = uncarried / window.trace
    if not path.is_file():
        expected = (
            f"the trace in {uncarried}: {window.trace} has no licence, so the project does not carry "
            f"it (not found at {path}); replay your copy with --trace FILE --window {window_text(window.window_s)}"
        )
        raise InvalidInput([Problem("window", name, expected)])
    return load_trace(path), window.window_s

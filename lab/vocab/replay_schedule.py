"""A window of a real spot capacity trace as a job's schedule: which of its slots (nodes) are
lost when, with how much notice, and when capacity comes back, in the replay's time (the
trace's time divided by the speed-up). Made from a trace by lab.vocab.trace_schedule; replayed on
the local target by lab.drill.replay, and on a cluster by the cluster drill.

The notice rules are the clouds': AWS gives 2 minutes, GCP 30 s, Azure up
to 30 s best effort and in practice often under 10 s (5 s here); `none` gives none. A notice is
time compressed like the rest of the window: 120 s at a speed-up of 20 is 6 s of replay.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

# Seconds of notice per cloud, in the trace's time (before compression).
NOTICE_RULES: dict[str, float | None] = {"aws": 120.0, "gcp": 30.0, "azure": 5.0, "none": None}

LOST: Literal["lost"] = "lost"
BACK: Literal["back"] = "back"


@dataclass(frozen=True)
class SlotChange:
    """One node of the job lost, or one slot given capacity back."""

    t_s: float  # seconds from the window's start, in the replay's time
    slot: int  # 0 .. slots-1
    kind: Literal["lost", "back"]
    # lost: seconds of notice in the replay's time, None for none (the node vanishes or is killed)
    notice_s: float | None = None


@dataclass(frozen=True)
class ReplaySchedule:
    """What a job of `slots` nodes is offered over one window of a trace.

    source: the trace it came from (a file name, with its origin where the project carries it).
    window_s: (start, end) in the trace's own seconds.
    speedup: the time compression (the trace's seconds per second of replay).
    rule: how the trace's instances or counts became the job's slots, in words (spares,
      proportional counts, which nodes a drop takes and its seed).
    alive_at_start: the slots that have a node when the window starts.
    changes: in time order; a slot is lost only while it has a node and given back only while
      it has none.
    duration_s: the window's length in the replay's time.
    """

    source: str
    window_s: tuple[float, float]
    speedup: float
    slots: int
    rule: str
    alive_at_start: frozenset[int]
    changes: tuple[SlotChange, ...]
    duration_s: float

    def alive(self) -> list[tuple[float, int]]:
        """The number of slots with a node, from t=0 and after each change: (t, count)."""
        count = len(self.alive_at_start)
        out = [(0.0, count)]
        for c in self.changes:
            count += 1 if c.kind == BACK else -1
            out.append((c.t_s, count))
        return out

    def capacity_node_seconds(self, until_s: float | None = None) -> float:
        """The capacity offered, in node-seconds of replay: the integral of the nodes alive
        (never more than the job's slots) from the start to `until_s` (the window's end)."""
        end = self.duration_s if until_s is None else min(until_s, self.duration_s)
        return sum(min(n, self.slots) * seconds for n, seconds in self._spans(end))

    def _spans(self, end: float) -> Iterator[tuple[int, float]]:
        """(slots with a node, for how many seconds) from the start to `end`, in order."""
        steps = self.alive()
        for (t, n), (t_next, _) in zip(steps, [*steps[1:], (end, 0)], strict=True):
            if t >= end:
                return
            yield n, min(t_next, end) - t

    def capacity_fields(
        self, alive: int, change: str, t_s: float, slot: int | None = None, notice_s: float | None = None
    ) -> dict[str, object]:
        """The fields of a capacity event (lab.vocab.events): `alive` slots with a node of the
        job's slots after `change` (start, lost, back, missed or end), `t_s` seconds of replay
        into the window as the trace's own seconds (`window_t`), and the slot changed and the
        notice its loss had where there is one."""
        fields: dict[str, object] = {
            "alive": alive,
            "slots": self.slots,
            "change": change,
            "window_t": round(self.window_s[0] + t_s * self.speedup, 3),
        }
        if slot is not None:
            fields["slot"] = slot
        if notice_s is not None:
            fields["notice_s"] = notice_s
        return fields

    def mean_s_between_losses(self) -> float | None:
        """The job's mean seconds between evictions over the window, as Daly's interval needs
        them: the seconds with a node in some slot over the loss events (slots lost at the same
        moment are one: the job rolls back once). The job's own count, once it has seen two
        (lab.runtime.job_history), is the nodes it lost over its seconds since it started, a
        figure that can differ. None: the window loses no slot."""
        losses = len({c.t_s for c in self.changes if c.kind == LOST})
        if not losses:
            return None
        return sum(seconds for n, seconds in self._spans(self.duration_s) if n > 0) / losses

    def wipeouts(self) -> list[tuple[float, float | None]]:
        """Each time every slot was lost: (when, when capacity first came back; None: not in
        the window)."""
        out: list[tuple[float, float | None]] = []
        for (_, before), (t, n) in itertools.pairwise(self.alive()):
            if n == 0 and before > 0:
                out.append((t, None))
            elif n > 0 and before == 0 and out and out[-1][1] is None:
                out[-1] = (out[-1][0], t)
        return out

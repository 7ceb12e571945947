"""A drill's events in time order (ours and torch's agents'), and the questions every figure
of the report and every rule of the verdict ask of them."""

from __future__ import annotations

import itertools
import math
from typing import Any

from lab.drill import per_step_report
from lab.drill.agent_events import AgentEvent
from lab.vocab.events import EXIT_DONE, Event

Record = dict[str, Any]
WORK_EVENTS = (Event.STEP, Event.COLLECTIVE_FAILED, Event.CHECKPOINT_SAVED)  # events that carry a completed step
# The workers of one round resume within seconds of each other (each loads the same checkpoint
# as it starts); a round's master port met again later than this is another round.
ROUND_SPREAD_S = 10.0


class Timeline:
    """A drill's events in time order, and the questions every figure asks of them."""

    def __init__(self, events: list[Record], agent_events: list[AgentEvent]) -> None:
        self.events = sorted(events, key=lambda e: e["t"])
        self.agent_events = sorted(agent_events, key=lambda a: a.t)
        self.t0 = self.events[0]["t"] if self.events else 0.0
        self.per_step = per_step_report.is_per_step(self.events)
        steps = self.of(Event.STEP)
        self.steps = per_step_report.committed(steps) if self.per_step else steps
        self.emits = bool(self.steps) or any(e["event"] in (Event.START, Event.RESUME, Event.FRESH) for e in events)
        self.rounds = _resume_rounds(self.events)
        self.first_step_t = (
            self.steps[0]["t"] if self.steps else min((a.t for a in self.agent_events), default=float("inf"))
        )

    def of(self, kind: Event) -> list[Record]:
        return [e for e in self.events if e["event"] == kind]

    def first(self, kind: Event, after: float, **where: Any) -> Record | None:
        """The first `kind` event at or after `after` whose fields match `where`."""
        return next(
            (
                e
                for e in self.events
                if e["event"] == kind and e["t"] >= after and all(e.get(k) == v for k, v in where.items())
            ),
            None,
        )

    def world_at(self, t: float) -> int | None:
        before = [s["world_size"] for s in self.steps if s["t"] <= t]
        if before:
            return int(before[-1])
        rdzv = [a.group_world_size for a in self.agent_events if a.kind == "rendezvous" and a.t <= t]
        return rdzv[-1] if rdzv else None

    def first_round_after(self, t: float, without: str | None = None) -> Record | None:
        """The first round started after `t`; with `without`, the first one that node's workers
        took no part in (a round the agents formed before a node's notice can start its workers
        after it: the noticed node trains on in that round, and leaves it)."""
        return next((r for r in self.rounds if r["t"] > t and (without is None or without not in r["nodes"])), None)

    def first_step_after(self, t: float) -> Record | None:
        return next((s for s in self.steps if s["t"] > t), None)

    def work_before(self, t_end: float, t_start: float) -> int | None:
        """The newest step any event between the two times says was done."""
        vals = [e["step"] for e in self.events if t_start <= e["t"] <= t_end and e["event"] in WORK_EVENTS]
        return max(vals) if vals else None

    def lost_for_round(self, r: Record) -> tuple[int | None, int | None]:
        """(newest step done before round r started, steps of it that r re-does)"""
        prev = max((p["t"] for p in self.rounds if p["t"] < r["t"]), default=self.t0)
        last = self.work_before(r["t"], max(prev, self.t0))
        if last is None:
            return None, None
        return last, max(0, last - r["step"])

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time without a step from `start` to `end` (a step at each end)."""
        times: list[float] = [start, *(s["t"] for s in self.steps if start < s["t"] < end), end]
        return max(b - a for a, b in itertools.pairwise(times))


def _resume_rounds(events: list[Record]) -> list[Record]:
    """One entry per worker-group start (rendezvous round; per-step mode: a replica group's
    torchrun round): its time, resumed step, replica group (None in elastic mode) and the nodes
    whose workers resumed in it. A round is known by its master port (`round`), which torchrun
    picks anew for each round: a long job meets a port again, so a resume more than
    ROUND_SPREAD_S after the last one of its port starts another round."""
    rounds: list[Record] = []
    latest: dict[object, tuple[Record, float]] = {}  # per (replica, port): its newest round and resume
    for e in sorted((e for e in events if e["event"] in (Event.RESUME, Event.FRESH)), key=lambda e: e["t"]):
        replica = e.get("replica")
        key = (replica, e.get("round", e["t"]))
        r, last = latest.get(key, (None, -math.inf))
        if r is None or e["t"] - last > ROUND_SPREAD_S:
            r = {"t": e["t"], "step": e["step"], "replica": replica, "nodes": set()}
            rounds.append(r)
        r["step"] = min(r["step"], e["step"])
        r["nodes"].add(e.get("node"))
        latest[key] = (r, e["t"])
    return rounds


def is_done(e: Record) -> bool:
    return bool(e["event"] == Event.EXIT and e.get("reason") == EXIT_DONE)

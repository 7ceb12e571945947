"""A drill's figures in per-step mode (TorchFT): the survivors never restart, so what counts
is how long they stall, how many in-flight steps are discarded, and how soon a new group
trains in a quorum.

Every replica group's first worker reports each committed step ("step": its quorum, the
number of groups in it, and whether this group took part) and each discarded one
("step_discarded"); the drill records evictions and nodes added. A group is named after
its node.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from lab.drill.lighthouse_log import HEARTBEAT, JOIN_WAIT, LeftOut
from lab.vocab.events import Event


def is_per_step(events: list[dict[str, Any]]) -> bool:
    """A run in per-step mode: said when the local target started, or seen on its steps."""
    started = [e for e in events if e["event"] == Event.CLUSTER_STARTED and "fault_tolerance" in e]
    if started:
        mode: str = started[-1]["fault_tolerance"]
        return mode == "per-step"
    return any(e["event"] == Event.STEP and "participants" in e for e in events)


def committed(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per committed step: the first group to report it."""
    seen: set[int] = set()
    out = []
    for s in steps:
        if s["step"] not in seen:
            seen.add(s["step"])
            out.append(s)
    return out


def participants_at(steps: list[dict[str, Any]], t: float) -> int | None:
    before = [s["participants"] for s in steps if s["t"] <= t]
    return before[-1] if before else None


# Steps the survivors commit after an eviction in the quorum they had, that show the evicted
# group was not in it (a step or two may still commit as the group goes).
SAME_QUORUM_STEPS = 3


def survivors_step(events: list[dict[str, Any]], t: float, node: str) -> dict[str, Any] | None:
    """The survivors' first committed step after an eviction at `t` of `node`'s group that
    the eviction no longer holds up: in a new quorum when the group was in theirs, else
    their next step (a group evicted while outside the survivors' quorum, e.g. still
    waiting to join it, costs them nothing)."""
    marks = [e for e in events if e["event"] in (Event.STEP, Event.STEP_DISCARDED) and "quorum" in e and e["t"] <= t]
    victim = [e["quorum"] for e in marks if e.get("replica") == node]
    others = [e["quorum"] for e in marks if e.get("replica") != node]
    held_up = bool(victim and others and victim[-1] == others[-1])
    # A group that got a notice trains on to a step boundary: steps after `t` in the quorum
    # it shares say nothing about whether it was in it.
    victim_stepped = any(e["event"] == Event.STEP and e["t"] > t and e.get("replica") == node for e in events)
    same_quorum: list[dict[str, Any]] = []
    for s in events:
        if s["event"] != Event.STEP or s["t"] <= t or s.get("replica") == node:
            continue
        if not held_up or s.get("quorum") != others[-1]:
            return s
        same_quorum.append(s)
        if len(same_quorum) >= SAME_QUORUM_STEPS and not victim_stepped:
            # The survivors go on committing in the quorum they had: the group was not in it
            # after all (it was still joining it when it went: a quorum with a dead member
            # commits nothing), so it held nothing up.
            return same_quorum[0]
    return None


def eviction_figures(ev: Any, events: list[dict[str, Any]]) -> None:
    """Fill `ev` (a report's Eviction): stall, discarded and lost steps, world sizes."""
    steps = [e for e in events if e["event"] == Event.STEP]
    groups_before = participants_at(steps, ev.t)
    before = [s for s in steps if s["t"] <= ev.t]
    ev.world_before = before[-1]["world_size"] if before else None
    ev.groups_before = groups_before
    ev.last_step_before = max((s["step"] for s in before), default=None)
    after = survivors_step(events, ev.t, ev.node)
    if after is None:
        return
    ev.recovery_s = after["t"] - ev.t
    ev.world_after = after["world_size"]
    ev.groups_after = after["participants"]
    ev.resumed_from = after["step"] - 1
    if ev.last_step_before is not None:
        ev.lost_steps = max(0, ev.last_step_before - ev.resumed_from)
    ev.discarded_steps = len(
        {
            d["step"]
            for d in events
            if d["event"] == Event.STEP_DISCARDED and ev.t <= d["t"] <= after["t"] and d.get("replica") != ev.node
        }
    )


def join_figures(j: Any, events: list[dict[str, Any]]) -> None:
    """Fill `j` (a report's Join): the new group's first committed step in a quorum, and the
    survivors' longest stall meanwhile."""
    steps = [e for e in events if e["event"] == Event.STEP]
    j.world_before = next((s["world_size"] for s in reversed(steps) if s["t"] <= j.t), None)
    first = next((s for s in steps if s["t"] > j.t and s.get("replica") == j.node and s.get("participating")), None)
    if first is None:
        return
    j.join_s = first["t"] - j.t
    started = next((e for e in events if e["event"] == Event.START and e.get("node") == j.node and e["t"] > j.t), None)
    if started is not None and started["t"] <= first["t"]:
        j.from_workers_s = first["t"] - started["t"]
    j.world_after = first["world_size"]
    j.lost_steps = 0
    others = committed([s for s in steps if j.t < s["t"] <= first["t"] and s.get("replica") != j.node])
    times = [j.t, *(s["t"] for s in others), first["t"]]
    j.stall_s = max(b - a for a, b in itertools.pairwise(times))


# A group that heals again after it trained: once can happen (a step it failed), more often
# means the groups take turns sitting steps out.
TURN_TAKING_HEALS = 3


def turn_taking(events: list[dict[str, Any]], left_out: Sequence[LeftOut] | None = None) -> str | None:
    """What to say when groups that already trained keep healing: quorums form without one of
    them, which then copies the state back; None when they trained on together. `left_out`,
    from the lighthouse's log (None where it cannot be read), says why the lighthouse left live
    groups out."""
    trained: set[str] = set()
    again: dict[str, int] = {}
    for e in events:
        replica = e.get("replica")
        if replica is None or e.get("rank", 0) != 0:
            continue
        if e["event"] == Event.STEP and e.get("participating", True):
            trained.add(replica)
        elif e["event"] == Event.HEALED and replica in trained:
            again[replica] = again.get(replica, 0) + 1
    total = sum(again.values())
    if total < TURN_TAKING_HEALS:
        return None
    groups = ", ".join(f"{r} {n}x" for r, n in sorted(again.items()))
    said = (
        f"groups that had trained healed again {total} times ({groups}): quorums formed without "
        "a live group, which then copied the state back"
    )
    return f"{said}; {_why_left_out(left_out)}"


def _why_left_out(left_out: Sequence[LeftOut] | None) -> str:
    lapsed = [g for g in left_out or () if g.cause == HEARTBEAT]
    late = [g for g in left_out or () if g.cause == JOIN_WAIT]
    why = []
    if lapsed:
        lapses = [g.lapse_s for g in lapsed if g.lapse_s is not None]
        longest = f", fewer groups heartbeating for up to {max(lapses):.2f} s beyond the timeout" if lapses else ""
        why.append(
            f"the lighthouse left a live group out {len(lapsed)} times because its heartbeats lapsed{longest}: "
            "a group's process paused longer than per_step.heartbeat_timeout_s, which must be longer than "
            "its longest pause (a killed group is then dropped that much later)"
        )
    if late:
        why.append(
            f"the lighthouse left a live group out {len(late)} times because it asked after the join wait ran out: "
            "per_step.join_timeout_s must be longer than a step, heal included"
        )
    if why:
        return "; ".join(why)
    if left_out is not None:
        return "the lighthouse's log shows no live group left out: the groups' own failures made them heal"
    return (
        "either a group's heartbeats lapsed (per_step.heartbeat_timeout_s shorter than its process's "
        "pauses) or it asked after the join wait (per_step.join_timeout_s shorter than a step): "
        "the lighthouse's log tells which"
    )

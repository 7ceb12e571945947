"""A window of a spot trace as a job's schedule (ReplaySchedule): which of its N slots lose their
node when, with how much notice, and when capacity comes back, time compressed.

How the pool's instances or counts become the job's slots (the advice that comes with the
public traces on replaying them on a machine with a few nodes), one of RULES:

- `proportional` (the default): the job feels the pool's pressure: alive = round(alive_pool *
  N / pool), halves up. A pool of 32 scaled to 3 slots loses a slot once it has lost 6 of its
  instances; as spares it would lose none until 30 of them were gone. Instance events are
  counted first.
- `spares`: the job runs on the pool's instances as they come. With instance events each
  arriving instance takes the lowest free slot; instances beyond N wait as spares, in arrival
  order, and the first of them takes a lost slot at once (the slot is lost and back at the same
  moment: the job still loses that node); a spare's loss costs the job nothing. With counts,
  alive = min(alive_pool, N).

With counts the trace does not say which instances went: a drop of d loses d running slots
drawn by random.Random(seed), and a rise fills the lowest free slots. The state at the
window's start (every change up to and at that time) is where the schedule starts.

Times: a change at t seconds of the trace is at (t - start) / speedup of the replay. A lost
slot's node is gone at its time; its notice (a cloud's, NOTICE_RULES, or seconds) came that
long before, compressed too, but never before the node joined the slot or the window began: a
node cannot be told before it is there.
"""

from __future__ import annotations

import math
import random
from typing import Any, Literal

from lab.vocab.problems import InvalidInput, Problem, Problems
from lab.vocab.replay_schedule import BACK, LOST, NOTICE_RULES, ReplaySchedule, SlotChange
from lab.vocab.spot_trace import INSTANCE_EVENTS, SpotTrace, Window, finite_number

PROPORTIONAL = "proportional"
SPARES = "spares"
RULES = (PROPORTIONAL, SPARES)

# A change of one slot in the trace's time: (t, slot, lost or back), in order.
TraceChange = tuple[float, int, Literal["lost", "back"]]


def notice_seconds(notice: str | float) -> float | None:
    """A notice rule as seconds of the trace: a cloud's name (NOTICE_RULES), `none`, or a number
    of seconds > 0 (also as text, `45`). InvalidInput names any other."""
    if isinstance(notice, str) and notice in NOTICE_RULES:
        return NOTICE_RULES[notice]
    try:
        seconds = float(notice)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(notice, bool) or not (math.isfinite(seconds) and seconds > 0):
        expected = f"one of {', '.join(NOTICE_RULES)}, or seconds of notice > 0"
        raise InvalidInput([Problem("notice", notice, expected)])
    return seconds


def schedule(
    trace: SpotTrace,
    slots: int,
    window: tuple[float, float] | None = None,
    speedup: float = 1.0,
    notice: str | float = "none",
    rule: str = PROPORTIONAL,
    seed: int = 0,
) -> ReplaySchedule:
    """What a job of `slots` nodes is offered over `window` (seconds of the trace; None: all of
    it), `speedup` times faster, under `rule` and `notice` (the module's docstring says how).
    InvalidInput names every bad argument, and a window that offers the job no capacity."""
    (start, end), notice_s = _checked(trace, slots, window, speedup, notice, rule, seed)
    if rule == SPARES and trace.shape == INSTANCE_EVENTS:
        alive, changes = _cut(_instance_slots(trace, slots), start, end)
        mapping = (
            f"instance events to {slots} slot(s): each arriving instance takes the lowest free slot; instances "
            f"beyond {slots} wait as spares in arrival order, the first taking a lost slot at once"
        )
    else:
        alive, changes = _count_slots(trace, slots, (start, end), rule, seed)
        formula = (
            f"round(alive * {slots} / {trace.pool}), halves up" if rule == PROPORTIONAL else f"min(alive, {slots})"
        )
        mapping = (
            f"counts of a pool of {trace.pool} to {slots} slot(s) ({rule}): {formula}; a drop loses running slots "
            f"drawn by random.Random({seed}), a rise fills the lowest free slots"
        )
    if not alive and not changes:
        expected = f"a window of {trace.source} that offers {slots} slot(s) capacity under {rule} (it offers none)"
        raise InvalidInput([Problem("window", (start, end), expected)])
    return ReplaySchedule(
        source=trace.source,
        window_s=(start, end),
        speedup=float(speedup),
        slots=slots,
        rule=f"{mapping}; {_notice_text(notice, notice_s, speedup)}",
        alive_at_start=frozenset(alive),
        changes=_timed(changes, start, speedup, notice_s, alive),
        duration_s=(end - start) / speedup,
    )


def _checked(
    trace: SpotTrace, slots: int, window: tuple[float, float] | None, speedup: float, notice: Any, rule: str, seed: int
) -> tuple[Window, float | None]:
    found = Problems()
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        found.add("slots", slots, "a whole number of the job's nodes >= 1")
    if not (finite_number(speedup) and speedup > 0):
        found.add("speedup", speedup, "a number > 0: the trace's seconds per second of replay")
    if rule not in RULES:
        found.add("rule", rule, "one of " + ", ".join(RULES))
    if isinstance(seed, bool) or not isinstance(seed, int):
        found.add("seed", seed, "a whole number")
    notice_s: float | None = None
    checked: Window = (0.0, 0.0)
    try:
        notice_s = notice_seconds(notice)
    except InvalidInput as error:
        found.absorb(error)
    try:
        checked = trace.checked_window(window)
    except InvalidInput as error:
        found.absorb(error)
    found.raise_if_any()
    return checked, notice_s


def _instance_slots(trace: SpotTrace, slots: int) -> list[TraceChange]:
    """Every change of the job's slots over the whole trace, as its instances come and go."""
    holder: dict[str, int] = {}  # instance -> its slot
    spares: list[str] = []  # instances beyond the slots, in arrival order
    free = set(range(slots))
    out: list[TraceChange] = []
    for event in trace.events:
        if event.kind == "add" and free:
            holder[event.instance] = min(free)
            free.discard(holder[event.instance])
            out.append((event.t_s, holder[event.instance], BACK))
        elif event.kind == "add":
            spares.append(event.instance)
        elif event.instance in spares:
            spares.remove(event.instance)
        else:
            slot = holder.pop(event.instance)
            out.append((event.t_s, slot, LOST))
            if spares:
                holder[spares.pop(0)] = slot
                out.append((event.t_s, slot, BACK))
            else:
                free.add(slot)
    return out


def _cut(changes: list[TraceChange], start: float, end: float) -> tuple[set[int], list[TraceChange]]:
    """The slots with a node at `start` (after every change up to it) and the changes within."""
    alive: set[int] = set()
    for t, slot, kind in changes:
        if t > start:
            break
        (alive.add if kind == BACK else alive.discard)(slot)
    return alive, [c for c in changes if start < c[0] < end]


def _count_slots(
    trace: SpotTrace, slots: int, window: Window, rule: str, seed: int
) -> tuple[set[int], list[TraceChange]]:
    """The slots with a node at the window's start and their changes within it, from the pool's
    counts mapped by `rule`."""
    start, end = window

    def mapped(count: int) -> int:
        if rule == PROPORTIONAL:
            return (2 * count * slots + trace.pool) // (2 * trace.pool)  # round(count * slots / pool), halves up
        return min(count, slots)

    draw = random.Random(seed)
    alive = set(range(mapped(trace.alive_at(start))))
    running = set(alive)
    out: list[TraceChange] = []
    for t, count in trace.capacity:
        if not start < t < end:
            continue
        target = mapped(count)
        if target < len(running):
            lost = sorted(draw.sample(sorted(running), len(running) - target))
            running.difference_update(lost)
            out.extend((t, slot, LOST) for slot in lost)
        while target > len(running):
            back = min(set(range(slots)) - running)
            running.add(back)
            out.append((t, back, BACK))
    return alive, out


def _timed(
    changes: list[TraceChange], start: float, speedup: float, notice_s: float | None, alive: set[int]
) -> tuple[SlotChange, ...]:
    """The changes in the replay's time, each loss with its notice (never from before its node
    joined the slot, or the window began)."""
    joined = dict.fromkeys(alive, 0.0)  # slot -> when its node joined, in the replay's time
    out = []
    for t, slot, kind in changes:
        at = (t - start) / speedup
        if kind == BACK:
            joined[slot] = at
            out.append(SlotChange(at, slot, BACK))
        else:
            notice = None if notice_s is None else min(notice_s / speedup, at - joined[slot])
            out.append(SlotChange(at, slot, LOST, notice))
    return tuple(out)


def _notice_text(notice: str | float, notice_s: float | None, speedup: float) -> str:
    if notice_s is None:
        return "no notice: every node is lost without one"
    name = f"{notice} " if isinstance(notice, str) and notice in NOTICE_RULES else ""
    return (
        f"notice {name}{notice_s:g} s of the trace ({notice_s / speedup:g} s of replay) before each loss, "
        "at most since its node joined"
    )

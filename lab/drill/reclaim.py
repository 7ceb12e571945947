"""A reclaim of borrowed nodes, from a drill's events: the owners' work took the job's burst
nodes back together (each an Event.EVICT with the reclaim cause), the job trained at its core,
and when the capacity was free again the burst nodes joined and it grew back.

The job's parts are those its nodes were started as (Event.NODE_ADDED's `part`): the core's
nodes at the start. A step's size in nodes is its committed quorum's groups in per-step mode,
its world size over the workers a node runs otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.drill.timeline import Timeline
from lab.vocab.events import CAUSE_RECLAIM, Event

Record = dict[str, Any]
# How long nodes given back may take to start and join before a job that trains on without them
# has not grown back (a node's start on a loaded machine and a rendezvous round take seconds).
JOIN_PATIENCE_S = 30.0


@dataclass
class Reclaim:
    """The borrowed nodes taken back at `t`, and the job through it.

    nodes: taken back; core_nodes: the job's own, at the start; full_nodes: both at the start.
    grace_s: the notice each got (their pods' grace period), None for none.
    lowest_nodes: the fewest nodes a step trained at from the reclaim to the job's end.
    at_core_s: from the reclaim to the first step at the core's size.
    back_t: when the first borrowed node was added again (the capacity free); None: never.
    grown_back_s: from then to the first step at full size; None: never.
    rounds_to_grow_back: elastic, the rounds the job started from then until that step (one
      when every returning node joined the same rendezvous); per-step groups join no round.
    """

    t: float
    nodes: int
    core_nodes: int
    full_nodes: int
    grace_s: float | None
    lowest_nodes: int | None = None
    at_core_s: float | None = None
    back_t: float | None = None
    grown_back_s: float | None = None
    rounds_to_grow_back: int | None = None
    trained_after_back_s: float | None = None  # from back_t to the job's last step
    taken_nodes: tuple[str, ...] = ()  # the nodes taken back

    @property
    def never_grew_back(self) -> bool:
        """The job trained on for long after the capacity was free, never at full size: not a
        job that ended before its nodes could start and join."""
        waited = self.trained_after_back_s
        return self.back_t is not None and self.grown_back_s is None and waited is not None and waited > JOIN_PATIENCE_S

    @property
    def below_core(self) -> bool:
        return self.lowest_nodes is not None and self.lowest_nodes < self.core_nodes


def reclaims(run: Timeline) -> list[Reclaim]:
    """Each reclaim: the borrowed nodes taken back at one moment (within a second)."""
    taken = [e for e in run.of(Event.EVICT) if e.get("cause") == CAUSE_RECLAIM]
    if not taken:
        return []
    # The job's nodes when its borrowed ones were first taken back: those added before (a
    # cluster's drill sees its pods run only at its polls, maybe after the first step).
    started = [e for e in run.of(Event.NODE_ADDED) if e["t"] <= taken[0]["t"]]
    core = sum(1 for e in started if e.get("part") == "core") or len(started)
    groups: list[list[Record]] = []
    for e in taken:
        if groups and e["t"] - groups[-1][0]["t"] <= 1.0:
            groups[-1].append(e)
        else:
            groups.append([e])
    return [_followed(run, together, core, len(started)) for together in groups]


def _followed(run: Timeline, taken: list[Record], core: int, full: int) -> Reclaim:
    t = taken[0]["t"]
    notice = taken[0].get("notice_s")
    out = Reclaim(t, len(taken), core, full, float(notice) if notice is not None else None)
    out.taken_nodes = tuple(str(e["node"]) for e in taken)
    per_node = _workers_per_node(run, full)
    sized = [(s["t"], _nodes(run, s, per_node)) for s in run.steps if s["t"] > t]
    sizes = [n for _, n in sized if n is not None]
    out.lowest_nodes = min(sizes) if sizes else None
    at_core = next((when for when, n in sized if n is not None and n <= core), None)
    out.at_core_s = at_core - t if at_core is not None else None
    back = next((e["t"] for e in run.of(Event.NODE_ADDED) if e["t"] > t and e.get("part") == "burst"), None)
    if back is None:
        return out
    out.back_t = back
    out.trained_after_back_s = max(0.0, sized[-1][0] - back) if sized else None
    whole = next((when for when, n in sized if when > back and n is not None and n >= full), None)
    if whole is not None:
        out.grown_back_s = whole - back
        if not run.per_step:  # per-step groups join the quorum as each is ready: no round to count
            out.rounds_to_grow_back = sum(1 for r in run.rounds if back < r["t"] <= whole)
    return out


def _workers_per_node(run: Timeline, nodes: int) -> int:
    """The workers a node runs: the full world's over its nodes (elastic mode)."""
    worlds = [int(s.get("world_size") or 0) for s in run.steps]
    return max(1, max(worlds, default=nodes) // max(nodes, 1))


def _nodes(run: Timeline, step: Record, per_node: int) -> int | None:
    if run.per_step:
        groups = step.get("participants")
        return int(groups) if groups is not None else None
    world = step.get("world_size")
    return int(world) // per_node if world is not None else None


def reclaim_lines(r: Reclaim, t0: float) -> list[str]:
    """The reclaim as the report says it."""
    grace = f"a grace of {r.grace_s:g} s" if r.grace_s is not None else "no grace period"
    lines = [
        f"  reclaim at {r.t - t0:.1f} s: the owners' work took back {r.nodes} borrowed node(s) ({grace}); "
        f"the job's core: {r.core_nodes} of {r.full_nodes} node(s)"
    ]
    if r.lowest_nodes is not None:
        at_core = f", at its core {r.at_core_s:.2f} s after the reclaim" if r.at_core_s is not None else ""
        below = " (BELOW its core)" if r.below_core else ""
        lines.append(f"    trained at {r.lowest_nodes} node(s) at the fewest{below}{at_core}")
    if r.back_t is None:
        lines.append("    the capacity was not free again before the job ended")
    elif r.grown_back_s is None:
        how = (
            "the job did NOT grow back to its full size"
            if r.never_grew_back
            else f"the job ended {r.trained_after_back_s or 0:.1f} s later, before the nodes given back joined"
        )
        lines.append(f"    capacity free again at {r.back_t - t0:.1f} s; {how}")
    else:
        rounds = f", in {r.rounds_to_grow_back} round(s)" if r.rounds_to_grow_back is not None else ""
        lines.append(
            f"    capacity free again at {r.back_t - t0:.1f} s: back at {r.full_nodes} node(s) {r.grown_back_s:.2f} s "
            f"later{rounds}"
        )
    return lines

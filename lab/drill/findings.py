"""The findings on a script of one's own: each named, each a reason to fail the drill (its verdict,
lab.drill.verdict, takes them with the rest).

A script that reports nothing itself is judged by what its workers did (lab.drill.script_runs):
which checkpoint each loaded when the workers restarted, whether one was saved before the
eviction or on its notice, and how each worker of the last round ended. Each finding names the
cause in the script's terms and what to change; each fails the drill unless the user accepts it
by name (`elastic-lab drill --accept NAME`), when it stays in the report as accepted.

  ranks-resumed-apart     after a membership change some ranks resumed from a checkpoint and
                          others from none, or from another one (node-local files)
  restarted-from-scratch  after an eviction (or a join) no rank loaded a checkpoint, or only one
                          saved before most of the training: that training was done again
  ranks-ended-early       in the last round some ranks finished and others failed or stopped
  notice-not-saved        a node was given a notice and no rank saved before its workers went,
                          though the job had trained since its last save
  slow-recovery           the workers ran again far later than the agents saw the node go
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lab.drill.script_runs import FileUse, Position, ScriptRound, WorkerRun, described, relative
from lab.drill.verdict import Finding
from lab.vocab.events import Event
from lab.vocab.script_findings import (
    NOTICE_NOT_SAVED,
    RANKS_ENDED_EARLY,
    RANKS_RESUMED_APART,
    RESTARTED_FROM_SCRATCH,
    SLOW_RECOVERY,
)

# Workers running again this much later than an agent saw the node go is no rendezvous's doing.
SLOW_RECOVERY_S = 10.0
# A restart lost most of the work when the checkpoint it resumed from was older than this share
# of the training before it, and older than MIN_LOST_S (a run of seconds).
LOST_SHARE = 0.5
MIN_LOST_S = 1.0
# torch stops a round's workers with SIGTERM and SIGKILLs those still there this much later.
TORCH_STOP_GRACE_S = 30.0


def _ranks(workers: Sequence[WorkerRun]) -> str:
    by_rank = sorted(workers, key=lambda w: w.rank)
    if len(by_rank) == 1:
        return by_rank[0].who
    return "ranks " + ", ".join(str(w.rank) for w in by_rank) + f" ({', '.join(w.node for w in by_rank)})"


def _from(worker: WorkerRun) -> str:
    """Where a worker started by its own output."""
    p = worker.position
    return f" ({p.kind} {p.first} by its output)" if p is not None else ""


def _membership_changes(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The evictions and the nodes added after the first eviction (warm-up joins restart
    workers that trained nothing yet)."""
    evictions = [e for e in events if e.get("event") == Event.EVICT]
    if not evictions:
        return []
    first = min(e["t"] for e in evictions)
    added = [e for e in events if e.get("event") == Event.NODE_ADDED and e["t"] > first]
    return sorted([*evictions, *added], key=lambda e: e["t"])


def _what(change: Mapping[str, Any]) -> str:
    if change.get("event") == Event.EVICT:
        kind = str(change.get("cause") or change.get("kind", ""))  # a scale-in, a reclaim, or the eviction's kind
        return f"the eviction of {change.get('node')} ({kind})"
    return f"{change.get('node')} joining"


def resumed_apart(round_: ScriptRound, change: Mapping[str, Any], workdir: str | None) -> Finding | None:
    """Some ranks loaded a checkpoint when the workers restarted and others none, or other ones
    (named with other numbers, or printing other positions)."""
    loaded = [w for w in round_.workers if w.first_load() is not None]
    fresh = [w for w in round_.workers if w.first_load() is None]
    firsts = {w.position.first for w in round_.workers if w.position is not None}
    kinds = {w.position.kind for w in round_.workers if w.position is not None}
    files = {(w.first_load() or FileUse(0, "", "")).path for w in loaded}
    apart = (loaded and fresh) or (len(kinds) == 1 and max(firsts) - min(firsts) > 1)
    if not apart and len(loaded) == len(round_.workers) and len(files) > 1:
        apart = len({_numbers(os.path.basename(p), loaded) for p in files}) > 1 or _node_local(loaded)
    if not apart:
        return None
    said = []
    for path in sorted(files):
        who = [w for w in loaded if (w.first_load() or FileUse(0, "", "")).path == path]
        said.append(f"{_ranks(who)} resumed from {relative(path, workdir)}{_from(who[0]) if len(who) == 1 else ''}")
    if fresh:
        said.append(
            f"{_ranks(fresh)} loaded no checkpoint and started over{_from(fresh[0]) if len(fresh) == 1 else ''}"
        )
    node_local = _node_local(loaded)
    saved_at = _site([u for w in loaded for u in w.loaded])
    fix = (
        f"keep the snapshot{saved_at} where every node reads it ($LAB_CHECKPOINT_DIR, a shared volume or bucket), "
        "not on a node's own disk"
        if node_local or fresh
        else f"have every rank load the same checkpoint{saved_at}"
    )
    return Finding(
        RANKS_RESUMED_APART,
        f"ranks resumed from different places after {_what(change)}: {'; '.join(said)}. The ranks then train "
        f"different steps together; {fix}",
    )


def _site(uses: Sequence[FileUse]) -> str:
    """` (at file:line)` of the script's call behind these uses, when one is known."""
    sites = sorted({u.at for u in uses if u.at})
    return f" ({', '.join(sites)})" if sites else ""


def _numbers(name: str, workers: Sequence[WorkerRun]) -> tuple[str, ...]:
    """The numbers in a checkpoint file's name, a rank's own left out (ckpt-rank3-step40.pt)."""
    ranks = {str(w.rank) for w in workers}
    return tuple(n for n in re.findall(r"\d+", name) if n not in ranks)


def _node_local(loaded: Sequence[WorkerRun]) -> bool:
    """Ranks on different nodes loaded files of one name at different paths: each its node's."""
    uses = [(w.node, w.first_load()) for w in loaded]
    names = {os.path.basename(u.path) for _, u in uses if u is not None}
    paths = {u.path for _, u in uses if u is not None}
    return len(names) == 1 and len(paths) > 1 and len({node for node, _ in uses}) > 1


def _lost_most_by_output(first: ScriptRound, running: ScriptRound | None, after: ScriptRound) -> bool | None:
    """Whether the workers resumed from before most of what the job had trained, by the
    positions they printed (an epoch, a step): from the first round's start to where the round
    the change stopped had got, against where the next round resumed; None when they did not
    say. Positions, not seconds: a round restarted during warm-up (a node slow to start) trains
    little in many seconds."""

    def said(workers: Sequence[WorkerRun]) -> list[Position]:
        return [w.position for w in workers if w.position is not None]

    start, reached, resumed = said(first.workers), said(running.workers if running else ()), said(after.workers)
    if not (start and reached and resumed):
        return None
    begun, got, back = min(p.first for p in start), max(p.last for p in reached), min(p.first for p in resumed)
    if got <= begun:
        return None
    return got - back > LOST_SHARE * (got - begun)


def restarted_from_scratch(
    round_: ScriptRound,
    change: Mapping[str, Any],
    saves_before: Sequence[FileUse],
    later_saves: Sequence[FileUse],
    rounds: tuple[ScriptRound, ScriptRound | None],
) -> Finding | None:
    """When the workers restarted after a membership change no rank loaded a checkpoint, or
    the newest one loaded held little of what the job had trained since the first of `rounds`
    began, up to where the second (the round the change stopped) got: it was saved before most
    of that (a stray save at the start, then none until the end). By the workers' printed
    positions where they print them, else by the seconds."""
    first, running = rounds
    loads = [u for w in round_.workers for u in w.loaded[:1]]
    if loads:
        newest = max(loads, key=lambda u: u.mtime or 0.0)
        trained = change["t"] - first.t
        lost = change["t"] - (newest.mtime or change["t"])
        most = _lost_most_by_output(first, running, round_)
        if lost < MIN_LOST_S or (not most if most is not None else lost <= LOST_SHARE * trained):
            return None
        after = min((s for s in later_saves if s.t > change["t"]), key=lambda s: s.t, default=None)
        next_save = (
            f" and its next save came {after.t - change['t']:.0f} s after it{', at ' + after.at if after.at else ''}"
            if after is not None
            else ""
        )
        return Finding(
            RESTARTED_FROM_SCRATCH,
            f"the job restarted from near the beginning after {_what(change)}: the newest checkpoint any rank "
            f"loaded ({newest.path}) was saved {lost:.0f} s before it, of {trained:.0f} s of training"
            f"{next_save}: save every few minutes of training, not only at the end or after long intervals",
        )
    if saves_before:
        last = max(saves_before, key=lambda s: s.t)
        by = f", by {last.at}" if last.at else ""
        why = (
            f"a checkpoint had been saved ({last.path}, {change['t'] - last.t:.0f} s before{by}) but no rank "
            "loaded it: load the newest checkpoint when the script starts"
        )
    elif later_saves:
        soonest = min(later_saves, key=lambda s: s.t)
        why = (
            f"no checkpoint had been saved yet (the script's first save came {soonest.t - change['t']:.0f} s after "
            f"it{', at ' + soonest.at if soonest.at else ''}): save every few minutes of training, not only at the "
            "end or after long intervals"
        )
    else:
        why = "the script saved no checkpoint at all: save one every few minutes and load the newest at start"
    return Finding(
        RESTARTED_FROM_SCRATCH,
        f"the job restarted from the beginning after {_what(change)}: {why}",
    )


def ended_early(last: ScriptRound) -> Finding | None:
    """Some ranks of the last round finished and others did not: the job is not finished."""
    done = [w for w in last.workers if w.ended is not None and w.code == 0]
    short = [w for w in last.workers if w not in done]
    if not done or not short:
        return None
    reached = max((w.position.last for w in done if w.position is not None), default=None)
    behind = [w for w in short if w.position is not None and reached is not None]
    got_to = sorted({f"{w.position.kind} {w.position.last}" for w in behind if w.position is not None})
    gap = f"; by their output they got to {', '.join(got_to)} of {reached}" if got_to else ""
    how = sorted({w.how_it_ended() for w in short})
    return Finding(
        RANKS_ENDED_EARLY,
        f"{_ranks(done)} finished, but {_ranks(short)} {' / '.join(how)}{gap}: the job is not finished until "
        "every rank of its last round is",
    )


def notice_not_saved(
    change: Mapping[str, Any],
    running: ScriptRound | None,
    next_round: ScriptRound | None,
    saves: Sequence[FileUse],
) -> Finding | None:
    """A notice came and no rank saved before the noticed node's workers went; or the noticed
    workers never returned from SIGTERM and saved nothing themselves, so that a save of another
    rank in the notice's window was one of its periodic ones, come then by chance."""
    if change.get("event") != Event.EVICT or change.get("kind") != "notice":
        return None
    until = next_round.t if next_round is not None else float("inf")
    window = [s for s in saves if change["t"] <= s.t <= until]
    before = [s for s in saves if s.t < change["t"]]
    advice = (
        "Save when SIGTERM comes (a signal handler that sets a flag the training loop checks at each step, and "
        f"save{_site(before or window)}), then exit"
    )
    if not window:
        if _saved_state_was_current(before, running):
            return None
        since = f" (its last save was {change['t'] - max(s.t for s in before):.1f} s before it)" if before else ""
        return Finding(
            NOTICE_NOT_SAVED,
            f"{change.get('node')} was given a notice and no rank saved a checkpoint before its workers went"
            f"{since}: what was trained since the last save was lost. {advice}",
        )
    noticed = [w for w in running.workers if w.node == change.get("node")] if running is not None else []
    if not noticed or any(w.ended is not None or any(change["t"] <= s.t <= until for s in w.saved) for w in noticed):
        return None
    first = min(window, key=lambda s: s.t)
    return Finding(
        NOTICE_NOT_SAVED,
        f"{change.get('node')} was given a notice and its workers never returned from SIGTERM nor saved (the script "
        "does not catch it, or never exits after it): a periodic save came "
        f"{first.t - change['t']:.1f} s after the notice by chance, so this time little was lost; a notice at "
        f"another moment loses what was trained since the last save. {advice}",
    )


def _saved_state_was_current(before: Sequence[FileUse], running: ScriptRound | None) -> bool:
    """The newest save before the notice held all the job had trained: its saver, a worker of the
    round the notice came in whose optimizer steps were seen, began no step after it, nor did any
    other worker of the round record one (in lockstep data-parallel training no rank completes a
    step the saver did not take part in). A script whose notice save finds that step saved and
    writes nothing again loses nothing."""
    if not before or running is None:
        return False
    last = max(before, key=lambda s: s.t)
    saver = next((w for w in running.workers if last in w.saved), None)
    if saver is None or not saver.trained:
        return False  # saved in an earlier round, or no optimizer step of its was seen: unknown
    return all(t < last.t for w in running.workers for t in w.trained)


def _stopped_promptly(ev: Any, groups: Sequence[WorkerRun]) -> bool:
    """Every survivor's worker of the round that ran when the node went said it ended within
    SLOW_RECOVERY_S of an agent seeing the node go (one torch killed never said)."""
    survivors = [w for w in groups if w.node != ev.node]
    return bool(survivors) and all(
        w.ended is not None and w.ended - ev.t - ev.detected_s <= SLOW_RECOVERY_S for w in survivors
    )


def slow_recovery(ev: Any, groups: Sequence[WorkerRun] = ()) -> Finding | None:
    """Workers ran again far later than an agent saw the node go, because the survivors' workers
    were slow to stop: not the rendezvous's doing. Survivors that stopped promptly are not the
    script's habit, whatever came after (new workers slow to start on a loaded machine).
    `groups`: the workers that ran when it went (their process groups' timeouts, their ends)."""
    back = ev.recovery_s if ev.recovery_s is not None else ev.restarted_s
    if back is None or ev.detected_s is None or back - ev.detected_s <= SLOW_RECOVERY_S:
        return None
    if _stopped_promptly(ev, groups):
        return None
    untimed = sorted({w.group_at for w in groups if w.group_at and w.group_timeout_s is None})
    group = (
        f"init_process_group at {', '.join(untimed)} has no timeout (torch's default: 30 minutes)"
        if untimed
        else "give init_process_group a timeout"
    )
    stopping = (ev.rendezvous_s or back) - ev.detected_s
    if stopping >= TORCH_STOP_GRACE_S - 2:
        why = (
            f"the survivors' workers did not stop on SIGTERM: torch waited its {TORCH_STOP_GRACE_S:.0f} s and killed "
            "them (the script blocks SIGTERM, or its handler waits, while a collective waits for ever for the "
            f"vanished peer): {group}; give it one (timeout=timedelta(seconds=60)) and leave promptly on SIGTERM"
        )
    else:
        why = (
            "the survivors' workers were slow to stop or to start again; a collective without a timeout waits for "
            f"a vanished peer: {group}"
        )
    return Finding(
        SLOW_RECOVERY,
        f"the workers ran again {back:.1f} s after the eviction of {ev.node}, though an agent saw it leave after "
        f"{ev.detected_s:.1f} s: {why}",
    )


def after_each_change(
    rounds: Sequence[ScriptRound], events: Sequence[Mapping[str, Any]], workdir: str | None
) -> list[str]:
    """What the workers did in the round after each membership change, a line each."""
    lines = []
    for change in _membership_changes(events):
        after = next((r for r in rounds if r.t > change["t"]), None)
        if after is not None:
            lines.append(f"workers after {_what(change)}: {described(after, workdir)}")
    return lines


def script_findings(
    rounds: Sequence[ScriptRound],
    events: Sequence[Mapping[str, Any]],
    evictions: Iterable[Any],
    *,
    workdir: str | None = None,
    accepted: Iterable[str] = (),
) -> list[Finding]:
    """Every finding of a watched script's run, oldest cause first; those named in `accepted`
    marked so."""
    found: list[Finding | None] = []
    saves = sorted((s for r in rounds for w in r.workers for s in w.saved), key=lambda s: s.t)
    for change in _membership_changes(events):
        after = next((r for r in rounds if r.t > change["t"]), None)
        running = next((r for r in reversed(rounds) if r.t <= change["t"]), None)
        found.append(notice_not_saved(change, running, after, saves))
        if after is None:
            continue
        found.append(resumed_apart(after, change, workdir))
        before = [s for s in saves if s.t <= change["t"]]
        later = [s for s in saves if s.t > change["t"]]
        found.append(restarted_from_scratch(after, change, before, later, (rounds[0], running)))
    if rounds:
        found.append(ended_early(rounds[-1]))
    for ev in evictions:
        running = next((r for r in reversed(rounds) if r.t <= ev.t), None)
        found.append(slow_recovery(ev, running.workers if running is not None else ()))
    ok, named = set(accepted), set()
    out: list[Finding] = []
    for f in found:
        if f is None or (f.name in named and f.name != SLOW_RECOVERY):
            continue  # a cause said once: the first change it came with
        named.add(f.name)
        out.append(Finding(f.name, f.text, f.name in ok))
    return out

"""The drill's verdict: what a run saw in, typed findings and pass or fail out, in one function.

What a run saw (`Observed`) is its figures (lab.drill.analysis), its events, and what the drill
itself saw beyond them: the local drill (`LocalSeen`: the script's findings, a crash loop, its
timeout, the rendezvous server's health, the uninterrupted runs) or the cluster drill
(`ClusterSeen`: full size reached, the eviction's clean-up, the deadline). `verdict` turns it into
findings, each named (lab.vocab.drill_findings, lab.vocab.script_findings) with its words, in the
order the report lists them; a drill passes when none fails it. Only findings on a script of
one's own can be accepted (`--accept NAME`): they stay in the report, marked so.

The rules on the events are plain functions in one explicit list (`EVENT_RULES`), in the
report's order; those on what a drill saw are called by `verdict` in that order.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from lab.drill import per_step_report
from lab.drill.lighthouse_log import LeftOut
from lab.drill.reclaim import JOIN_PATIENCE_S, Reclaim
from lab.drill.report import DrillReport, node_local_warning
from lab.drill.timeline import Timeline
from lab.vocab.drill_findings import (
    BASELINE_UNFINISHED,
    BELOW_CORE,
    CLEANUP_FAILED,
    CRASH_LOOP,
    DEADLINE_PASSED,
    JOB_FAILED,
    LOST_TOO_MUCH,
    NEVER_FULL_SIZE,
    NEVER_SCALED,
    NO_FAILURE_ENDED,
    NO_FAULT,
    NO_TRAINING_AFTER_OUTAGE,
    NODE_LOCAL_CHECKPOINTS,
    NOT_CONVERGED,
    NOT_FINISHED,
    NOT_GROWN_BACK,
    NOT_RECOVERED,
    RECLAIM_LOST_STEPS,
    RECLAIM_OUTRUN,
    RENDEZVOUS_DIED,
    RENDEZVOUS_GIVEN_UP,
    RENDEZVOUS_NOT_BACK,
    SAMPLES_DOUBLED,
    SAMPLES_LOST,
    SCRIPT_CRASH_LOOP,
    STILL_RUNNING,
    TIMED_OUT,
    TURN_TAKING,
    WORKER_FAILED,
)
from lab.vocab.events import CAUSE_RECLAIM, Event
from lab.vocab.script_findings import FINDINGS, RANKS_ENDED_EARLY, RANKS_RESUMED_APART


@dataclass(frozen=True)
class Finding:
    """One reason to fail a drill: its name, its words, and whether the user accepted it."""

    name: str
    text: str
    accepted: bool = False

    def line(self) -> str:
        """As the report lists it; a finding one may accept with its name, as `--accept` takes it."""
        if self.name not in FINDINGS:
            return self.text
        return f"{self.text} [{self.name}{', accepted' if self.accepted else ''}]"


@dataclass(frozen=True)
class LocalSeen:
    """What the local drill saw beyond the job's events."""

    fault: str = "node"  # the fault it made: "scale" is judged by its scaling, any other by an eviction
    # On a script of one's own: what its workers did (lab.drill.findings), the accepted ones marked.
    script_findings: tuple[Finding, ...] = ()
    # A crash loop, described in the script's terms (lab.drill.diagnosis): one the drill stopped
    # the job on; one the error files show its agents gave up on; the newest worker failure that
    # no new start of its node's workers followed.
    stopped: str | None = None
    agents_stopped: str | None = None
    unrecovered: str | None = None
    failures: int = 0  # worker failures in the error files
    timed_out_s: float | None = None  # the drill's time ran out: its timeout
    rendezvous_died: tuple[str, ...] = ()  # the rendezvous server died while the job ran: how and when
    baseline_unfinished: tuple[int, int] | None = None  # (run, of runs): an uninterrupted run that did not finish
    # A per-step job: the live groups its lighthouse left out of a quorum, from its log.
    left_out: tuple[LeftOut, ...] | None = None


@dataclass(frozen=True)
class ClusterSeen:
    """What the cluster drill saw beyond the job's events."""

    timeout_s: float
    full_world: int  # the workers that make full size
    evict_at_step: int
    evicted: bool  # the job trained at full size in time and a node was evicted
    job_ended: bool  # the PyTorchJob succeeded or failed before the deadline
    cleanup_error: str | None = None  # the eviction's clean-up failed so


@dataclass(frozen=True)
class Observed:
    """Everything a drill's verdict is computed from."""

    report: DrillReport  # the figures; its problems and findings are the verdict's
    run: Timeline
    local: LocalSeen | None = None
    cluster: ClusterSeen | None = None

    @property
    def finished(self) -> bool:
        """The job finished: as its figures say, unless ranks of its last round ended early."""
        script = self.local.script_findings if self.local is not None else ()
        return self.report.finished and not any(f.name == RANKS_ENDED_EARLY and not f.accepted for f in script)


@dataclass(frozen=True)
class Verdict:
    failing: tuple[Finding, ...]  # in the report's order
    accepted: tuple[Finding, ...]
    finished: bool

    @property
    def passed(self) -> bool:
        return not self.failing


def verdict(seen: Observed) -> Verdict:
    """The drill's findings from what it saw, and whether it passed."""
    from_events = [f for rule in EVENT_RULES for f in rule(seen)]
    if seen.local is not None:
        failing = _local(seen.report, seen.local, from_events)
    elif seen.cluster is not None:
        failing = _cluster(seen.cluster, from_events)
    else:
        failing = from_events
    script = seen.local.script_findings if seen.local is not None else ()
    return Verdict(tuple(failing), tuple(f for f in script if f.accepted), seen.finished)


def judged(seen: Observed) -> DrillReport:
    """The drill's report: its figures, with the verdict's problems and findings."""
    found = verdict(seen)
    script = seen.local.script_findings if seen.local is not None else ()
    return dataclasses.replace(
        seen.report,
        problems=[f.line() for f in found.failing],
        findings=[dataclasses.asdict(f) for f in script],
        finished=found.finished,
    )


# ------------------------------------------------------------------ what the local drill saw
def _local(report: DrillReport, local: LocalSeen, from_events: list[Finding]) -> list[Finding]:
    """What stopped the drill first (the server, its time, a crash loop), then the script's
    findings (causes before what they led to), the events', what ended the job and what the
    drill could not do."""
    script = [f for f in local.script_findings if not f.accepted]
    # A crash loop the error files show is why the drill fails when anything fails it.
    stopped = local.stopped or (local.agents_stopped if script or from_events else None)
    if stopped is not None:
        # Its description carries the cause in the script's terms, the traceback and what to
        # change: the agents' shorter note of the same crash loop gives way to it.
        from_events = [f for f in from_events if f.name != CRASH_LOOP]
    found = [
        *(Finding(RENDEZVOUS_DIED, died) for died in local.rendezvous_died),
        *_timed_out(report, local),
        *([Finding(SCRIPT_CRASH_LOOP, stopped)] if stopped is not None else []),
        *script,
        *from_events,
        *_what_ended(local, stopped, failing=bool(script or from_events)),
    ]
    found += _node_local(report, found)
    found += _no_fault(report, local, stopped)
    return found + _baselines(report, local)


def _timed_out(report: DrillReport, local: LocalSeen) -> list[Finding]:
    if local.timed_out_s is None:
        return []
    return [
        Finding(TIMED_OUT, f"the drill timed out after {local.timed_out_s:g} s; remaining nodes were killed"),
        *(Finding(STILL_RUNNING, p.problem()) for p in report.still_running),
    ]


def _what_ended(local: LocalSeen, stopped: str | None, *, failing: bool) -> list[Finding]:
    """The failure that ended a failing job, or that none did when the drill timed out."""
    if stopped is not None:
        return []
    if local.unrecovered is not None and failing:
        return [Finding(WORKER_FAILED, local.unrecovered)]
    if local.failures and local.timed_out_s is not None:
        # Every failure was followed by new workers on its node (an eviction's, recovered):
        # none of them is why the job did not end.
        return [
            Finding(
                NO_FAILURE_ENDED,
                f"no worker failure ended the job ({local.failures} earlier one(s) were each followed by a "
                "restart): its workers were still running, or hung, when the drill timed out",
            )
        ]
    return []


def _node_local(report: DrillReport, found: list[Finding]) -> list[Finding]:
    """Checkpoints on a node's own disk, a likely cause of a failing drill (unless the script's
    finding says so already)."""
    if not report.node_local_checkpoints or not found or any(f.name == RANKS_RESUMED_APART for f in found):
        return []
    return [Finding(NODE_LOCAL_CHECKPOINTS, node_local_warning(report.node_local_checkpoints))]


def _no_fault(report: DrillReport, local: LocalSeen, stopped: str | None) -> list[Finding]:
    """The drill made no fault, for no reason already given."""
    if stopped is not None or local.rendezvous_died:
        return []
    if local.fault == "scale":
        return (
            [] if report.scaling else [Finding(NO_FAULT, "no scaling happened: the job ended or failed during warm-up")]
        )
    if local.fault == "trace":  # a window may lose no node: its capacity was replayed all the same
        replayed = report.replay is not None
        return [] if replayed else [Finding(NO_FAULT, "no window was replayed: the job ended or failed before it")]
    return (
        [] if report.evictions else [Finding(NO_FAULT, "no eviction happened: the job ended or failed during warm-up")]
    )


def _baselines(report: DrillReport, local: LocalSeen) -> list[Finding]:
    """The drilled run against uninterrupted ones (lab.drill.convergence)."""
    if local.baseline_unfinished is not None:
        run, runs = local.baseline_unfinished
        return [Finding(BASELINE_UNFINISHED, f"uninterrupted run {run} of {runs} did not finish: no comparison")]
    if report.convergence is None or report.convergence["passed"]:
        return []
    said = str(report.convergence["summary"])[len("  convergence:") :]
    return [Finding(NOT_CONVERGED, "the loss did not end where uninterrupted runs end:" + said)]


# ------------------------------------------------------------------ what the cluster drill saw
def _cluster(cluster: ClusterSeen, from_events: list[Finding]) -> list[Finding]:
    ahead = []
    if not cluster.evicted:
        ahead.append(
            Finding(
                NEVER_FULL_SIZE,
                f"the job did not train at full size ({cluster.full_world} workers) by step {cluster.evict_at_step} "
                f"within {cluster.timeout_s:g} s: no eviction was made",
            )
        )
    if cluster.cleanup_error is not None:
        ahead.append(Finding(CLEANUP_FAILED, f"clean-up after the eviction failed: {cluster.cleanup_error}"))
    late = []
    if cluster.evicted and not cluster.job_ended:
        late.append(Finding(DEADLINE_PASSED, f"the deadline ({cluster.timeout_s:g} s) passed before the job finished"))
    return [*ahead, *from_events, *late]


# ------------------------------------------------------------------ what the events say
def _not_finished(seen: Observed) -> list[Finding]:
    return [] if seen.report.finished else [Finding(NOT_FINISHED, _unfinished(seen.run, seen.report))]


def _unfinished(run: Timeline, report: DrillReport) -> str:
    """Why the job did not finish, as far as the events tell."""
    evicted = {e["node"] for e in run.of(Event.EVICT)}
    stuck = {n: c for n, c in report.node_exit_codes.items() if n not in evicted and c != 0}
    target = report.target_steps
    if run.emits and target and report.final_step == target and stuck:
        late = sorted(j.node for j in report.joins if j.join_s is None and j.node in stuck)
        if late and len(late) == len(stuck):
            return (
                f"the job trained every step ({report.final_step} of {target}) before {', '.join(late)} could join: "
                "a node added back needs seconds to start and join (more on a loaded machine); give the job "
                "more steps or a longer --step-time"
            )
        codes = ", ".join(f"{n} ({c})" for n, c in sorted(stuck.items()))
        return (
            f"the job trained every step ({report.final_step} of {target}) but these nodes did not exit"
            f" cleanly (exit code): {codes}"
        )
    if run.emits and target:
        return f"the job did not finish: final step {report.final_step}, expected {target}"
    succeeded = sorted({a.node for a in run.agent_events if a.kind == "group_succeeded"})
    if succeeded and stuck:
        codes = ", ".join(f"{n} ({c})" for n, c in sorted(stuck.items()))
        return (
            f"workers finished the job (on {', '.join(succeeded)}), but these nodes did not exit cleanly"
            f" (exit code): {codes}"
        )
    return "the job did not finish: no node's worker group completed successfully"


def _outages(seen: Observed) -> list[Finding]:
    found = []
    for o in seen.report.outages:
        if o.down_s is None:
            found.append(Finding(RENDEZVOUS_NOT_BACK, "the rendezvous server was stopped and not started again"))
        elif seen.run.emits and o.stall_s is None and not seen.report.finished:
            found.append(
                Finding(NO_TRAINING_AFTER_OUTAGE, "training did not go on after the rendezvous server came back")
            )
    return found


def _gave_up(seen: Observed) -> list[Finding]:
    gave_up = seen.run.of(Event.RDZV_GAVE_UP)
    if not gave_up:
        return []
    nodes = sorted({str(e.get("node")) for e in gave_up})
    return [
        Finding(
            RENDEZVOUS_GIVEN_UP,
            f"the rendezvous server stayed unreachable for {max(e.get('down_s', 0) for e in gave_up):.0f} s: "
            f"the agents of {', '.join(nodes)} gave up on it (exit 170, retried by the operator)",
        )
    ]


def _crash_loops(seen: Observed) -> list[Finding]:
    # An agent gave up on a deterministic crash (lab.runtime.launch): the job fails with it.
    return [
        Finding(
            CRASH_LOOP,
            f"workers crash loop on {loop.get('node')}: rank {loop.get('rank')} failed {loop.get('attempts')} times "
            f"in a row with {loop.get('error')}; its agent gave up (torchrun exits 1, the job fails)",
        )
        for loop in seen.run.of(Event.WORKERS_CRASH_LOOP)
    ]


def _turn_taking(seen: Observed) -> list[Finding]:
    left_out = seen.local.left_out if seen.local is not None else None
    turns = per_step_report.turn_taking(seen.run.events, left_out) if seen.run.per_step else None
    return [Finding(TURN_TAKING, turns)] if turns else []


def _job_failed(seen: Observed) -> list[Finding]:
    failed = [e for e in seen.run.of(Event.K8S_JOB) if e.get("condition") == "Failed"]
    if not failed:
        return []
    why = f"{failed[-1].get('reason', '')} {failed[-1].get('message', '')}".rstrip()
    return [Finding(JOB_FAILED, f"the PyTorchJob failed: {why}")]


def _never_scaled(seen: Observed) -> list[Finding]:
    return [
        Finding(NEVER_SCALED, f"the job never trained at {sc.to_nodes} node(s) after it was scaled to them")
        for sc in seen.report.scaling
        if sc.reached_s is None
    ]


def _evictions(seen: Observed) -> list[Finding]:
    """Each eviction: at most one checkpoint interval lost, and training on without the node."""
    report, run, found = seen.report, seen.run, []
    for ev in report.evictions:
        if ev.lost_steps is not None and ev.lost_steps > report.checkpoint_every:
            found.append(
                Finding(
                    LOST_TOO_MUCH,
                    f"eviction of {ev.node} lost {ev.lost_steps} steps: expected at most one "
                    f"checkpoint interval ({report.checkpoint_every})",
                )
            )
        if run.emits and ev.recovery_s is None and report.finished and not ev.finished_within:
            found.append(
                Finding(
                    NOT_RECOVERED,
                    f"the survivors committed no step without {ev.node} after its eviction"
                    if run.per_step
                    else f"no step at a new world size was seen after the eviction of {ev.node}",
                )
            )
    return found


def _reclaims(seen: Observed) -> list[Finding]:
    """Each reclaim of borrowed nodes: the job never below its core; with a grace period no
    step lost (the nodes' workers save and leave within it); back at full size once the
    capacity is free, while the job still trains."""
    found = []
    for r in seen.report.reclaims:
        if r.below_core:
            found.append(
                Finding(
                    BELOW_CORE,
                    f"after the reclaim at {r.t - seen.report.t0:.1f} s the job trained at {r.lowest_nodes} node(s), "
                    f"below its core of {r.core_nodes}: the core's own nodes left with the borrowed ones",
                )
            )
        lost = [
            ev
            for ev in seen.report.evictions
            if ev.cause == CAUSE_RECLAIM and ev.node in r.taken_nodes and (ev.lost_steps or 0) > 0
        ]
        if r.grace_s is not None and lost:
            found.append(
                Finding(
                    RECLAIM_LOST_STEPS,
                    f"the reclaim at {r.t - seen.report.t0:.1f} s lost {max(ev.lost_steps or 0 for ev in lost)} "
                    f"step(s) though its nodes had a grace period of {r.grace_s:g} s: expected 0 (their workers save "
                    "the step they hold and leave within it)",
                )
            )
        if seen.run.steps and (r.lowest_nodes is None or r.lowest_nodes >= r.full_nodes) and seen.finished:
            found.append(Finding(RECLAIM_OUTRUN, _outrun(seen, r)))
        if r.never_grew_back:
            found.append(
                Finding(
                    NOT_GROWN_BACK,
                    f"the job did not train at its full {r.full_nodes} node(s) again in the "
                    f"{r.trained_after_back_s or 0:.0f} s it trained after the borrowed capacity was free at "
                    f"{(r.back_t or 0) - seen.report.t0:.1f} s",
                )
            )
    return found


def _outrun(seen: Observed, r: Reclaim) -> str:
    """The job ended before the borrowed nodes left (they trained on through their grace): how
    many steps would have let the drill see it shrink, wait `reclaim_for` and grow back, at the
    pace the job trained (the grace, then JOIN_PATIENCE_S for the capacity kept and the join)."""
    steps = seen.run.steps
    grace = r.grace_s or 0.0
    words = (
        f"the job ended {steps[-1]['t'] - r.t:.0f} s after the reclaim at {r.t - seen.report.t0:.1f} s, before its "
        f"borrowed nodes left (they trained on through their grace of {grace:g} s): the drill saw it neither shrink "
        "nor grow back"
    )
    first, last = steps[0], steps[-1]
    if last["t"] <= first["t"] or last["step"] <= first["step"]:
        return words
    pace = (last["step"] - first["step"]) / (last["t"] - first["t"])
    more = (r.t + grace + JOIN_PATIENCE_S - last["t"]) * pace
    return (
        f"{words}; run it longer: --steps {math.ceil(last['step'] + more)} or more at this pace, or a shorter --grace"
    )


def _samples(seen: Observed) -> list[Finding]:
    """The sample ledger (lab.drill.ledger): every sample of every epoch trained into the model
    once, none twice, none left out."""
    epochs = seen.report.ledger.epochs if seen.report.ledger is not None else ()
    return [
        *(Finding(SAMPLES_DOUBLED, words) for e in epochs if (words := e.doubled_words()) is not None),
        *(Finding(SAMPLES_LOST, words) for e in epochs if (words := e.lost_words()) is not None),
    ]


Rule = Callable[[Observed], list[Finding]]
# The rules on the events and their figures, in the report's order.
EVENT_RULES: tuple[Rule, ...] = (
    _not_finished,
    _outages,
    _gave_up,
    _crash_loops,
    _turn_taking,
    _job_failed,
    _never_scaled,
    _evictions,
    _reclaims,
    _samples,
)

"""Turn a drill's events (ours and the agents') into measured figures."""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from lab.drill import per_step_report
from lab.drill.agent_events import AgentEvent
from lab.drill.checkpoint_cost import advice as interval_advice
from lab.vocab.checkpoint_interval import FIRST_SAVE_AFTER
from lab.vocab.events import EXIT_DONE, EXIT_NOTICE, SAVE_NOTICE, Event


@dataclass
class Eviction:
    node: str
    kind: str  # "hard" | "notice" | "silent"
    t: float
    world_before: int | None = None
    world_after: int | None = None
    last_step_before: int | None = None  # newest step any rank completed before the restart
    resumed_from: int | None = None
    lost_steps: int | None = None
    recovery_s: float | None = None  # eviction -> first step at the new world size
    rendezvous_s: float | None = None  # eviction -> agents' next completed rendezvous
    restarted_s: float | None = None  # eviction -> a survivor's workers started again (torch's events)
    detected_s: float | None = None  # eviction -> an agent saw the node leave its round
    emergency_save_s: float | None = None  # notice only: seconds the save took
    emergency_save_already: bool = False  # notice only: that step was saved before the notice came
    # notice only: the save could not be made in time (sharded: no step boundary came, or the
    # node went before the save committed); the newest committed checkpoint stood instead.
    emergency_save_missed: bool = False
    notice_to_exit_s: float | None = None  # notice only: SIGTERM -> worker exit
    # A cluster only: eviction -> the next node of the GPU pool Ready (a replacement, or one
    # that was there already) and -> the evicted node gone from the Ready nodes.
    replacement_node_s: float | None = None
    node_gone_s: float | None = None
    # ... and the GPU capacity rank that node came from, where its labels say (a fallback rank).
    replacement_rank: int | None = None
    replacement_capacity: str | None = None
    # A cluster only: the eviction requested through `backend` reached the job `lead_s` later,
    # seen first as `first_sign` (lab.cluster.disruption); `t` and every figure count from there.
    backend: str | None = None
    lead_s: float | None = None
    first_sign: str | None = None
    # Per-step mode only: replica groups in the quorum before and after, and the in-flight
    # steps the survivors discarded (recovery_s is then the survivors' stall: eviction -> their
    # first committed step in a quorum without the evicted group).
    groups_before: int | None = None
    groups_after: int | None = None
    discarded_steps: int | None = None
    # Why the node went, when not a spot reclaim: "scale-in" (the job was made smaller).
    cause: str | None = None


@dataclass
class RendezvousOutage:
    """The rendezvous server was down from `t` for `down_s` seconds (it restarted)."""

    t: float
    down_s: float | None = None
    stall_s: float | None = None  # longest gap between steps from the outage until training went on after it
    steps_during: int = 0  # steps completed while the server was down
    restarts: int = 0  # worker-group restarts it caused
    lost_steps: int | None = None  # steps re-done because of it (0 when training never stopped)
    agents_unreachable: int = 0  # agents that saw the server unreachable (and rode it out)
    agents_cut_off_s: float | None = None  # the longest time an agent could not reach the server


@dataclass
class Join:
    node: str
    t: float
    world_before: int | None = None
    world_after: int | None = None
    join_s: float | None = None  # node started -> first step at the larger world size (per-step: with it in the quorum)
    lost_steps: int | None = None
    stall_s: float | None = None  # the longest gap between steps from its start until it trained
    # Per-step mode: its workers started (the Python, torch and the agent already up) -> its
    # first committed step in a quorum: what joining costs beyond starting the processes.
    from_workers_s: float | None = None
    # The GPU capacity it stands for, where the drill said (a fallback rank in a capacity drill).
    rank: int | None = None
    capacity: str | None = None


@dataclass
class ReducedSize:
    """From an eviction until its replacement trained (or the job ended): how long the job ran
    smaller, what it trained then, and its goodput against the rate at full size before the
    eviction (samples trained in the window / what the full size trains in as long)."""

    node: str  # the evicted node
    seconds: float
    world: int | None  # the world size it trained at meanwhile
    steps: int
    samples_per_s: float | None
    full_samples_per_s: float | None
    goodput: float | None
    replaced_after_s: float | None = None  # eviction -> the replacement node added
    replacement_rank: int | None = None
    replacement_capacity: str | None = None


@dataclass
class Scaling:
    """The job asked at `t` to run at `to_nodes` nodes (from `from_nodes`): the first step at
    that size `reached_s` later (per-step: in a quorum of that many groups), `world_after` its
    world size; None when it never trained at it."""

    t: float
    from_nodes: int
    to_nodes: int
    reached_s: float | None = None
    world_after: int | None = None


@dataclass
class StillRunning:
    """A process of a node that still ran when the drill's time was up, and where it was."""

    node: str
    role: str  # "agent" or "worker"
    pid: int
    where: str
    stacks: str  # the file with every thread's stack

    def problem(self) -> str:
        return f"{self.node}'s {self.role} (pid {self.pid}) was in {self.where}; every thread's stack: {self.stacks}"


@dataclass
class DrillReport:
    target_steps: int | None
    checkpoint_every: int  # derived while the job ran: the longest interval it chose
    final_step: int | None
    finished: bool
    emits_events: bool
    duration_s: float
    restart_rounds: int
    max_restart_count: int
    evictions: list[Eviction] = field(default_factory=list)
    outages: list[RendezvousOutage] = field(default_factory=list)
    joins: list[Join] = field(default_factory=list)
    scaling: list[Scaling] = field(default_factory=list)
    reduced: list[ReducedSize] = field(default_factory=list)
    node_exit_codes: dict[str, int | None] = field(default_factory=dict)
    loss_curve: list[tuple[float, int, float, int]] = field(default_factory=list)  # (s, step, loss, world)
    world_timeline: list[tuple[float, int]] = field(default_factory=list)  # (s, world size) from agents or steps
    problems: list[str] = field(default_factory=list)
    # Every worker that died of an exception (torchelastic's error files): node, attempt, message, hint.
    worker_errors: list[dict[str, Any]] = field(default_factory=list)
    t0: float = 0.0
    fault_tolerance: str = "elastic"
    # The loss against uninterrupted runs of the same job (lab.drill.convergence), when asked.
    convergence: dict[str, Any] | None = None
    # Checkpoint-like files the script wrote under a node's own directory (its working
    # directory): lost with the node, and ranks on other nodes never see them.
    node_local_checkpoints: list[str] = field(default_factory=list)
    # What an interval save cost training, and the interval that calls for at each eviction band.
    checkpoint_advice: dict[str, Any] | None = None
    checkpoint_derived: bool = False  # the job derived its interval (checkpoint_every 0)
    checkpoint_advice_text: str = ""
    # The processes that still ran when the drill's time was up (it then killed them).
    still_running: list[StillRunning] = field(default_factory=list)
    # On a script of one's own: what its workers did that fails it (lab.drill.findings), each
    # {name, text, accepted}; the unaccepted ones are among the problems too.
    findings: list[dict[str, Any]] = field(default_factory=list)
    # ... and what its workers did in the round after each membership change, a line each.
    script_rounds: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def summary(self) -> str:
        lines = [f"Drill {'PASSED' if self.passed else 'FAILED'} in {self.duration_s:.1f} s"]
        if self.emits_events:
            of = f"of {self.target_steps}" if self.target_steps is not None else "(as the script counts)"
            lines.append(f"  final step: {self.final_step} {of}  ({'finished' if self.finished else 'NOT finished'})")
        else:
            lines.append(
                f"  the script emits no lab events: figures below come from the torchrun agents"
                f" ({'completed' if self.finished else 'did NOT complete'})"
            )
        lines.append(
            f"  restart rounds: {self.restart_rounds} (max TORCHELASTIC_RESTART_COUNT {self.max_restart_count})"
        )
        for o in self.outages:
            lines.append(
                f"  rendezvous server down at {o.t - self.t0:.1f} s for {o.down_s:.1f} s:"
                f" {o.agents_unreachable} agent(s) saw it unreachable"
                + (f" (for up to {o.agents_cut_off_s:.1f} s)" if o.agents_cut_off_s is not None else "")
                + f", {o.steps_during} step(s) trained meanwhile"
            )
            stall = f"stalled at most {o.stall_s:.2f} s" if o.stall_s is not None else "did not step again"
            lines.append(f"    training {stall}; worker restarts {o.restarts}, lost {o.lost_steps} step(s)")
        for sc in self.scaling:
            reached = (
                f"training at world {sc.world_after} {sc.reached_s:.2f} s later"
                if sc.reached_s is not None
                else "NEVER trained at that size"
            )
            lines.append(f"  scaled {sc.from_nodes} -> {sc.to_nodes} node(s) at {sc.t - self.t0:.1f} s: {reached}")
        for ev in self.evictions:
            what = f"{ev.node} left (scale-in, SIGTERM with a grace)" if ev.cause == "scale-in" else None
            lines.append(
                (f"  {what}" if what else f"  eviction of {ev.node} ({ev.kind})")
                + f" at {ev.t - self.t0:.1f} s: {world_change(ev.world_before, ev.world_after)}"
            )
            if ev.lead_s is not None:
                lines.append(
                    f"    requested through {ev.backend}; the cloud's lead time {ev.lead_s:.1f} s,"
                    f" until {ev.first_sign} (the figures below count from there)"
                )
            if self.fault_tolerance == "per-step":
                if ev.recovery_s is not None:
                    lines.append(
                        f"    survivors' next step {ev.recovery_s:.2f} s after it, in a quorum of {ev.groups_after}"
                        f" group(s) (of {ev.groups_before}); {ev.discarded_steps} in-flight step(s) discarded,"
                        f" {ev.lost_steps} committed step(s) lost"
                    )
                else:
                    lines.append("    the survivors committed NO step without it")
            elif ev.recovery_s is not None:
                lines.append(f"    recovery: {ev.recovery_s:.2f} s to the first step at the new world size")
            elif ev.world_before is not None and not self.finished:
                if self.emits_events:
                    lines.append("    recovery: NONE, no step at a new world size after it")
                elif ev.restarted_s is None:
                    lines.append("    recovery: NONE, no workers started at a new world size after it")
            if ev.node_gone_s is not None:
                lines.append(f"    the node left the Ready nodes after {ev.node_gone_s:.1f} s")
            if ev.replacement_node_s is not None:
                rank = (
                    f" (rank {ev.replacement_rank}, {ev.replacement_capacity})"
                    if ev.replacement_rank is not None
                    else ""
                )
                lines.append(f"    a GPU node was Ready {ev.replacement_node_s:.1f} s after the eviction{rank}")
            if ev.detected_s is not None:
                lines.append(f"    an agent saw it leave the round after {ev.detected_s:.2f} s")
            if ev.rendezvous_s is not None:
                lines.append(f"    agents re-rendezvoused after {ev.rendezvous_s:.2f} s")
            if ev.restarted_s is not None and not self.emits_events:
                lines.append(f"    recovery: {ev.restarted_s:.2f} s to workers running again at the new world size")
            if ev.lost_steps is not None and self.fault_tolerance != "per-step":
                lines.append(
                    f"    lost work: {ev.lost_steps} step(s) (last step {ev.last_step_before},"
                    f" resumed from {ev.resumed_from}; checkpoint interval {self.checkpoint_every}"
                    f"{' at most, derived' if self.checkpoint_derived else ''})"
                )
            if ev.emergency_save_s is not None:
                saved = f"{ev.emergency_save_s:.3f} s"
                if ev.emergency_save_already:
                    saved = "nothing to write, the step was saved already"
                left = f"{ev.notice_to_exit_s:.2f} s" if ev.notice_to_exit_s is not None else "not seen"
                lines.append(f"    emergency save: {saved}; notice to worker exit: {left}")
            elif ev.emergency_save_missed and not self.emits_events:
                lines.append(
                    "    emergency save: not visible to the drill (the script reports none); see the node's log"
                )
            elif ev.emergency_save_missed:
                kept = f"step {ev.resumed_from}" if ev.resumed_from is not None else "the newest checkpoint"
                lines.append(
                    "    emergency save: not made within the notice (no step boundary came in time, or the node"
                    f" went before it committed); training resumed from {kept}, the newest committed checkpoint"
                )
        for j in self.joins:
            js = f"joined in {j.join_s:.2f} s" if j.join_s is not None else "did NOT join"
            came = f" (rank {j.rank}, {j.capacity})" if j.rank is not None else ""
            lines.append(
                f"  node {j.node} added{came} at {j.t - self.t0:.1f} s: {world_change(j.world_before, j.world_after)},"
                f" {js}"
                + (f", lost {j.lost_steps} step(s)" if j.lost_steps is not None else "")
                + (f", survivors stalled at most {j.stall_s:.2f} s" if j.stall_s is not None else "")
                + (f" (in a quorum {j.from_workers_s:.2f} s after its workers started)" if j.from_workers_s else "")
            )
        for r in self.reduced:
            came = (
                f"until its replacement (rank {r.replacement_rank}, {r.replacement_capacity}, added "
                f"{r.replaced_after_s:.1f} s after the eviction) trained"
                if r.replacement_rank is not None and r.replaced_after_s is not None
                else "until it was replaced"
                if r.replaced_after_s is not None
                else "to the end (no replacement)"
            )
            rate = (
                f"{r.samples_per_s:.0f} samples/s against {r.full_samples_per_s:.0f} at full size: goodput "
                f"{100 * r.goodput:.0f} % over those {r.seconds:.1f} s"
                if r.goodput is not None and r.samples_per_s is not None and r.full_samples_per_s
                else "its rate not measured"
            )
            lines.append(
                f"  at reduced size after losing {r.node}: {r.seconds:.1f} s {came}; {r.steps} step(s) at world "
                f"{r.world}, {rate}"
            )
        lines += [f"  {line}" for line in self.script_rounds]
        if self.loss_curve:
            first, last = self.loss_curve[0], self.loss_curve[-1]
            lines.append(f"  loss: {first[2]:.4f} at step {first[1]} -> {last[2]:.4f} at step {last[1]}")
        if self.checkpoint_advice_text:
            lines.append(self.checkpoint_advice_text)
        if self.convergence is not None:
            lines.append(self.convergence["summary"])
        if self.node_local_checkpoints:
            lines.append(f"  WARNING: {node_local_warning(self.node_local_checkpoints)}")
        for f in self.findings:
            if f["accepted"]:
                lines.append(f"  ACCEPTED ({f['name']}, with --accept): {f['text']}")
        for p in self.problems:
            lines.append(f"  PROBLEM: {p}")
        return "\n".join(lines)


def world_change(before: int | None, after: int | None) -> str:
    """`world 3 -> 2`, in words where a size was not seen (no step at it, or none yet)."""
    if before is None and after is None:
        return "world size not seen before or after"
    if after is None:
        return f"world {before} -> no new size seen"
    if before is None:
        return f"world (not seen before) -> {after}"
    return f"world {before} -> {after}"


def node_local_warning(paths: list[str]) -> str:
    shown = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
    return (
        f"the script wrote checkpoint-like files on node-local paths ({shown}): they go with their node, and"
        " ranks on other nodes resume from other steps or none; write checkpoints under $LAB_CHECKPOINT_DIR"
    )


Record = dict[str, Any]
WORK_EVENTS = (Event.STEP, Event.COLLECTIVE_FAILED, Event.CHECKPOINT_SAVED)  # events that carry a completed step


def analyze(
    events: list[Record],
    agent_events: list[AgentEvent],
    *,
    target_steps: int | None,
    checkpoint_every: int,
    node_exit_codes: dict[str, int | None],
) -> DrillReport:
    """The drill's figures from its events (ours) and the agents' (torch's), read in order:
    what the run was, each eviction, rendezvous outage and join, the curves, the problems."""
    run = Timeline(events, agent_events)
    derived = checkpoint_every == 0
    if derived:
        # The longest interval the job chose, and the first save's distance from a start.
        chosen = [int(e["steps"]) for e in run.of(Event.CHECKPOINT_INTERVAL) if "steps" in e]
        checkpoint_every = max([FIRST_SAVE_AFTER, *chosen])
    report = _overview(run, target_steps, checkpoint_every, node_exit_codes)
    report.checkpoint_derived = derived
    for e in run.of(Event.EVICT):
        report.evictions.append(_per_step_eviction(run, e) if run.per_step else _elastic_eviction(run, e))
    report.outages = [_outage(run, down) for down in run.of(Event.RDZV_DOWN)]
    for e in run.of(Event.NODE_ADDED):
        if e["t"] > run.first_step_t:
            report.joins.append(_per_step_join(run, e) if run.per_step else _elastic_join(run, e))
    report.scaling = [_scaling(run, e) for e in run.of(Event.SCALE)]
    if run.emits:
        report.reduced = [_reduced(run, e, report.joins) for e in run.of(Event.EVICT) if e.get("cause") != "scale-in"]
    report.loss_curve, report.world_timeline = _curves(run)
    nodes = {e.get("node") for e in run.of(Event.NODE_ADDED) if e["t"] <= run.first_step_t}
    found = interval_advice(run.events, len(nodes - {None}), checkpoint_every, derived=derived)
    if found is not None:
        report.checkpoint_advice, report.checkpoint_advice_text = found.to_dict(), found.summary()
    report.problems = _problems(run, report, checkpoint_every)
    return report


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

    def first_round_after(self, t: float) -> Record | None:
        return next((r for r in self.rounds if r["t"] > t), None)

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
    """One entry per worker-group start (rendezvous round): its time and resumed step."""
    rounds: dict[object, Record] = {}
    for e in events:
        if e["event"] in (Event.RESUME, Event.FRESH):
            key = e.get("round", e["t"])
            r = rounds.setdefault(key, {"t": e["t"], "step": e["step"]})
            r["t"] = min(r["t"], e["t"])
            r["step"] = min(r["step"], e["step"])
    return sorted(rounds.values(), key=lambda r: r["t"])


def _agent_rounds(agent_events: list[AgentEvent], gap_s: float = 1.0) -> int:
    """Rendezvous rounds the agents completed: their completions, grouped where less than
    `gap_s` apart (every agent of a round completes it at about the same time). Counted from
    times, not restart counts: a restart for a membership change does not raise the count."""
    times = sorted(a.t for a in agent_events if a.kind == "rendezvous")
    return sum(1 for i, t in enumerate(times) if i == 0 or t - times[i - 1] >= gap_s)


def _restart_rounds(run: Timeline) -> int:
    """Worker-group restarts: rounds after the first; in per-step mode no group restarts for a
    membership change, so the worker starts torchrun made after a failure."""
    if run.per_step:
        return sum(1 for e in run.of(Event.START) if e.get("restarts", 0) > 0)
    if run.emits:
        return max(0, len(run.rounds) - 1)
    return max(0, _agent_rounds(run.agent_events) - 1)


# ------------------------------------------------------------------ what the run was
def _overview(
    run: Timeline, target_steps: int | None, checkpoint_every: int, node_exit_codes: dict[str, int | None]
) -> DrillReport:
    done = [e["step"] for e in run.events if e["event"] in WORK_EVENTS or _done(e)]
    final_step = max(done) if done else None
    evicted = {e["node"] for e in run.of(Event.EVICT)}
    survivors_ok = all(code == 0 for node, code in node_exit_codes.items() if node not in evicted)
    # Our trainer says it is done; a script that only reports its steps (lab.runtime.report_step)
    # is done when its agents' worker groups succeeded, as one that reports nothing.
    succeeded = any(a.kind == "group_succeeded" for a in run.agent_events)
    if run.emits:
        finished = (
            (final_step == target_steps if target_steps else True)
            and survivors_ok
            and (any(_done(e) for e in run.events) or (target_steps is None and succeeded))
        )
    else:
        finished = survivors_ok and succeeded
    restart_counts = [a.restart_count or 0 for a in run.agent_events if a.kind == "rendezvous"]
    restart_counts += [e.get("restart_count", 0) for e in run.of(Event.START)]
    return DrillReport(
        target_steps=target_steps,
        checkpoint_every=checkpoint_every,
        final_step=final_step,
        finished=finished,
        emits_events=run.emits,
        duration_s=(run.events[-1]["t"] - run.t0) if run.events else 0.0,
        restart_rounds=_restart_rounds(run),
        max_restart_count=max(restart_counts or [0]),
        node_exit_codes=node_exit_codes,
        t0=run.t0,
        fault_tolerance="per-step" if run.per_step else "elastic",
    )


def _done(e: Record) -> bool:
    return bool(e["event"] == Event.EXIT and e.get("reason") == EXIT_DONE)


# ------------------------------------------------------------------------ evictions
def _requested(ev: Eviction, e: Record) -> Eviction:
    """A cluster drill's eviction: how it was asked for, and the cloud's lead time; and why."""
    ev.backend, ev.lead_s, ev.first_sign = e.get("backend"), e.get("lead_s"), e.get("first_sign")
    ev.cause = e.get("cause")
    return ev


def _scaling(run: Timeline, e: Record) -> Scaling:
    """The first step after a scale request at its size: in a quorum of that many groups in
    per-step mode, at that many nodes' world size otherwise (the world size per node as it was
    when the job was asked)."""
    sc = Scaling(t=e["t"], from_nodes=int(e.get("from_nodes") or 0), to_nodes=int(e["nodes"]))
    before = run.world_at(e["t"])
    per_node = before // sc.from_nodes if before and sc.from_nodes else 1
    for s in run.steps:
        if s["t"] <= e["t"]:
            continue
        size = s.get("participants") if run.per_step else int(s.get("world_size") or 0) // max(per_node, 1)
        if size == sc.to_nodes:
            sc.reached_s, sc.world_after = s["t"] - e["t"], s.get("world_size")
            break
    return sc


def _per_step_eviction(run: Timeline, e: Record) -> Eviction:
    ev = _requested(Eviction(node=e["node"], kind=e["kind"], t=e["t"]), e)
    per_step_report.eviction_figures(ev, run.events)
    return ev


def _elastic_eviction(run: Timeline, e: Record) -> Eviction:
    """The survivors' path back to training: an agent sees the node leave, the agents meet
    again, the workers restart and resume, the first step at the new world size."""
    ev = _requested(Eviction(node=e["node"], kind=e["kind"], t=e["t"], world_before=run.world_at(e["t"])), e)
    next_round = run.first_round_after(e["t"])
    # An agent saw the node leave its round: before the survivors' next round started (a
    # later "member lost" is another change, e.g. agents leaving a round for a join).
    until = next_round["t"] if next_round else float("inf")
    lost = next((x for x in run.of(Event.RDZV_MEMBER_LOST) if e["t"] < x["t"] <= until), None)
    ev.detected_s = lost["t"] - e["t"] if lost else None
    _agents_figures(run, e, ev)
    if next_round:
        ev.last_step_before, ev.lost_steps = run.lost_for_round(next_round)
        ev.resumed_from = next_round["step"]
        s = run.first_step_after(next_round["t"])
        if s:
            ev.recovery_s = s["t"] - e["t"]
            ev.world_after = s["world_size"]
    if e["kind"] == "notice":
        _notice_figures(run, e, ev)
    _cluster_figures(run, e, ev)
    return ev


def _agents_figures(run: Timeline, e: Record, ev: Eviction) -> None:
    """The survivors' agents: their next rendezvous and the workers they started for it (not
    a late start of the round before it)."""
    rdzv = next((a for a in run.agent_events if a.kind == "rendezvous" and a.t > e["t"] and a.node != e["node"]), None)
    if rdzv is None:
        return
    ev.rendezvous_s = rdzv.t - e["t"]
    ev.world_after = rdzv.group_world_size
    started = next((a for a in run.agent_events if a.kind == "started" and a.node == rdzv.node and a.t >= rdzv.t), None)
    if started:
        ev.restarted_s = started.t - e["t"]
        ev.world_after = started.group_world_size or ev.world_after


def _notice_figures(run: Timeline, e: Record, ev: Eviction) -> None:
    """The noticed node's emergency save and how soon its worker left. A sharded save is made
    by every rank and reported by rank 0, wherever it runs."""
    save = run.first(Event.CHECKPOINT_SAVED, e["t"], reason=SAVE_NOTICE, node=e["node"]) or run.first(
        Event.CHECKPOINT_SAVED, e["t"], reason=SAVE_NOTICE, sharded=True
    )
    leave = run.first(Event.EXIT, e["t"], reason=EXIT_NOTICE, node=e["node"])
    ev.emergency_save_s = save["seconds"] if save else None
    ev.emergency_save_already = bool(save and save.get("already"))
    ev.emergency_save_missed = save is None and (leave is None or leave.get("saved") is False)
    ev.notice_to_exit_s = leave["notice_to_exit_s"] if leave else None


def _cluster_figures(run: Timeline, e: Record, ev: Eviction) -> None:
    """On a cluster: the next GPU node Ready, and the evicted node gone from the Ready ones."""
    ready = next((x for x in run.of(Event.K8S_NODE_READY) if x["t"] > e["t"]), None)
    ev.replacement_node_s = ready["t"] - e["t"] if ready else None
    if ready:
        ev.replacement_rank, ev.replacement_capacity = ready.get("rank"), ready.get("capacity")
    gone = run.first(Event.K8S_NODE_GONE, e["t"], k8s_node=e.get("k8s_node"))
    ev.node_gone_s = gone["t"] - e["t"] if gone else None


# ---------------------------------------------------------------- rendezvous outages
def _outage(run: Timeline, down: Record) -> RendezvousOutage:
    o = RendezvousOutage(t=down["t"])
    o.agents_unreachable = len({e.get("node") for e in run.of(Event.RDZV_UNREACHABLE) if e["t"] >= down["t"]})
    cut_off = [e["down_s"] for e in run.of(Event.RDZV_REACHABLE) if e["t"] >= down["t"] and "down_s" in e]
    o.agents_cut_off_s = max(cut_off, default=None)
    up = next((e for e in run.of(Event.RDZV_UP) if e["t"] > down["t"]), None)
    if up is None:
        return o
    o.down_s = up["t"] - down["t"]
    o.steps_during = len({s["step"] for s in run.steps if down["t"] <= s["t"] <= up["t"]})
    # A round that started while the server was down or right after it came back (before
    # the next eviction) is a restart the outage caused.
    later_faults = [e["t"] for e in run.events if e["event"] in (Event.EVICT, Event.NODE_ADDED) and e["t"] > down["t"]]
    horizon = min(later_faults, default=float("inf"))
    caused = [r for r in run.rounds if down["t"] < r["t"] < horizon]
    o.restarts = len(caused)
    o.lost_steps = run.lost_for_round(caused[0])[1] if caused else 0
    after = run.first_step_after(caused[-1]["t"] if caused else up["t"])
    if after is not None:
        o.stall_s = run.longest_gap(down["t"], after["t"])
    return o


# ----------------------------------------------------------------- reduced size
FULL_RATE_WINDOW_S = 10.0  # the full-size rate is measured over this much training before the eviction


def _samples_per_s(steps: list[Record]) -> float | None:
    """Samples per second over consecutive steps (each step's samples over the time since the
    one before it)."""
    if len(steps) < 2:
        return None
    seconds = steps[-1]["t"] - steps[0]["t"]
    samples = sum(int(s.get("samples") or 0) for s in steps[1:])
    return samples / seconds if seconds > 0 and samples else None


def _reduced(run: Timeline, e: Record, joins: list[Join]) -> ReducedSize:
    """The job between an eviction and the first step of its replacement's larger world."""
    t = e["t"]
    join = next((j for j in joins if j.t > t), None)
    # The window ends with the larger world's first step, or with the run.
    larger_from = join.t + join.join_s if join is not None and join.join_s is not None else None
    end = larger_from if larger_from is not None else (run.steps[-1]["t"] if run.steps else t)
    during = [s for s in run.steps if t < s["t"] <= end]
    # The full size's rate, from the steps just before the eviction.
    before = [s for s in run.steps if t - FULL_RATE_WINDOW_S <= s["t"] <= t]
    trained = sum(int(s.get("samples") or 0) for s in during)
    full = _samples_per_s(before)
    seconds = max(end - t, 0.0)
    smaller = during[:-1] if larger_from is not None else during  # without the larger world's step
    r = ReducedSize(
        node=e["node"],
        seconds=seconds,
        world=int(smaller[-1]["world_size"]) if smaller and smaller[-1].get("world_size") else None,
        steps=len({s["step"] for s in during}),
        samples_per_s=trained / seconds if seconds > 0 else None,
        full_samples_per_s=full,
        goodput=(trained / (full * seconds)) if full and seconds > 0 else None,
    )
    if join is not None:
        r.replaced_after_s, r.replacement_rank, r.replacement_capacity = join.t - t, join.rank, join.capacity
    return r


# ---------------------------------------------------------------------------- joins
def _per_step_join(run: Timeline, e: Record) -> Join:
    j = Join(node=e["node"], t=e["t"], rank=e.get("rank"), capacity=e.get("capacity"))
    per_step_report.join_figures(j, run.events)
    return j


def _elastic_join(run: Timeline, e: Record) -> Join:
    """The first step at a larger world size after the node came (a round that broke up on
    the way, e.g. a member that missed its heartbeats on a loaded machine, does not end the
    join); without steps of ours, the agents' first rendezvous at a larger world size."""
    j = Join(
        node=e["node"], t=e["t"], world_before=run.world_at(e["t"]), rank=e.get("rank"), capacity=e.get("capacity")
    )
    before = j.world_before
    s = next((s for s in run.steps if s["t"] > e["t"] and before is not None and s["world_size"] > before), None)
    rounds = [r for r in run.rounds if r["t"] > e["t"] and (s is None or r["t"] <= s["t"])]
    lost = [n for r in rounds if (n := run.lost_for_round(r)[1]) is not None]
    if lost:
        j.lost_steps = sum(lost)
    if s is not None:
        j.join_s, j.world_after = s["t"] - e["t"], s["world_size"]
        j.stall_s = run.longest_gap(e["t"], s["t"])
    if j.join_s is None and not run.emits and j.world_before is not None:
        rdzv = next(
            (
                a
                for a in run.agent_events
                if a.kind == "rendezvous"
                and a.t > e["t"]
                and a.group_world_size
                and a.group_world_size > j.world_before
            ),
            None,
        )
        if rdzv:
            j.join_s, j.world_after = rdzv.t - e["t"], rdzv.group_world_size
    return j


# ----------------------------------------------------------------- curves, problems
def _curves(run: Timeline) -> tuple[list[tuple[float, int, float, int]], list[tuple[float, int]]]:
    """(loss curve, world-size timeline): from the steps, else from the agents' rounds."""
    loss = [(s["t"] - run.t0, s["step"], s["loss"], s["world_size"]) for s in run.steps if "loss" in s]
    if run.steps:
        return loss, [(s["t"] - run.t0, s["world_size"]) for s in run.steps]
    world = [
        (a.t - run.t0, a.group_world_size)
        for a in run.agent_events
        if a.kind == "rendezvous" and a.group_world_size is not None
    ]
    # To the job's end, not its last membership change: the last size held until then.
    end = max([e["t"] for e in run.events[-1:]] + [a.t for a in run.agent_events[-1:]], default=None)
    if world and end is not None and end - run.t0 > world[-1][0]:
        world.append((end - run.t0, world[-1][1]))
    return loss, world


def _problems(run: Timeline, report: DrillReport, checkpoint_every: int) -> list[str]:
    found = []
    if not report.finished:
        found.append(_unfinished(run, report))
    for o in report.outages:
        if o.down_s is None:
            found.append("the rendezvous server was stopped and not started again")
        elif run.emits and o.stall_s is None and not report.finished:
            found.append("training did not go on after the rendezvous server came back")
    gave_up = run.of(Event.RDZV_GAVE_UP)
    if gave_up:
        nodes = sorted({str(e.get("node")) for e in gave_up})
        found.append(
            f"the rendezvous server stayed unreachable for {max(e.get('down_s', 0) for e in gave_up):.0f} s: "
            f"the agents of {', '.join(nodes)} gave up on it (exit 170, retried by the operator)"
        )
    for loop in run.of(Event.WORKERS_CRASH_LOOP):
        # An agent gave up on a deterministic crash (lab.runtime.launch): the job fails with it.
        found.append(
            f"workers crash loop on {loop.get('node')}: rank {loop.get('rank')} failed {loop.get('attempts')} times "
            f"in a row with {loop.get('error')}; its agent gave up (torchrun exits 1, the job fails)"
        )
    if run.per_step and (turns := per_step_report.turn_taking(run.events)):
        found.append(turns)
    failed = [e for e in run.of(Event.K8S_JOB) if e.get("condition") == "Failed"]
    if failed:
        found.append(f"the PyTorchJob failed: {failed[-1].get('reason', '')} {failed[-1].get('message', '')}".rstrip())
    for sc in report.scaling:
        if sc.reached_s is None:
            found.append(f"the job never trained at {sc.to_nodes} node(s) after it was scaled to them")
    for ev in report.evictions:
        if ev.lost_steps is not None and ev.lost_steps > checkpoint_every:
            found.append(
                f"eviction of {ev.node} lost {ev.lost_steps} steps: expected at most one "
                f"checkpoint interval ({checkpoint_every})"
            )
        if run.emits and ev.recovery_s is None and report.finished:
            found.append(
                f"the survivors committed no step without {ev.node} after its eviction"
                if run.per_step
                else f"no step at a new world size was seen after the eviction of {ev.node}"
            )
    return found


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

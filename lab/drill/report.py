"""A drill's report: its figures (measured by lab.drill.analysis), the problems and findings of its
verdict (lab.drill.verdict), and its text and JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from lab.drill.ledger import SampleLedger
from lab.drill.reclaim import Reclaim, reclaim_lines
from lab.drill.replay_goodput import ReplayGoodput
from lab.vocab.events import CAUSE_RECLAIM, CAUSE_SCALE_IN


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
    trained_on_s: float | None = None  # notice only: of that, trained on through a notice that said when
    # notice only: the job's last step came within the notice, its workers trained through to the end
    finished_within: bool = False
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
    # Why the node went, when not a spot reclaim (lab.vocab.events' causes): the job was made
    # smaller, or a borrowed node's owners took it back.
    cause: str | None = None
    # Elastic, sharded checkpoints with node memory: the resume's bytes from the ranks' own
    # memory, from other ranks' memory and from storage; the memory slots refused and why.
    state_from: dict[str, int] | None = None
    memory_refused: list[str] | None = None
    # A sharded resume's load on rank 0, its seconds by part (lab.runtime.sharded_checkpoint).
    load_split: dict[str, float] | None = None


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
    thread_dump: str  # the file with every thread's stack

    def problem(self) -> str:
        where = f"{self.node}'s {self.role} (pid {self.pid}) was in {self.where}"
        return f"{where}; every thread's stack: {self.thread_dump}"


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
    # Spot reclaims (evictions with no other cause) and nodes added: the membership changes,
    # which torch's agents (and the training operator) restart for without counting them.
    preemptions: int = 0
    nodes_added: int = 0
    evictions: list[Eviction] = field(default_factory=list)
    # Borrowed nodes taken back by their owners' work (evictions with the reclaim cause), and
    # the job through each (lab.drill.reclaim).
    reclaims: list[Reclaim] = field(default_factory=list)
    outages: list[RendezvousOutage] = field(default_factory=list)
    joins: list[Join] = field(default_factory=list)
    scaling: list[Scaling] = field(default_factory=list)
    reduced: list[ReducedSize] = field(default_factory=list)
    node_exit_codes: dict[str, int | None] = field(default_factory=dict)
    loss_curve: list[tuple[float, int, float, int]] = field(default_factory=list)  # (s, step, loss, world)
    world_timeline: list[tuple[float, int]] = field(default_factory=list)  # (s, world size) from agents or steps
    # A replayed trace window: (s, nodes the capacity offered) at its start, each change and its end.
    capacity_timeline: list[tuple[float, int]] = field(default_factory=list)
    # The verdict (lab.drill.verdict): what fails the drill, in order; it passes without any.
    problems: list[str] = field(default_factory=list)
    # Every worker that died of an exception (torchelastic's error files): node, attempt, message, hint.
    worker_errors: list[dict[str, Any]] = field(default_factory=list)
    t0: float = 0.0
    fault_tolerance: str = "elastic"
    # Per world size: samples a step, micro-batches a rank, the median step time (lab.drill.batch_cost).
    batch_by_world: list[dict[str, Any]] = field(default_factory=list)
    batch_text: str | None = None
    # The loss against uninterrupted runs of the same job (lab.drill.convergence), when asked.
    convergence: dict[str, Any] | None = None
    # Checkpoint-like files the script wrote under a node's own directory (its working
    # directory): lost with the node, and ranks on other nodes never see them.
    node_local_checkpoints: list[str] = field(default_factory=list)
    # What an interval save cost training, and the interval that calls for at each eviction band.
    checkpoint_advice: dict[str, Any] | None = None
    checkpoint_derived: bool = False  # the job derived its interval (checkpoint_every 0)
    # Its checkpoints were sharded (no rank holds the whole state, so survivors of a hard loss
    # cannot save the step they hold: they resume from the newest checkpoint).
    checkpoints_sharded: bool = False
    checkpoint_advice_text: str = ""
    # The processes that still ran when the drill's time was up (it then killed them).
    still_running: list[StillRunning] = field(default_factory=list)
    # On a script of one's own: what its workers did that fails it (lab.drill.findings), each
    # {name, text, accepted}; the unaccepted ones are among the problems too.
    findings: list[dict[str, Any]] = field(default_factory=list)
    # ... and what its workers did in the round after each membership change, a line each.
    script_rounds: list[str] = field(default_factory=list)
    # Which samples the model was trained on, per epoch: once, more than once or never
    # (lab.drill.ledger); None where no ledger was made.
    ledger: SampleLedger | None = None
    # A replayed trace window: its goodput against the capacity it offered (lab.drill.replay_goodput).
    replay: ReplayGoodput | None = None

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        if self.replay is not None:
            d["replay"] = self.replay.to_dict()
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def summary(self) -> str:
        lines = [f"Drill {'PASSED' if self.passed else 'FAILED'} in {self.duration_s:.1f} s", self._how_it_ended()]
        reclaimed = sum(r.nodes for r in self.reclaims)
        taken = f", {reclaimed} taken back by their owners" if reclaimed else ""
        lines.append(
            f"  restart rounds: {self.restart_rounds} ({self.preemptions} node(s) preempted{taken}, {self.nodes_added} "
            f"added: membership changes); failures counted against --max-restarts: {self.max_restart_count} "
            "(the highest TORCHELASTIC_RESTART_COUNT)"
        )
        for o in self.outages:
            lines += _outage_lines(o, self.t0)
        lines += [_scaling_line(sc, self.t0) for sc in self.scaling]
        for r in self.reclaims:
            lines += reclaim_lines(r, self.t0)
        for ev in self.evictions:
            lines += self._eviction_lines(ev)
        lines += [_join_line(j, self.t0) for j in self.joins]
        lines += [_reduced_line(r) for r in self.reduced]
        return "\n".join(lines + self._closing_lines())

    def _how_it_ended(self) -> str:
        if self.emits_events:
            of = f"of {self.target_steps}" if self.target_steps is not None else "(as the script counts)"
            return f"  final step: {self.final_step} {of}  ({'finished' if self.finished else 'NOT finished'})"
        return (
            f"  the script emits no lab events: figures below come from the torchrun agents"
            f" ({'completed' if self.finished else 'did NOT complete'})"
        )

    def _eviction_lines(self, ev: Eviction) -> list[str]:
        what = {
            CAUSE_SCALE_IN: f"{ev.node} left (scale-in, SIGTERM with a grace)",
            CAUSE_RECLAIM: f"{ev.node} taken back by its owners' work ({ev.kind})",
        }.get(ev.cause or "")
        lines = [
            (f"  {what}" if what else f"  eviction of {ev.node} ({ev.kind})")
            + f" at {ev.t - self.t0:.1f} s: {world_change(ev.world_before, ev.world_after)}"
        ]
        if ev.lead_s is not None:
            lines.append(
                f"    requested through {ev.backend}; the cloud's lead time {ev.lead_s:.1f} s,"
                f" until {ev.first_sign} (the figures below count from there)"
            )
        lines += self._recovery_lines(ev) + _on_the_way_back(ev)
        if ev.restarted_s is not None and not self.emits_events:
            lines.append(f"    recovery: {ev.restarted_s:.2f} s to workers running again at the new world size")
        lines += _state_lines(ev)
        if ev.lost_steps is not None and self.fault_tolerance != "per-step":
            lines.append(
                f"    lost work: {ev.lost_steps} step(s) (last step {ev.last_step_before},"
                f" resumed from {ev.resumed_from}; checkpoint interval {self.checkpoint_every}"
                f"{' at most, derived' if self.checkpoint_derived else ''})"
            )
        return lines + self._emergency_save_lines(ev)

    def _recovery_lines(self, ev: Eviction) -> list[str]:
        if self.fault_tolerance == "per-step":
            if ev.recovery_s is None:
                return ["    the survivors committed NO step without it"]
            return [
                f"    survivors' next step {ev.recovery_s:.2f} s after it, in a quorum of {ev.groups_after}"
                f" group(s) (of {ev.groups_before}); {ev.discarded_steps} in-flight step(s) discarded,"
                f" {ev.lost_steps} committed step(s) lost"
            ]
        if ev.recovery_s is not None:
            return [f"    recovery: {ev.recovery_s:.2f} s to the first step at the new world size"]
        if ev.finished_within:
            return ["    recovery: none needed, the job trained through the notice to its last step"]
        if ev.world_before is None or self.finished:
            return []
        if self.emits_events:
            return ["    recovery: NONE, no step at a new world size after it"]
        if ev.restarted_s is None:
            return ["    recovery: NONE, no workers started at a new world size after it"]
        return []

    def _emergency_save_lines(self, ev: Eviction) -> list[str]:
        if ev.emergency_save_s is not None:
            saved = f"{ev.emergency_save_s:.3f} s"
            if ev.emergency_save_already:
                saved = "nothing to write, the step was saved already"
            left = f"{ev.notice_to_exit_s:.2f} s" if ev.notice_to_exit_s is not None else "not seen"
            if ev.trained_on_s:
                left += f" (trained on through the notice for {ev.trained_on_s:.2f} s first)"
            return [f"    emergency save: {saved}; notice to worker exit: {left}"]
        if not ev.emergency_save_missed:
            return []
        if not self.emits_events:
            return ["    emergency save: not visible to the drill (the script reports none); see the node's log"]
        kept = f"step {ev.resumed_from}" if ev.resumed_from is not None else "the newest checkpoint"
        return [
            "    emergency save: not made within the notice (no step boundary came in time, or the node"
            f" went before it committed); training resumed from {kept}, the newest committed checkpoint"
        ]

    def _closing_lines(self) -> list[str]:
        """The script's rounds, the loss, the advice, and the verdict's words."""
        lines = [f"  {line}" for line in self.script_rounds]
        if self.loss_curve:
            first, last = self.loss_curve[0], self.loss_curve[-1]
            lines.append(f"  loss: {first[2]:.4f} at step {first[1]} -> {last[2]:.4f} at step {last[1]}")
        if self.batch_text:
            lines.append(self.batch_text)
        if self.ledger is not None:
            lines.append(self.ledger.summary())
        if self.replay is not None:
            lines.append(self.replay.summary())
        if self.checkpoint_advice_text:
            lines.append(self.checkpoint_advice_text)
        if self.convergence is not None:
            lines.append(self.convergence["summary"])
            if "parity" in self.convergence:
                lines.append(self.convergence["parity"]["summary"])
        if self.node_local_checkpoints:
            lines.append(f"  WARNING: {node_local_warning(self.node_local_checkpoints)}")
        lines += [f"  ACCEPTED ({f['name']}, with --accept): {f['text']}" for f in self.findings if f["accepted"]]
        return lines + [f"  PROBLEM: {p}" for p in self.problems]


def _outage_lines(o: RendezvousOutage, t0: float) -> list[str]:
    stall = f"stalled at most {o.stall_s:.2f} s" if o.stall_s is not None else "did not step again"
    return [
        f"  rendezvous server down at {o.t - t0:.1f} s for {o.down_s:.1f} s:"
        f" {o.agents_unreachable} agent(s) saw it unreachable"
        + (f" (for up to {o.agents_cut_off_s:.1f} s)" if o.agents_cut_off_s is not None else "")
        + f", {o.steps_during} step(s) trained meanwhile",
        f"    training {stall}; worker restarts {o.restarts}, lost {o.lost_steps} step(s)",
    ]


def _scaling_line(sc: Scaling, t0: float) -> str:
    reached = (
        f"training at world {sc.world_after} {sc.reached_s:.2f} s later"
        if sc.reached_s is not None
        else "NEVER trained at that size"
    )
    return f"  scaled {sc.from_nodes} -> {sc.to_nodes} node(s) at {sc.t - t0:.1f} s: {reached}"


# A sharded load's parts, as the report names them.
LOAD_PARTS = {
    "state_s": "state dicts",
    "plan_s": "plan",
    "exchange_s": "other nodes' memory sent",
    "read_s": "read",
    "apply_s": "into the model",
}


def _state_lines(ev: Eviction) -> list[str]:
    """Where the resumed state came from (node memory, other nodes' memory, storage), and
    where its load's seconds went."""
    lines = []
    if ev.state_from is not None:
        mb = {k: v / 1e6 for k, v in ev.state_from.items()}
        lines.append(
            f"    state: {mb['memory']:.1f} MB from the survivors' own memory, {mb['peers']:.1f} MB from"
            f" other nodes' memory, {mb['storage']:.1f} MB from storage"
        )
    if ev.load_split:
        parts = ", ".join(f"{LOAD_PARTS.get(k, k)} {v:.2f}" for k, v in ev.load_split.items())
        lines.append(f"    state load on rank 0: {sum(ev.load_split.values()):.2f} s ({parts})")
    lines += [f"    memory refused: {why}" for why in ev.memory_refused or []]
    return lines


def _on_the_way_back(ev: Eviction) -> list[str]:
    """The cluster's nodes, and the agents' steps back to training."""
    lines = []
    if ev.node_gone_s is not None:
        lines.append(f"    the node left the Ready nodes after {ev.node_gone_s:.1f} s")
    if ev.replacement_node_s is not None:
        rank = f" (rank {ev.replacement_rank}, {ev.replacement_capacity})" if ev.replacement_rank is not None else ""
        lines.append(f"    a GPU node was Ready {ev.replacement_node_s:.1f} s after the eviction{rank}")
    if ev.detected_s is not None:
        lines.append(f"    an agent saw it leave the round after {ev.detected_s:.2f} s")
    if ev.rendezvous_s is not None:
        lines.append(f"    agents re-rendezvoused after {ev.rendezvous_s:.2f} s")
    return lines


def _join_line(j: Join, t0: float) -> str:
    js = f"joined in {j.join_s:.2f} s" if j.join_s is not None else "did NOT join"
    came = f" (rank {j.rank}, {j.capacity})" if j.rank is not None else ""
    return (
        f"  node {j.node} added{came} at {j.t - t0:.1f} s: {world_change(j.world_before, j.world_after)},"
        f" {js}"
        + (f", lost {j.lost_steps} step(s)" if j.lost_steps is not None else "")
        + (f", survivors stalled at most {j.stall_s:.2f} s" if j.stall_s is not None else "")
        + (f" (in a quorum {j.from_workers_s:.2f} s after its workers started)" if j.from_workers_s else "")
    )


def _reduced_line(r: ReducedSize) -> str:
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
    return (
        f"  at reduced size after losing {r.node}: {r.seconds:.1f} s {came}; {r.steps} step(s) at world "
        f"{r.world}, {rate}"
    )


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

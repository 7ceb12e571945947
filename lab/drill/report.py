"""Turn a drill's events (ours and the agents') into measured figures."""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from lab.drill import per_step_report
from lab.drill.agent_events import AgentEvent


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
    notice_to_exit_s: float | None = None  # notice only: SIGTERM -> worker exit
    # A cluster only: eviction -> the next node of the GPU pool Ready (a replacement, or one
    # that was there already) and -> the evicted node gone from the Ready nodes.
    replacement_node_s: float | None = None
    node_gone_s: float | None = None
    # Per-step mode only: replica groups in the quorum before and after, and the in-flight
    # steps the survivors discarded (recovery_s is then the survivors' stall: eviction -> their
    # first committed step in a quorum without the evicted group).
    groups_before: int | None = None
    groups_after: int | None = None
    discarded_steps: int | None = None


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


@dataclass
class DrillReport:
    target_steps: int | None
    checkpoint_every: int
    final_step: int | None
    finished: bool
    emits_events: bool
    duration_s: float
    restart_rounds: int
    max_restart_count: int
    evictions: list[Eviction] = field(default_factory=list)
    outages: list[RendezvousOutage] = field(default_factory=list)
    joins: list[Join] = field(default_factory=list)
    node_exit_codes: dict[str, int | None] = field(default_factory=dict)
    loss_curve: list[tuple[float, int, float, int]] = field(default_factory=list)  # (s, step, loss, world)
    world_timeline: list[tuple[float, int]] = field(default_factory=list)  # (s, world size) from agents or steps
    problems: list[str] = field(default_factory=list)
    # Every worker that died of an exception (torchelastic's error files): node, attempt, message, hint.
    worker_errors: list[dict[str, Any]] = field(default_factory=list)
    t0: float = 0.0
    fault_tolerance: str = "elastic"

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
            lines.append(
                f"  final step: {self.final_step} of {self.target_steps}"
                f"  ({'finished' if self.finished else 'NOT finished'})"
            )
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
        for ev in self.evictions:
            lines.append(
                f"  eviction of {ev.node} ({ev.kind}) at {ev.t - self.t0:.1f} s:"
                f" world {ev.world_before} -> {ev.world_after}"
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
                lines.append("    recovery: NONE, no step at a new world size after it")
            if ev.node_gone_s is not None:
                lines.append(f"    the node left the Ready nodes after {ev.node_gone_s:.1f} s")
            if ev.replacement_node_s is not None:
                lines.append(f"    a GPU node was Ready {ev.replacement_node_s:.1f} s after the eviction")
            if ev.detected_s is not None:
                lines.append(f"    an agent saw it leave the round after {ev.detected_s:.2f} s")
            if ev.rendezvous_s is not None:
                lines.append(f"    agents re-rendezvoused after {ev.rendezvous_s:.2f} s")
            if ev.restarted_s is not None and not self.emits_events:
                lines.append(f"    recovery: {ev.restarted_s:.2f} s to workers running again at the new world size")
            if ev.lost_steps is not None and self.fault_tolerance != "per-step":
                lines.append(
                    f"    lost work: {ev.lost_steps} step(s) (last step {ev.last_step_before},"
                    f" resumed from {ev.resumed_from}; checkpoint interval {self.checkpoint_every})"
                )
            if ev.emergency_save_s is not None:
                saved = f"{ev.emergency_save_s:.3f} s"
                if ev.emergency_save_already:
                    saved = "nothing to write, the step was saved already"
                left = f"{ev.notice_to_exit_s:.2f} s" if ev.notice_to_exit_s is not None else "not seen"
                lines.append(f"    emergency save: {saved}; notice to worker exit: {left}")
        for j in self.joins:
            js = f"{j.join_s:.2f} s" if j.join_s is not None else "did not join"
            lines.append(
                f"  node {j.node} added at {j.t - self.t0:.1f} s: world {j.world_before} -> {j.world_after},"
                f" joined in {js}, lost {j.lost_steps} step(s)"
                + (f", survivors stalled at most {j.stall_s:.2f} s" if j.stall_s is not None else "")
                + (f" (in a quorum {j.from_workers_s:.2f} s after its workers started)" if j.from_workers_s else "")
            )
        if self.loss_curve:
            first, last = self.loss_curve[0], self.loss_curve[-1]
            lines.append(f"  loss: {first[2]:.4f} at step {first[1]} -> {last[2]:.4f} at step {last[1]}")
        for p in self.problems:
            lines.append(f"  PROBLEM: {p}")
        return "\n".join(lines)


def _resume_rounds(events: list[dict]) -> list[dict]:
    """One entry per worker-group start (rendezvous round): its time and resumed step."""
    rounds: dict[object, dict] = {}
    for e in events:
        if e["event"] in ("resume", "fresh"):
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


def _restart_rounds(
    events: list[dict], agent_events: list[AgentEvent], *, emits: bool, per_step: bool, rounds: list[dict]
) -> int:
    """Worker-group restarts: rounds after the first; in per-step mode no group restarts for a
    membership change, so the worker starts torchrun made after a failure."""
    if per_step:
        return sum(1 for e in events if e["event"] == "start" and e.get("restarts", 0) > 0)
    return max(0, len(rounds) - 1) if emits else max(0, _agent_rounds(agent_events) - 1)


def analyze(
    events: list[dict],
    agent_events: list[AgentEvent],
    *,
    target_steps: int | None,
    checkpoint_every: int,
    node_exit_codes: dict[str, int | None],
) -> DrillReport:
    events = sorted(events, key=lambda e: e["t"])
    agent_events = sorted(agent_events, key=lambda a: a.t)
    t0 = events[0]["t"] if events else 0.0
    steps = [e for e in events if e["event"] == "step"]
    per_step = per_step_report.is_per_step(events)
    if per_step:
        steps = per_step_report.committed(steps)
    emits = bool(steps) or any(e["event"] in ("start", "resume", "fresh") for e in events)
    rounds = _resume_rounds(events)
    done_steps = [
        e["step"]
        for e in events
        if e["event"] in ("step", "collective_failed", "checkpoint_saved")
        or (e["event"] == "exit" and e.get("reason") == "done")
    ]
    final_step = max(done_steps) if done_steps else None
    evicted = {e["node"] for e in events if e["event"] == "evict"}
    survivors_ok = all(code == 0 for node, code in node_exit_codes.items() if node not in evicted)
    if emits:
        finished = (
            (final_step == target_steps if target_steps else True)
            and survivors_ok
            and any(e["event"] == "exit" and e.get("reason") == "done" for e in events)
        )
    else:
        finished = survivors_ok and any(a.kind == "group_succeeded" for a in agent_events)

    def world_at(t: float) -> int | None:
        before = [s["world_size"] for s in steps if s["t"] <= t]
        if before:
            return before[-1]
        rdzv = [a.group_world_size for a in agent_events if a.kind == "rendezvous" and a.t <= t]
        return rdzv[-1] if rdzv else None

    def first_round_after(t: float) -> dict | None:
        return next((r for r in rounds if r["t"] > t), None)

    def work_before(t_end: float, t_start: float) -> int | None:
        vals = [
            e["step"]
            for e in events
            if t_start <= e["t"] <= t_end and e["event"] in ("step", "collective_failed", "checkpoint_saved")
        ]
        return max(vals) if vals else None

    def first_step_after(t: float) -> dict | None:
        return next((s for s in steps if s["t"] > t), None)

    def lost_for_round(r: dict) -> tuple[int | None, int | None]:
        """(newest step done before round r started, steps of it that r re-does)"""
        prev = max((p["t"] for p in rounds if p["t"] < r["t"]), default=t0)
        last = work_before(r["t"], max(prev, t0))
        if last is None:
            return None, None
        return last, max(0, last - r["step"])

    report = DrillReport(
        target_steps=target_steps,
        checkpoint_every=checkpoint_every,
        final_step=final_step,
        finished=finished,
        emits_events=emits,
        duration_s=(events[-1]["t"] - t0) if events else 0.0,
        restart_rounds=_restart_rounds(events, agent_events, emits=emits, per_step=per_step, rounds=rounds),
        max_restart_count=max(
            [a.restart_count or 0 for a in agent_events if a.kind == "rendezvous"]
            + [e.get("restart_count", 0) for e in events if e["event"] == "start"]
            or [0]
        ),
        node_exit_codes=node_exit_codes,
        t0=t0,
        fault_tolerance="per-step" if per_step else "elastic",
    )

    for e in (e for e in events if e["event"] == "evict" and per_step):
        ev = Eviction(node=e["node"], kind=e["kind"], t=e["t"])
        per_step_report.eviction_figures(ev, events)
        report.evictions.append(ev)
    for e in (e for e in events if e["event"] == "evict" and not per_step):
        ev = Eviction(node=e["node"], kind=e["kind"], t=e["t"], world_before=world_at(e["t"]))
        # An agent saw the node leave its round: before the survivors' next round started (a
        # later "member lost" is another change, e.g. agents leaving a round for a join).
        next_round = first_round_after(e["t"])
        lost = next(
            (
                x
                for x in events
                if x["event"] == "rdzv_member_lost"
                and x["t"] > e["t"]
                and (next_round is None or x["t"] <= next_round["t"])
            ),
            None,
        )
        ev.detected_s = lost["t"] - e["t"] if lost else None
        rdzv = next((a for a in agent_events if a.kind == "rendezvous" and a.t > e["t"] and a.node != e["node"]), None)
        if rdzv:
            ev.rendezvous_s = rdzv.t - e["t"]
            ev.world_after = rdzv.group_world_size
        # The workers a survivor started for the first round after the eviction (not a late
        # start of the round before it).
        started = next(
            (a for a in agent_events if rdzv and a.kind == "started" and a.node == rdzv.node and a.t >= rdzv.t),
            None,
        )
        if started:
            ev.restarted_s = started.t - e["t"]
            ev.world_after = started.group_world_size or ev.world_after
        r = first_round_after(e["t"])
        if r:
            ev.last_step_before, ev.lost_steps = lost_for_round(r)
            ev.resumed_from = r["step"]
            s = first_step_after(r["t"])
            if s:
                ev.recovery_s = s["t"] - e["t"]
                ev.world_after = s["world_size"]
        if e["kind"] == "notice":
            save = next(
                (
                    x
                    for x in events
                    if x["event"] == "checkpoint_saved"
                    and x["t"] >= e["t"]
                    and x.get("reason") == "notice"
                    and x.get("node") == e["node"]
                ),
                None,
            )
            leave = next(
                (
                    x
                    for x in events
                    if x["event"] == "exit"
                    and x["t"] >= e["t"]
                    and x.get("reason") == "notice"
                    and x.get("node") == e["node"]
                ),
                None,
            )
            ev.emergency_save_s = save["seconds"] if save else None
            ev.emergency_save_already = bool(save and save.get("already"))
            ev.notice_to_exit_s = leave["notice_to_exit_s"] if leave else None
        ready = next((x for x in events if x["event"] == "k8s_node_ready" and x["t"] > e["t"]), None)
        ev.replacement_node_s = ready["t"] - e["t"] if ready else None
        gone = next(
            (
                x
                for x in events
                if x["event"] == "k8s_node_gone" and x["t"] >= e["t"] and x.get("k8s_node") == e.get("k8s_node")
            ),
            None,
        )
        ev.node_gone_s = gone["t"] - e["t"] if gone else None
        report.evictions.append(ev)

    downs = [e for e in events if e["event"] == "rdzv_down"]
    for down in downs:
        up = next((e for e in events if e["event"] == "rdzv_up" and e["t"] > down["t"]), None)
        o = RendezvousOutage(t=down["t"])
        o.agents_unreachable = len(
            {e.get("node") for e in events if e["event"] == "rdzv_unreachable" and e["t"] >= down["t"]}
        )
        cut_off = [
            e["down_s"] for e in events if e["event"] == "rdzv_reachable" and e["t"] >= down["t"] and "down_s" in e
        ]
        o.agents_cut_off_s = max(cut_off, default=None)
        if up is not None:
            o.down_s = up["t"] - down["t"]
            o.steps_during = len({s["step"] for s in steps if down["t"] <= s["t"] <= up["t"]})
            # A round that started while the server was down or right after it came back
            # (before the next eviction) is a restart the outage caused.
            later_faults = [e["t"] for e in events if e["event"] in ("evict", "node_added") and e["t"] > down["t"]]
            horizon = min(later_faults, default=float("inf"))
            caused = [r for r in rounds if down["t"] < r["t"] < horizon]
            o.restarts = len(caused)
            o.lost_steps = lost_for_round(caused[0])[1] if caused else 0
            after = first_step_after(caused[-1]["t"] if caused else up["t"])
            if after is not None:
                times = [down["t"], *(s["t"] for s in steps if down["t"] < s["t"] < after["t"]), after["t"]]
                o.stall_s = max(b - a for a, b in itertools.pairwise(times))
        report.outages.append(o)

    first_step_t = steps[0]["t"] if steps else min((a.t for a in agent_events), default=float("inf"))
    for e in (e for e in events if e["event"] == "node_added" and e["t"] > first_step_t and per_step):
        j = Join(node=e["node"], t=e["t"])
        per_step_report.join_figures(j, events)
        report.joins.append(j)
    for e in (e for e in events if e["event"] == "node_added" and e["t"] > first_step_t and not per_step):
        j = Join(node=e["node"], t=e["t"], world_before=world_at(e["t"]))
        r = first_round_after(e["t"])
        if r:
            _, j.lost_steps = lost_for_round(r)
            s = first_step_after(r["t"])
            if s and j.world_before is not None and s["world_size"] > j.world_before:
                j.join_s, j.world_after = s["t"] - e["t"], s["world_size"]
                times = [e["t"], *(x["t"] for x in steps if e["t"] < x["t"] < s["t"]), s["t"]]
                j.stall_s = max(b - a for a, b in itertools.pairwise(times))
        if j.join_s is None:
            rdzv = next(
                (
                    a
                    for a in agent_events
                    if a.kind == "rendezvous"
                    and a.t > e["t"]
                    and a.group_world_size
                    and j.world_before is not None
                    and a.group_world_size > j.world_before
                ),
                None,
            )
            if rdzv and not emits:
                j.join_s, j.world_after = rdzv.t - e["t"], rdzv.group_world_size
        report.joins.append(j)

    report.loss_curve = [(s["t"] - t0, s["step"], s["loss"], s["world_size"]) for s in steps if "loss" in s]
    if steps:
        report.world_timeline = [(s["t"] - t0, s["world_size"]) for s in steps]
    else:
        report.world_timeline = [
            (a.t - t0, a.group_world_size)
            for a in agent_events
            if a.kind == "rendezvous" and a.group_world_size is not None
        ]

    if not finished:
        stuck = {n: c for n, c in node_exit_codes.items() if n not in evicted and c != 0}
        if emits and target_steps and final_step == target_steps and stuck:
            codes = ", ".join(f"{n} ({c})" for n, c in sorted(stuck.items()))
            report.problems.append(
                f"the job trained every step ({final_step} of {target_steps}) but these nodes did not exit"
                f" cleanly (exit code): {codes}"
            )
        elif emits and target_steps:
            report.problems.append(f"the job did not finish: final step {final_step}, expected {target_steps}")
        else:
            report.problems.append("the job did not finish: no node's worker group completed successfully")
    for o in report.outages:
        if o.down_s is None:
            report.problems.append("the rendezvous server was stopped and not started again")
        elif emits and o.stall_s is None and not finished:
            report.problems.append("training did not go on after the rendezvous server came back")
    gave_up = [e for e in events if e["event"] == "rdzv_gave_up"]
    if gave_up:
        nodes = sorted({str(e.get("node")) for e in gave_up})
        report.problems.append(
            f"the rendezvous server stayed unreachable for {max(e.get('down_s', 0) for e in gave_up):.0f} s: "
            f"the agents of {', '.join(nodes)} gave up on it (exit 170, retried by the operator)"
        )
    failed = [e for e in events if e["event"] == "k8s_job" and e.get("condition") == "Failed"]
    if failed:
        report.problems.append(
            f"the PyTorchJob failed: {failed[-1].get('reason', '')} {failed[-1].get('message', '')}".rstrip()
        )
    for ev in report.evictions:
        if ev.lost_steps is not None and ev.lost_steps > checkpoint_every:
            report.problems.append(
                f"eviction of {ev.node} lost {ev.lost_steps} steps: expected at most one "
                f"checkpoint interval ({checkpoint_every})"
            )
        if emits and ev.recovery_s is None and finished:
            report.problems.append(
                f"the survivors committed no step without {ev.node} after its eviction"
                if per_step
                else f"no step at a new world size was seen after the eviction of {ev.node}"
            )
    return report

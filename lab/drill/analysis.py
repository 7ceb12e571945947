"""Turn a drill's events (ours and the agents') into measured figures, and judge them."""

from __future__ import annotations

from lab.drill import batch_cost, per_step_report
from lab.drill.agent_events import AgentEvent
from lab.drill.checkpoint_cost import advice as interval_advice
from lab.drill.ledger import sample_ledger
from lab.drill.reclaim import reclaims
from lab.drill.replay_goodput import replay_goodput
from lab.drill.report import DrillReport, Eviction, Join, ReducedSize, RendezvousOutage, Scaling
from lab.drill.timeline import WORK_EVENTS, Record, Timeline, is_done
from lab.drill.verdict import Observed, judged
from lab.vocab.checkpoint_interval import FIRST_SAVE_AFTER
from lab.vocab.events import CAUSE_SCALE_IN, EXIT_DONE, EXIT_NOTICE, SAVE_NOTICE, Event


def analyze(
    events: list[Record],
    agent_events: list[AgentEvent],
    *,
    target_steps: int | None,
    checkpoint_every: int,
    node_exit_codes: dict[str, int | None],
) -> DrillReport:
    """The drill's report from its events alone: the figures and the verdict on them (a drill
    that saw more judges `measure`'s record with it, lab.drill.verdict)."""
    seen = measure(
        events,
        agent_events,
        target_steps=target_steps,
        checkpoint_every=checkpoint_every,
        node_exit_codes=node_exit_codes,
    )
    return judged(seen)


def measure(
    events: list[Record],
    agent_events: list[AgentEvent],
    *,
    target_steps: int | None,
    checkpoint_every: int,
    node_exit_codes: dict[str, int | None],
) -> Observed:
    """The drill's figures from its events (ours) and the agents' (torch's), read in order:
    what the run was, each eviction, rendezvous outage and join, the curves."""
    run = Timeline(events, agent_events)
    derived = checkpoint_every == 0
    if derived:
        # The longest interval the job chose, and the first save's distance from a start.
        chosen = [int(e["steps"]) for e in run.of(Event.CHECKPOINT_INTERVAL) if "steps" in e]
        checkpoint_every = max([FIRST_SAVE_AFTER, *chosen])
    report = _overview(run, target_steps, checkpoint_every, node_exit_codes)
    report.checkpoint_derived = derived
    report.checkpoints_sharded = any(e.get("sharded") for e in run.of(Event.CHECKPOINT_SAVED))
    for e in run.of(Event.EVICT):
        report.evictions.append(_per_step_eviction(run, e) if run.per_step else _elastic_eviction(run, e))
    report.outages = [_outage(run, down) for down in run.of(Event.RDZV_DOWN)]
    for e in run.of(Event.NODE_ADDED):
        if e["t"] > run.first_step_t:
            report.joins.append(_per_step_join(run, e) if run.per_step else _elastic_join(run, e))
    report.scaling = [_scaling(run, e) for e in run.of(Event.SCALE)]
    report.reclaims = reclaims(run)
    if run.emits:
        report.reduced = [
            _reduced(run, e, report.joins) for e in run.of(Event.EVICT) if e.get("cause") != CAUSE_SCALE_IN
        ]
    report.loss_curve, report.world_timeline = _curves(run)
    report.capacity_timeline = [(e["t"] - run.t0, int(e["alive"])) for e in run.of(Event.CAPACITY)]
    report.ledger = sample_ledger(run)
    report.replay = replay_goodput(run.events)
    nodes = {e.get("node") for e in run.of(Event.NODE_ADDED) if e["t"] <= run.first_step_t}
    worlds = batch_cost.by_world(run.events)
    report.batch_by_world, report.batch_text = [vars(w) for w in worlds], batch_cost.summary(worlds)
    found = interval_advice(run.events, len(nodes - {None}), checkpoint_every, derived=derived)
    if found is not None:
        report.checkpoint_advice, report.checkpoint_advice_text = found.to_dict(), found.summary()
    return Observed(report, run)


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


def _nodes_added_later(run: Timeline) -> int:
    """Nodes added once the job had started (its first worker's start, or its agents' where the
    script says nothing): not the first ones."""
    starts = [e["t"] for e in run.of(Event.START)] + [a.t for a in run.agent_events if a.kind == "started"]
    if not starts:
        return 0
    return sum(1 for e in run.of(Event.NODE_ADDED) if e["t"] > min(starts))


# ------------------------------------------------------------------ what the run was
def _overview(
    run: Timeline, target_steps: int | None, checkpoint_every: int, node_exit_codes: dict[str, int | None]
) -> DrillReport:
    done = [e["step"] for e in run.events if e["event"] in WORK_EVENTS or is_done(e)]
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
            and (any(is_done(e) for e in run.events) or (target_steps is None and succeeded))
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
        preemptions=sum(1 for e in run.of(Event.EVICT) if not e.get("cause")),
        nodes_added=_nodes_added_later(run),
        node_exit_codes=node_exit_codes,
        t0=run.t0,
        fault_tolerance="per-step" if run.per_step else "elastic",
    )


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
    if e["kind"] == "notice":
        _leave_figures(run.first(Event.EXIT, e["t"], reason=EXIT_NOTICE, node=e["node"]), ev)
        ev.finished_within = _finished_within(run, e, ev)
    return ev


def _elastic_eviction(run: Timeline, e: Record) -> Eviction:
    """The survivors' path back to training: an agent sees the node leave, the agents meet
    again, the workers restart and resume, the first step at the new world size."""
    ev = _requested(Eviction(node=e["node"], kind=e["kind"], t=e["t"], world_before=run.world_at(e["t"])), e)
    next_round = run.first_round_after(e["t"], without=e["node"])
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
        _state_sources(run, e["t"], s["t"] if s else next_round["t"], ev)
        if s:
            ev.recovery_s = s["t"] - e["t"]
            ev.world_after = s["world_size"]
    if e["kind"] == "notice":
        _notice_figures(run, e, ev)
    _cluster_figures(run, e, ev)
    return ev


def _state_sources(run: Timeline, since: float, until: float, ev: Eviction) -> None:
    """Where the resume's state came from, where its load says (node memory kept), and its
    seconds by part (sharded): the load between the eviction and the first step after it (a
    worker records its load before it resumes, so before the round's first resume event)."""
    loaded = run.first(Event.CHECKPOINT_LOADED, since)
    if loaded is None or loaded["t"] > until:
        return
    ev.load_split = dict(loaded["split"]) if loaded.get("split") else None
    if "from_storage" not in loaded:
        return
    ev.state_from = {k: int(loaded.get(f"from_{k}") or 0) for k in ("memory", "peers", "storage")}
    ev.memory_refused = list(loaded.get("memory_refused") or []) or None


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
    by every rank and reported by rank 0, wherever it runs. Both come before the survivors'
    next round: a notice save after it is a later eviction's (this one's node went first)."""
    next_round = run.first_round_after(e["t"], without=e["node"])
    until = next_round["t"] if next_round else float("inf")

    def before_the_next_round(found: Record | None) -> Record | None:
        return found if found is not None and found["t"] <= until else None

    save = before_the_next_round(
        run.first(Event.CHECKPOINT_SAVED, e["t"], reason=SAVE_NOTICE, node=e["node"])
        or run.first(Event.CHECKPOINT_SAVED, e["t"], reason=SAVE_NOTICE, sharded=True)
    )
    leave = before_the_next_round(run.first(Event.EXIT, e["t"], reason=EXIT_NOTICE, node=e["node"]))
    ev.emergency_save_s = save["seconds"] if save else None
    ev.emergency_save_already = bool(save and save.get("already"))
    _leave_figures(leave, ev)
    ev.finished_within = _finished_within(run, e, ev)
    ev.emergency_save_missed = (
        save is None and not ev.finished_within and (leave is None or leave.get("saved") is False)
    )


def _finished_within(run: Timeline, e: Record, ev: Eviction) -> bool:
    """The noticed node's workers trained through the notice to the job's end (it said when the
    node would go, and the job's last step came first): nothing to recover from."""
    return ev.notice_to_exit_s is None and run.first(Event.EXIT, e["t"], reason=EXIT_DONE, node=e["node"]) is not None


def _leave_figures(leave: Record | None, ev: Eviction) -> None:
    """How soon the noticed node's worker left, and how long it trained on through the notice first."""
    ev.notice_to_exit_s = leave["notice_to_exit_s"] if leave else None
    ev.trained_on_s = leave.get("trained_on_s") if leave else None


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
    # Without the larger world's steps: every worker's record of its first one may share its time.
    smaller = [s for s in during if larger_from is None or s["t"] < larger_from]
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
        # A replayed wipeout: no node, so no world, until the next step says otherwise.
        gone = [(e["t"] - run.t0, 0) for e in run.of(Event.CAPACITY) if e.get("alive") == 0]
        return loss, sorted([(s["t"] - run.t0, s["world_size"]) for s in run.steps] + gone)
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

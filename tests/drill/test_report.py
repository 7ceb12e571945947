"""The drill's analysis on recorded event streams (ours and torch's agent events)."""

from __future__ import annotations

from lab.drill.agent_events import AgentEvent
from lab.drill.analysis import analyze


def _agents(*rows: tuple[float, str, str, int | None, int]) -> list[AgentEvent]:
    return [AgentEvent(t, node, kind, restarts, world) for t, node, kind, world, restarts in rows]


def test_a_script_without_events_is_timed_from_the_agents_events():
    recorded = [{"t": 100.0, "event": "node_added", "node": n} for n in ("a", "b", "c")] + [
        {"t": 110.0, "event": "evict", "node": "c", "kind": "hard"}
    ]
    agents = _agents(
        *((101.0, n, "rendezvous", 3, 0) for n in "abc"),
        *((102.0, n, "started", 3, 0) for n in "abc"),
        (111.8, "c", "started", 3, 0),  # a late start of the evicted node's old round: not a recovery
        (112.5, "a", "rendezvous", 2, 1),
        (112.6, "b", "rendezvous", 2, 1),
        (112.9, "a", "started", 2, 1),
        (113.0, "b", "started", 2, 1),
        (130.0, "a", "group_succeeded", None, 1),
        (130.0, "b", "group_succeeded", None, 1),
    )
    report = analyze(recorded, agents, target_steps=None, checkpoint_every=10, node_exit_codes={"a": 0, "b": 0})
    assert not report.emits_events and report.finished and report.passed, report.summary()
    (ev,) = report.evictions
    assert ev.world_after == 2
    assert round(ev.rendezvous_s, 2) == 2.5 and round(ev.restarted_s, 2) == 2.9
    assert report.restart_rounds == 1 and report.max_restart_count == 1
    # The node lost is a preemption, counted apart from the failures torch's agents counted.
    assert (report.preemptions, report.nodes_added) == (1, 0)
    assert (
        "restart rounds: 1 (1 node(s) preempted, 0 added: membership changes); failures counted against "
        "--max-restarts: 1" in report.summary()
    )
    assert "recovery: 2.90 s to workers running again at the new world size" in report.summary()
    # The world size drawn to the job's end (the agents' last word), not to the last change.
    assert [(round(t, 1), size) for t, size in report.world_timeline[-2:]] == [(12.6, 2), (30.0, 2)]


def test_a_job_whose_survivors_never_restart_is_not_finished():
    recorded = [{"t": 110.0, "event": "evict", "node": "c", "kind": "notice", "notice_s": 10}]
    agents = _agents(
        *((101.0, n, "rendezvous", 3, 0) for n in "abc"),
        *((102.0, n, "started", 3, 0) for n in "abc"),
        (110.5, "a", "rendezvous", None, 1),  # the survivors met, and their workers never started
    )
    report = analyze(recorded, agents, target_steps=None, checkpoint_every=10, node_exit_codes={"a": 1, "b": 1})
    (ev,) = report.evictions
    assert round(ev.rendezvous_s, 2) == 0.5 and ev.restarted_s is None
    assert not report.passed and "no node's worker group completed successfully" in report.problems[0]
    summary = report.summary()
    assert "recovery: NONE, no workers started at a new world size after it" in summary
    # The script says nothing of its saves: the drill cannot tell whether one was made.
    assert "emergency save: not visible to the drill" in summary and "not made" not in summary


def test_a_job_whose_workers_finished_but_a_node_hung_names_that_node():
    """One agent's workers finished; the other node was still up when the drill's time ran out
    (an agent held in its exit barrier, a worker that never exits): the report says which."""
    recorded = [{"t": 100.0, "event": "node_added", "node": n} for n in ("a", "b")]
    agents = _agents(
        *((101.0, n, "rendezvous", 2, 0) for n in "ab"),
        *((102.0, n, "started", 2, 0) for n in "ab"),
        (120.0, "a", "group_succeeded", None, 0),
    )
    report = analyze(recorded, agents, target_steps=None, checkpoint_every=10, node_exit_codes={"a": 0, "b": -9})
    assert not report.finished and not report.passed
    assert (
        "workers finished the job (on a), but these nodes did not exit cleanly (exit code): b (-9)"
        in (report.problems[0])
    )


def test_a_notice_that_finds_its_step_saved_says_so():
    base = {"world_size": 2, "loss": 1.0}
    recorded = [
        {"t": 1.0, "event": "fresh", "step": 0, "round": 1, "node": "a"},
        {"t": 1.0, "event": "fresh", "step": 0, "round": 1, "node": "b"},
        *({"t": 1.0 + i / 10, "event": "step", "step": i, **base} for i in range(1, 11)),
        {"t": 2.0, "event": "checkpoint_saved", "step": 10, "reason": "periodic", "seconds": 0.01, "node": "a"},
        {"t": 2.05, "event": "evict", "node": "b", "kind": "notice"},
        {
            "t": 2.06,
            "event": "checkpoint_saved",
            "step": 10,
            "reason": "notice",
            "seconds": 0.0,
            "already": True,
            "node": "b",
        },
        {"t": 2.07, "event": "exit", "reason": "notice", "node": "b", "step": 10, "notice_to_exit_s": 0.02},
        {"t": 3.0, "event": "resume", "step": 10, "round": 2, "node": "a"},
        {"t": 3.5, "event": "step", "step": 11, "world_size": 1, "loss": 0.9},
        {"t": 4.0, "event": "exit", "reason": "done", "node": "a", "step": 11},
    ]
    report = analyze(recorded, [], target_steps=11, checkpoint_every=10, node_exit_codes={"a": 0, "b": 143})
    (ev,) = report.evictions
    assert ev.emergency_save_already and ev.lost_steps == 0 and round(ev.recovery_s, 2) == 1.45
    assert "emergency save: nothing to write, the step was saved already; notice to worker exit: 0.02 s" in (
        report.summary()
    )


def test_a_notice_the_job_trained_through_to_its_last_step_needs_no_recovery():
    """The notice said when the node would go, and the job's last step came first: the node's
    workers finished the job, and no step at a smaller world size is owed."""
    base = {"world_size": 2, "loss": 1.0}
    recorded = [
        {"t": 1.0, "event": "fresh", "step": 0, "round": 1, "node": "a"},
        {"t": 1.0, "event": "fresh", "step": 0, "round": 1, "node": "b"},
        *({"t": 1.0 + i / 10, "event": "step", "step": i, **base} for i in range(1, 11)),
        {"t": 1.55, "event": "evict", "node": "b", "kind": "notice", "notice_s": 6.0},
        {"t": 2.1, "event": "checkpoint_saved", "step": 10, "reason": "final", "seconds": 0.01, "node": "a"},
        *({"t": 2.1, "event": "exit", "reason": "done", "node": n, "step": 10} for n in "ab"),
    ]
    report = analyze(recorded, [], target_steps=10, checkpoint_every=10, node_exit_codes={"a": 0, "b": 0})
    (ev,) = report.evictions
    assert ev.finished_within and ev.recovery_s is None and not ev.emergency_save_missed
    assert report.passed, report.summary()
    assert "recovery: none needed, the job trained through the notice to its last step" in report.summary()


def test_a_job_that_trained_every_step_but_hung_on_exit_says_which_nodes():
    recorded = [
        {"t": 1.0, "event": "fresh", "step": 0, "round": 1, "node": "a"},
        {"t": 2.0, "event": "step", "step": 1, "world_size": 2, "loss": 1.0},
        {"t": 2.5, "event": "exit", "reason": "done", "node": "a", "step": 1},
        {"t": 2.5, "event": "exit", "reason": "done", "node": "b", "step": 1},
    ]
    report = analyze(recorded, [], target_steps=1, checkpoint_every=1, node_exit_codes={"a": 0, "b": -9})
    assert not report.finished
    assert report.problems == [
        "the job trained every step (1 of 1) but these nodes did not exit cleanly (exit code): b (-9)"
    ]


def test_a_node_added_back_after_the_last_step_is_named_as_too_late():
    """The job ended before the node added back could join (its agent found the rendezvous
    closed and exited 1): the report says so, and what to change, not that it hung."""
    recorded = [
        {"t": 1.0, "event": "fresh", "step": 0, "round": 1, "node": n} for n in ("node-0", "node-1", "node-2")
    ] + [
        {"t": 2.0, "event": "step", "step": 1, "world_size": 3, "loss": 1.0},
        {"t": 3.0, "event": "evict", "node": "node-2", "kind": "hard"},
        {"t": 4.0, "event": "resume", "step": 1, "round": 2, "node": "node-0"},
        {"t": 4.5, "event": "step", "step": 2, "world_size": 2, "loss": 0.9},
        {"t": 5.0, "event": "node_added", "node": "node-3"},
        {"t": 5.5, "event": "exit", "reason": "done", "node": "node-0", "step": 2},
    ]
    codes = {"node-0": 0, "node-1": 0, "node-2": -9, "node-3": 1}
    report = analyze(recorded, [], target_steps=2, checkpoint_every=1, node_exit_codes=codes)
    assert not report.passed
    assert report.problems[0].startswith("the job trained every step (2 of 2) before node-3 could join")
    assert "more steps or a longer --step-time" in report.problems[0]


def _cluster_stream(recover: bool) -> list[dict]:
    """Events as the cluster drill records them: the job's lines from pod logs (node = pod),
    and what Kubernetes said (pods, nodes, the PyTorchJob's conditions), around one eviction."""
    pods = ("demo-worker-0", "demo-worker-1", "demo-worker-2")
    out: list[dict] = [{"t": 100.0 + i, "event": "k8s_node_ready", "k8s_node": f"gpu-{i}"} for i in range(3)]
    out += [{"t": 110.0, "event": "fresh", "step": 0, "round": 1, "node": p} for p in pods]
    out += [{"t": 110.0 + i / 10, "event": "step", "step": i, "world_size": 3, "loss": 1.0} for i in range(1, 61)]
    out.append({"t": 115.5, "event": "checkpoint_saved", "step": 50, "reason": "interval", "seconds": 0.1})
    out.append({"t": 116.5, "event": "evict", "node": "demo-worker-2", "kind": "aks", "k8s_node": "gpu-2"})
    out.append({"t": 116.6, "event": "k8s_node_gone", "k8s_node": "gpu-2"})
    if recover:
        out += [{"t": 119.0, "event": "resume", "step": 60, "round": 2, "node": p} for p in pods[:2]]
        out += [
            {"t": 119.5 + i / 10, "event": "step", "step": 60 + i, "world_size": 2, "loss": 0.5} for i in range(1, 41)
        ]
        out.append({"t": 200.0, "event": "k8s_node_ready", "k8s_node": "gpu-3"})
        out.append({"t": 230.0, "event": "node_added", "node": "demo-worker-2", "k8s_node": "gpu-3"})
        out += [{"t": 233.0, "event": "resume", "step": 100, "round": 3, "node": p} for p in pods]
        out += [
            {"t": 234.0 + i / 10, "event": "step", "step": 100 + i, "world_size": 3, "loss": 0.2} for i in range(1, 101)
        ]
        out += [{"t": 245.0, "event": "exit", "reason": "done", "step": 200, "node": p} for p in pods]
        out.append({"t": 246.0, "event": "k8s_job", "condition": "Succeeded", "reason": "PyTorchJobSucceeded"})
    return out


def test_a_cluster_eviction_is_measured_from_pod_logs_and_kubernetes():
    report = analyze(
        _cluster_stream(recover=True),
        [],
        target_steps=200,
        checkpoint_every=50,
        node_exit_codes={f"demo-worker-{i}": 0 for i in range(3)},
    )
    assert report.passed, report.summary()
    (ev,) = report.evictions
    assert (ev.world_before, ev.world_after, ev.lost_steps) == (3, 2, 0)
    assert round(ev.recovery_s, 2) == 3.1 and round(ev.node_gone_s, 2) == 0.1
    assert round(ev.replacement_node_s, 1) == 83.5
    (join,) = report.joins
    assert join.world_after == 3 and round(join.join_s, 1) == 4.1
    assert "a GPU node was Ready 83.5 s after the eviction" in report.summary()


def test_a_cluster_job_that_never_recovers_fails_with_the_reason():
    report = analyze(
        _cluster_stream(recover=False),
        [],
        target_steps=200,
        checkpoint_every=50,
        node_exit_codes={"demo-worker-0": None, "demo-worker-1": None},
    )
    assert not report.passed
    (ev,) = report.evictions
    assert ev.recovery_s is None and ev.world_before == 3
    assert "the job did not finish: final step 60, expected 200" in report.problems
    assert "recovery: NONE, no step at a new world size after it" in report.summary()
    assert "eviction of demo-worker-2 (aks) at 16.5 s: world 3 -> no new size seen" in report.summary()


def test_a_job_that_loses_its_rendezvous_server_says_so():
    stream = _cluster_stream(recover=False)
    stream += [
        {
            "t": 117.0 + i,
            "event": "rdzv_unreachable",
            "error": "RendezvousConnectionError",
            "node": p,
            "source": "agent",
        }
        for i, p in enumerate(("demo-worker-0", "demo-worker-1"))
    ]
    stream += [
        {"t": 178.0 + i, "event": "rdzv_gave_up", "down_s": 61.0, "node": p, "source": "agent"}
        for i, p in enumerate(("demo-worker-0", "demo-worker-1"))
    ]
    stream.append({"t": 190.0, "event": "k8s_job", "condition": "Failed", "reason": "PyTorchJobFailed", "message": "x"})
    report = analyze(stream, [], target_steps=200, checkpoint_every=50, node_exit_codes={})
    assert any(
        "rendezvous server stayed unreachable for 61 s: the agents of demo-worker-0, demo-worker-1 gave up" in p
        for p in report.problems
    ), report.problems
    assert "the PyTorchJob failed: PyTorchJobFailed x" in report.problems


def test_a_crash_loop_an_agent_gave_up_on_is_reported_with_its_pod_and_exception():
    """The agent's workers_crash_loop event (from the pod's log, on a cluster) names the pod,
    the rank, the count and the exception: the drill's report says why the job failed."""
    stream = _cluster_stream(recover=False)
    stream.append(
        {
            "t": 150.0,
            "event": "workers_crash_loop",
            "error": "FileNotFoundError: [Errno 2] No such file or directory: '/data/train.bin'",
            "attempts": 3,
            "rank": 1,
            "node": "demo-worker-1",
            "source": "agent",
        }
    )
    stream.append({"t": 152.0, "event": "k8s_job", "condition": "Failed", "reason": "PyTorchJobFailed", "message": ""})
    report = analyze(stream, [], target_steps=200, checkpoint_every=50, node_exit_codes={})
    assert (
        "workers crash loop on demo-worker-1: rank 1 failed 3 times in a row with FileNotFoundError: [Errno 2] "
        "No such file or directory: '/data/train.bin'; its agent gave up (torchrun exits 1, the job fails)"
    ) in report.problems


def test_a_rendezvous_without_a_world_size_leaves_no_hole_in_the_timeline(tmp_path):
    from lab.drill.plot import plot_timeline

    agents = _agents((101.0, "a", "rendezvous", None, 0), (102.0, "a", "rendezvous", 2, 0))
    report = analyze([], agents, target_steps=None, checkpoint_every=10, node_exit_codes={})
    assert report.world_timeline == [(102.0, 2)]  # no events of our own: times from 0
    assert plot_timeline(report, tmp_path / "t.png").is_file()


def test_a_replayed_wipeout_takes_the_world_to_zero_until_the_next_step():
    def step(t: float, n: int, world: int) -> dict:
        return {"t": t, "event": "step", "step": n, "world_size": world, "samples": 4, "loss": 1.0}

    def capacity(t: float, alive: int, change: str) -> dict:
        return {"t": t, "event": "capacity", "alive": alive, "slots": 2, "change": change}

    recorded = [
        capacity(100.0, 2, "start"),
        step(101.0, 1, 2),
        step(102.0, 2, 2),
        capacity(103.0, 0, "lost"),
        capacity(110.0, 2, "back"),
        step(112.0, 3, 2),
    ]
    report = analyze(recorded, [], target_steps=None, checkpoint_every=10, node_exit_codes={})
    assert report.world_timeline == [(1.0, 2), (2.0, 2), (3.0, 0), (12.0, 2)]


def test_a_member_lost_after_the_survivors_restarted_is_not_the_evictions_detection():
    base = {"world_size": 3, "loss": 1.0}
    recorded = [{"t": 1.0, "event": "fresh", "step": 0, "round": 1, "node": n} for n in ("a", "b", "c")] + [
        {"t": 1.0 + i / 10, "event": "step", "step": i, **base} for i in range(1, 11)
    ]
    recorded += [
        {"t": 2.1, "event": "evict", "node": "c", "kind": "hard"},
        {"t": 3.0, "event": "resume", "step": 10, "round": 2, "node": "a"},
        {"t": 3.1, "event": "step", "step": 11, "world_size": 2, "loss": 1.0},
        {"t": 9.0, "event": "rdzv_member_lost", "nodes": ["x"], "node": "a"},  # a later join's round change
    ]
    report = analyze(recorded, [], target_steps=None, checkpoint_every=10, node_exit_codes={})
    (ev,) = report.evictions
    assert ev.detected_s is None and round(ev.recovery_s, 2) == 1.0


def _per_step_run(*, victim_in_quorum: bool) -> list[dict]:
    """Three groups a, b, c commit steps 1..10 in quorum 1; c is evicted at 2.05; a and b
    discard one in-flight step, then commit from step 11 in quorum 2 (or, when c was outside
    their quorum, go straight on in quorum 1). Group d joins at 3.0 and trains from 4.0."""
    recorded: list[dict] = [{"t": 0.5, "event": "cluster_started", "fault_tolerance": "per-step"}]
    members = "abc" if victim_in_quorum else "ab"
    for i in range(1, 11):
        for g in members:
            recorded.append(
                {
                    "t": 1.0 + i / 10,
                    "event": "step",
                    "step": i,
                    "replica": g,
                    "node": g,
                    "quorum": 1,
                    "participants": len(members),
                    "participating": True,
                    "world_size": len(members),
                    "loss": 1.0,
                }
            )
    if not victim_in_quorum:
        recorded.append({"t": 2.0, "event": "step_discarded", "step": 3, "replica": "c", "quorum": 7})
    recorded.append({"t": 2.05, "event": "evict", "node": "c", "kind": "hard"})
    if victim_in_quorum:
        recorded += [{"t": 2.1, "event": "step_discarded", "step": 10, "replica": g, "quorum": 1} for g in "ab"]
    quorum = 2 if victim_in_quorum else 1
    step_t = {11: 2.4, 12: 2.6, 13: 3.5, 14: 4.0, 15: 4.2}
    recorded.append({"t": 3.0, "event": "node_added", "node": "d"})
    for step, t in step_t.items():
        for g in ("a", "b", "d") if step >= 14 else ("a", "b"):
            recorded.append(
                {
                    "t": t,
                    "event": "step",
                    "step": step,
                    "replica": g,
                    "node": g,
                    "quorum": quorum if step < 14 else 3,
                    "participants": 3 if step >= 14 else 2,
                    "participating": True,
                    "world_size": 3 if step >= 14 else 2,
                    "loss": 1.0,
                }
            )
    recorded.append({"t": 5.0, "event": "exit", "reason": "done", "step": 15})
    return recorded


def test_per_step_eviction_is_the_survivors_stall_until_a_quorum_without_the_group():
    report = analyze(
        _per_step_run(victim_in_quorum=True),
        [],
        target_steps=15,
        checkpoint_every=10,
        node_exit_codes={"a": 0, "b": 0, "d": 0},
    )
    assert report.passed and report.fault_tolerance == "per-step", report.summary()
    (ev,) = report.evictions
    assert (ev.groups_before, ev.groups_after) == (3, 2)
    assert round(ev.recovery_s, 2) == 0.35  # 2.05 -> step 11 in quorum 2 at 2.4
    assert ev.discarded_steps == 1 and ev.lost_steps == 0 and ev.last_step_before == 10
    (join,) = report.joins
    assert round(join.join_s, 2) == 1.0 and join.world_after == 3
    assert round(join.stall_s, 2) == 0.5  # the survivors' longest gap from 3.0 to 4.0: steps at 3.5 and 4.0
    # One entry per committed step, whoever reported it.
    assert [s for _, s, _, _ in report.loss_curve] == list(range(1, 16))
    assert "survivors' next step 0.35 s after it, in a quorum of 2 group(s) (of 3)" in report.summary()


def test_per_step_eviction_of_a_group_outside_the_quorum_costs_the_survivors_nothing():
    report = analyze(
        _per_step_run(victim_in_quorum=False),
        [],
        target_steps=15,
        checkpoint_every=10,
        node_exit_codes={"a": 0, "b": 0, "d": 0},
    )
    (ev,) = report.evictions
    assert round(ev.recovery_s, 2) == 0.35 and ev.discarded_steps == 0 and ev.lost_steps == 0


def test_per_step_survivors_that_never_commit_again_fail_the_drill():
    recorded = [e for e in _per_step_run(victim_in_quorum=True) if e["t"] < 2.2]
    report = analyze(recorded, [], target_steps=15, checkpoint_every=10, node_exit_codes={"a": 1, "b": 1})
    (ev,) = report.evictions
    assert ev.recovery_s is None and not report.passed
    assert "the survivors committed NO step without it" in report.summary()


def test_per_step_groups_taking_turns_at_healing_fail_the_drill_with_the_setting_to_change():
    """After d joined, each quorum formed without one group, which healed at the next step: the
    drill names the pattern and the join wait. One heal after training (d's join) is fine."""
    recorded = _per_step_run(victim_in_quorum=True)
    healed = {"event": "healed", "rank": 0, "seconds": 0.3, "bytes": 10}
    recorded.append({**healed, "t": 3.9, "replica": "d", "node": "d", "step": 13})  # d's join: it never trained
    calm = analyze(recorded, [], target_steps=15, checkpoint_every=10, node_exit_codes={"a": 0, "b": 0, "d": 0})
    assert calm.passed, calm.summary()
    turns = [{**healed, "t": 4.0 + i / 100, "replica": g, "node": g, "step": 14 + i} for i, g in enumerate("abda")]
    report = analyze(
        recorded + turns, [], target_steps=15, checkpoint_every=10, node_exit_codes={"a": 0, "b": 0, "d": 0}
    )
    assert not report.passed
    assert "groups that had trained healed again 4 times (a 2x, b 1x, d 1x)" in report.summary()
    assert "per_step.join_timeout_s" in report.summary()


def test_checkpoints_on_node_local_paths_are_named():
    recorded = [{"t": 110.0, "event": "evict", "node": "c", "kind": "hard"}]
    agents = _agents(*((101.0, n, "rendezvous", 3, 0) for n in "abc"), *((102.0, n, "started", 3, 0) for n in "abc"))
    report = analyze(recorded, agents, target_steps=None, checkpoint_every=10, node_exit_codes={"a": 0, "b": 0})
    report.node_local_checkpoints = [f"node-{i}/snapshot.pt" for i in range(6)]
    summary = report.summary()
    assert "WARNING: the script wrote checkpoint-like files on node-local paths (node-0/snapshot.pt" in summary
    assert "and 2 more" in summary and "$LAB_CHECKPOINT_DIR" in summary


def test_a_late_replacement_from_a_fallback_rank_shows_the_job_at_reduced_size_and_its_goodput():
    """A capacity fault: 3 nodes at 30 samples/step, 10 steps/s; node c lost at 10 s; the job
    trains on 2 nodes (20 samples/step) after a 1 s stall; the replacement, from rank 3 on
    demand, is added 5 s later and trains at world 3 from 16 s."""
    recorded = [
        *({"t": 0.0, "event": "node_added", "node": n} for n in "abc"),
        *(
            {"t": 1.0 + i / 10, "event": "step", "step": i, "world_size": 3, "samples": 30, "loss": 1.0}
            for i in range(90)
        ),
        {"t": 10.0, "event": "evict", "node": "c", "kind": "hard"},
        *(
            {"t": 11.0 + i / 10, "event": "step", "step": 90 + i, "world_size": 2, "samples": 20, "loss": 1.0}
            for i in range(50)
        ),
        {"t": 15.0, "event": "node_added", "node": "d", "rank": 3, "capacity": "on-demand"},
        *(
            {"t": 16.0 + i / 10, "event": "step", "step": 140 + i, "world_size": 3, "samples": 30, "loss": 1.0}
            for i in range(20)
        ),
    ]
    report = analyze(recorded, [], target_steps=None, checkpoint_every=10, node_exit_codes={})
    (join,) = report.joins
    assert (join.rank, join.capacity, join.world_after) == (3, "on-demand", 3)
    (reduced,) = report.reduced
    assert reduced.node == "c" and reduced.world == 2 and round(reduced.seconds, 2) == 6.0
    assert round(reduced.replaced_after_s, 2) == 5.0 and reduced.replacement_rank == 3
    assert round(reduced.full_samples_per_s) == 300
    # 50 steps of 20 samples and the replacement's first step of 30, in 6 s: 1030 of 1800.
    assert reduced.steps == 51 and round(reduced.goodput, 3) == round(1030 / 1800, 3)
    summary = report.summary()
    assert "node d added (rank 3, on-demand)" in summary
    assert "at reduced size after losing c: 6.0 s until its replacement (rank 3, on-demand, added 5.0 s" in summary
    assert "goodput 57 % over those 6.0 s" in summary


def test_a_node_that_never_joined_is_said_so_in_plain_words():
    recorded = [
        *({"t": 0.0, "event": "node_added", "node": n} for n in "ab"),
        *({"t": 1.0 + i / 10, "event": "step", "step": i, "world_size": 2, "loss": 1.0} for i in range(1, 30)),
        {"t": 2.0, "event": "node_added", "node": "c"},
    ]
    report = analyze(recorded, [], target_steps=None, checkpoint_every=10, node_exit_codes={})
    (join,) = report.joins
    assert join.join_s is None and join.world_after is None
    line = next(line for line in report.summary().splitlines() if "node c added" in line)
    assert line == "  node c added at 2.0 s: world 2 -> no new size seen, did NOT join"  # no "lost None step(s)"


def test_a_replay_draws_the_capacity_offered_behind_the_world_size(tmp_path, monkeypatch):
    from lab.drill import plot

    recorded = [
        {"t": 10.0, "event": "capacity", "alive": 2, "slots": 2, "change": "start", "window_t": 0.0},
        *({"t": 10.0 + i, "event": "step", "step": i, "world_size": 2, "loss": 1.0, "samples": 8} for i in (1, 2)),
        {"t": 13.0, "event": "capacity", "alive": 0, "slots": 2, "change": "lost", "slot": 0, "window_t": 60.0},
        {"t": 15.0, "event": "capacity", "alive": 2, "slots": 2, "change": "back", "slot": 0, "window_t": 100.0},
        {"t": 16.0, "event": "step", "step": 3, "world_size": 2, "loss": 1.0, "samples": 8},
        {"t": 17.0, "event": "capacity", "alive": 2, "slots": 2, "change": "end", "window_t": 140.0},
    ]
    report = analyze(recorded, [], target_steps=None, checkpoint_every=10, node_exit_codes={})
    assert report.capacity_timeline == [(0.0, 2), (3.0, 0), (5.0, 2), (7.0, 2)]
    import matplotlib.pyplot as plt

    figures: list = []
    monkeypatch.setattr(plt, "close", figures.append)  # the figure kept, to look at what was drawn
    assert plot.plot_timeline(report, tmp_path / "t.png").is_file()
    (fig,) = figures
    world_ax = fig.axes[1]
    (band,) = world_ax.collections
    outline = {(round(float(x), 3), round(float(y), 3)) for x, y in band.get_paths()[0].vertices}
    # Held from each change to the next: 2 nodes until 3 s, none until 5 s, 2 again.
    assert {(0.0, 2.0), (3.0, 2.0), (3.0, 0.0), (5.0, 0.0), (5.0, 2.0), (7.0, 2.0)} <= outline
    labels = [t.get_text() for t in world_ax.get_legend().get_texts()]
    assert "capacity offered (nodes)" in labels
    assert "trace replay" in fig._suptitle.get_text()
    plt.close(fig)


def test_a_resume_says_where_its_state_came_from_and_which_memory_was_refused():
    base = {"world_size": 3, "loss": 1.0}
    loaded = {
        "t": 3.0,
        "event": "checkpoint_loaded",
        "step": 10,
        "node": "a",
        "from_memory": 40_000_000,
        "from_peers": 20_500_000,
        "from_storage": 0,
        "memory_refused": ["rank 1 peer slot: step 10 being written"],
        "split": {"state_s": 0.1, "plan_s": 0.2, "exchange_s": 0.3, "read_s": 0.4, "apply_s": 0.05},
    }
    recorded = [
        *({"t": 1.0, "event": "fresh", "step": 0, "round": 1, "node": n} for n in "abc"),
        *({"t": 1.0 + i / 10, "event": "step", "step": i, **base} for i in range(1, 11)),
        {"t": 2.05, "event": "evict", "node": "c", "kind": "hard"},
        loaded,  # a worker records its load, then its resume
        {"t": 3.01, "event": "resume", "step": 10, "round": 2, "node": "a"},
        {"t": 3.5, "event": "step", "step": 11, "world_size": 2, "loss": 0.9},
        # a node added back later loads again: not the eviction's resume
        {**loaded, "t": 5.0, "from_memory": 1, "from_peers": 2, "from_storage": 3, "memory_refused": []},
        {"t": 5.01, "event": "resume", "step": 12, "round": 3, "node": "a"},
        {"t": 5.5, "event": "step", "step": 13, "world_size": 3, "loss": 0.9},
        {"t": 6.0, "event": "exit", "reason": "done", "node": "a", "step": 13},
    ]
    report = analyze(recorded, [], target_steps=13, checkpoint_every=10, node_exit_codes={"a": 0, "b": 0, "c": -9})
    (ev,) = report.evictions
    assert ev.state_from == {"memory": 40_000_000, "peers": 20_500_000, "storage": 0}
    summary = report.summary()
    assert (
        "state: 40.0 MB from the survivors' own memory, 20.5 MB from other nodes' memory, 0.0 MB from storage"
        in summary
    )
    assert "memory refused: rank 1 peer slot: step 10 being written" in summary
    assert (
        "state load on rank 0: 1.05 s (state dicts 0.10, plan 0.20, other nodes' memory sent 0.30, read 0.40, "
        "into the model 0.05)" in summary
    )
    # Without node memory the load says nothing of it, and neither does the report: its seconds
    # have no plan and nothing sent.
    for key in ("from_memory", "from_peers", "from_storage", "memory_refused"):
        del loaded[key]
    loaded["split"] = {"state_s": 0.1, "read_s": 0.6, "apply_s": 0.05}
    recorded = [e for e in recorded if e["t"] < 5.0]
    report = analyze(recorded, [], target_steps=11, checkpoint_every=10, node_exit_codes={"a": 0, "b": 0, "c": -9})
    assert report.evictions[0].state_from is None and "state:" not in report.summary()
    assert "state load on rank 0: 0.75 s (state dicts 0.10, read 0.60, into the model 0.05)" in report.summary()


def test_a_notice_too_short_to_save_in_is_missed_even_when_a_later_notice_saves():
    """A sharded job's node is noticed, and killed before its emergency save commits: the
    survivors resume from the interval save. A later eviction's notice save is not this one's."""
    step = {"world_size": 3, "loss": 1.0}
    recorded = [
        *({"t": 1.0, "event": "fresh", "step": 0, "round": 1, "node": n} for n in "abc"),
        *({"t": 1.0 + i / 10, "event": "step", "step": i, **step} for i in range(1, 15)),
        {"t": 2.0, "event": "checkpoint_saved", "step": 10, "reason": "interval", "seconds": 0.01, "node": "a",
         "sharded": True},
        {"t": 2.45, "event": "evict", "node": "c", "kind": "notice"},  # killed 0.25 s later, nothing saved
        {"t": 3.0, "event": "resume", "step": 10, "round": 2, "node": "a"},
        *({"t": 3.0 + i / 10, "event": "step", "step": 10 + i, "world_size": 2, "loss": 0.9} for i in range(1, 6)),
        {"t": 3.6, "event": "evict", "node": "b", "kind": "notice"},
        {"t": 3.65, "event": "checkpoint_saved", "step": 15, "reason": "notice", "seconds": 0.04, "node": "a",
         "sharded": True},
        {"t": 3.66, "event": "exit", "reason": "notice", "node": "b", "step": 15, "notice_to_exit_s": 0.06},
        {"t": 4.0, "event": "resume", "step": 15, "round": 3, "node": "a"},
        {"t": 4.5, "event": "step", "step": 16, "world_size": 1, "loss": 0.8},
        {"t": 5.0, "event": "exit", "reason": "done", "node": "a", "step": 16},
    ]  # fmt: skip
    report = analyze(recorded, [], target_steps=16, checkpoint_every=10, node_exit_codes={"a": 0, "b": 143, "c": -9})
    first, second = report.evictions
    assert first.emergency_save_missed and first.emergency_save_s is None and first.lost_steps == 4
    assert not second.emergency_save_missed and second.emergency_save_s == 0.04 and second.lost_steps == 0


def test_a_notice_that_comes_as_its_node_joins_a_round_is_followed_to_the_round_without_it():
    """The agents formed a round (after c's loss) before b's notice, and b's worker resumed in it
    after the notice: b trains on in that round, saves and leaves; its eviction is measured to
    the survivors' next round, the first one b takes no part in."""
    step = {"world_size": 3, "loss": 1.0}
    recorded = [
        *({"t": 1.0, "event": "fresh", "step": 0, "round": 1, "node": n} for n in "abc"),
        *({"t": 1.0 + i / 10, "event": "step", "step": i, **step} for i in range(1, 11)),
        {"t": 2.0, "event": "evict", "node": "c", "kind": "hard"},
        {"t": 2.4, "event": "evict", "node": "b", "kind": "notice"},
        *({"t": 2.5, "event": "resume", "step": 10, "round": 2, "node": n} for n in "ab"),
        *({"t": 2.5 + i / 10, "event": "step", "step": 10 + i, "world_size": 2, "loss": 0.9} for i in range(1, 6)),
        {"t": 3.05, "event": "checkpoint_saved", "step": 15, "reason": "notice", "seconds": 0.03, "node": "b"},
        {"t": 3.1, "event": "exit", "reason": "notice", "node": "b", "step": 15, "notice_to_exit_s": 0.7,
         "trained_on_s": 0.6},
        {"t": 3.5, "event": "resume", "step": 15, "round": 3, "node": "a"},
        {"t": 3.7, "event": "step", "step": 16, "world_size": 1, "loss": 0.8},
        {"t": 4.0, "event": "exit", "reason": "done", "node": "a", "step": 16},
    ]  # fmt: skip
    report = analyze(recorded, [], target_steps=16, checkpoint_every=10, node_exit_codes={"a": 0, "b": 143, "c": -9})
    lost_c, noticed_b = report.evictions
    assert (lost_c.resumed_from, lost_c.lost_steps) == (10, 0)
    assert (noticed_b.trained_on_s, noticed_b.emergency_save_s, noticed_b.emergency_save_missed) == (0.6, 0.03, False)
    assert (noticed_b.resumed_from, noticed_b.lost_steps, noticed_b.world_after) == (15, 0, 1)
    assert round(noticed_b.recovery_s, 2) == 1.3


def test_the_world_at_reduced_size_leaves_out_every_record_of_the_larger_worlds_first_step():
    """Each of the 3 workers records the step at which the replacement joined, all at one time
    (a cluster's pod logs): the job trained at world 2 meanwhile, not 3."""
    recorded = [
        *({"t": 0.0, "event": "node_added", "node": n} for n in "abc"),
        *({"t": 1.0 + i / 10, "event": "step", "step": i, "world_size": 3, "samples": 30} for i in range(50)),
        {"t": 6.0, "event": "evict", "node": "c", "kind": "hard"},
        *({"t": 7.0 + i / 10, "event": "step", "step": 50 + i, "world_size": 2, "samples": 20} for i in range(20)),
        {"t": 9.5, "event": "node_added", "node": "d", "rank": 3, "capacity": "on-demand"},
        *({"t": 10.0, "event": "step", "step": 70, "world_size": 3, "samples": 30, "node": n} for n in "abd"),
    ]
    report = analyze(recorded, [], target_steps=None, checkpoint_every=10, node_exit_codes={})
    (reduced,) = report.reduced
    assert reduced.world == 2 and reduced.replacement_rank == 3

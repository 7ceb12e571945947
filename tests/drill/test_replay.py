"""A trace window replayed on the local target (lab.drill.replay), in both fault-tolerance
modes, with real agents, workers and kills: one node lost alone, then the other two at once (a
wipeout: one with a notice, one without), then capacity back one slot at a time. The job must
survive the wipeout, train every sample once, and record the capacity it was offered."""

from __future__ import annotations

import dataclasses

import pytest

from lab.drill.replay import RESTART_CAUSE
from lab.drill.replay_goodput import replay_goodput
from lab.drill.run import DrillConfig, run_drill
from lab.vocab import events
from lab.vocab.events import Event, unknown_fields
from lab.vocab.job import JobSpec
from lab.vocab.problems import InvalidInput
from lab.vocab.replay_schedule import BACK, LOST, ReplaySchedule, SlotChange
from tests.drill.ledger_checks import assert_every_sample_trained_once
from tests.patience import within

STEPS = 600
# Seconds of replay: the window's changes, then the job trains on at full size to its end.
WINDOW = ReplaySchedule(
    source="by hand: one loss, a wipeout of two at once, three slots back",
    window_s=(0.0, 280.0),
    speedup=20.0,
    slots=3,
    rule="the slots named",
    alive_at_start=frozenset({0, 1, 2}),
    changes=(
        SlotChange(2.0, 2, LOST),
        SlotChange(5.0, 0, LOST, notice_s=2.0),
        SlotChange(5.0, 1, LOST),
        SlotChange(8.0, 0, BACK),
        SlotChange(8.5, 1, BACK),
        SlotChange(10.0, 2, BACK),
    ),
    duration_s=12.0,
)

# The capacity records WINDOW's replay writes: (change, slots with a node), start to end.
WINDOW_CAPACITY = [
    ("start", 3),
    ("lost", 2),
    ("lost", 1),
    ("lost", 0),
    ("back", 1),
    ("back", 2),
    ("back", 3),
    ("end", 3),
]


def _config(workdir, mode: str, min_nodes: int = 1, checkpoint_every_steps: int = 20, **kw) -> DrillConfig:
    spec = JobSpec(
        name="t",
        min_nodes=min_nodes,
        max_nodes=3,
        fault_tolerance=mode,
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=checkpoint_every_steps,
        script_args=("--steps", str(STEPS), "--step-time", "0.03"),
    )
    base = {"nodes": 3, "fault": "trace", "replay": WINDOW, "target_steps": STEPS, "timeout_s": within(150)}
    base.update(kw)
    return DrillConfig(spec=spec, workdir=workdir / "run", **base)


@pytest.mark.processes
@pytest.mark.long
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("mode", "every"), [("elastic", 20), ("per-step", 20), ("elastic", 0)], ids=["elastic", "per-step", "derived"]
)
def test_a_replayed_window_with_a_wipeout_is_survived_and_every_sample_trained_once(workdir, mode, every):
    report = run_drill(_config(workdir, mode, checkpoint_every_steps=every))
    assert report.passed and report.finished, report.summary()
    assert_every_sample_trained_once(report.ledger, full_epochs=1)
    recorded = events.read(workdir / "run" / "events.jsonl")
    capacity = [e for e in recorded if e["event"] == Event.CAPACITY]
    assert [(e["change"], e["alive"]) for e in capacity] == WINDOW_CAPACITY
    assert [e for e in capacity if unknown_fields(e)] == []
    evicted = [e for e in recorded if e["event"] == Event.EVICT]
    assert [(e["node"], e["kind"]) for e in evicted] == [("node-2", "hard"), ("node-0", "notice"), ("node-1", "hard")]
    # Three preemptions and three nodes back: membership changes, none counted as a failure.
    assert (report.preemptions, report.nodes_added, report.max_restart_count) == (3, 3, 0), report.summary()
    # The notice said when node-0 would go: a worker it had running trained on through it, then
    # saved. Elastic mode restarts every worker on node-2's loss, and on a loaded machine that
    # round can still be starting when the notice comes: a worker killed before it could take the
    # notice leaves no exit record. Per-step mode's workers train on through a peer's loss.
    noticed = [e for e in recorded if e["event"] == Event.EXIT and e.get("node") == "node-0"]
    (told,) = [ev for ev in report.evictions if ev.node == "node-0"]
    assert all(e["reason"] == "notice" and e.get("trained_on_s", 0) > 0 for e in noticed), noticed
    assert not noticed or told.trained_on_s == noticed[0]["trained_on_s"], report.summary()
    # A worker started before the notice came must have trained through it (one started as it
    # came may have: its agent passes the notice on once the worker runs).
    since = evicted[0]["t"] if mode == "elastic" else 0.0
    assert noticed or not _started_between(recorded, "node-0", since, evicted[1]["t"]), report.summary()
    # The wipeout: training stopped with the last node, and went on once capacity was back.
    wiped = capacity[3]["t"]
    steps = [e for e in recorded if e["event"] == Event.STEP]
    assert not [e for e in steps if wiped + 0.5 < e["t"] < capacity[4]["t"]]
    goodput = replay_goodput(recorded)
    assert goodput is not None and report.replay == goodput
    assert (goodput.wipeouts, goodput.wipeouts_resumed) == (1, 1)
    assert goodput.useful_samples > 0 and goodput.ratio is not None and goodput.ratio > 0
    assert "replay goodput" in report.summary()
    if every == 0:
        _the_derived_interval_started_from_the_windows_rate(recorded, report)


@pytest.mark.processes
@pytest.mark.long
@pytest.mark.timeout(300)
def test_sharded_state_comes_from_node_memory_until_a_wipeout_takes_it_all(workdir):
    """gpt-small's sharded checkpoints, kept in node memory: a resume while nodes survive reads
    nothing from storage; the wipeout takes every node's memory with it, so the job resumes from
    storage, and every sample is still trained once."""
    spec = JobSpec(
        name="t",
        min_nodes=1,
        max_nodes=3,
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=10,
        script_args=("--model", "gpt-small", "--steps", "200", "--step-time", "0.03"),
    )
    report = run_drill(
        DrillConfig(spec=spec, workdir=workdir / "run", nodes=3, fault="trace", replay=WINDOW, target_steps=200,
                    timeout_s=within(200))
    )  # fmt: skip
    assert report.passed and report.finished, report.summary()
    assert_every_sample_trained_once(report.ledger, full_epochs=1)
    recorded = events.read(workdir / "run" / "events.jsonl")
    capacity = [e for e in recorded if e["event"] == Event.CAPACITY]
    assert [(e["change"], e["alive"]) for e in capacity] == WINDOW_CAPACITY
    wiped, back = capacity[3]["t"], capacity[4]["t"]
    loads = [e for e in recorded if e["event"] == Event.CHECKPOINT_LOADED]
    # While nodes survive, memory gives the state; storage at most the one shard whose only
    # complete copy a lost node held while a save was replacing the other (docs/real-size.md).
    before = [e for e in loads if e["t"] < wiped]
    assert all(e["from_storage"] < e["from_memory"] + e["from_peers"] for e in before), before
    # The first round after the wipeout resumes from a state saved before it, which no node's
    # memory kept: it reads storage alone (each rank's event gives the round's bytes, all ranks'
    # together). Later rounds may take from the memory of the nodes that came back. On a loaded
    # machine the job may not have saved before the wipeout: it then starts afresh, and a state
    # saved since (a worker stopped for a joiner saves on SIGTERM) may come from memory.
    after = sorted((e for e in loads if e["t"] > back), key=lambda e: e["t"])
    saved_before = [e["step"] for e in recorded if e["event"] == Event.CHECKPOINT_SAVED and e["t"] < wiped]
    if saved_before:
        assert after and after[0]["step"] <= max(saved_before), (saved_before, after[:1])
        first = after[0]
        assert first["from_storage"] > 0 and first["from_memory"] == first["from_peers"] == 0, first


def _the_derived_interval_started_from_the_windows_rate(recorded: list[dict], report) -> None:
    """A derived interval's job knew the window's rate of evictions from its start: 9 s with a
    node over 2 loss events (the two slots of the wipeout at once), until it had seen two."""
    chosen = [e for e in recorded if e["event"] == Event.CHECKPOINT_INTERVAL]
    assert chosen and chosen[0]["source"] == "given" and chosen[0]["mtbf_s"] == WINDOW.mean_s_between_losses() == 4.5
    assert {e["source"] for e in chosen if e["evictions"] >= 2} <= {"observed"}, chosen
    # What a wipeout redid is at most the interval the job had chosen.
    assert all(ev.lost_steps is None or ev.lost_steps <= report.checkpoint_every for ev in report.evictions)


def _started_between(recorded: list[dict], node: str, after: float, before: float) -> bool:
    """Whether `node` started a worker between two times: one running when the second came."""
    return any(e["event"] == Event.START and e.get("node") == node and after < e["t"] < before for e in recorded)


def test_a_replay_is_checked_against_the_drill_before_anything_starts(workdir):
    with pytest.raises(InvalidInput) as caught:
        _config(workdir, "elastic", nodes=2, eviction="notice").validate()
    said = str(caught.value)
    assert "nodes=2 is invalid: expected the replayed window's slots (3)" in said
    assert "eviction='notice' is invalid" in said
    with pytest.raises(InvalidInput, match="a trace window to replay"):
        _config(workdir, "elastic", replay=None).validate()
    with pytest.raises(InvalidInput, match="none without fault 'trace'"):
        _config(workdir, "elastic", fault="node").validate()
    assert not (workdir / "run").exists()


@pytest.mark.processes
@pytest.mark.long
@pytest.mark.timeout(200)
def test_a_window_that_starts_with_no_capacity_starts_the_job_when_its_first_slot_comes(workdir):
    empty = ReplaySchedule(
        source="by hand: no node at first",
        window_s=(0.0, 100.0),
        speedup=20.0,
        slots=3,
        rule="the slots named",
        alive_at_start=frozenset(),
        changes=(SlotChange(1.0, 0, BACK), SlotChange(1.5, 1, BACK), SlotChange(2.0, 2, BACK)),
        duration_s=3.0,
    )
    report = run_drill(_config(workdir, "elastic", replay=empty))
    assert report.passed and report.finished, report.summary()
    recorded = events.read(workdir / "run" / "events.jsonl")
    capacity = [(e["change"], e["alive"]) for e in recorded if e["event"] == Event.CAPACITY]
    assert capacity == [("start", 0), ("back", 1), ("back", 2), ("back", 3), ("end", 3)]
    first_step = next(e["t"] for e in recorded if e["event"] == Event.STEP)
    first_node = next(e["t"] for e in recorded if e["event"] == Event.NODE_ADDED)
    assert first_step > first_node


@pytest.mark.processes
@pytest.mark.long
@pytest.mark.timeout(300)
def test_restart_everything_stops_every_node_at_each_loss_and_restarts_at_full_size_once_all_are_back(workdir):
    report = run_drill(_config(workdir, "elastic", min_nodes=3, restart_everything=True))
    assert report.passed and report.finished, report.summary()
    assert_every_sample_trained_once(report.ledger, full_epochs=1)
    recorded = events.read(workdir / "run" / "events.jsonl")
    # The same capacity records as the elastic replay's: the bound is what was offered.
    capacity = [(e["change"], e["alive"]) for e in recorded if e["event"] == Event.CAPACITY]
    assert capacity == WINDOW_CAPACITY
    evicted = [(e["node"], e["kind"], e.get("cause")) for e in recorded if e["event"] == Event.EVICT]
    # The first loss stops the whole job; the wipeout finds no node.
    assert evicted == [("node-2", "hard", None), ("node-0", "hard", RESTART_CAUSE), ("node-1", "hard", RESTART_CAUSE)]
    added = [e["t"] for e in recorded if e["event"] == Event.NODE_ADDED]
    backs = [e["t"] for e in recorded if e["event"] == Event.CAPACITY and e["change"] == "back"]
    # Three nodes again, none of them before the last slot came back (its record follows them).
    assert len(added) == 6 and all(t > backs[-2] for t in added[3:])
    last_back = backs[-1]
    steps = [e for e in recorded if e["event"] == Event.STEP]
    first_loss = next(e["t"] for e in recorded if e["event"] == Event.EVICT)
    # Never below full size: nothing trained from the first loss until every slot was back.
    assert {e["world_size"] for e in steps} == {3}
    assert not [e for e in steps if first_loss + 0.5 < e["t"] < last_back]
    assert report.replay is not None and report.replay.ratio is not None and 0 < report.replay.ratio < 1


def test_restart_everything_is_a_fixed_size_elastic_job_on_a_window_that_starts_full(workdir):
    starts_partial = dataclasses.replace(WINDOW, alive_at_start=frozenset({0, 1}), changes=WINDOW.changes[4:])
    with pytest.raises(InvalidInput) as caught:
        _config(workdir, "per-step", restart_everything=True, replay=starts_partial).validate()
    said = str(caught.value)
    assert "fault_tolerance='per-step' is invalid: expected elastic with restart_everything" in said
    assert "min_nodes=1 is invalid: expected the replayed window's slots (3) with restart_everything" in said
    assert "expected a window that starts with all 3 slots alive with restart_everything (it starts with 2)" in said
    with pytest.raises(InvalidInput, match="restart_everything=True is invalid: expected False without fault 'trace'"):
        _config(workdir, "elastic", fault="node", replay=None, restart_everything=True).validate()
    _config(workdir, "elastic", min_nodes=3, restart_everything=True).validate()


def test_a_drill_that_would_give_up_before_the_window_ends_is_refused(workdir):
    """The drill's time is a budget too: a whole trace replayed must fit in it, or the replay
    stops part-way with most of the trace's changes never played."""
    with pytest.raises(InvalidInput) as caught:
        _config(workdir, "elastic", timeout_s=WINDOW.duration_s).validate()
    assert "timeout_s=12.0 is invalid: expected more seconds than the replayed window's 12 s of replay" in str(
        caught.value
    )
    _config(workdir, "elastic", timeout_s=WINDOW.duration_s + 1).validate()

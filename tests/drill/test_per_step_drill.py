"""Per-step mode (TorchFT) on the local target: a real lighthouse, real torchrun replica
groups, real kills. The survivors never restart: no step is lost, only in-flight ones are
discarded."""

from __future__ import annotations

import time
import urllib.parse

import psutil
import pytest

from lab.drill.run import DrillConfig, run_drill
from lab.local import LocalTarget
from lab.vocab import events
from lab.vocab.events import unknown_fields
from lab.vocab.job import JobSpec
from tests.drill.ledger_checks import assert_every_sample_trained_once
from tests.patience import within

pytestmark = pytest.mark.processes  # every drill starts a lighthouse, agents and workers


# A group added back must have time to start, heal and join a quorum before the survivors
# finish: the survivors sleep this long per step in the drills that add one.
JOIN_STEP_TIME = "0.12"
# The eviction comes early, leaving the group added back most of the run to join: its start
# (its agent's rendezvous, healing; torch is imported already, lab.local.node_forker) took more
# than 14 s on a loaded machine when every node still imported torch itself.
EVICT_AT = 25
# The eviction-and-join runs' length: 95 steps of at least JOIN_STEP_TIME after the eviction.
JOIN_RUN_STEPS = 120


def _spec(workdir, steps: int = 150, **kw):
    base = {
        "name": "t",
        "min_nodes": 2,
        "max_nodes": 3,
        "fault_tolerance": "per-step",
        "checkpoint_dir": str(workdir / "ckpt"),
        "checkpoint_every_steps": 30,
        "script_args": ("--steps", str(steps), "--step-time", "0.02"),
    }
    base.update(kw)
    return JobSpec(**base)


def _checkpointed_steps(workdir) -> list[int]:
    """Steps with a committed checkpoint: a whole one's pointer, or a sharded one's metadata."""
    whole = (int(p.name.split("-")[1]) for p in (workdir / "ckpt").glob("step-*.json"))
    sharded = (int(p.parent.name.split("-")[1]) for p in (workdir / "ckpt").glob("step-*/.metadata"))
    return sorted([*whole, *sharded])


def _eviction_and_join(workdir, eviction: str, model: str = "tiny", nproc: int = 1) -> DrillConfig:
    """3 replica groups of `nproc` workers; node-2's group evicted at step EVICT_AT, a group
    added back 1 s after the survivors went on. The drill has every worker record the samples of
    its committed steps: an epoch is 512 samples, 8 per worker and step."""
    args = ("--steps", str(JOIN_RUN_STEPS), "--step-time", JOIN_STEP_TIME, "--dataset-size", "512", "--batch-size", "8")
    return DrillConfig(
        spec=_spec(workdir, script_args=(*args, "--model", model), nproc_per_node=nproc),
        workdir=workdir,
        nodes=3,
        target_steps=JOIN_RUN_STEPS,
        eviction=eviction,
        notice_s=30.0,
        evict_at_step=EVICT_AT,
        scale_out_after_s=1.0,
        timeout_s=within(140),
    )


def _assert_the_survivors_trained_on(report, workdir, eviction: str, nproc: int = 1) -> None:
    """The survivors kept their step (no worker restarts, 0 committed steps lost), the new
    group healed from a live peer and trained in a quorum, durable checkpoints were written."""
    assert report.passed, report.summary()
    assert report.fault_tolerance == "per-step" and report.final_step == JOIN_RUN_STEPS and report.finished
    (ev,) = report.evictions
    assert ev.kind == eviction and ev.groups_before == 3 and ev.groups_after == 2
    assert ev.recovery_s is not None and ev.recovery_s > 0
    assert ev.lost_steps == 0, report.summary()
    assert report.restart_rounds == 0  # no worker was restarted: the survivors never stopped
    (join,) = report.joins
    assert join.join_s is not None and join.world_after == 3 * nproc and join.lost_steps == 0
    # The evicted group's peers were never restarted, and the job ended cleanly everywhere else.
    codes = report.node_exit_codes
    assert all(codes[n] == 0 for n in ("node-0", "node-1", "node-3")), codes
    # The new group resumed at the survivors' step, not at the newest checkpoint's.
    recorded = events.read(workdir / "events.jsonl")
    healed = [e for e in recorded if e["event"] == "step" and e.get("replica") == "node-3"]
    assert healed and healed[0]["step"] > EVICT_AT
    _assert_the_groups_trained_together(recorded)
    assert _checkpointed_steps(workdir) == [60, 90, 120]  # every 30 steps, the newest 3 kept
    _assert_each_step_says_where_its_time_went(recorded, asynchronous=nproc == 1)
    assert [e for e in recorded if unknown_fields(e)] == []  # only the fields lab.vocab.events declares
    # The same sharding by global position as the elastic mode: across the eviction (its
    # in-flight step discarded) and the join (the new group healed from a peer, the sampler's
    # position included), the committed steps trained every sample of each epoch once.
    assert any(e["event"] == "samples" and e.get("replica") == "node-3" for e in recorded), "node-3 never trained"
    assert_every_sample_trained_once(report.ledger, full_epochs=3)
    _assert_every_group_ends_with_the_same_weights(recorded)


def _assert_every_group_ends_with_the_same_weights(recorded: list[dict]) -> None:
    """The groups of a quorum apply the same summed gradients: the survivors and the group that
    healed from one of them end with the same parameters, worker by worker (a heal that copied a
    peer's state one update late would leave the new group apart for good)."""
    ends = [e for e in recorded if e["event"] == "exit" and e.get("reason") == "done" and "weights" in e]
    by_rank: dict[int, set[str]] = {}
    for e in ends:
        by_rank.setdefault(e["rank"], set()).add(e["weights"])
    assert {e["replica"] for e in ends} == {"node-0", "node-1", "node-3"}, ends
    assert all(len(digests) == 1 for digests in by_rank.values()), by_rank


def _assert_the_groups_trained_together(recorded: list[dict]) -> None:
    """The new group healed after the eviction, at one step, and the groups trained on together
    instead of taking turns sitting a step out (with a join wait shorter than a step, every
    group healed again and again until the end). A group heals again (a survivor, or the new group
    after its first heal) only after its own step was discarded: a cross-group collective that
    outlived its timeout on a stalled machine (its peers committed that step; it copies it from
    them), at most a couple of times in a run."""
    heals = sorted({(e["replica"], e["step"]) for e in recorded if e["event"] == "healed" and e["step"] > EVICT_AT})
    joined = [(replica, step) for replica, step in heals if replica == "node-3"]
    assert joined != [], heals
    # Heals after the new group's first, and any survivor's: each after a step of its own was discarded.
    again = joined[1:] + [(replica, step) for replica, step in heals if replica != "node-3"]
    assert len(again) <= 2, heals
    discarded = {(e["replica"], e["step"]) for e in recorded if e["event"] == "step_discarded"}
    for replica, step in again:
        assert any(r == replica and step - 3 <= s <= step for r, s in discarded), (replica, step, sorted(discarded))


def _assert_each_step_says_where_its_time_went(recorded: list[dict], asynchronous: bool) -> None:
    """Every committed step's phases. A group of one worker (a whole replica) chooses its batch
    for the last committed step's quorum while its next quorum runs: the step after the new
    group healed has one more participant, and its survivors computed that step again for the
    batch of the bigger quorum (every sample still trained once, above). A group sharded by
    FSDP2 waits for its quorum and never computes a step twice."""
    steps = [e for e in recorded if e["event"] == "step"]
    assert steps and all(set(e["phases"]) == {"quorum", "compute", "recompute", "reduce", "commit"} for e in steps)
    recomputed = [e for e in steps if e["phases"]["recompute"] > 0]
    if asynchronous:
        assert any(e["replica"] in ("node-0", "node-1") and e["participants"] == 3 for e in recomputed), recomputed
    else:
        assert recomputed == []


# eviction, model, workers per group: the notice's run trains a small GPT sharded over each
# group's two workers by FSDP2 (HSDP across the groups), with sharded checkpoints, and the
# group added back heals shard by shard.
SURVIVOR_RUNS = {"hard": ("tiny", 1), "notice": ("gpt-small", 2), "silent": ("tiny", 1)}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("eviction", list(SURVIVOR_RUNS))
@pytest.mark.long
def test_the_survivors_train_on_through_an_eviction_and_a_join(workdir, eviction):
    """3 replica groups, one SIGKILLed, given a notice or vanished, one added back."""
    model, nproc = SURVIVOR_RUNS[eviction]
    report = run_drill(_eviction_and_join(workdir, eviction, model, nproc))
    _assert_the_survivors_trained_on(report, workdir, eviction, nproc)


@pytest.mark.timeout(150)
def test_the_job_rides_out_a_lighthouse_restart(workdir):
    """The lighthouse (it keeps nothing) is down for 3 s: the groups retry their quorum, no
    worker restarts, no step is lost, and an eviction afterwards goes through the new one."""
    cfg = DrillConfig(
        spec=_spec(workdir, steps=200),
        workdir=workdir,
        nodes=3,
        fault="rendezvous-restart",
        outage_s=3.0,
        target_steps=200,
        evict_at_step=30,
        scale_out_after_s=None,
        timeout_s=within(140),
    )
    report = run_drill(cfg)
    assert report.passed, report.summary()
    (outage,) = report.outages
    assert outage.down_s is not None and outage.restarts == 0 and outage.lost_steps == 0
    assert outage.stall_s is not None  # training went on after it
    assert report.restart_rounds == 0 and report.final_step == 200


@pytest.mark.timeout(90)
def test_torchft_servers_listen_on_loopback_only(workdir):
    """The lighthouse and each group's manager and weight server listen on 127.0.0.1, never
    on every address (TorchFT's defaults)."""
    spec = _spec(workdir, steps=100000)
    with LocalTarget(spec, workdir) as cluster:
        cluster.add_node()
        cluster.add_node()
        deadline = time.monotonic() + within(60)
        groups: list[dict] = []
        while time.monotonic() < deadline and len(groups) < 2:
            groups = [e for e in cluster.events() if e["event"] == "replica_group"]
            time.sleep(0.2)
        assert len(groups) == 2, cluster.events()
        ports = {cluster.spec.lighthouse_endpoint.rpartition(":")[2]}
        for g in groups:
            for url in (g["manager"], g["weights"]):
                parsed = urllib.parse.urlsplit(url)
                assert parsed.hostname == "127.0.0.1", url
                ports.add(str(parsed.port))
        listening = {
            str(c.laddr.port): c.laddr.ip for c in psutil.net_connections("inet") if c.status == psutil.CONN_LISTEN
        }
        for port in ports:
            assert listening.get(port) == "127.0.0.1", (port, listening.get(port))


def _wait_for(cluster: LocalTarget, predicate, timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recorded = cluster.events()
        if predicate(recorded):
            return recorded
        if not cluster.alive_nodes:
            break
        time.sleep(0.2)
    return cluster.events()


@pytest.mark.timeout(150)
def test_a_checkpoint_of_one_mode_resumes_the_other(workdir):
    """Elastic to per-step and back: each resumes from the other's newest checkpoint."""
    elastic = _spec(workdir, fault_tolerance="elastic", min_nodes=1, max_nodes=1, script_args=("--steps", "20"))
    with LocalTarget(elastic, workdir / "elastic") as cluster:
        cluster.add_node()
        assert cluster.wait(within(90)) and cluster.nodes[0].exit_code == 0
    per_step = _spec(workdir, min_nodes=1, max_nodes=1, script_args=("--steps", "40"))
    with LocalTarget(per_step, workdir / "per-step") as cluster:
        cluster.add_node()
        assert cluster.wait(within(90)) and cluster.nodes[0].exit_code == 0
    back = _spec(workdir, fault_tolerance="elastic", min_nodes=1, max_nodes=1, script_args=("--steps", "60"))
    with LocalTarget(back, workdir / "back") as cluster:
        cluster.add_node()
        assert cluster.wait(within(90)) and cluster.nodes[0].exit_code == 0
    resumed = [
        [e["step"] for e in events.read(workdir / run / "events.jsonl") if e["event"] == "checkpoint_loaded"]
        for run in ("per-step", "back")
    ]
    assert resumed == [[20], [40]]
    assert _checkpointed_steps(workdir)[-1] == 60

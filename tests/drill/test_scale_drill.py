"""Scaling a running job on the local target, as `elastic-lab scale` does on a cluster: nodes
join (a scale-out) and the newest leave with a grace to save and go (a scale-in), while the
job trains; real etcd, real torchrun agents (per-step mode: a real lighthouse)."""

from __future__ import annotations

import pytest

from lab.drill.run import DrillConfig, drill_problems, run_drill
from lab.vocab import events
from lab.vocab.events import unknown_fields
from lab.vocab.job import JobSpec
from tests.drill.ledger_checks import assert_every_sample_trained_once
from tests.patience import within


def _spec(workdir) -> JobSpec:
    # An epoch is 512 samples, 8 per worker and step: every world size reshards it.
    args = ("--steps", "420", "--step-time", "0.04", "--dataset-size", "512", "--batch-size", "8")
    return JobSpec(
        name="t",
        min_nodes=2,
        max_nodes=4,
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=50,
        script_args=args,
    )


@pytest.mark.processes
@pytest.mark.long
def test_a_job_scaled_out_then_in_while_it_trains_trains_every_sample_once(workdir):
    cfg = DrillConfig(
        spec=_spec(workdir),
        workdir=workdir,
        nodes=3,
        fault="scale",
        scale_to=(4, 2),
        target_steps=420,
        evict_at_step=60,
        timeout_s=within(200),
    )
    report = run_drill(cfg)
    assert report.passed, report.summary()
    assert report.finished and report.final_step == 420
    # Each size was reached: world 4 after the join, world 2 after two nodes left.
    assert [(s.from_nodes, s.to_nodes, s.world_after) for s in report.scaling] == [(3, 4, 4), (4, 2, 2)]
    assert all(s.reached_s is not None and s.reached_s > 0 for s in report.scaling)
    (join,) = report.joins
    assert join.world_after == 4 and join.lost_steps == 0
    leaves = report.evictions
    assert [ev.cause for ev in leaves] == ["scale-in", "scale-in"]
    assert {ev.node for ev in leaves} == {"node-2", "node-3"}  # the newest two: node-3 joined last
    assert all(ev.lost_steps == 0 for ev in leaves), report.summary()
    # Two nodes leave at once: the second's worker may see the first's sockets close before it
    # takes its notice, and leave through the collective's failure instead (its peers' saves hold
    # the step): at least one emergency save, no step lost either way.
    assert any(ev.emergency_save_s is not None for ev in leaves), report.summary()
    summary = report.summary()
    assert "scaled 3 -> 4 node(s)" in summary and "node-3 left (scale-in, SIGTERM with a grace)" in summary
    recorded = events.read(workdir / "events.jsonl")
    assert [e for e in recorded if unknown_fields(e)] == []
    # Through the join and the leaves (a world of 3, 4, then 2), every sample of each epoch was
    # trained exactly once: the sampler walks by global position, which the checkpoints carry.
    assert_every_sample_trained_once(report.ledger, full_epochs=5)


# Per-step mode: a group that joins starts, heals and trains in a quorum while the others train
# on; its steps last long enough for that.
PER_STEP_STEPS = 240


@pytest.mark.processes
@pytest.mark.long
def test_a_per_step_job_scaled_out_then_in_trains_every_sample_once(workdir):
    """Per-step mode (TorchFT): a group joins, healing from a live peer, then the two newest
    groups leave with a grace while the others train on (no worker restarts): the ledger holds
    every sample of each epoch once (8 x 4 samples a step whatever the quorum, 512 an epoch)."""
    args = ("--steps", str(PER_STEP_STEPS), "--step-time", "0.1", "--dataset-size", "512", "--batch-size", "8")
    cfg = DrillConfig(
        spec=_spec(workdir).replace(fault_tolerance="per-step", script_args=args),
        workdir=workdir,
        nodes=3,
        fault="scale",
        scale_to=(4, 2),
        target_steps=PER_STEP_STEPS,
        evict_at_step=30,
        timeout_s=within(200),
    )
    report = run_drill(cfg)
    assert report.passed, report.summary()
    assert report.finished and report.final_step == PER_STEP_STEPS and report.restart_rounds == 0
    assert [(s.from_nodes, s.to_nodes) for s in report.scaling] == [(3, 4), (4, 2)]
    assert all(s.reached_s is not None for s in report.scaling), report.summary()
    assert [ev.cause for ev in report.evictions] == ["scale-in", "scale-in"]
    recorded = events.read(workdir / "events.jsonl")
    assert any(e["event"] == "samples" and e.get("replica") == "node-3" for e in recorded), "node-3 never trained"
    assert_every_sample_trained_once(report.ledger, full_epochs=10)


def test_bad_scale_sizes_are_refused_before_anything_starts(workdir):
    spec = _spec(workdir)

    def problems(fault, sizes, nodes=3):
        kw = {"eviction": "hard", "notice_s": 30.0, "evict_at_step": 10, "target_steps": 100, "victim": -1}
        return drill_problems(spec, fault=fault, nodes=nodes, scale_to=sizes, **kw)

    assert problems("scale", (4, 2)) == []
    assert problems("scale", (2,), nodes=2) != []  # the size it already has
    [outside] = problems("scale", (5,))
    assert outside.key == "scale_to" and "node counts in the job's range 2..4" in outside.expected
    [none] = problems("scale", ())
    assert "one or more node counts" in none.expected
    [stray] = problems("node", (4,))
    assert stray.expected == "none without fault 'scale'"

"""Borrowed nodes taken back on the local target: the job's burst nodes (started last) are
reclaimed together by their owners' work, with their pods' grace period or none; the job
trains at its core meanwhile and grows back when the capacity is free again. Real etcd, real
torchrun agents (per-step mode: a real lighthouse)."""

from __future__ import annotations

import pytest

from lab.drill.run import DrillConfig, run_drill
from lab.vocab import events
from lab.vocab.events import CAUSE_RECLAIM, unknown_fields
from lab.vocab.job import JobSpec
from lab.vocab.problems import InvalidInput
from tests.drill.ledger_checks import assert_every_sample_trained_once
from tests.patience import within

# Per mode: the steps and seconds of simulated compute a step, enough for the job to train on
# while the borrowed nodes leave, stay gone and start again on a loaded machine.
STEPS = {"elastic": 800, "per-step": 500}
STEP_TIME = {"elastic": "0.03", "per-step": "0.06"}


def _spec(workdir, mode: str = "elastic", **kw) -> JobSpec:
    """A core of 2 nodes and 2 borrowed ones; an epoch of 512 samples, 8 per worker and step
    (fixed-global: 32 a step whatever the world size)."""
    args = ("--steps", str(STEPS[mode]), "--step-time", STEP_TIME[mode], "--dataset-size", "512", "--batch-size", "8")
    base = {"name": "t", "min_nodes": 2, "max_nodes": 4, "burst_nodes": 2, "checkpoint_every_steps": 50}
    return JobSpec(
        **{**base, **kw},
        checkpoint_dir=str(workdir / "ckpt"),
        script_args=args,
        fault_tolerance=mode,
    )


def _reclaim(workdir, mode: str, grace_s: float | None) -> DrillConfig:
    return DrillConfig(
        spec=_spec(workdir, mode),
        workdir=workdir,
        nodes=4,
        fault="reclaim",
        reclaim_grace_s=grace_s,
        reclaim_for_s=2.0,
        target_steps=STEPS[mode],
        evict_at_step=60,
        timeout_s=within(240),
    )


@pytest.mark.processes
@pytest.mark.long
@pytest.mark.timeout(400)
@pytest.mark.parametrize("mode", ["elastic", "per-step"])
def test_a_reclaim_with_a_grace_shrinks_the_job_to_its_core_and_it_grows_back(workdir, mode):
    report = run_drill(_reclaim(workdir, mode, grace_s=3.0))
    assert report.passed and report.finished, report.summary()
    (r,) = report.reclaims
    assert (r.nodes, r.core_nodes, r.full_nodes, r.grace_s) == (2, 2, 4, 3.0)
    assert r.lowest_nodes == 2 and r.grown_back_s is not None, report.summary()
    taken = [ev for ev in report.evictions if ev.cause == CAUSE_RECLAIM]
    assert sorted(ev.node for ev in taken) == ["node-2", "node-3"]  # the borrowed ones, started last
    assert all(ev.lost_steps == 0 for ev in taken), report.summary()
    assert report.preemptions == 0 and report.max_restart_count == 0
    assert sorted(j.node for j in report.joins) == ["node-4", "node-5"]
    recorded = events.read(workdir / "events.jsonl")
    assert [e for e in recorded if unknown_fields(e)] == []
    parts = [e.get("part") for e in recorded if e["event"] == "node_added"]
    assert parts == ["core", "core", "burst", "burst", "burst", "burst"]
    assert "taken back by their owners" in report.summary()
    assert_every_sample_trained_once(report.ledger, full_epochs=STEPS[mode] * 32 // 512)


@pytest.mark.processes
@pytest.mark.long
@pytest.mark.timeout(400)
def test_a_reclaim_without_a_grace_loses_at_most_an_interval_and_never_the_core(workdir):
    report = run_drill(_reclaim(workdir, "elastic", grace_s=None))
    assert report.passed and report.finished, report.summary()
    (r,) = report.reclaims
    assert r.grace_s is None and r.lowest_nodes == 2 and not r.below_core
    assert all(ev.kind == "hard" and (ev.lost_steps or 0) <= 50 for ev in report.evictions), report.summary()
    assert_every_sample_trained_once(report.ledger, full_epochs=STEPS["elastic"] * 32 // 512)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"spec": {"burst_nodes": 0}}, "burst_nodes=0 is invalid: expected at least 1 with fault 'reclaim'"),
        ({"nodes": 3}, "nodes=3 is invalid: expected max_nodes (4) with fault 'reclaim'"),
        ({"reclaim_grace_s": 0.0}, "reclaim_grace_s=0.0 is invalid: expected seconds in (0, 600], or none"),
        ({"reclaim_for_s": -1.0}, "reclaim_for_s=-1.0 is invalid: expected seconds in [0, 3600]"),
    ],
)
def test_a_reclaim_that_cannot_be_drilled_is_refused_before_anything_starts(workdir, change, named):
    cfg = _reclaim(workdir, "elastic", grace_s=3.0)
    spec = cfg.spec.replace(**change.pop("spec", {}))
    with pytest.raises(InvalidInput, match=named.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        DrillConfig(**{**vars(cfg), "spec": spec, **change}).validate()

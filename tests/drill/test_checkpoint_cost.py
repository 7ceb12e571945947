"""A save's cost to training from a job's events, and the interval it calls for."""

from __future__ import annotations

import pytest

from lab.drill.analysis import analyze
from lab.drill.checkpoint_cost import advice, save_cost
from lab.vocab.checkpoint_interval import daly_interval_s, job_mtbf_s


def _job(node: str = "a", slow: float = 0.0) -> list[dict]:
    """40 steps of 0.1 s; background saves at steps 10 and 30 that block 0.05 s each and slow
    the two steps after them by `slow` seconds each."""
    events, t = [], 100.0
    for step in range(1, 41):
        seconds = 0.1 + (slow if step in (11, 12, 31, 32) else 0.0)
        t += seconds
        events.append(
            {"t": t, "event": "step", "step": step, "seconds": seconds, "node": node, "loss": 1.0, "world_size": 3}
        )
        if step in (12, 32):  # the save started at step 10 / 30 commits here
            base = {"event": "checkpoint_saved", "reason": "interval", "node": node, "bytes": 1000}
            events.append({"t": t + 0.001, "step": step - 2, "seconds": 0.25, "blocking_s": 0.05, **base})
    return events


def test_a_save_costs_what_it_blocks_and_what_it_slows():
    cost = save_cost(_job(slow=0.3))
    assert cost is not None and cost.saves == 2
    assert cost.step_s == pytest.approx(0.1) and cost.blocked_s == pytest.approx(0.05)
    assert cost.cost_s == pytest.approx(0.05 + 2 * 0.3)
    assert save_cost(_job(slow=0.0)).cost_s == pytest.approx(0.05)


def test_one_nodes_saves_are_counted_when_several_report():
    """Per-step groups each save and step: the cost is one node's, not their sum."""
    mixed = sorted(_job("a", slow=0.3) + _job("b", slow=0.3), key=lambda e: e["t"])
    cost = save_cost(mixed)
    assert cost.saves == 2 and cost.cost_s == pytest.approx(0.05 + 2 * 0.3)


def test_no_interval_save_no_cost():
    assert save_cost([e for e in _job() if e["event"] == "step"]) is None


def test_the_interval_at_each_band_is_dalys_for_the_jobs_nodes():
    found = advice(_job(slow=0.3), nodes=3, every_steps=20)
    assert found is not None and found.every_s == pytest.approx(2.0)
    first = found.bands[0]
    assert first.band == "<5%" and first.interval_s == pytest.approx(daly_interval_s(0.65, job_mtbf_s(0.025, 3)))
    assert first.interval_steps == round(first.interval_s / 0.1)
    text = found.summary()
    assert "a save costs training 0.650 s (median of 2, 0.050 s blocked); every 20 steps is 2.0 s here" in text
    assert "interval for 3 node(s) at each monthly eviction band (Daly): <5% " in text


def test_the_drill_report_gives_the_interval():
    events = [{"t": 100.0, "event": "node_added", "node": n} for n in ("a", "b", "c")] + _job(slow=0.3)
    report = analyze(events, [], target_steps=40, checkpoint_every=20, node_exit_codes={})
    assert report.checkpoint_advice is not None and report.checkpoint_advice["nodes"] == 3
    assert "interval for 3 node(s) at each monthly eviction band" in report.summary()


def test_a_derived_interval_is_reported_as_the_longest_the_job_chose():
    events = [{"t": 100.0, "event": "node_added", "node": n} for n in ("a", "b", "c")] + _job(slow=0.3)
    chose = {"event": "checkpoint_interval", "next_step": 0, "source": "band"}
    events += [{"t": 101.0, "step": 10, "steps": 20, **chose}, {"t": 103.0, "step": 30, "steps": 35, **chose}]
    report = analyze(events, [], target_steps=40, checkpoint_every=0, node_exit_codes={})
    assert report.checkpoint_derived and report.checkpoint_every == 35
    assert "derived while it ran, at most every 35 steps (3.5 s here)" in report.summary()
    # The interval a failure meets on average: each weighted by its length, (20^2 + 35^2) / 55.
    advice_ = report.checkpoint_advice
    assert advice_ is not None and advice_["typical_steps"] == pytest.approx((20 * 20 + 35 * 35) / 55)
    assert advice_["typical_s"] == pytest.approx(advice_["typical_steps"] * advice_["cost"]["step_s"])
    assert advice_["mean_steps"] == 27.5  # and how often the saves came: (20 + 35) / 2
    # before any interval was chosen, the first save's distance from a start bounds the work lost
    early = analyze(events[:-2], [], target_steps=40, checkpoint_every=0, node_exit_codes={})
    assert early.checkpoint_every == 10


def test_a_report_says_whether_its_jobs_checkpoints_were_sharded():
    """Sharded saves (every rank's shards; no rank can save alone) mark their events: the
    goodput model then counts a loss without notice as redoing the work since the last save."""
    nodes = [{"t": 100.0, "event": "node_added", "node": n} for n in ("a", "b", "c")]
    whole = analyze(nodes + _job(), [], target_steps=40, checkpoint_every=20, node_exit_codes={})
    sharded_job = [{**e, "sharded": True} if e["event"] == "checkpoint_saved" else e for e in _job()]
    sharded = analyze(nodes + sharded_job, [], target_steps=40, checkpoint_every=20, node_exit_codes={})
    assert (whole.checkpoints_sharded, sharded.checkpoints_sharded) == (False, True)
    assert sharded.to_dict()["checkpoints_sharded"] is True

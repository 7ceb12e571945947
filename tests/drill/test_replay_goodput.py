"""The replay's goodput from a drill's events: the capacity offered, the useful samples of the
final history inside the window, one node's throughput per size, and the wipeouts resumed."""

from __future__ import annotations

import pytest

from lab.drill.replay_goodput import replay_goodput, throughput


def _capacity(t: float, alive: int, change: str) -> dict:
    return {"t": t, "event": "capacity", "alive": alive, "slots": 2, "change": change}


def _step(t: float, step: int, world: int, samples: int = 10) -> dict:
    return {"t": t, "event": "step", "step": step, "world_size": world, "samples": samples, "rank": 0}


def test_the_bound_is_the_capacity_offered_at_one_nodes_full_size_throughput():
    recorded = [
        _capacity(0.0, 2, "start"),
        *(_step(0.5 + i, i, 2) for i in range(1, 5)),  # 10 samples a second at 2 nodes: 5 a node
        _capacity(4.0, 1, "lost"),
        *(_step(4.5 + i, 4 + i, 1) for i in range(1, 3)),  # 10 a second at 1 node
        _capacity(6.0, 0, "lost"),
        _capacity(8.0, 2, "back"),
        _step(8.5, 5, 2),  # step 5 trained again after a resume: it replaces the first
        _step(9.5, 6, 2),
        _step(10.5, 7, 2),  # after the window's end: not counted
        _capacity(10.0, 2, "end"),
    ]
    g = replay_goodput(recorded)
    assert g is not None
    assert g.capacity_node_s == pytest.approx(2 * 4 + 1 * 2 + 0 * 2 + 2 * 2)
    assert g.full_per_node == pytest.approx(5.0)
    assert g.bound == pytest.approx(14 * 5.0)
    assert g.useful_samples == 10 * 6  # steps 1-6, step 5 counted once
    assert g.ratio == pytest.approx(60 / 70)
    assert [(t.nodes, t.per_node) for t in g.per_size] == [(2, pytest.approx(5.0)), (1, pytest.approx(10.0))]
    assert (g.wipeouts, g.wipeouts_resumed) == (1, 1)
    assert "85.7% of the capacity bound" in g.summary() and "1 node(s) 10" in g.summary()
    # At each size's own rate the 2 node-seconds at 1 node could have trained 20 samples, not 10:
    # the stricter bound is 12 x 5 + 2 x 10.
    assert g.offered_by_size == ((2, pytest.approx(12.0)), (1, pytest.approx(2.0)))
    assert g.size_bound == pytest.approx(80.0) and g.size_ratio == pytest.approx(60 / 80)
    assert "75.0% of the bound at each size's own rate" in g.summary()


def test_no_replay_no_goodput_and_a_job_never_at_full_size_has_no_bound():
    assert replay_goodput([_step(1.0, 1, 2)]) is None
    half = replay_goodput([_capacity(0.0, 1, "start"), _step(1.0, 1, 1), _step(2.0, 2, 1), _capacity(3.0, 1, "end")])
    assert half is not None and half.bound is None and half.ratio is None
    assert "no bound" in half.summary()


def test_per_step_throughput_counts_the_quorums_groups_as_nodes():
    steps = [{**_step(float(i), i, 2, 30), "participants": 3, "quorum": 1} for i in range(1, 4)]
    (at,) = throughput(steps, nproc_per_node=1)
    assert (at.nodes, at.per_node, at.steps) == (3, pytest.approx(10.0), 2)


def _wiped_run(resumed_from: int) -> list[dict]:
    """Two nodes train steps 1-8, capacity goes to zero at 8.5 and comes back at 10; the job
    resumes from `resumed_from` and trains on to step 12."""
    recorded = [_capacity(0.0, 2, "start"), *(_step(float(i), i, 2) for i in range(1, 9))]
    recorded += [_capacity(8.5, 0, "lost"), _capacity(10.0, 2, "back")]
    recorded += [_step(10.5 + i, resumed_from + 1 + i, 2) for i in range(12 - resumed_from)]
    return [*recorded, _capacity(30.0, 2, "end")]


@pytest.mark.parametrize(("resumed_from", "lost"), [(8, 0), (5, 3)], ids=["saved-at-the-notice", "from-a-checkpoint"])
def test_a_wipeout_costs_the_steps_trained_again_after_it(resumed_from, lost):
    g = replay_goodput(_wiped_run(resumed_from))
    assert g is not None and (g.wipeouts, g.wipeouts_resumed) == (1, 1)
    assert g.wipeout_steps_lost == (lost,)
    assert g.to_dict()["wipeout_steps_lost"] == [lost]
    assert f"1 resumed, steps lost {lost}" in g.summary()


def test_a_wipeout_never_resumed_costs_no_steps_it_can_count():
    recorded = [_capacity(0.0, 2, "start"), *(_step(float(i), i, 2) for i in range(1, 5)), _capacity(4.5, 0, "lost")]
    g = replay_goodput([*recorded, _capacity(9.0, 0, "end")])
    assert g is not None and (g.wipeouts, g.wipeouts_resumed, g.wipeout_steps_lost) == (1, 0, ())


def test_cost_per_million_useful_samples_pays_the_capacity_offered_and_on_demand_pays_every_slot():
    g = replay_goodput(_wiped_run(8))
    assert g is not None
    # 2 nodes offered for 8.5 s and 20 s: 57 node-seconds; 12 steps of 10 samples.
    assert g.capacity_node_s == pytest.approx(57.0) and g.useful_samples == 120
    assert g.spot_cost_per_million(0.9) == pytest.approx(0.9 * 57 / 3600 / 120 * 1e6)
    # On demand trains 5 samples a second a node (10 a second at 2 nodes), with no loss.
    assert g.full_per_node == pytest.approx(5.0)
    assert g.on_demand_cost_per_million(3.06) == pytest.approx(3.06 / 3600 / 5.0 * 1e6)
    nothing = replay_goodput([_capacity(0.0, 2, "start"), _capacity(1.0, 2, "end")])
    assert nothing is not None
    assert nothing.spot_cost_per_million(0.9) is None and nothing.on_demand_cost_per_million(3.06) is None

"""The goodput model fed with a trace window's capacity (lab.vocab.trace_goodput): its arithmetic
worked out by hand on small windows (a wipeout, partial capacity, a burst, notices, throughput
by size) for each mode, and its check against a replay drill's report."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from lab.vocab.replay_schedule import BACK, LOST, ReplaySchedule, SlotChange
from lab.vocab.spot_goodput import MeasuredCosts
from lab.vocab.trace_goodput import (
    WITHIN_POINTS,
    check_against_replay,
    replay_prediction,
    report_costs,
    schedule_notice_s,
    trace_goodput,
)
from lab.vocab.trace_stats import CapacityStats, Moment, capacity_stats, schedule_stats

# Round figures, so that every loss below can be counted by hand.
COSTS = MeasuredCosts(
    elastic_recovery_s=2.0,
    elastic_notice_recovery_s=1.0,
    elastic_join_stall_s=0.5,
    per_step_stall_s=0.3,
    per_step_join_stall_s=0.2,
    per_step_overhead=0.25,
    restart_s=10.0,
    node_start_s=1.0,
    resume_s=3.0,
    save_cost_s=1.0,
    notice_lead_s=math.inf,  # a notice that says no end: the node leaves when told
)
INTERVAL_S = 100.0  # seconds of training between checkpoints: they take 1/101 of what is trained


def window(moments: list[Moment], full: int = 3, span_s: float = 1000.0, alive: int = 3) -> CapacityStats:
    return capacity_stats(alive, moments, full, 0.0, span_s)


def predicted(mode: str, stats: CapacityStats, costs: MeasuredCosts = COSTS, **kw):
    return trace_goodput(mode, stats, costs, interval_s=INTERVAL_S, **kw)


def test_with_no_change_every_mode_pays_only_its_checkpoints_and_per_step_its_overhead():
    steady = window([])
    assert predicted("elastic", steady).ratio == pytest.approx(1 - 1 / 101)
    assert predicted("restart-everything", steady).ratio == pytest.approx(1 - 1 / 101)
    assert predicted("per-step", steady).ratio == pytest.approx((1 - 1 / 101) / 1.25)


WIPEOUT = [(400.0, 3, 0), (600.0, 0, 3)]  # every node lost at 400 s, all back at 600 s: 2400 node-s offered


def test_a_wipeout_without_notice_costs_elastic_a_resume_and_the_work_since_its_last_save():
    """400 s trained since the start: the last checkpoint was up to an interval before, half of
    it on average (E[min(400, U x 100)] = 50 s of 3 nodes); the resume stalls 3 nodes 3 s."""
    g = predicted("elastic", window(WIPEOUT))
    trained = 3 * 400 + 3 * (400 - 3)
    assert g.bound_node_s == 2400 and g.offered_node_s == 2400
    assert dict(g.lost_node_s) == pytest.approx(
        {"stalls": 9.0, "redone": 150.0, "late and early": 0.0, "checkpoints": trained / 101}
    )
    assert g.ratio == pytest.approx((2400 - 9 - 150 - trained / 101) / 2400)


def test_a_wipeout_costs_restart_everything_its_restart_of_every_node():
    g = predicted("restart-everything", window(WIPEOUT))
    trained = 3 * 400 + 3 * (400 - 10)
    assert dict(g.lost_node_s) == pytest.approx(
        {"stalls": 30.0, "redone": 150.0, "late and early": 0.0, "checkpoints": trained / 101}
    )
    assert predicted("elastic", window(WIPEOUT)).ratio - g.ratio == pytest.approx(
        (30 - 9 + (trained - 2391) / 101) / 2400
    )


def test_work_redone_at_a_wipeout_is_only_that_since_the_last_change():
    """A loss at 390 s makes the survivors save: the wipeout at 400 s redoes what they trained
    after their recovery (8 s of 2 nodes, less the chance a checkpoint fell in it)."""
    g = predicted("elastic", window([(390.0, 1, 0), (400.0, 2, 0), (600.0, 0, 3)]))
    assert g.lost_node_s["redone"] == pytest.approx(2 * (8 - 8**2 / 200))


PARTIAL = [(200.0, 1, 0), (700.0, 0, 1)]  # one of 3 lost for 500 s: 2500 node-s offered


def test_with_sharded_checkpoints_a_loss_without_notice_redoes_the_work_since_the_last_save():
    """No rank holds the whole state, so the survivors cannot save the step they hold: at the
    loss at 200 s they resume from the last checkpoint (E[min(200, U x 100)] = 50 s of the 3
    nodes' work), as at a wipeout. With a notice every rank saves first, and per-step survivors
    train on: nothing redone."""
    sharded = replace(COSTS, loss_redoes=True)
    assert predicted("elastic", window(PARTIAL)).lost_node_s["redone"] == 0.0
    assert predicted("elastic", window(PARTIAL), sharded).lost_node_s["redone"] == pytest.approx(3 * 50.0)
    assert predicted("elastic", window(PARTIAL), sharded, notice_s=30.0).lost_node_s["redone"] == 0.0
    assert predicted("per-step", window(PARTIAL), sharded).lost_node_s["redone"] == 0.0


def test_a_notice_whose_save_was_missed_redoes_like_no_notice_for_its_share_of_the_losses():
    """A sharded job's notice too short for its ranks to save together: with half the saves
    missed, half the redo of a loss without notice (per-step survivors still train on)."""
    missing = replace(COSTS, loss_redoes=True, notice_misses=0.5)
    assert predicted("elastic", window(PARTIAL), missing, notice_s=30.0).lost_node_s["redone"] == pytest.approx(
        0.5 * 3 * 50.0
    )
    assert predicted("elastic", window(PARTIAL), replace(missing, notice_misses=0.0), notice_s=30.0).lost_node_s[
        "redone"
    ] == pytest.approx(0.0)
    assert predicted("per-step", window(PARTIAL), missing, notice_s=30.0).lost_node_s["redone"] == 0.0
    # a whole checkpoint's survivors save alone: a missed notice redoes nothing but at a wipeout
    assert predicted("elastic", window(PARTIAL), replace(missing, loss_redoes=False), notice_s=30.0).lost_node_s[
        "redone"
    ] == pytest.approx(0.0)


def test_partial_capacity_trains_elastic_and_not_restart_everything():
    """Elastic: the survivors' recovery (2 s of 2 nodes), the node back training 1 s after it is
    given (its start), then the join's stall (0.5 s of 3 nodes). Restart-everything: nothing
    while partial, the work since its last checkpoint lost at the drop, a restart at the return."""
    elastic = predicted("elastic", window(PARTIAL))
    trained = 600 + 2 * 498 + 2 * 1 + 3 * 298.5
    assert elastic.bound_node_s == 2500 and elastic.offered_node_s == 2500
    assert dict(elastic.lost_node_s) == pytest.approx(
        {"stalls": 5.5, "redone": 0.0, "late and early": 1.0, "checkpoints": trained / 101}
    )
    restart = predicted("restart-everything", window(PARTIAL))
    trained = 600 + 3 * 290
    assert restart.offered_node_s == 1500  # the time at full size only
    assert restart.ratio == pytest.approx((1500 - 30 - 150 - trained / 101) / 2500)
    assert restart.ratio < 0.6 < 0.98 < elastic.ratio


def test_throughput_by_size_counts_what_fewer_nodes_train():
    """One node trains 1.2 times as fast at 2 nodes (a fixed global batch, fewer to
    synchronise): elastic's time at 2 nodes is worth 2.4 nodes, and the ratio can pass 1."""
    faster = predicted("elastic", window(PARTIAL), per_node={3: 100.0, 2: 120.0})
    assert faster.offered_node_s == pytest.approx(1500 + 2.4 * 500)
    assert faster.ratio > 1 > predicted("elastic", window(PARTIAL)).ratio
    flat = predicted("restart-everything", window(PARTIAL))
    assert predicted("restart-everything", window(PARTIAL), per_node={3: 100.0, 2: 120.0}) == flat
    # a size not measured takes the nearest measured one's throughput (1 node: 2 nodes')
    one = predicted("elastic", window([(200.0, 2, 0), (700.0, 0, 2)]), per_node={3: 100.0, 2: 120.0})
    assert one.offered_node_s == pytest.approx(1500 + 1.2 * 500)


def test_a_burst_stalls_once_not_once_per_loss():
    """Two nodes lost half a second apart: the second loss starts the recovery over, 2 s from
    its own time, so the job stalls 2.5 s in all, not 2 + 2."""
    g = predicted("elastic", window([(100.0, 1, 0), (100.5, 1, 0), (500.0, 0, 2)]))
    # 0.5 s of 2 nodes, 2 s of 1, then the join: 0.5 s of 3
    assert g.lost_node_s["stalls"] == pytest.approx(0.5 * 2 + 2 * 1 + 0.5 * 3)
    per_step = predicted("per-step", window([(100.0, 1, 0), (100.5, 1, 0), (500.0, 0, 2)]))
    assert per_step.lost_node_s["stalls"] == pytest.approx((0.3 * 2 + 0.3 * 1 + 0.2 * 3) / 1.25)


def test_a_notice_moves_the_loss_to_when_the_node_is_told_and_saves_the_work():
    """AWS's 120 s at a speed-up of 4: the nodes leave 30 s of replay before the wipeout, and
    saved first: nothing is redone, 3 nodes x 30 s are lost instead."""
    stats = window([(1600.0, 3, 0), (2400.0, 0, 3)], span_s=4000.0)
    g = predicted("elastic", stats, notice_s=120.0, speedup=4.0)
    trained = 3 * 370 + 3 * (400 - 3)
    assert dict(g.lost_node_s) == pytest.approx(
        {"stalls": 9.0, "redone": 0.0, "late and early": 90.0, "checkpoints": trained / 101}
    )
    # The same window at speed-up 1, four times shorter, with a notice four times shorter.
    assert predicted("elastic", window(WIPEOUT), notice_s=30.0) == g
    # A partial loss with a notice: the survivors' recovery is the notice's.
    told = predicted("elastic", window(PARTIAL), notice_s=10.0)
    assert told.lost_node_s["late and early"] == pytest.approx(1.0 + 10.0)
    assert told.lost_node_s["stalls"] == pytest.approx(1.0 * 2 + 0.5 * 3)


def test_a_notice_that_says_when_is_trained_through_and_the_node_leaves_its_lead_before():
    """The same wipeout with AWS's notice trained through: the nodes leave 5 s before the end,
    not 30 s; a notice shorter than the lead is left at when told."""
    stats = window([(1600.0, 3, 0), (2400.0, 0, 3)], span_s=4000.0)
    through = predicted("elastic", stats, notice_s=120.0, speedup=4.0, costs=replace(COSTS, notice_lead_s=5.0))
    assert through.lost_node_s["late and early"] == pytest.approx(3 * 5.0)
    assert through.lost_node_s["redone"] == 0.0
    short = predicted("elastic", stats, notice_s=8.0, speedup=4.0, costs=replace(COSTS, notice_lead_s=5.0))
    assert short.lost_node_s["late and early"] == pytest.approx(3 * 2.0)


def test_a_clusters_worker_trains_through_its_notice_only_as_long_as_its_pods_grace_period():
    """On a cluster the kubelet kills a noticed worker when its pod's grace period ends: of a
    30 s notice (AWS's 120 s at a speed-up of 4) a pod with 10 s of grace trains 10 s less its
    lead, and leaves 25 s before the end; a notice within the grace is trained through whole."""
    stats = window([(1600.0, 3, 0), (2400.0, 0, 3)], span_s=4000.0)
    cluster = replace(COSTS, notice_lead_s=5.0, trained_through_s=10.0)
    capped = predicted("elastic", stats, notice_s=120.0, speedup=4.0, costs=cluster)
    assert capped.lost_node_s["late and early"] == pytest.approx(3 * (30.0 - 10.0 + 5.0))
    inside = predicted("elastic", stats, notice_s=32.0, speedup=4.0, costs=cluster)
    assert inside.lost_node_s["late and early"] == pytest.approx(3 * 5.0)


def test_a_notice_is_never_before_the_change_before_it():
    """A node told at 70 s, the two others at 100 s (the moment before theirs, not 75 s): the
    survivors' recovery from 70 s, then the wipeout, nothing redone."""
    g = predicted("elastic", window([(100.0, 1, 0), (105.0, 2, 0), (600.0, 0, 3)]), notice_s=30.0)
    assert g.lost_node_s["redone"] == 0.0
    assert g.lost_node_s["stalls"] == pytest.approx(2 * 1 + 3 * 3)
    trained = g.offered_node_s - g.lost_node_s["late and early"] - g.lost_node_s["stalls"]
    assert trained == pytest.approx(3 * 70 + 2 * 29 + 3 * (400 - 3))


def test_a_schedule_is_predicted_from_its_own_slots_and_notices():
    schedule = ReplaySchedule(
        source="by hand",
        window_s=(0.0, 1000.0),
        speedup=1.0,
        slots=3,
        rule="the slots named",
        alive_at_start=frozenset({0, 1, 2}),
        changes=(SlotChange(200.0, 2, LOST, notice_s=10.0), SlotChange(700.0, 2, BACK)),
        duration_s=1000.0,
    )
    assert schedule_notice_s(schedule) == 10.0
    assert replay_prediction("elastic", schedule, COSTS, interval_s=INTERVAL_S) == trace_goodput(
        "elastic", schedule_stats(schedule), COSTS, notice_s=10.0, interval_s=INTERVAL_S
    )


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        ({"mode": "spot-only"}, "mode='spot-only': expected one of elastic, per-step, restart-everything"),
        ({"speedup": 0.0}, "speedup=0.0: expected a number > 0"),
        ({"per_node": {2: 120.0}}, r"per_node=\{2: 120.0\}: expected a throughput at full size \(3 nodes\)"),
        ({"interval_s": 0.0}, "interval_s=0.0: expected seconds > 0"),
    ],
)
def test_a_bad_argument_is_named(kw, named):
    args = {"mode": "elastic", "stats": window(PARTIAL), "costs": COSTS} | kw
    with pytest.raises(ValueError, match=named):
        trace_goodput(**args)


SCHEDULE = ReplaySchedule(
    source="by hand",
    window_s=(0.0, 1000.0),
    speedup=1.0,
    slots=3,
    rule="the slots named",
    alive_at_start=frozenset({0, 1, 2}),
    changes=(SlotChange(200.0, 2, LOST), SlotChange(700.0, 2, BACK)),
    duration_s=1000.0,
)


def report(ratio: float | None) -> dict:
    """A replay drill's JSON report, cut to what the check reads."""
    return {
        "fault_tolerance": "elastic",
        "replay": {"ratio": ratio, "per_size": [{"nodes": 3, "per_node": 100.0}, {"nodes": 2, "per_node": 110.0}]},
        "checkpoint_advice": {"every_s": 100.0, "cost": {"cost_s": 0.5}},
        "evictions": [
            {"kind": "hard", "world_after": 2, "recovery_s": 1.5},
            {"kind": "hard", "world_after": 0, "recovery_s": 30.0},  # a wipeout: no survivors' recovery
        ],
        "joins": [{"world_before": 2, "stall_s": 0.8}, {"world_before": 0, "stall_s": 12.0}],
    }


def test_a_reports_own_measured_costs_replace_the_defaults():
    costs = report_costs(report(0.9), COSTS)
    assert (costs.elastic_recovery_s, costs.elastic_join_stall_s, costs.save_cost_s) == (1.5, 0.8, 0.5)
    assert costs.resume_s == COSTS.resume_s


def test_a_replays_own_costs_count_the_notices_whose_emergency_save_was_missed():
    doc = report(0.9) | {
        "evictions": [
            {"kind": "notice", "world_after": 2, "recovery_s": 1.0, "emergency_save_missed": True},
            {"kind": "notice", "world_after": 2, "recovery_s": 1.0},
            {"kind": "notice", "world_after": 2, "recovery_s": 1.0, "emergency_save_missed": False},
            {"kind": "hard", "world_after": 2, "recovery_s": 1.0, "emergency_save_missed": True},  # not a notice
        ]
    }
    assert report_costs(doc, COSTS).notice_misses == pytest.approx(1 / 3)
    assert report_costs(report(0.9), COSTS).notice_misses == 0.0  # no notice: the given figure


def test_a_replays_own_costs_leave_out_notices_trained_through_and_waits_for_capacity():
    """A noticed node trained on 5 s before it left: its survivors' stall is 0.7 s, not 5.7. A
    recovery or a join's stall that spans a wipeout measures the wait for capacity: left out."""
    doc = report(0.9) | {
        "t0": 1000.0,
        "capacity_timeline": [(0.0, 3), (40.0, 0), (90.0, 3)],
        "evictions": [
            {"kind": "notice", "t": 1010.0, "world_after": 2, "recovery_s": 5.7, "trained_on_s": 5.0},
            {"kind": "notice", "t": 1035.0, "world_after": 3, "recovery_s": 60.0, "trained_on_s": 4.0},
        ],
        "joins": [
            {"t": 1020.0, "world_before": 2, "stall_s": 0.6},
            {"t": 1030.0, "world_before": 2, "stall_s": 61.0},
        ],
    }
    costs = report_costs(doc, COSTS)
    assert costs.elastic_notice_recovery_s == pytest.approx(0.7)
    assert costs.elastic_join_stall_s == pytest.approx(0.6)


def test_the_model_is_checked_against_a_replay_within_three_points():
    expected = replay_prediction(
        "elastic", SCHEDULE, report_costs(report(0.9)), {3: 100.0, 2: 110.0}, interval_s=100.0
    ).ratio
    close = check_against_replay(SCHEDULE, report(expected - 0.029))
    assert close.predicted == pytest.approx(expected) and close.within
    assert close.points == pytest.approx(2.9)
    far = check_against_replay(SCHEDULE, report(expected + 0.031))
    assert not far.within and far.points == pytest.approx(-3.1)
    assert f"NOT within {WITHIN_POINTS:g}" in far.line() and "(-3.1 points" in far.line()


def test_costs_given_to_the_check_keep_only_the_reports_own_save_cost():
    """The benchmarks' figures instead of the run's stalls; a save's cost is always the job's."""
    given = check_against_replay(SCHEDULE, report(0.9), COSTS)
    own_save = MeasuredCosts(**{**COSTS.__dict__, "save_cost_s": 0.5})
    assert given.predicted == pytest.approx(
        replay_prediction("elastic", SCHEDULE, own_save, {3: 100.0, 2: 110.0}, interval_s=100.0).ratio
    )
    assert given.predicted != pytest.approx(check_against_replay(SCHEDULE, report(0.9)).predicted)


def test_a_replay_of_sharded_checkpoints_is_modelled_redoing_its_losses():
    """The report says its job's checkpoints were sharded (the drill saw sharded saves)."""
    whole, sharded = report(0.9), report(0.9) | {"checkpoints_sharded": True}
    per_node = {3: 100.0, 2: 110.0}
    redoing = replace(report_costs(whole), loss_redoes=True)
    assert check_against_replay(SCHEDULE, sharded).predicted == pytest.approx(
        replay_prediction("elastic", SCHEDULE, redoing, per_node, interval_s=100.0).ratio
    )
    assert check_against_replay(SCHEDULE, sharded).predicted < check_against_replay(SCHEDULE, whole).predicted


def test_a_derived_interval_is_modelled_at_its_typical_length_not_its_longest():
    derived = report(0.9)
    derived["checkpoint_advice"] = {**derived["checkpoint_advice"], "every_s": 100.0, "typical_s": 20.0, "mean_s": 8.0}
    costs = report_costs(derived)
    per_node = {3: 100.0, 2: 110.0}
    predicted = check_against_replay(SCHEDULE, derived).predicted
    assert predicted == pytest.approx(
        replay_prediction("elastic", SCHEDULE, costs, per_node, interval_s=20.0, saves_every_s=8.0).ratio
    )
    # The saves' cost at their plain mean: more of them than the weighted length says.
    assert predicted < replay_prediction("elastic", SCHEDULE, costs, per_node, interval_s=20.0).ratio


def test_a_report_without_a_replay_goodput_is_named():
    with pytest.raises(ValueError, match=r"replay=.*expected a replay's goodput against its capacity bound"):
        check_against_replay(SCHEDULE, report(None))

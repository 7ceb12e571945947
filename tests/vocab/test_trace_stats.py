"""A window's capacity statistics: worked out by hand on small traces and schedules, and computed
on the public traces against what their README states (loss events, bursts, wipeouts, how long a
lost node takes to come back, the two regimes of partial capacity)."""

from __future__ import annotations

import pytest

from lab.vocab.replay_schedule import BACK, LOST, ReplaySchedule, SlotChange
from lab.vocab.trace_files import load_trace, read_trace
from lab.vocab.trace_schedule import schedule
from lab.vocab.trace_stats import schedule_stats, window_stats
from tests.traces import FOUR_NODE, SIXTEEN_NODE, counts, events, shared_trace


def test_a_small_count_trace_by_hand(tmp_path):
    # 4 nodes, ticks of 100 s: 2 lost at 200 s, the other 2 at 400 s (a wipeout), all back at 600 s,
    # 1 lost at 800 s and back at 900 s.
    stats = window_stats(counts(tmp_path, [4, 4, 2, 2, 0, 0, 4, 4, 3, 4], gap_s=100))
    assert (stats.full, stats.span_s, stats.loss_events, stats.nodes_lost) == (4, 1000.0, 3, 5)
    assert stats.loss_gap_mean_s == 300.0  # gaps of 200 and 400 s
    assert stats.loss_gap_cv == pytest.approx(1 / 3)
    assert (stats.wipeouts, stats.zero_s, stats.wipeout_share) == (1, (200.0,), pytest.approx(1 / 3))
    # the 3rd and 4th nodes back after 400 s, the 1st and 2nd after 200 s, the last after 100 s
    assert (stats.back_median_s, stats.back_p90_s, stats.not_back) == (200.0, 400.0, 0)
    assert (stats.share_full, stats.share_partial, stats.share_zero) == (0.5, 0.3, 0.2)
    assert stats.partial_points == pytest.approx(17.5)  # 2/4 for 200 s and 3/4 for 100 s, of 1000 s
    assert stats.capacity_share == pytest.approx(0.675)
    assert (stats.nodes_per_loss_event, stats.node_mtbf_s) == (pytest.approx(5 / 3), 200.0)


def test_a_window_carries_its_time_at_each_size_and_its_changes_from_its_start(tmp_path):
    """What a goodput model walks: the seconds at 0..4 nodes, the nodes at the window's start,
    and each moment (t from the window's start, lost, gained)."""
    stats = window_stats(counts(tmp_path, [4, 4, 2, 2, 0, 0, 4, 4, 3, 4], gap_s=100), (100, 1000))
    assert stats.level_s == (200.0, 0.0, 200.0, 100.0, 400.0)
    assert stats.alive_at_start == 4
    assert stats.moments == ((100.0, 2, 0), (300.0, 2, 0), (500.0, 0, 4), (700.0, 1, 0), (800.0, 0, 1))


def test_a_window_starts_from_the_traces_state_then(tmp_path):
    trace = counts(tmp_path, [4, 4, 2, 2, 0, 0, 4, 4, 3, 4], gap_s=100)
    stats = window_stats(trace, (300, 700))  # 2 nodes at 300 s, both lost at 400 s, 4 back at 600 s
    assert (stats.loss_events, stats.nodes_lost, stats.wipeouts, stats.zero_s) == (1, 2, 1, (200.0,))
    assert (stats.back_median_s, stats.not_back) == (200.0, 0)
    assert (stats.share_full, stats.share_partial, stats.share_zero) == (0.25, 0.25, 0.5)


def test_what_is_not_back_by_the_windows_end_is_counted_apart(tmp_path):
    stats = window_stats(counts(tmp_path, [2, 0, 0], gap_s=100))
    assert (stats.wipeouts, stats.zero_s, stats.not_back) == (1, (200.0,), 2)  # at 0 until the end
    assert (stats.back_median_s, stats.back_p90_s, stats.loss_gap_mean_s, stats.loss_gap_cv) == (None, None, None, None)


def test_a_trace_with_no_loss_has_no_rates(tmp_path):
    stats = window_stats(counts(tmp_path, [3, 3], gap_s=100))
    assert (stats.loss_events, stats.nodes_per_loss_event, stats.wipeout_share, stats.node_mtbf_s) == (
        0,
        None,
        None,
        None,
    )
    assert (stats.share_full, stats.capacity_share) == (1.0, 1.0)


def test_an_instance_lost_and_replaced_in_the_same_minute_is_a_loss_event(tmp_path):
    trace = events(tmp_path, ["0,add,a", "0,add,b", "60000,remove,a", "60000,add,c", "120000,remove,b"])
    stats = window_stats(trace)
    assert (stats.loss_events, stats.nodes_lost) == (2, 2)  # the pool's count saw only the second
    assert (stats.back_median_s, stats.not_back) == (0.0, 1)


def test_a_schedules_statistics_count_its_slots_in_the_replays_seconds():
    plan = ReplaySchedule(
        source="by hand",
        window_s=(0.0, 1000.0),
        speedup=10.0,
        slots=2,
        rule="by hand",
        alive_at_start=frozenset({0, 1}),
        changes=(
            SlotChange(10.0, 0, LOST, 1.0),
            SlotChange(10.0, 0, BACK),  # a spare took the slot at once
            SlotChange(20.0, 1, LOST),
            SlotChange(20.0, 0, LOST),
            SlotChange(50.0, 0, BACK),
            SlotChange(60.0, 1, BACK),
        ),
        duration_s=100.0,
    )
    stats = schedule_stats(plan)
    assert (stats.full, stats.span_s, stats.loss_events, stats.nodes_lost) == (2, 100.0, 2, 3)
    assert (stats.wipeouts, stats.zero_s) == (1, (30.0,))
    assert (stats.back_median_s, stats.not_back) == (30.0, 0)  # back after 0, 30 and 40 s
    assert (stats.share_full, stats.share_partial, stats.share_zero) == (0.6, 0.1, 0.3)
    assert stats.partial_points == pytest.approx(5.0)
    assert stats.capacity_share == pytest.approx(plan.capacity_node_seconds() / (plan.slots * plan.duration_s))


def test_a_schedule_at_the_pools_size_has_the_pools_statistics_compressed():
    trace = read_trace(shared_trace(FOUR_NODE))
    pool, job = window_stats(trace), schedule_stats(schedule(trace, slots=4, speedup=20))
    assert (job.loss_events, job.nodes_lost, job.wipeouts, job.not_back) == (
        pool.loss_events,
        pool.nodes_lost,
        pool.wipeouts,
        pool.not_back,
    )
    assert job.back_median_s == pool.back_median_s / 20  # type: ignore[operator]
    assert job.share_zero == pytest.approx(pool.share_zero)
    assert job.capacity_share == pytest.approx(pool.capacity_share)


# ------------------------------------------------------------------ the public traces, against their README


def test_the_four_node_trace_loses_330_nodes_and_43_percent_of_its_loss_events_take_it_to_zero():
    stats = window_stats(read_trace(shared_trace(FOUR_NODE)))
    assert stats.nodes_lost == 330
    assert round(100 * stats.wipeout_share) == 43  # type: ignore[operator]
    assert 1.25 <= round(stats.nodes_per_loss_event, 1) <= 1.8  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [FOUR_NODE, SIXTEEN_NODE])
def test_the_aws_v100_losses_are_bursty_and_a_lost_node_is_back_after_20_to_45_minutes(name):
    stats = window_stats(read_trace(shared_trace(name)))
    assert 1.8 <= round(stats.loss_gap_cv, 1) <= 3.2  # type: ignore[arg-type]  # a Poisson process's is 1
    assert 20 <= stats.back_median_s / 60 <= 45  # type: ignore[operator]
    assert stats.back_p90_s > 3600  # type: ignore[operator]  # "the 90th percentile hours"
    assert 1 <= round(stats.partial_points) <= 9  # all or nothing: partial capacity is worth 1-9 points


def test_a_loss_event_takes_6_7_to_11_nodes_of_the_16_node_pool():
    stats = window_stats(read_trace(shared_trace(SIXTEEN_NODE)))
    assert 6.7 <= round(stats.nodes_per_loss_event, 1) <= 11  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["bamboo-p3-32", "bamboo-g4dn-24", "skynomad-gcp-h100-16-us-east4-a"])
def test_the_autoscaling_groups_and_the_h100_zone_are_partly_available_7_to_54_points(name):
    stats = window_stats(load_trace(name))
    assert 7 <= round(stats.partial_points) <= 54
    assert stats.share_partial > 0.25

"""The goodput model behind `elastic-lab plan --band` and benchmarks/bands.py."""

from __future__ import annotations

import math

import pytest

from lab.vocab.checkpoint_interval import EVICTION_BANDS, daly_interval_s, job_mtbf_s
from lab.vocab.spot_goodput import MODES, MeasuredCosts, costs_for, eviction_times, goodput

COSTS = MeasuredCosts()


def test_with_no_eviction_every_mode_pays_only_its_checkpoints_and_per_step_its_overhead():
    never = 1e18  # seconds between evictions: none in the job's lifetime
    checkpoints = COSTS.save_cost_s / (daly_interval_s(COSTS.save_cost_s, never) + COSTS.save_cost_s)
    assert goodput("elastic", 3, never) == pytest.approx(1 - checkpoints)
    assert goodput("restart-everything", 3, never) == pytest.approx(1 - checkpoints)
    assert goodput("per-step", 3, never) == pytest.approx((1 - checkpoints) / (1 + COSTS.per_step_overhead))


@pytest.mark.parametrize("mode", MODES)
def test_more_evictions_never_train_more(mode):
    shares = [share for _, share in EVICTION_BANDS]
    values = [goodput(mode, 3, job_mtbf_s(share, 3)) for share in shares]
    assert values == sorted(values, reverse=True) and all(0 < v < 1 for v in values)


def test_restart_everything_loses_more_than_elastic_per_eviction():
    """Every node waits for the replacement and the restart, instead of one node's share."""
    often = 3600.0  # a node lost every hour: the difference shows
    assert goodput("restart-everything", 3, often) < goodput("elastic", 3, often)
    assert goodput("elastic", 3, often, notice_share=1.0) > goodput("elastic", 3, often)  # nothing redone


def test_an_unknown_mode_is_named():
    with pytest.raises(ValueError, match="mode='spot-only': expected one of elastic, per-step, restart-everything"):
        goodput("spot-only", 3, 3600.0)


@pytest.mark.parametrize("band_share", [share for _, share in EVICTION_BANDS])
def test_daly_interval_trains_more_than_fixed_ones_around_it(band_share):
    """The interval from the evidence (the save's cost and the band's rate) against fixed ones:
    the demo's 50 steps of a real-size model on a GPU (4 s), 10 min, 6 h."""
    mtbf = job_mtbf_s(band_share, 3)
    derived = goodput("elastic", 3, mtbf)
    for fixed in (3.85, 600.0, 6 * 3600.0):
        assert goodput("elastic", 3, mtbf, interval_s=fixed) < derived
    assert goodput("elastic", 3, mtbf, interval_s=3.85) < 0.8  # saving every few seconds costs a quarter


def test_an_interval_that_is_no_duration_is_named():
    with pytest.raises(ValueError, match="interval_s=0: expected seconds > 0"):
        goodput("elastic", 3, 3600.0, interval_s=0)


def test_an_eviction_schedule_is_the_same_for_a_seed_and_another_for_another_seed():
    first = eviction_times(15.0, seed=1, horizon_s=600)
    assert first == eviction_times(15.0, seed=1, horizon_s=600)
    assert first != eviction_times(15.0, seed=2, horizon_s=600)
    assert first == sorted(first) and first[0] > 0 and first[-1] <= 600
    # a shorter horizon is the same schedule, cut
    assert eviction_times(15.0, seed=1, horizon_s=100) == [t for t in first if t <= 100]


def test_an_eviction_schedule_keeps_its_mean():
    """Exponential gaps: over many evictions their mean is the one asked for, and their spread
    is the Poisson process's (as many gaps shorter than a third of the mean as one would expect)."""
    times = eviction_times(10.0, seed=7, horizon_s=200_000)
    gaps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    assert sum(gaps) / len(gaps) == pytest.approx(10.0, rel=0.05)
    short = sum(g < 10.0 / 3 for g in gaps) / len(gaps)
    assert short == pytest.approx(1 - math.exp(-1 / 3), abs=0.02)


@pytest.mark.parametrize(("mean_s", "horizon_s", "bad"), [(0.0, 10.0, "mean_s=0.0"), (5.0, -1.0, "horizon_s=-1.0")])
def test_an_eviction_schedule_refuses_what_cannot_be_drawn(mean_s, horizon_s, bad):
    with pytest.raises(ValueError, match=bad):
        eviction_times(mean_s, seed=1, horizon_s=horizon_s)


def test_a_bigger_model_stalls_longer_at_each_change_and_an_unmeasured_size_counts_the_size_below():
    tiny, small = costs_for("tiny"), costs_for("gpt-small")
    assert tiny == MeasuredCosts()
    for cost in ("elastic_recovery_s", "elastic_notice_recovery_s", "elastic_join_stall_s", "per_step_stall_s"):
        assert getattr(small, cost) > getattr(tiny, cost), cost
    # What the size does not change (a node's start, the save's cost on the accelerator) stays.
    assert (small.node_start_s, small.save_cost_s) == (tiny.node_start_s, tiny.save_cost_s)
    assert costs_for("gpt-100m") == small
    with pytest.raises(ValueError, match=r"model='gpt-2': expected one of tiny, gpt-small, gpt-100m"):
        costs_for("gpt-2")

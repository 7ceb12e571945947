"""Young's and Daly's checkpoint intervals at the eviction-rate bands."""

from __future__ import annotations

import itertools
import math

import pytest

from lab.vocab import checkpoint_interval as ci


def test_a_band_is_a_mean_time_between_evictions():
    # 10 % of nodes evicted in a month: exp(-30 d / MTBF) = 0.9
    assert math.exp(-ci.MONTH_S / ci.node_mtbf_s(0.10)) == pytest.approx(0.9)
    assert ci.job_mtbf_s(0.10, 4) == pytest.approx(ci.node_mtbf_s(0.10) / 4)


def test_daly_is_young_with_its_corrections_and_never_beyond_the_mtbf():
    cost, mtbf = 2.0, 3600.0
    young = ci.young_interval_s(cost, mtbf)
    assert young == pytest.approx(120.0)
    ratio = cost / (2 * mtbf)
    assert ci.daly_interval_s(cost, mtbf) == pytest.approx(young * (1 + math.sqrt(ratio) / 3 + ratio / 9) - cost)
    assert ci.daly_interval_s(10.0, 4.0) == 4.0


def test_the_interval_minimises_the_time_lost():
    cost, mtbf = 5.0, 6 * 3600.0
    best = ci.daly_interval_s(cost, mtbf)
    lost = ci.lost_share(cost, best, mtbf)
    assert lost < ci.lost_share(cost, best / 3, mtbf) and lost < ci.lost_share(cost, best * 3, mtbf)


def test_intervals_shorten_as_evictions_grow_and_count_steps():
    rows = ci.intervals(cost_s=1.0, nodes=3, step_s=0.5)
    assert [r.band for r in rows] == ["<5%", "5-10%", "10-15%", "15-20%", ">20%"]
    assert all(a.interval_s > b.interval_s for a, b in itertools.pairwise(rows))
    assert rows[0].interval_steps == round(rows[0].interval_s / 0.5)
    assert ci.intervals(cost_s=1.0, nodes=3)[0].interval_steps is None


@pytest.mark.parametrize(("bad", "call"), [(0.0, lambda v: ci.node_mtbf_s(v)), (0, lambda v: ci.job_mtbf_s(0.1, v))])
def test_bad_figures_are_refused(bad, call):
    with pytest.raises(ValueError, match="is invalid: expected"):
        call(bad)


def test_durations_read_as_people_say_them():
    assert [ci.duration(s) for s in (4.25, 45, 720, 3 * 3600, 3 * 86400)] == [
        "4.2 s",
        "45 s",
        "12 min",
        "3.0 h",
        "3.0 d",
    ]


def test_a_band_is_found_by_its_name_and_a_wrong_name_is_refused_with_the_names():
    assert ci.band_share("10-15%") == 0.125
    with pytest.raises(ValueError, match=r"band='12%' is invalid: expected one of <5%, 5-10%, 10-15%, 15-20%, >20%"):
        ci.band_share("12%")


def test_the_band_stands_until_two_evictions_then_the_rate_the_job_saw():
    band = ci.job_mtbf_s(0.125, 3)
    assert ci.estimated_mtbf_s(band, trained_s=600.0, evictions=0) == (band, "band")
    assert ci.estimated_mtbf_s(band, trained_s=600.0, evictions=1) == (band, "band")  # one is no rate
    assert ci.estimated_mtbf_s(band, trained_s=600.0, evictions=3) == (200.0, "observed")
    # a job that saw fewer evictions than its band says gets the longer interval too
    assert ci.estimated_mtbf_s(60.0, trained_s=6000.0, evictions=2) == (3000.0, "observed")


def test_the_interval_in_steps_is_dalys_rounded_and_at_least_one():
    assert ci.interval_steps(1.0, 0.5, 3600.0) == round(ci.daly_interval_s(1.0, 3600.0) / 0.5)
    assert ci.interval_steps(5.0, 100.0, 60.0) == 1
    with pytest.raises(ValueError, match="step_s=0"):
        ci.interval_steps(1.0, 0, 3600.0)

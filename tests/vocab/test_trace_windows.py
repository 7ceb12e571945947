"""The benchmark's named windows: each what its `why` says, computed from its trace; each
starting with a job of 3 slots at full size and ending with every slot back; the one from a
trace the project does not carry refused clearly where ../shared is absent."""

from __future__ import annotations

import pytest

from lab.vocab.problems import InvalidInput
from lab.vocab.trace_files import CARRIED_TRACES
from lab.vocab.trace_schedule import schedule
from lab.vocab.trace_stats import schedule_stats, window_stats
from lab.vocab.trace_windows import NAMED_WINDOWS, load_window, named_window
from tests.traces import SHARED_TRACES_DIR, shared_trace

# What each window's statistics are (the pool's; a job of 3 slots, proportional), as its `why` says.
FIGURES = {
    "bamboo-p3-partial": {"partial %": 72, "points": 58, "loss events": 23, "nodes lost": 53, "wipeouts": 0},
    "aws-4node-wipeouts": {"zero %": 42, "loss events": 8, "nodes lost": 15, "wipeouts": 4, "capacity": 0.47},
    "h100-mixed": {"partial %": 47, "full %": 47, "loss events": 8, "nodes lost": 68, "wipeouts": 1, "capacity": 0.75},
}


def _loaded(name):
    window = named_window(name)
    if window.trace not in CARRIED_TRACES:
        shared_trace(window.trace)
    return load_window(name, SHARED_TRACES_DIR)


@pytest.mark.parametrize("name", [w.name for w in NAMED_WINDOWS])
def test_each_named_window_has_the_figures_its_why_gives(name):
    trace, window = _loaded(name)
    stats = window_stats(trace, window)
    measured = {
        "partial %": round(100 * stats.share_partial),
        "full %": round(100 * stats.share_full),
        "zero %": round(100 * stats.share_zero),
        "points": round(stats.partial_points),
        "loss events": stats.loss_events,
        "nodes lost": stats.nodes_lost,
        "wipeouts": stats.wipeouts,
        "capacity": round(stats.capacity_share, 2),
    }
    expected = FIGURES[name]
    assert {key: measured[key] for key in expected} == expected
    why = named_window(name).why
    assert all(str(value) in why for key, value in expected.items() if key != "wipeouts")
    assert window[1] - window[0] == 3 * 3600 and stats.not_back == 0


def test_the_wipeout_window_goes_to_zero_for_15_5_45_and_10_minutes():
    trace, window = _loaded("aws-4node-wipeouts")
    assert [z / 60 for z in window_stats(trace, window).zero_s] == [15, 5, 45, 10]


@pytest.mark.parametrize("name", [w.name for w in NAMED_WINDOWS])
def test_a_job_of_3_slots_starts_each_window_full_and_has_every_slot_back_at_its_end(name):
    trace, window = _loaded(name)
    plan = schedule(trace, slots=3, window=window, speedup=20)
    assert len(plan.alive_at_start) == 3
    assert plan.alive()[-1][1] == 3 and schedule_stats(plan).not_back == 0


def test_a_window_of_a_trace_not_carried_says_where_it_is_looked_for(tmp_path, monkeypatch):
    with pytest.raises(InvalidInput) as error:
        load_window("aws-4node-wipeouts", tmp_path)
    (problem,) = error.value.problems
    assert (problem.key, problem.value) == ("window", "aws-4node-wipeouts")
    assert "no licence" in problem.expected
    assert str(tmp_path) in problem.expected and "--trace FILE --window 1016100:1026900" in problem.expected
    assert load_window("bamboo-p3-partial", tmp_path)[1] == (7800.0, 18600.0)  # carried: read from traces/


def test_an_unknown_window_lists_the_named_ones():
    with pytest.raises(InvalidInput) as error:
        named_window("calm")
    assert error.value.problems[0].expected == "one of bamboo-p3-partial, aws-4node-wipeouts, h100-mixed"

"""A spot trace's record: its capacity and prices at a time, and windows of it, written `A:B`
and checked against its span."""

from __future__ import annotations

import math

import pytest

from lab.vocab.problems import InvalidInput
from lab.vocab.spot_trace import parse_window, step_value, window_text
from lab.vocab.trace_files import read_trace
from tests.traces import counts, ticks_file


@pytest.mark.parametrize(
    ("text", "window"),
    [
        ("100:200", (100.0, 200.0)),
        ("2h:5h", (7200.0, 18000.0)),
        ("90m:1.5d", (5400.0, 129600.0)),
        ("30s:45", (30.0, 45.0)),
        ("1h:", (3600.0, math.inf)),
        (":1h", (0.0, 3600.0)),
        (":", None),
        (" 0 : ", None),
    ],
)
def test_a_window_is_read_in_seconds_minutes_hours_or_days(text, window):
    assert parse_window(text) == window


@pytest.mark.parametrize("text", ["", "5", "a:b", "-5:10", "1:2:3", "1h30m:2h", "1e3:2e3"])
def test_a_window_that_is_not_a_to_b_is_named(text):
    with pytest.raises(InvalidInput) as error:
        parse_window(text)
    (problem,) = error.value.problems
    assert (problem.key, problem.value) == ("window", text)
    assert problem.expected.startswith("A:B, seconds of the trace")


def test_a_window_is_checked_against_the_traces_span(tmp_path):
    trace = counts(tmp_path, [2, 1, 2], gap_s=100)  # 300 s
    assert trace.checked_window(None) == (0.0, 300.0)
    assert trace.checked_window((100, math.inf)) == (100.0, 300.0)
    assert trace.checked_window((0, 300)) == (0.0, 300.0)


@pytest.mark.parametrize(
    "window", [(100, 100), (200, 100), (-1, 100), (0, 301), (math.nan, 100), (True, 100), (300, math.inf)]
)
def test_an_empty_window_or_one_outside_the_trace_is_named_with_the_traces_span(tmp_path, window):
    trace = counts(tmp_path, [2, 1, 2], gap_s=100)
    with pytest.raises(InvalidInput) as error:
        trace.checked_window(window)
    (problem,) = error.value.problems
    assert (problem.key, problem.value) == ("window", window)
    assert problem.expected == f"a window of {trace.source}: start < end, both within its 0 s to 300 s (0.1 h)"


def test_capacity_and_price_at_a_time_are_those_of_the_last_change_at_or_before_it(tmp_path):
    trace = read_trace(ticks_file(tmp_path, [3, 3, 1, 0, 2], gap_s=10, prices=[0.5, 0.6, 0.6, 0.6, 0.4]))
    assert [trace.alive_at(t) for t in (0, 19.9, 20, 35, 40, 1000)] == [3, 3, 1, 0, 2, 2]
    assert [trace.price_at(t) for t in (0, 9, 10, 45)] == [0.5, 0.5, 0.6, 0.4]
    assert step_value(((0.0, 1), (5.0, 2)), 4.99) == 1


@pytest.mark.parametrize("window", [(1016100.0, 1026900.0), (12.5, 7200.25), (0.0, 0.001)])
def test_a_window_is_written_in_plain_seconds_that_read_back(window):
    assert parse_window(window_text(window)) == window
    assert "e+" not in window_text(window)

"""One error for invalid input: every problem named by key, value and what is expected."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from lab.vocab.problems import InvalidInput, Problem, Problems, seconds_problems


def test_a_problem_reads_key_value_expected():
    assert str(Problem("gpuMaxNodes", 0, "a whole number in 1..1000")) == (
        "gpuMaxNodes=0 is invalid: expected a whole number in 1..1000"
    )
    assert Problem("etcd.tag", "latest", "v3.5.x").under("platform.").key == "platform.etcd.tag"


def test_one_problem_without_a_source_is_the_message():
    assert (
        str(InvalidInput([Problem("name", "Bad", "a DNS-1035 label")]))
        == "name='Bad' is invalid: expected a DNS-1035 label"
    )


def test_several_problems_are_listed_under_their_source_once_each():
    problems = [Problem("a", [1], "x"), Problem("b", {"k": 1}, "y"), Problem("a", [1], "x")]
    error = InvalidInput(problems, "stack config in stack 'dev'")
    assert error.problems == problems[:2]  # unhashable values, and the repeat dropped
    assert str(error) == (
        "invalid stack config in stack 'dev' (2 problem(s)):\n  - a=[1] is invalid: expected x\n"
        "  - b={'k': 1} is invalid: expected y"
    )


def test_the_collector_raises_everything_it_found_or_nothing():
    found = Problems()
    found.raise_if_any()  # nothing found: nothing raised
    found.add("a", 1, "x")
    found.absorb(InvalidInput([Problem("tag", "latest", "v3.5.x")]), "platform.etcd.")
    assert bool(found)
    with pytest.raises(InvalidInput) as info:
        found.raise_if_any("settings")
    assert [p.key for p in info.value.problems] == ["a", "platform.etcd.tag"]
    assert isinstance(info.value, ValueError)


def test_seconds_problems_name_each_field_that_is_no_positive_number():
    @dataclasses.dataclass(frozen=True)
    class Waits:
        join_s: Any = 1.0
        tick_s: Any = 0.1
        heal_s: Any = 0.0

    assert seconds_problems(Waits(), "w.", {"heal_s": "from the state"}) == []
    found = seconds_problems(Waits(join_s=0, tick_s="1", heal_s=-1), "w.", {"heal_s": "from the state"})
    assert found == [
        Problem("w.join_s", 0, "a number of seconds > 0"),
        Problem("w.tick_s", "1", "a number of seconds > 0"),
        Problem("w.heal_s", -1, "a number of seconds >= 0 (0: derived from the state)"),
    ]
    # Without a derived meaning, 0 is no number of seconds; neither is a boolean.
    assert [p.key for p in seconds_problems(Waits(tick_s=True), "")] == ["tick_s", "heal_s"]

"""Poll.until: the one wait of the eviction backends, the sweeps and the rebalancer, driven
by a simulated clock (no real time passes)."""

from __future__ import annotations

import pytest

from lab.cluster.polling import Poll


class SimulatedClock:
    """A clock that moves only when slept on; records every sleep."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def test_until_returns_the_first_thing_found_and_sleeps_between_looks():
    clock = SimulatedClock()
    answers = iter([None, None, "there"])
    assert Poll(2.0, clock.sleep, clock.clock).until(lambda: next(answers), timeout_s=60) == "there"
    assert clock.slept == [2.0, 2.0]


def test_a_falsy_answer_that_is_not_none_counts_as_found():
    clock = SimulatedClock()
    assert Poll(1.0, clock.sleep, clock.clock).until(lambda: False, timeout_s=10) is False
    assert clock.slept == []


def test_until_gives_none_after_a_last_look_once_the_timeout_passed():
    clock = SimulatedClock()
    looks: list[float] = []

    def nothing() -> None:
        looks.append(clock.now)

    assert Poll(4.0, clock.sleep, clock.clock).until(nothing, timeout_s=10) is None
    # Looks at 0, 4 and 8 s, then one at 12 s, past the 10 s deadline, before giving up.
    assert looks == [0.0, 4.0, 8.0, 12.0]


def test_what_found_raises_ends_the_wait():
    clock = SimulatedClock()

    def failing() -> None:
        raise RuntimeError("the experiment failed")

    with pytest.raises(RuntimeError, match="failed"):
        Poll(1.0, clock.sleep, clock.clock).until(failing, timeout_s=10)
    assert clock.slept == []

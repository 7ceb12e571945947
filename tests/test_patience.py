"""Tests wait as long as the machine's load needs (tests/patience.py), and so do their time
limits (tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests import conftest, patience


@pytest.mark.parametrize(
    ("load", "cores", "stretch"),
    [(0.5, 2, 1.0), (2.0, 2, 1.0), (6.0, 2, 3.0), (100.0, 2, patience.MAX_STRETCH), (3.0, 1, 3.0)],
)
def test_waits_stretch_with_the_load_per_core(monkeypatch, load, cores, stretch):
    monkeypatch.setattr(patience.os, "getloadavg", lambda: (load, 0.0, 0.0))
    monkeypatch.setattr(patience.os, "cpu_count", lambda: cores)
    assert patience.stretch() == stretch
    assert patience.within(10) == 10 * stretch


def test_a_system_without_a_load_average_waits_as_on_a_quiet_machine(monkeypatch):
    def none():
        raise OSError("no load average")

    monkeypatch.setattr(patience.os, "getloadavg", none)
    assert patience.within(10) == 10


@pytest.mark.timeout(7, method="thread")
def test_a_tests_time_limit_is_stretched_and_keeps_its_method(request, monkeypatch):
    # This test's own limit was stretched as it started (7 s times the load then, at least 7).
    (armed,) = request.node.get_closest_marker("timeout").args
    assert armed >= 7
    monkeypatch.setattr(conftest, "within", lambda seconds: seconds * 3)
    hook = conftest.pytest_runtest_protocol(request.node, None)
    next(hook)
    mark = request.node.get_closest_marker("timeout")
    assert (mark.args, mark.kwargs) == ((armed * 3,), {"method": "thread"})
    hook.close()

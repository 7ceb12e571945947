"""How long a test may wait for something, on the machine as loaded as it is now.

A wait that is enough on a quiet machine is not on a busy one (CI beside other jobs, `make test`
on four workers and two cores): a bound that fails there says nothing about the code. So tests
never wait a fixed number of seconds: they wait `within(s)`, `s` being what a quiet machine
needs with room to spare, stretched by how loaded the machine is (the 1-minute load average
per core, between 1 and MAX_STRETCH), and pytest-timeout's limits are stretched the same way
(tests/conftest.py)."""

from __future__ import annotations

import os

MAX_STRETCH = 4.0


def stretch() -> float:
    """How many times longer than on a quiet machine things take now."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this system
        return 1.0
    return min(MAX_STRETCH, max(1.0, load / (os.cpu_count() or 1)))


def within(seconds: float) -> float:
    """`seconds` on a quiet machine, stretched to the machine's load now."""
    return seconds * stretch()

"""Waiting on a cloud or a cluster by looking again: the one loop the eviction backends, the
teardown sweeps and the rebalancer share. Its `sleep` and `clock` are handed in, so tests drive
a wait with a simulated clock and no real time passes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Poll:
    """A look every `every_s` seconds, through `sleep`, with time read from `clock`."""

    every_s: float
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def until(self, found: Callable[[], T | None], timeout_s: float) -> T | None:
        """`found()` until it gives something (returned) or `timeout_s` passed since the first
        look (None, after a last look). What `found` raises ends the wait."""
        deadline = self.clock() + timeout_s
        while True:
            value = found()
            if value is not None or self.clock() >= deadline:
                return value
            self.sleep(self.every_s)

"""When an elastic job saves its next interval checkpoint, with `--checkpoint-every 0`.

Daly's interval (lab.vocab.checkpoint_interval) from what the job measures as it runs: the
median of its recent steps, what its last save cost training (what the save blocked, plus
what the steps it overlapped took above that median), and its mean time between evictions:
its band's until it has seen two evictions, then its own seconds of training over them. Both
counts travel in the checkpoints, so a restarted worker goes on from them.

The first interval save comes a few steps after the job (or a restarted group) starts, to
measure a save; until one is measured a save is taken to cost one step. Every rank must save
at the same steps (a sharded save is collective, a whole one gathers the ranks' RNG), so at
each save the ranks agree on the figures (the largest of each, one small all_reduce) and
compute the same next step from them.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lab.vocab.checkpoint_interval import FIRST_SAVE_AFTER, band_share, estimated_mtbf_s, interval_steps, job_mtbf_s

# Steps whose median is "a step".
STEPS_KEPT = 32


@dataclass(frozen=True)
class Interval:
    """One decision: the next save `steps` steps on, and what it came from."""

    steps: int
    step_s: float
    cost_s: float
    mtbf_s: float
    source: str  # "band" or "observed"
    evictions: int
    trained_s: float


class CheckpointPacer:
    """See the module's docstring. `evictions` and `trained_s`: what the job had seen when
    this worker started (its checkpoint's counts, plus a node lost since)."""

    def __init__(
        self,
        band: str,
        nodes: int,
        start_step: int,
        evictions: int = 0,
        trained_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.band_mtbf_s = job_mtbf_s(band_share(band), max(nodes, 1))
        self.evictions = evictions
        self.trained_before_s = trained_s
        self.clock = clock
        self.started = clock()
        self.next_save = start_step + FIRST_SAVE_AFTER
        self.quiet: deque[float] = deque(maxlen=STEPS_KEPT)
        self.cost_s = 0.0  # the last measured save's; 0: none yet
        self._busy: list[float] | None = None  # steps taken while a background save runs

    def trained_s(self) -> float:
        """The job's seconds of training: before this worker started, and since."""
        return self.trained_before_s + (self.clock() - self.started)

    def due(self, step: int) -> bool:
        return step >= self.next_save

    def step_done(self, seconds: float) -> None:
        (self.quiet if self._busy is None else self._busy).append(seconds)

    def save_started(self) -> None:
        """A background save began: the steps until it commits are slowed by it."""
        self._busy = []

    def save_done(self, blocked_s: float) -> None:
        """A save finished, having blocked training `blocked_s`: its whole cost is that plus
        what the steps it overlapped took above the median step."""
        busy, self._busy = self._busy or [], None
        step_s = self.step_s()
        self.cost_s = blocked_s + sum(max(s - step_s, 0.0) for s in busy)

    def step_s(self) -> float:
        return statistics.median(self.quiet) if self.quiet else 0.0

    def proposal(self) -> list[float]:
        """This rank's figures, to agree on (the largest of each)."""
        return [self.step_s(), self.cost_s, self.trained_s(), float(self.evictions)]

    def decide(self, step: int, agreed: Sequence[float]) -> Interval:
        """The next save, from the figures every rank agreed on at `step`."""
        step_s, cost_s, trained_s, evictions = agreed
        step_s = max(step_s, 1e-6)
        cost = cost_s if cost_s > 0 else step_s  # no save measured yet: one step's worth
        mtbf, source = estimated_mtbf_s(self.band_mtbf_s, trained_s, int(evictions))
        steps = interval_steps(cost, step_s, mtbf)
        self.next_save = step + steps
        return Interval(steps, step_s, cost, mtbf, source, int(evictions), trained_s)


def nodes_lost(saved_world: int, world: int, local_world: int) -> int:
    """Nodes the job lost between a checkpoint taken at `saved_world` ranks and a start at
    `world`, with `local_world` ranks a node (a node added back since counts as none lost)."""
    per_node = max(local_world, 1)
    return max(0, -(-saved_world // per_node) - -(-world // per_node))

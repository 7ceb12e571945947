"""When an elastic job saves its next interval checkpoint, with `--checkpoint-every 0`.

Daly's interval (lab.vocab.checkpoint_interval) from what the job measures as it runs: the
median of its recent steps; what a save costs training: what the save itself held training
up, plus how much longer the steps until the next save took than the steps of this start
before its first save (a save's writes and copies slow the steps beside it, on a busy CPU by
more than it blocks); and its mean time between evictions: its band's until it has seen two
evictions (or the mean time between them it was given, when known: a replayed trace's, a
pool's own record), then its own seconds over them (both counted across the job's restarts by
lab.runtime.job_history).

The first interval save comes a few steps after the job (or a restarted group) starts, to
measure a save; until one is measured a save is taken to cost one step. Every rank must save
at the same steps (a sharded save is collective, and so is the agreement below), so at
each save the ranks agree on the figures (the largest of each, one small all_reduce) and
compute the same next step from them.
"""

from __future__ import annotations

import math
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
    source: str  # "band", "given" (the job's known rate) or "observed"
    evictions: int
    trained_s: float


class CheckpointPacer:
    """See the module's docstring. `evictions` and `trained_s`: what the job had lived through
    when this worker started (lab.runtime.job_history); `known_mtbf_s`: the job's mean seconds
    between evictions, when known, in place of its band's."""

    def __init__(
        self,
        band: str,
        nodes: int,
        start_step: int,
        evictions: int = 0,
        trained_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        known_mtbf_s: float | None = None,
    ) -> None:
        if known_mtbf_s is not None and not (math.isfinite(known_mtbf_s) and known_mtbf_s > 0):
            raise ValueError(
                f"known_mtbf_s={known_mtbf_s!r} is invalid: expected a finite number of seconds > 0, or None"
            )
        self.known_mtbf_s = known_mtbf_s
        # Until the job has seen its own: the rate it was given, else its band's.
        self.prior_mtbf_s = known_mtbf_s or job_mtbf_s(band_share(band), max(nodes, 1))
        self.evictions = evictions
        self.trained_before_s = trained_s
        self.clock = clock
        self.started = clock()
        self.next_save = start_step + FIRST_SAVE_AFTER
        self.before_saves: list[float] = []  # this start's steps before its first save
        self.recent: deque[float] = deque(maxlen=STEPS_KEPT)
        self.cost_s = 0.0  # the last measured save's; 0: none yet
        self._since_save: list[float] | None = None  # steps since the last save began
        self._held_s = 0.0  # what the last save held training up itself

    def trained_s(self) -> float:
        """The job's seconds of training: before this worker started, and since."""
        return self.trained_before_s + (self.clock() - self.started)

    def due(self, step: int) -> bool:
        return step >= self.next_save

    def step_done(self, seconds: float) -> None:
        self.recent.append(seconds)
        (self.before_saves if self._since_save is None else self._since_save).append(seconds)

    def save_started(self) -> None:
        """A save begins: the previous one's cost is complete (what it held training up, and
        what the steps since it took above this start's steps before any save)."""
        if self._since_save is not None:
            base = self.base_step_s()
            self.cost_s = self._held_s + sum(max(s - base, 0.0) for s in self._since_save)
        self._since_save, self._held_s = [], 0.0

    def save_held(self, seconds: float) -> None:
        """The save that began held the training loop up this long itself."""
        self._held_s += seconds

    def base_step_s(self) -> float:
        """A step with no save about: this start's before its first save."""
        return statistics.median(self.before_saves) if self.before_saves else self.step_s()

    def step_s(self) -> float:
        """A step as training goes, saves included."""
        return statistics.median(self.recent) if self.recent else 0.0

    def proposal(self) -> list[float]:
        """This rank's figures, to agree on (the largest of each)."""
        return [self.step_s(), self.cost_s, self.trained_s(), float(self.evictions)]

    def decide(self, step: int, agreed: Sequence[float]) -> Interval:
        """The next save, from the figures every rank agreed on at `step`."""
        step_s, cost_s, trained_s, evictions = agreed
        step_s = max(step_s, 1e-6)
        cost = cost_s if cost_s > 0 else step_s  # no save measured yet: one step's worth
        mtbf, source = estimated_mtbf_s(self.prior_mtbf_s, trained_s, int(evictions))
        if source == "band" and self.known_mtbf_s is not None:
            source = "given"
        steps = interval_steps(cost, step_s, mtbf)
        self.next_save = step + steps
        return Interval(steps, step_s, cost, mtbf, source, int(evictions), trained_s)

"""The sample ledger: which samples a run trained into its model, per epoch, once, more than
once (doubled) or never (lost), counted from what its workers recorded and nothing else.

The demo trainer (lab.runtime.train, with `--log-samples`) records on every rank the samples
of each step (`samples`: step, epoch, indices; all of a rank's micro-batches of the step at
once) and on rank 0 where each step left the data order (`step`: epoch, position, and the
samples the step walked; lab.vocab.events). The order is a seeded permutation of the data
set per epoch, walked by global position (lab.runtime.demo.GlobalSampler): an epoch is
trained exactly once when every position walked gave one sample and no sample came twice.
The data set's size is read from the samples themselves: the highest index recorded, plus one.

Which records are in the model:
- elastic mode: a rank records its samples before the step's all-reduce, and every round of
  workers starts from a checkpoint (`resume`, or `fresh` at step 0): a step after that one
  recorded by an earlier round never reached the model that goes on (it is redone);
- per-step mode: a replica group records its samples before the step's cross-group reduction,
  with its quorum; they are in the model when a group committed that step in that quorum (its
  `step` event says the quorum), even if the group that recorded them died before its own
  commit, and not when the quorum discarded the step (it is redone in the next one). A group
  that starts heals from a live peer (the data position comes with the state) and goes on from
  the peers' step; a group whose first committed step follows its own checkpoint found no live
  peer, and the job went back to that checkpoint (its later steps are redone).
The records end at the newest step a `step` event reports: a step a round recorded and never
completed is not in the model. The first epoch starts where the first step did (mid-way for a
drill resumed from an earlier run's checkpoint) and the last ends where the last step left
the order: each counts the positions it walked, no more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from lab.drill.timeline import Record, Timeline
from lab.vocab.events import Event
from lab.vocab.job import JobSpec
from lab.vocab.models import DEMO_MODULE, LOG_SAMPLES

NOT_KEPT = "the workers recorded no samples (the demo trainer does with --log-samples; a script of one's own does not)"
# Steps named in a finding's words; more are counted.
STEPS_SHOWN = 8


@dataclass(frozen=True)
class EpochTally:
    """One epoch of the model's lineage: how many samples were trained once, more than once,
    and never, of the `walked` positions its steps went through (the data set's size when
    `full`: walked from its start to its end)."""

    epoch: int
    walked: int
    full: bool
    once: int
    doubled: int
    lost: int
    most: int  # times the most trained sample was trained
    first_step: int | None  # the epoch's steps in the lineage (None: it has none)
    last_step: int | None
    doubled_steps: tuple[int, ...]  # the steps that trained a doubled sample

    def doubled_words(self) -> str | None:
        if not self.doubled:
            return None
        times = "twice" if self.most == 2 else f"more than once (up to {self.most} times)"
        shown = ", ".join(str(s) for s in self.doubled_steps[:STEPS_SHOWN])
        more = f" and {len(self.doubled_steps) - STEPS_SHOWN} more" if len(self.doubled_steps) > STEPS_SHOWN else ""
        return f"{self.doubled} samples of epoch {self.epoch} were trained {times} (steps {shown}{more})"

    def lost_words(self) -> str | None:
        if not self.lost:
            return None
        steps = f"steps {self.first_step}-{self.last_step}" if self.first_step is not None else "no step of it"
        return f"{self.lost} samples of epoch {self.epoch} were never trained (of the {self.walked} its {steps} walked)"


@dataclass(frozen=True)
class SampleLedger:
    """Every epoch the model's lineage covered, and their totals; or why there is no ledger
    (`kept` False: nothing is known, which is not 0 lost)."""

    kept: bool
    why_not: str | None = None
    epochs: tuple[EpochTally, ...] = ()
    once: int = 0
    doubled: int = 0
    lost: int = 0
    full_epochs: int = 0
    redone_steps: int = 0  # steps recorded, then redone after a start from before them

    @classmethod
    def of(cls, epochs: list[EpochTally], redone_steps: int) -> SampleLedger:
        return cls(
            kept=True,
            epochs=tuple(epochs),
            once=sum(e.once for e in epochs),
            doubled=sum(e.doubled for e in epochs),
            lost=sum(e.lost for e in epochs),
            full_epochs=sum(e.full for e in epochs),
            redone_steps=redone_steps,
        )

    def summary(self) -> str:
        if not self.kept:
            return f"  samples: not counted: {self.why_not}"
        covered = f"epochs {self.epochs[0].epoch}-{self.epochs[-1].epoch}" if self.epochs else "no epoch"
        partial = "".join(f", epoch {e.epoch} partial ({e.walked} samples walked)" for e in self.epochs if not e.full)
        redone = f"; {self.redone_steps} step(s) begun, then redone after a resume from before them"
        return (
            f"  samples: {covered}, {self.full_epochs} full{partial}: {self.once} trained once, {self.lost} lost,"
            f" {self.doubled} trained more than once{redone if self.redone_steps else ''}"
        )


def lost_and_doubled(ledgers: Iterable[SampleLedger | None]) -> str:
    """Samples lost and doubled over several runs' ledgers, as a benchmark's table shows them:
    `lost/doubled`, or `-` when no run kept a ledger (nothing known is not 0)."""
    kept = [ledger for ledger in ledgers if ledger is not None and ledger.kept]
    return f"{sum(k.lost for k in kept)}/{sum(k.doubled for k in kept)}" if kept else "-"


def recording_samples(spec: JobSpec) -> JobSpec:
    """The job with the demo trainer recording every rank's samples of each step (the ledger's
    record); a script of one's own runs as given."""
    if spec.module != DEMO_MODULE or LOG_SAMPLES in spec.script_args:
        return spec
    return spec.replace(script_args=(*spec.script_args, LOG_SAMPLES))


def sample_ledger(run: Timeline) -> SampleLedger:
    """The ledger of the run's recorded samples (see the module's docstring)."""
    recorded = run.of(Event.SAMPLES)
    if not recorded:
        return SampleLedger(kept=False, why_not=NOT_KEPT)
    starts = _starts(run)
    committed = {(s["step"], s.get("quorum")) for s in run.of(Event.STEP)}
    in_model = [e for e in recorded if _kept(e, starts) and _committed(e, committed)]
    steps = [s for s in run.of(Event.STEP) if _kept(s, starts)]
    end = max((s["step"] for s in steps), default=None)
    trained = [e for e in in_model if end is None or e["step"] <= end]
    redone = {e["step"] for e in recorded if not _kept(e, starts)}
    size = 1 + max((i for e in recorded for i in e["indices"]), default=-1)
    walk = _walk(steps, trained, size)
    epochs = sorted({e["epoch"] for e in trained} | set(walk.epochs() if walk else ()))
    return SampleLedger.of(
        [_tally(n, [e for e in trained if e["epoch"] == n], walk, size) for n in epochs], len(redone)
    )


def _starts(run: Timeline) -> list[Record]:
    """The starts the model's lineage goes on from ({t, step}): every round of workers in
    elastic mode; in per-step mode, a group's start whose first committed step follows its
    own checkpoint's (it found no live peer to heal from)."""
    if not run.per_step:
        return run.rounds
    commits = run.of(Event.STEP)
    return [r for r in run.rounds if _first_commit(commits, r) == r["step"] + 1]


def _first_commit(commits: list[Record], start: Record) -> int | None:
    return next((s["step"] for s in commits if s["t"] > start["t"] and s.get("replica") == start["replica"]), None)


def _committed(e: Record, committed: set[tuple[int, object]]) -> bool:
    """A per-step group's record of a step in a quorum: some group committed that step in that
    quorum, as `committed` (step, quorum) says (a record without its quorum, as the elastic
    mode's, stands)."""
    return "quorum" not in e or (e["step"], e["quorum"]) in committed


def _kept(e: Record, starts: list[Record]) -> bool:
    """A step's record that no later start from before its step discarded."""
    return not any(r["t"] > e["t"] and r["step"] < e["step"] for r in starts)


@dataclass(frozen=True)
class _Walk:
    """Where the lineage walked the data order: (epoch, position) before its first step and
    after its last."""

    start: tuple[int, int]
    end: tuple[int, int]

    def epochs(self) -> range:
        """The epochs it walked some of (an end at position 0 walked none of its epoch)."""
        return range(self.start[0], self.end[0] + (1 if self.end[1] else 0))

    def positions(self, epoch: int, size: int) -> tuple[int, int]:
        """The positions of `epoch` walked: [from, to)."""
        if not self.start[0] <= epoch <= self.end[0]:
            return 0, 0
        return (self.start[1] if epoch == self.start[0] else 0), (self.end[1] if epoch == self.end[0] else size)


def _walk(steps: list[Record], trained: list[Record], size: int) -> _Walk | None:
    """From the lineage's `step` events (the order's place after each step, and how many
    samples it walked); None when they do not say (no step event, or one without them)."""
    if not steps or any(k not in s for s in steps for k in ("epoch", "position", "samples")):
        return None
    first, last = min(steps, key=lambda s: s["step"]), max(steps, key=lambda s: s["step"])
    if any(e["step"] == 1 for e in trained):
        start = (0, 0)
    elif first["position"]:
        start = (first["epoch"], first["position"] - first["samples"])
    else:  # the step ended its epoch
        start = (first["epoch"] - 1, size - first["samples"])
    return _Walk(start, (last["epoch"], last["position"]))


def _tally(epoch: int, trained: list[Record], walk: _Walk | None, size: int) -> EpochTally:
    times = Counter(i for e in trained for i in e["indices"])
    doubled = {i for i, n in times.items() if n > 1}
    if walk is None:  # only what was trained is known: no sample can be called lost
        walked, full = len(times), False
    else:
        start, end = walk.positions(epoch, size)
        walked, full = end - start, start == 0 and end == size
    steps = sorted({e["step"] for e in trained})
    return EpochTally(
        epoch=epoch,
        walked=walked,
        full=full,
        once=sum(1 for n in times.values() if n == 1),
        doubled=len(doubled),
        lost=max(0, walked - len(times)),
        most=max(times.values(), default=0),
        first_step=steps[0] if steps else None,
        last_step=steps[-1] if steps else None,
        doubled_steps=tuple(sorted({e["step"] for e in trained if doubled.intersection(e["indices"])})),
    )

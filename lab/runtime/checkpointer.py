"""What a trainer asks of its checkpoints, whatever their kind: the `Checkpointer` contract.

Two kinds implement it, and the trainer picks one when it starts (lab.runtime.workload
`open_checkpointer`), as torchtitan's CheckpointManager is set up once for a job:

- whole checkpoints (lab.runtime.checkpoint `WholeCheckpointer`): any one rank holds the whole
  state, so any one rank can save it, alone, at once (a spot notice, a lost peer);
- sharded ones (lab.runtime.sharded_checkpoint `ShardedCheckpointer`): every rank holds its
  shards, so every rank saves together, in the background, and a notice is saved at the next
  step boundary that all ranks reach.

A save is called by every rank of the group together (`save`) or by one rank alone (`save_alone`,
only where one rank holds the state). Its record (`SaveRecord`) comes back on the rank that
reports it: the one that wrote a whole checkpoint, rank 0 of a sharded one; elsewhere None. A
save in the background reports when it commits (`finished`, `wait`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from lab.runtime.demo import GlobalSampler


class PeerLost(RuntimeError):
    """A collective of a save failed: a peer is gone (or timed out). Its cause is torch's error.
    A save's own failure (a full disk, a write refused) is not this: it propagates as it is."""


@dataclass(frozen=True)
class TrainingState:
    """What a save writes: the live model and optimizer at a completed step, and the data
    position (the sampler's)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    sampler: GlobalSampler
    step: int
    world_size: int  # workers of the group that trains it
    batches_committed: int = 0  # the per-step mode's TorchFT manager count


@dataclass(frozen=True)
class Choice:
    """The checkpoint every rank loads (rank 0 chose it)."""

    step: int
    name: str  # a whole checkpoint's pointer, a sharded one's step directory
    skipped: tuple[str, ...] = ()  # newer checkpoints that failed verification, as rank 0 saw them
    started: float = 0.0  # time.perf_counter() when the choice began


class Progressed(Protocol):
    """Where a checkpoint says training was."""

    @property
    def step(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def batches_committed(self) -> int: ...


@dataclass(frozen=True)
class Resumed:
    """A loaded checkpoint: where training resumes, and what the load's event tells."""

    step: int
    epoch: int
    position: int
    world_size: int  # when it was saved
    batches_committed: int
    seconds: float
    fields: dict[str, Any]  # the checkpoint_loaded event's fields of this kind: path, skipped, ...

    @classmethod
    def at(cls, where: Progressed, seconds: float, fields: dict[str, Any]) -> Resumed:
        """Resumed where a checkpoint's record of its progress says (a whole one's snapshot, a
        sharded one's progress)."""
        return cls(
            where.step,
            where.epoch,
            where.position,
            where.world_size,
            where.batches_committed,
            seconds,
            fields,
        )

    def sampler(self, size: int, seed: int) -> GlobalSampler:
        """A sampler at the checkpoint's data position."""
        return GlobalSampler(size, seed, self.epoch, self.position)


@dataclass
class SaveRecord:
    """One save, as the rank that reports it saw it."""

    step: int
    reason: str
    seconds: float = 0.0  # start to commit
    blocking_s: float = 0.0  # all the training loop waited for it
    nbytes: int = 0
    path: str = ""
    error: BaseException | None = None  # a background save that failed
    already: bool = False  # the step had a checkpoint already: nothing written
    marks: dict[str, Any] = field(default_factory=dict)  # the kind's own event fields (sharded: True)

    def fields(self) -> dict[str, Any]:
        """The checkpoint_saved event's fields."""
        if self.already:
            return {"step": self.step, "reason": self.reason, "seconds": 0.0, "blocking_s": 0.0, "already": True}
        return {
            "step": self.step,
            "reason": self.reason,
            "seconds": round(self.seconds, 4),
            "blocking_s": round(self.blocking_s, 4),
            "bytes": self.nbytes,
            "path": self.path,
            **self.marks,
        }


class Checkpointer(Protocol):
    """A job's checkpoints, as a trainer uses them (see the module's docstring)."""

    @property
    def saves_alone(self) -> bool:
        """Whether one rank holds the whole state and may save it by itself."""
        ...

    def choose(self) -> Choice | None:
        """The newest valid checkpoint, chosen by rank 0 for every rank (a collective); None
        when there is none. Raises CheckpointError when there are some and none is valid."""
        ...

    def load(self, choice: Choice, model: nn.Module, optimizer: torch.optim.Optimizer) -> Resumed:
        """Load the chosen checkpoint into the model and the optimizer."""
        ...

    def save(
        self, state: TrainingState, reason: str, *, blocking: bool = False, since: float | None = None
    ) -> SaveRecord | None:
        """Save `state.step`, called by every rank together. In the background unless
        `blocking` (where the kind can): its record then comes from `finished` or `wait`.
        `since`: when the training loop began waiting for it (time.perf_counter()), counted
        in its blocking_s."""
        ...

    def save_alone(self, state: TrainingState, reason: str) -> SaveRecord | None:
        """Save `state.step` from this rank alone, from any thread; None where a rank cannot
        (it holds only its shards)."""
        ...

    def wait_for_staging(self) -> None:
        """Return once a save in flight has copied the state (before the optimizer changes it)."""
        ...

    def finished(self) -> SaveRecord | None:
        """A background save that committed (or failed) since the last call, reported once."""
        ...

    def wait(self) -> SaveRecord | None:
        """Wait for a save in flight to commit (or fail); its record."""
        ...

    def close(self) -> None:
        """Wait for a save in flight, and release what the saves hold."""
        ...

    def newest_step(self) -> int | None:
        """The newest step with a checkpoint, committed or not (a plain listing, on any rank)."""
        ...

"""The training state a checkpoint holds, one type for both fault-tolerance modes: a
checkpoint written by the elastic mode resumes the per-step mode and back.

A snapshot is captured from the live model, optimizer and sampler at a completed step and
applied back to them; on disk it is a plain dict of these keys (lab.runtime.checkpoint writes
it with torch.save), so checkpoints of earlier runs load too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lab.runtime.demo import GlobalSampler


@dataclass(frozen=True)
class TrainingSnapshot:
    model: dict[str, Any]  # the model's state_dict
    optimizer: dict[str, Any]  # the optimizer's state_dict
    step: int  # optimizer steps completed
    epoch: int  # the data position: epoch, and global sample position in it
    position: int
    world_size: int  # workers when it was taken
    batches_committed: int = 0  # the per-step mode's TorchFT manager count

    @classmethod
    def capture(
        cls,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        sampler: GlobalSampler,
        *,
        step: int,
        world_size: int,
        batches_committed: int = 0,
    ) -> TrainingSnapshot:
        return cls(
            model=model.state_dict(),
            optimizer=optimizer.state_dict(),
            step=step,
            epoch=sampler.epoch,
            position=sampler.position,
            world_size=world_size,
            batches_committed=batches_committed,
        )

    def apply(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Load the model's and the optimizer's state (the data position: `sampler`)."""
        model.load_state_dict(self.model)
        optimizer.load_state_dict(self.optimizer)

    def sampler(self, size: int, seed: int) -> GlobalSampler:
        """A sampler at this snapshot's data position."""
        return GlobalSampler(size, seed, self.epoch, self.position)

    def to_payload(self) -> dict[str, Any]:
        """The dict a checkpoint stores."""
        return {
            "model": self.model,
            "optimizer": self.optimizer,
            "step": self.step,
            "epoch": self.epoch,
            "position": self.position,
            "world_size": self.world_size,
            "batches_committed": self.batches_committed,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> TrainingSnapshot:
        return cls(
            model=payload["model"],
            optimizer=payload["optimizer"],
            step=int(payload["step"]),
            epoch=int(payload["epoch"]),
            position=int(payload["position"]),
            world_size=int(payload.get("world_size", 0)),
            batches_committed=int(payload.get("batches_committed", 0)),
        )

"""How a step's samples are shared by the ranks that are alive, under a job's batch policy.

`fixed-global` (the default): the job's global batch and learning rate are settings of the
job. Whatever the world size, one step covers `global_batch` samples (fewer at the end of an
epoch), split over the live ranks; each rank runs as many micro-batches of at most
`micro_batch` samples as the largest share needs, so that a job which lost a node runs the
optimisation it was configured with, at the price of time: at world 2 of 3 a rank's share is
3/2 of a micro-batch and its step takes about 3/2 as long.

`per-worker`: every rank trains one micro-batch per step, so the global batch grows and
shrinks with the world, and the learning rate is scaled with it (throughput over
equivalence).

At the job's full world size the two policies run the very same step: the same samples on
the same ranks, one micro-batch each, the same learning rate.

Every rank runs the same number of micro-batches (FSDP2 gathers parameters in each forward,
a collective every rank must join); a rank whose share runs out first runs empty ones. The
gradient is the exact mean over the step's samples: each micro-batch's summed loss is scaled
by world / covered, and the ranks' gradients are averaged (DDP, FSDP2, or a sum over groups
divided by their number).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar


class BatchPolicy(StrEnum):
    FIXED_GLOBAL = "fixed-global"
    PER_WORKER = "per-worker"


BATCH_POLICIES = tuple(p.value for p in BatchPolicy)

# What a job's workers read (set by JobSpec.env; flags of the training script override them).
ENV_BATCH_POLICY = "LAB_BATCH_POLICY"
ENV_GLOBAL_BATCH = "LAB_GLOBAL_BATCH"  # samples per step; unset: micro-batch x the full world
ENV_FULL_WORLD_SIZE = "LAB_FULL_WORLD_SIZE"  # workers at the job's full size (max nodes x workers)

LR_SCALINGS = ("linear", "sqrt", "none")


class Sliceable(Protocol):
    """A window of sample indices: a list, a range, a tensor."""

    def __getitem__(self, index: slice, /) -> Any: ...

    def __len__(self) -> int: ...


S = TypeVar("S", bound=Sliceable)


def scaled_lr(base_lr: float, world_size: float, scaling: str) -> float:
    """A learning rate given for one worker's batch, scaled to `world_size` workers' batch
    (fractional: a global batch that is not a whole number of micro-batches)."""
    return base_lr * {"linear": world_size, "sqrt": math.sqrt(world_size), "none": 1}[scaling]


@dataclass(frozen=True)
class BatchPlan:
    """A job's batch policy made concrete: what one step covers and how a rank runs it.

    policy: fixed-global or per-worker.
    micro_batch: samples one worker puts through one forward and backward (what fits memory).
    full_world_size: workers at the job's full size; the global batch and the learning rate
      of `fixed-global` are those `per-worker` has at this size, unless set.
    global_batch: fixed-global: samples per step (None: micro_batch x full_world_size).
    """

    policy: BatchPolicy
    micro_batch: int
    full_world_size: int
    global_batch: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", BatchPolicy(self.policy))

    @property
    def fixed_global_batch(self) -> int:
        return self.global_batch or self.micro_batch * self.full_world_size

    def step_samples(self, world_size: int) -> int:
        """Samples a full step covers at `world_size` workers."""
        if self.policy is BatchPolicy.PER_WORKER:
            return self.micro_batch * world_size
        return self.fixed_global_batch

    def learning_rate(self, base_lr: float, world_size: int, scaling: str) -> float:
        """`base_lr` is given for one worker's micro-batch (as `per-worker` always had it);
        fixed-global keeps the rate of its own global batch at every world size."""
        if self.policy is BatchPolicy.PER_WORKER:
            return scaled_lr(base_lr, world_size, scaling)
        return scaled_lr(base_lr, self.fixed_global_batch / self.micro_batch, scaling)

    def micro_batches(self, covered: int, world_size: int) -> int:
        """Micro-batches every rank runs for a step of `covered` samples: as many as the
        largest rank's share needs (at least one: a rank with no sample still joins the
        step's collectives)."""
        largest_share = -(-covered // world_size)
        return max(1, -(-largest_share // self.micro_batch))

    def share(self, window: S, rank: int, world_size: int) -> list[S]:
        """This rank's micro-batches of the step's samples `window` (in global order): every
        world_size-th sample from `rank` on, cut into `micro_batches` parts of at most
        `micro_batch` (the last ones may be short or empty)."""
        mine: S = window[rank::world_size]
        size = self.micro_batch
        return [mine[i * size : (i + 1) * size] for i in range(self.micro_batches(len(window), world_size))]

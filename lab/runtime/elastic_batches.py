"""A script of one's own trained under the job's batch policy, as the demo trainer is: which
samples this rank trains at each step, in how many micro-batches, with what loss scale and
learning rate, and where the data stands in a checkpoint.

    from lab.runtime.elastic_batches import ElasticBatches, gradient_sync

    batches = ElasticBatches(len(dataset), micro_batch=32, seed=0)   # the policy from the job
    if resumed:
        batches.load_state_dict(checkpoint["batches"])
    set_lr(optimizer, batches.learning_rate(base_lr))                # the job's, at any world size
    while step < steps:
        work = batches.next_step(step + 1)                            # logs its samples for the drill
        optimizer.zero_grad()
        for i, part in enumerate(work.parts):
            with gradient_sync(model, last=i == len(work.parts) - 1):
                x, y = dataset[part]
                (loss_fn(model(x), y, reduction="sum") * work.loss_scale).backward()
        optimizer.step()
        batches.advance(work)
        step += 1
        checkpoint = {..., "batches": batches.state_dict()}

The policy, the global batch and the job's full size come from the job (LAB_BATCH_POLICY,
LAB_GLOBAL_BATCH, LAB_FULL_WORLD_SIZE; lab.vocab.batch_policy), the rank and world size from
torchrun. Every rank of a step runs the same number of micro-batches (some may be empty: run them
anyway, FSDP2's forward is a collective), and the gradient averaged over the ranks is the exact
mean over the step's samples. The sample order is one seeded permutation per epoch walked by
global position: resumed at another world size, the job goes on at the same sample, none skipped
or trained twice. `examples/fixed_global_ddp.py` is a whole script that does this.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from lab.runtime import events
from lab.runtime.demo import GlobalSampler
from lab.vocab.batch_policy import (
    ENV_BATCH_POLICY,
    ENV_FULL_WORLD_SIZE,
    ENV_GLOBAL_BATCH,
    BatchPlan,
    BatchPolicy,
)
from lab.vocab.events import Event


@dataclass(frozen=True)
class StepWork:
    """One step as this rank runs it."""

    parts: list[torch.Tensor]  # this rank's micro-batches of sample indices (some may be empty)
    covered: int  # the step's samples, every rank together
    loss_scale: float  # multiplies a micro-batch's summed loss: world size / covered
    epoch: int

    @property
    def indices(self) -> torch.Tensor:
        return torch.cat(self.parts)


def _env_int(name: str) -> int | None:
    return int(os.environ.get(name) or 0) or None


class ElasticBatches:
    """The steps of a job's data under its batch policy (see the module's docstring).

    dataset_size: samples in the data set; micro_batch: samples one worker puts through one
    forward and backward; seed: the sample order. The others default to the job's settings
    (`policy`, `global_batch`, `full_world_size`) and torchrun's (`rank`, `world_size`)."""

    def __init__(
        self,
        dataset_size: int,
        micro_batch: int,
        seed: int = 0,
        *,
        policy: str | None = None,
        global_batch: int | None = None,
        full_world_size: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        env = os.environ.get
        self.rank = int(env("RANK", "0")) if rank is None else rank
        self.world_size = int(env("WORLD_SIZE", "1")) if world_size is None else world_size
        self.plan = BatchPlan(
            BatchPolicy(policy or env(ENV_BATCH_POLICY) or BatchPolicy.FIXED_GLOBAL.value),
            micro_batch,
            full_world_size or _env_int(ENV_FULL_WORLD_SIZE) or self.world_size,
            global_batch or _env_int(ENV_GLOBAL_BATCH),
        )
        self.sampler = GlobalSampler(dataset_size, seed)

    def learning_rate(self, base_lr: float, scaling: str = "linear") -> float:
        """`base_lr` given for one micro-batch, scaled to the global batch (fixed-global: the
        job's, whatever the world size; per-worker: this world's)."""
        return self.plan.learning_rate(base_lr, self.world_size, scaling)

    def next_step(self, step: int | None = None) -> StepWork:
        """This rank's part of the next step. Given the step's number (counting from 1), its
        samples are logged first, before they can enter an all-reduce (the drill's ledger of
        samples trained once)."""
        window = self.sampler.window(self.plan.step_samples(self.world_size))
        parts = self.plan.share(window, self.rank, self.world_size)
        work = StepWork(list(parts), len(window), self.world_size / max(len(window), 1), self.sampler.epoch)
        if step is not None:
            events.emit(Event.SAMPLES, step=step, epoch=work.epoch, indices=work.indices.tolist())
        return work

    def advance(self, work: StepWork) -> None:
        """The step's update is applied: the data moves on (never before: a failed step is
        redone)."""
        self.sampler.advance(work.covered)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.sampler.epoch, "position": self.sampler.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler = GlobalSampler(self.sampler.size, self.sampler.seed, int(state["epoch"]), int(state["position"]))


def gradient_sync(model: nn.Module, *, last: bool) -> AbstractContextManager[object]:
    """Where the gradients of a micro-batch go: only accumulated locally before the step's last
    one (DDP's no_sync; FSDP2 keeps them unsharded until its reduce-scatter), averaged over the
    ranks in the last one's backward. A model with neither (one process) just accumulates."""
    set_sync = getattr(model, "set_requires_gradient_sync", None)  # FSDP2's fully_shard
    if set_sync is not None:
        set_sync(last)
        return nullcontext()
    no_sync = getattr(model, "no_sync", None)  # DistributedDataParallel
    if not last and no_sync is not None:
        return cast(AbstractContextManager[object], no_sync())
    return nullcontext()

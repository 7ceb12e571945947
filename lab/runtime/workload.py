"""What the demo job trains, chosen by its `--model` setting, the same in both fault-tolerance
modes: the model, its data (addressed by sample index, sharded by global position), the loss,
the optimizer, and how the model is spread over the ranks.

- `tiny` (the default, for quick drills): the small classifier of lab.runtime.demo, trained with
  DistributedDataParallel and SGD; every rank holds the whole state, so any one rank can
  checkpoint it (lab.runtime.checkpoint).
- a GPT size (lab.runtime.gpt.SIZES): a decoder-only transformer on generated token data,
  trained with AdamW and sharded over the ranks by FSDP2 (`--parallel fsdp`, the default) or
  replicated by DDP (`--parallel ddp`); its checkpoints are sharded (lab.runtime.sharded_checkpoint).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lab.runtime import demo, gpt
from lab.runtime.checkpointer import Checkpointer
from lab.vocab.models import MODELS, PARALLEL, TINY

__all__ = ["MODELS", "PARALLEL", "TINY", "Workload", "shard"]


@dataclass(frozen=True)
class Workload:
    """One model size's data, model, loss and optimizer."""

    name: str
    dataset_size: int
    seed: int

    @property
    def sharded(self) -> bool:
        """Whether its checkpoints are sharded (DCP): every GPT size."""
        return self.name != TINY

    @property
    def default_lr(self) -> float:
        return 0.05 if self.name == TINY else 3e-4

    # ------------------------------------------------------------------ data
    def data(self) -> Any:
        """The whole data set, the same on every rank (generated from the seed)."""
        if self.name == TINY:
            return demo.make_dataset(self.dataset_size, self.seed)
        cfg = gpt.SIZES[self.name]
        return gpt.TokenData.generate(self.dataset_size, cfg.seq_len, cfg.vocab_size, self.seed)

    def batch(self, data: Any, indices: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self.name == TINY:
            x, y = data
            return x[indices].to(device), y[indices].to(device)
        inputs, targets = data.batch(indices)
        return inputs.to(device), targets.to(device)

    # ----------------------------------------------------------------- model
    def model(self) -> nn.Module:
        """The model with its initial weights: the same on every rank for the same seed (set
        by the caller)."""
        if self.name == TINY:
            return demo.make_model()
        return gpt.GPT(gpt.SIZES[self.name])

    def loss_sum(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """The batch's loss summed over its samples (each sample's own loss is a mean over
        its tokens for a GPT): divided by the step's sample count it is the exact mean."""
        x, y = batch
        if self.name == TINY:
            return nn.functional.cross_entropy(model(x), y, reduction="sum")
        return gpt.sample_losses(model(x), y).sum()

    def optimizer(self, params: Any, lr: float) -> torch.optim.Optimizer:
        if self.name == TINY:
            return torch.optim.SGD(params, lr=lr, momentum=0.9)
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)


def build_model(
    workload: Workload, device: torch.device, seed: int, *, sharded: bool, initialise: bool = True
) -> tuple[nn.Module, int]:
    """The model with the same initial weights on every rank (`seed`), on `device`, sharded over
    the ranks by FSDP2 when `sharded` (each rank keeps its shard of those weights); and its
    parameter count. A sharded model that a checkpoint is about to overwrite whole (`initialise`
    False) draws no weights: it is built on the meta device and sharded there, and each rank
    allocates only its shards, left unset for the load."""
    torch.manual_seed(seed)
    if sharded and not initialise:
        net = shards_to_fill(workload.model, device)
    else:
        net = workload.model().to(device)
        net = shard(net, device) if sharded else net
    # A sharded parameter (a DTensor) counts its whole tensor, not this rank's shard.
    return net, sum(p.numel() for p in net.parameters())


def shards_to_fill(make: Callable[[], nn.Module], device: torch.device) -> nn.Module:
    """The model `make` builds, sharded by FSDP2 with no weights drawn: built on the meta device,
    sharded there, then each rank's shards allocated on `device`, unset, for a load to fill."""
    with torch.device("meta"):
        net = make()
    return shard(net, device).to_empty(device=device)


def open_checkpointer(
    workload: Workload, args: Any, *, writer: str, device: torch.device, exclusive: threading.Lock
) -> Checkpointer:
    """The job's checkpoints, chosen once: sharded ones for a GPT (lab.runtime.sharded_checkpoint),
    whole ones for the tiny model (lab.runtime.checkpoint), where the script's settings say.
    `writer` names this rank's files, `exclusive`: see WholeCheckpointer."""
    if workload.sharded:
        from lab.runtime.sharded_checkpoint import ShardedCheckpointer, ShardedCheckpoints

        return ShardedCheckpointer(
            ShardedCheckpoints(
                args.checkpoint_dir,
                args.checkpoint_writes,
                keep=max(2, args.keep_checkpoints),
                pinned=getattr(args, "pinned_staging", None),
            )
        )
    from lab.runtime.checkpoint import CheckpointStore, WholeCheckpointer

    store = CheckpointStore(args.checkpoint_dir, args.checkpoint_writes, keep=args.keep_checkpoints)
    return WholeCheckpointer(store, writer=writer, device=device, exclusive=exclusive)


def shard(model: nn.Module, device: torch.device, group: Any = None) -> nn.Module:
    """FSDP2 over the ranks of `group` (all of them by default): each transformer block is
    a unit of its own (gathered for its forward and backward only), then the rest."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    mesh = DeviceMesh(device.type, ranks)
    for block in getattr(model, "blocks", ()):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model

"""The state a group of the per-step mode (lab.runtime.train_per_step) hands TorchFT to heal a
joining group, and takes back from a live peer: each worker's part of it (a shard under FSDP2),
copied to the worker of the same rank; and the tensor plumbing of its step's gradients."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lab.runtime.demo import GlobalSampler


def local(t: Any) -> torch.Tensor:
    """The part of `t` this worker holds (a DTensor's shard; any other tensor whole)."""
    to_local = getattr(t, "to_local", None)
    held: torch.Tensor = to_local() if to_local is not None else t
    return held


def like(held: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """`held` as `param` holds it: the same DTensor layout when the model is sharded."""
    from torch.distributed.tensor import DTensor

    if isinstance(param, DTensor):
        return DTensor.from_local(
            held, param.device_mesh, param.placements, shape=param.shape, stride=param.stride(), run_check=False
        )
    return held


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One contiguous tensor of all of them: one collective instead of one per parameter."""
    return torch.cat([t.reshape(-1) for t in tensors])


def unflatten(flat: torch.Tensor, shapes: list[torch.Tensor]) -> list[torch.Tensor]:
    """`flat` cut back into tensors shaped as `shapes`."""
    return [chunk.view_as(t) for chunk, t in zip(torch.split(flat, [t.numel() for t in shapes]), shapes, strict=True)]


def held_now(t: Any) -> torch.Tensor:
    """The part of `t` this worker holds, as it is now. TorchFT's HTTP transport serves the
    tensors it is handed when the joining group asks, later, and copies only those on an
    accelerator: a tensor in host memory is served as the optimizer has left it by then, one
    update ahead of the step the heal is labelled with (the joining group then applies that
    update again, and the groups' weights part for good). Host tensors are copied here."""
    held = local(t)
    return held.detach().clone() if held.device.type == "cpu" else held


def state_of(net: nn.Module, optimizer: torch.optim.Optimizer, sampler: GlobalSampler) -> dict[str, Any]:
    """This worker's part of the state a heal copies, as it is at the quorum's step (its step
    comes with it, from TorchFT): the weights, the optimizer's per-parameter state (moments,
    step counts) and the data position. Not the optimizer's hyper-parameters: see load_state."""
    optim = optimizer.state_dict()
    return {
        "model": {k: held_now(v) for k, v in net.state_dict().items()},
        "optimizer": {"state": {i: {k: held_now(v) for k, v in st.items()} for i, st in optim["state"].items()}},
        "epoch": sampler.epoch,
        "position": sampler.position,
    }


def load_state(state: dict[str, Any], net: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """A peer's state (`state_of` on the worker of the same rank) into this worker's model and
    optimizer, in their own layout; the data position is the caller's. The optimizer keeps its
    own hyper-parameters: the learning rate is the step's (it follows the quorum's world size
    under the per-worker policy), set before an asynchronous quorum's heal lands in the step's
    commit, and the peer's, read before the peer set its own for the step, may be another
    (before its first step, the unscaled rate the optimizer was built with): the healed group
    would apply the step's update at another rate than its peers, and their weights part."""
    with torch.no_grad():
        for key, value in net.state_dict().items():
            local(value).copy_(state["model"][key])
    optim = state["optimizer"]
    by_index = dict(enumerate(p for g in optimizer.param_groups for p in g["params"]))
    optimizer.load_state_dict(
        {
            "state": {
                i: {k: like(v, by_index[int(i)]) if v.dim() else v for k, v in st.items()}
                for i, st in optim["state"].items()
            },
            "param_groups": optimizer.state_dict()["param_groups"],
        }
    )


def copied_bytes(state: dict[str, Any]) -> int:
    """Bytes of the tensors of a state a heal copied."""
    tensors = [*state["model"].values()]
    tensors += [v for st in state["optimizer"]["state"].values() for v in st.values()]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def weights_digest(net: nn.Module) -> str:
    """A digest of the parameters this worker holds: equal on the workers of the same rank of
    every group that trained the same steps."""
    import hashlib

    digest = hashlib.sha256()
    for p in net.parameters():
        digest.update(local(p).detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def bound_bytes(net: nn.Module) -> int:
    """Bytes of this worker's part of the state a heal copies: its parameters and, once the
    optimizer has stepped, about twice that again (Adam's two moments; SGD's momentum is
    one): counted as three times the parameters, the most."""
    params = sum(local(p).numel() * local(p).element_size() for p in net.parameters())
    return 3 * params

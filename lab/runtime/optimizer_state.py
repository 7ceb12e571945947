"""A fresh optimizer's state, made to be loaded into.

torch's state dict of an optimizer that has not stepped yet makes its state by a step with zero
gradients (`torch.distributed.checkpoint.state_dict._init_optim_state`): the optimizer's whole
arithmetic over every parameter, 0.67 s for gpt-100m's AdamW on one rank here, against 0.10 s
for the zeros themselves. A sharded checkpoint's load (lab.runtime.sharded_checkpoint) fills
the state of the optimizers it knows the shape of before it asks for that state dict.
"""

from __future__ import annotations

import torch


def fill_adam_state(optimizer: torch.optim.Optimizer) -> None:
    """A fresh Adam or AdamW's state made as its first step would make it (zeroed moments, step
    0), to be loaded into. torch's state dict makes it otherwise by a step with zero gradients:
    the optimizer's whole arithmetic over every parameter, several times the cost of the zeros.
    Other optimizers, and Adam's variants with more state or other step tensors (amsgrad,
    capturable, fused, differentiable), are left to torch."""
    if optimizer.state or type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW):
        return
    groups = optimizer.param_groups
    if any(g.get("amsgrad") or g.get("capturable") or g.get("fused") or g.get("differentiable") for g in groups):
        return
    for group in groups:
        for p in group["params"]:
            if p.requires_grad:
                optimizer.state[p] = {
                    "step": torch.tensor(0.0, dtype=_scalar_dtype(), device="cpu"),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }


def _scalar_dtype() -> torch.dtype:
    """The dtype of Adam's `step` on the CPU: float64 only where that is the default."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32

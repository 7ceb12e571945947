"""The state a heal of the per-step mode copies from a live peer (lab.runtime.heal_state)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lab.runtime import heal_state
from lab.runtime.demo import GlobalSampler, make_model, set_lr

# The optimizers of the demo's models (lab.runtime.workload): the tiny model's, a GPT's.
OPTIMIZERS = {
    "sgd-momentum": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9),
    "adamw": lambda params, lr: torch.optim.AdamW(params, lr=lr, weight_decay=0.0),
}
BUILT_LR, STEP_LR = 0.05, 0.1  # the rate the optimizers are built with; the one the step sets


def _gradients(net: nn.Module, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(p.shape, generator=generator) for p in net.parameters()]


def _update(net: nn.Module, optimizer: torch.optim.Optimizer, grads: list[torch.Tensor]) -> None:
    for p, g in zip(net.parameters(), grads, strict=True):
        p.grad = g.clone()
    optimizer.step()


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_a_healed_worker_applies_the_steps_update_at_the_steps_learning_rate(optimizer, inductor_cache_kept):
    """Under the asynchronous quorum a group's heal lands in the step's commit, after the group
    set the step's learning rate, and the peer's state was read before the peer set its own
    (before its first step: the rate its optimizer was built with). The healed worker takes the
    peer's weights, moments and step counts, keeps the step's rate, and ends the step with the
    peer's weights exactly."""
    make = OPTIMIZERS[optimizer]
    torch.manual_seed(0)
    peer = make_model()
    peer_optimizer = make(peer.parameters(), BUILT_LR)
    _update(peer, peer_optimizer, _gradients(peer, seed=1))  # an earlier step: moments to copy
    state = heal_state.state_of(peer, peer_optimizer, GlobalSampler(64, 0))

    torch.manual_seed(1)  # a group that starts later: other weights, no optimizer state yet
    healed = make_model()
    healed_optimizer = make(healed.parameters(), BUILT_LR)
    assert heal_state.weights_digest(healed) != heal_state.weights_digest(peer)

    grads = _gradients(peer, seed=2)  # the step's summed gradients, the same in every group
    set_lr(peer_optimizer, STEP_LR)
    set_lr(healed_optimizer, STEP_LR)
    heal_state.load_state(state, healed, healed_optimizer)  # in the healed group's commit
    _update(peer, peer_optimizer, grads)
    _update(healed, healed_optimizer, grads)

    assert [g["lr"] for g in healed_optimizer.param_groups] == [STEP_LR]
    assert heal_state.weights_digest(healed) == heal_state.weights_digest(peer)

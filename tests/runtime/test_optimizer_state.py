"""A fresh optimizer's state to load into (lab/runtime/optimizer_state.py): the one torch's
state dict would make, without its zero-gradient step."""

from __future__ import annotations

import pytest

from lab.runtime.optimizer_state import fill_adam_state


def _fresh(kind: str, **options):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    model[1].bias.requires_grad_(False)
    make = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[kind]
    return model, make(model.parameters(), lr=0.1, **options)


def _made(optimizer) -> list:
    """Each parameter's state: its keys, and each value's dtype, shape and device."""
    return [
        [(key, value.dtype, tuple(value.shape), value.device.type) for key, value in state.items()]
        for state in (optimizer.state.get(p, {}) for g in optimizer.param_groups for p in g["params"])
    ]


@pytest.mark.parametrize("kind", ["adam", "adamw"])
def test_a_fresh_adams_state_to_load_into_is_the_one_torchs_state_dict_makes(kind, inductor_cache_kept):
    """The state a load fills: the same keys, dtypes, shapes and devices as torch makes with
    its zero-gradient step (which counts a step), all zero, and no parameter changed."""
    import torch
    from torch.distributed.checkpoint.state_dict import _init_optim_state

    theirs, ours = _fresh(kind), _fresh(kind)
    ours[0].load_state_dict(theirs[0].state_dict())
    _init_optim_state(theirs[1])
    fill_adam_state(ours[1])
    assert _made(ours[1]) == _made(theirs[1])
    assert len(_made(ours[1])[0]) == 3 and _made(ours[1])[-1] == []  # the frozen bias has none
    assert not any(value.count_nonzero() for state in ours[1].state.values() for value in state.values())
    for a, b in zip(ours[0].parameters(), theirs[0].parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(("kind", "options"), [("sgd", {"momentum": 0.9}), ("adam", {"amsgrad": True})])
def test_other_optimizers_and_adams_with_more_state_are_left_to_torch(kind, options, inductor_cache_kept):
    _, optimizer = _fresh(kind, **options)
    fill_adam_state(optimizer)
    assert not optimizer.state

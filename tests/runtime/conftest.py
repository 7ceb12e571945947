"""Fixtures of the runtime's tests: the launcher installed in the test's own process, and
taken out again after it (torch's tables as they were)."""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest

from lab.runtime import agent_hooks, launch, torch_seam


def owner_of(module: str, path: str) -> tuple[Any, str]:
    """(the object holding `path`'s last name, that name): where the seam writes an entry of
    torch_seam.REPLACED or WRITTEN_TABLES."""
    owner: Any = importlib.import_module(module)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    return owner, name


@pytest.fixture
def restored_torch(monkeypatch):
    """Everything lab.runtime.torch_seam replaces or writes into, put back after the test: each
    replaced attribute as it was, each table as a copy the test may write (the original then
    comes back untouched)."""
    for module, path in torch_seam.REPLACED:
        owner, name = owner_of(module, path)
        monkeypatch.setattr(owner, name, getattr(owner, name))
    for module, path in torch_seam.WRITTEN_TABLES:
        owner, name = owner_of(module, path)
        monkeypatch.setattr(owner, name, dict(getattr(owner, name)))
    monkeypatch.setattr(agent_hooks, "_STOP", None)


@pytest.fixture
def installed(restored_torch):
    """lab.runtime.launch's rendezvous handlers and agent monitor in torch's tables, for
    this test only."""
    launch.install()


INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"


@pytest.fixture
def inductor_cache_kept():
    """An optimizer's first step imports torch._dynamo, which sets TORCHINDUCTOR_CACHE_DIR: put
    back as it was (before the autouse check of the process's state, which monkeypatch would
    undo after)."""
    cache_dir = os.environ.get(INDUCTOR_CACHE)
    yield
    if cache_dir is None:
        os.environ.pop(INDUCTOR_CACHE, None)
    else:
        os.environ[INDUCTOR_CACHE] = cache_dir

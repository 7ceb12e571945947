"""Fixtures of the runtime's tests: the launcher installed in the test's own process, and
taken out again after it (torch's tables as they were)."""

from __future__ import annotations

import pytest

from lab.runtime import agent_hooks, launch, torch_seam


@pytest.fixture
def restored_torch(monkeypatch):
    """Everything lab.runtime.torch_seam replaces or writes into, put back after the test: each
    replaced attribute as it was, each table as a copy the test may write (the original then
    comes back untouched)."""
    for module, path in torch_seam.REPLACED:
        owner, name = torch_seam.owner_of(module, path)
        monkeypatch.setattr(owner, name, getattr(owner, name))
    for module, path in torch_seam.WRITTEN_TABLES:
        owner, name = torch_seam.owner_of(module, path)
        monkeypatch.setattr(owner, name, dict(getattr(owner, name)))
    monkeypatch.setattr(agent_hooks, "_STOP", None)


@pytest.fixture
def installed(restored_torch):
    """lab.runtime.launch's rendezvous handlers and agent monitor in torch's tables, for
    this test only."""
    launch.install()

"""Fixtures of every test: real processes and a check that none survives a test; the
PyTorchJob CRD schema."""

from __future__ import annotations

import os
import sys
import time

import psutil
import pytest

from lab.k8s.schemas import CrdSchemaMissing, crd_path


def _ours(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "environ"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            env = p.info["environ"] or {}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if p.pid != os.getpid() and (marker in cmd or any(marker in v for v in env.values())):
            found.append(p)
    return found


@pytest.fixture
def workdir(tmp_path):
    """A work directory; after the test, no process that mentions it may be alive."""
    yield tmp_path
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _ours(str(tmp_path)):
        time.sleep(0.2)
    left = _ours(str(tmp_path))
    for p in left:
        p.kill()
    assert not left, f"processes survived the test: {[(p.pid, p.name()) for p in left]}"
    # A stopped agent's forkserver and resource tracker see it go and exit on their own; on a
    # loaded machine that takes a moment. What is still there after 10 s survived.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _live_children():
        time.sleep(0.2)
    survivors = _live_children()
    for p in survivors:
        p.kill()
    assert not survivors, (
        f"child processes of the test runner survived: {[(p.pid, p.cmdline()[:4]) for p in survivors]}"
    )


def _live_children() -> list[psutil.Process]:
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                out.append(child)
        except psutil.NoSuchProcess:
            continue
    return out


@pytest.fixture
def python():
    return sys.executable


@pytest.fixture(scope="session")
def crd():
    try:
        return crd_path()
    except CrdSchemaMissing as exc:
        pytest.skip(f"PyTorchJob CRD schema absent, CRD validation not tested: {exc}")

"""The lighthouse of the per-step mode on the local target: a real `torchft_lighthouse`."""

from __future__ import annotations

import psutil
import pytest

from lab.local import LocalTarget, LocalTargetError
from lab.local import lighthouse as lighthouse_module
from lab.local.lighthouse import Lighthouse, find_lighthouse
from lab.local.procs import ServerError
from lab.vocab.job import JobSpec
from lab.vocab.per_step import PerStepSettings


def _listening(port: int) -> set[str]:
    return {
        c.laddr.ip for c in psutil.net_connections("inet") if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }


def test_it_restarts_on_its_own_port_on_loopback_only(workdir):
    lh = Lighthouse(workdir, PerStepSettings(), min_replicas=2).start()
    try:
        port, first = lh.port, lh.proc
        assert lh.ready() and _listening(port) == {"127.0.0.1"}
        lh.stop()
        assert first.poll() is not None and not lh.ready()
        lh.start()
        assert lh.port == port and lh.proc is not first and lh.ready()
        assert f"--bind=127.0.0.1:{port}" in psutil.Process(lh.proc.pid).cmdline()
        assert "--heartbeat_timeout_ms=200" in psutil.Process(lh.proc.pid).cmdline()
    finally:
        lh.stop()
    assert lh.proc.poll() is not None


def test_a_missing_lighthouse_is_named_before_anything_starts(workdir, monkeypatch):
    def missing() -> str:
        raise ServerError("torchft_lighthouse was not found beside python or on PATH: expected the torchft package")

    monkeypatch.setattr("lab.local.target.find_lighthouse", missing)
    spec = JobSpec(fault_tolerance="per-step", checkpoint_dir=str(workdir / "ckpt"))
    with pytest.raises(LocalTargetError, match="torchft_lighthouse was not found"):
        LocalTarget(spec, workdir / "run")
    assert not (workdir / "run" / "lighthouse.log").exists()


def test_find_lighthouse_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(lighthouse_module.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServerError, match=r"pip install torchft==0\.2\.0"):
        find_lighthouse()

"""A local rendezvous server whose free port another process took between the pick and its
bind starts on another one; a server restarted on its own port never moves."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from lab.local import etcd as etcd_module
from lab.local import procs
from lab.local.etcd import EtcdServer
from lab.local.lighthouse import Lighthouse
from lab.local.procs import ServerError
from lab.vocab.per_step import PerStepSettings


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port another process holds (a listening socket of this one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _first_pick(monkeypatch, module, port: int) -> list[int]:
    """`module.free_port` hands out `port` first, then free ones; the ports handed out."""
    real, given = procs.free_port, []

    def pick(host: str = "127.0.0.1") -> int:
        given.append(port if not given else real(host))
        return given[-1]

    monkeypatch.setattr(module, "free_port", pick)
    return given


def test_etcd_starts_on_other_ports_when_its_port_was_taken(workdir, monkeypatch, taken):
    given = _first_pick(monkeypatch, etcd_module, taken)
    server = EtcdServer(workdir).start()
    try:
        assert given[0] == taken and server.client_port not in (taken, 0) and server.v2_ready()
        assert "address already in use" in server.log_path.read_text()  # the first try, logged
    finally:
        server.stop()


def test_etcd_restarted_on_its_own_port_does_not_move(workdir, taken):
    server = EtcdServer(workdir)
    server.client_port, server.peer_port = taken, procs.free_port()
    with pytest.raises(ServerError, match="etcd exited with code 1 at start"):
        server.start()
    assert server.client_port == taken


def test_the_lighthouse_starts_on_another_port_when_its_port_was_taken(workdir, monkeypatch, taken):
    given = _first_pick(monkeypatch, procs, taken)
    lighthouse = Lighthouse(workdir, PerStepSettings(), min_replicas=2).start()
    try:
        assert given[0] == taken and lighthouse.port not in (taken, 0) and lighthouse.ready()
    finally:
        lighthouse.stop()

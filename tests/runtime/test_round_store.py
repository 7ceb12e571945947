"""lab.runtime.round_store against a real c10d store: a key's reader waits for it, and stops
waiting, with RoundLost, once its round has no one left to write it."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import torch.distributed as dist

from lab.runtime.round_store import RoundLost, RoundStore


@pytest.fixture
def tcp_store():
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=5), wait_for_workers=False)
    yield store
    del store


def test_a_key_written_later_is_read_when_it_comes(tcp_store):
    # The PrefixStore's C++ side does not keep the Python object alive: the test does, as the
    # rendezvous handler does (its _store).
    asked = []
    inner = RoundStore(tcp_store, lambda: asked.append(1) or True)
    store = dist.PrefixStore("round-3", inner)
    writer = threading.Timer(0.3, lambda: store.set("master_addr", "10.0.0.7"))
    writer.start()
    try:
        # Past the store's own timeout (5 s) the read would fail with LookupError.
        assert store.get("master_addr") == b"10.0.0.7"
    finally:
        writer.cancel()
    assert asked, "the key came before the read looked: nothing was waited for"


def test_the_wait_ends_once_its_round_lost_the_writer(tcp_store):
    writer_alive = threading.Event()
    writer_alive.set()
    inner = RoundStore(tcp_store, writer_alive.is_set)
    store = dist.PrefixStore("round-3", inner)
    threading.Timer(0.3, writer_alive.clear).start()
    # RoundLost, not the LookupError of the store's own timeout (5 s).
    with pytest.raises(RoundLost, match="master_addr"):
        store.get("master_addr")


def test_a_key_never_written_times_out_as_the_store_would(tcp_store):
    tcp_store.set_timeout(timedelta(seconds=0.4))
    store = RoundStore(tcp_store, lambda: True)
    with pytest.raises(LookupError, match="not written within"):
        store.get("master_addr")


def test_everything_else_is_the_wrapped_stores(tcp_store):
    store = RoundStore(tcp_store, lambda: False)
    store.set("k", "v")
    assert tcp_store.get("k") == b"v"
    assert store.get("k") == b"v", "a key that is there is read whatever the round"
    assert store.add("n", 2) == 2 and tcp_store.add("n", 0) == 2
    assert store.check(["k"]) and not store.check(["absent"])
    store.wait(["k"], timedelta(seconds=1))
    store.set_timeout(timedelta(seconds=7))
    assert store.timeout == tcp_store.timeout == timedelta(seconds=7)

"""The rendezvous store, with waits that end when the round they wait in is gone.

Once a round completes, torch's agents meet in the rendezvous store: rank 0 writes the address
and port its workers' store will use, and every other agent reads them with a blocking `get`.
That read waits for the store's whole timeout (300 s) when rank 0 never writes: a node evicted
just after the round completed, before its agent wrote them. Its peers would sit out five
minutes that no heartbeat can shorten.

`RoundStore` passes every call to the store it wraps, but reads a key by polling for it and
asks between polls whether the wait still makes sense (`still_waiting`: in the launcher, rank 0
is still a participant of the round). When it no longer does, `get` raises `RoundLost`, and the
launcher joins the next round instead (lab.runtime.launch).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from torch.distributed import Store  # type: ignore[attr-defined]  # torch re-exports it untyped

# How often a missing key is looked for: a round's addresses are written milliseconds after
# it completes, and each poll is one small request to the rendezvous server.
POLL_S = 0.05


class RoundLost(RuntimeError):
    """The key will not come: the round it belongs to lost its writer."""


class RoundStore(Store):
    """A store that wraps another (see the module's docstring). A C++ store built on it (torch's
    PrefixStore) does not keep this Python object alive: its owner must."""

    def __init__(self, inner: Store, still_waiting: Callable[[], bool], poll_s: float = POLL_S) -> None:
        super().__init__()  # the C++ side of a store written in Python
        self.inner: Any = inner  # torch's stubs lack `timeout` and take only str values
        self.still_waiting = still_waiting
        self.poll_s = poll_s

    def get(self, key: str) -> bytes:
        """`key`'s value, once it is written; `RoundLost` as soon as `still_waiting()` says it
        will not be, and LookupError (what etcd's store raises) past the wrapped store's
        timeout."""
        timeout: timedelta = self.inner.timeout
        deadline = time.monotonic() + timeout.total_seconds()
        while not self.inner.check([key]):
            if not self.still_waiting():
                raise RoundLost(f"rendezvous key {key!r} will not be written: its round lost its writer")
            if time.monotonic() >= deadline:
                raise LookupError(f"rendezvous key {key!r} not written within {timeout}")
            time.sleep(self.poll_s)
        value: bytes = self.inner.get(key)
        return value

    # Everything else is the wrapped store's.
    def set(self, key: str, value: str) -> None:
        self.inner.set(key, value)

    def add(self, key: str, value: int) -> int:
        added: int = self.inner.add(key, value)
        return added

    def check(self, keys: list[str]) -> bool:
        return bool(self.inner.check(keys))

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        if timeout is None:
            self.inner.wait(keys)
        else:
            self.inner.wait(keys, timeout)

    def set_timeout(self, timeout: timedelta) -> None:
        self.inner.set_timeout(timeout)

    @property
    def timeout(self) -> timedelta:
        value: timedelta = self.inner.timeout
        return value

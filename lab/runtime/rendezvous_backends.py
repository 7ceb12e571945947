"""The c10d and etcd-v2 rendezvous backends as the launcher builds them: handlers
(lab.runtime.rendezvous_handler) made from fractional-second settings, a poll of the job's own,
clients that reconnect to a server that restarted, and a round written back to a server that
came back empty. `install` routes torch's registry to `etcd_v2` and `c10d`
(lab.runtime.torch_seam)."""

from __future__ import annotations

import copy
import functools
import logging
import pickle
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from torch.distributed import TCPStore  # type: ignore[attr-defined]  # not re-exported by torch
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend as create_c10d_backend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousTimeout
from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import create_backend as create_etcd_backend
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from lab.runtime import container_ledger, torch_seam
from lab.runtime.rendezvous_handler import (
    DEFAULT_SERVER_OUTAGE_S,
    RECONNECT_EVERY_S,
    ResilientRendezvousHandler,
    outage_began,
    outage_ended,
    outage_gave_up,
)
from lab.runtime.round_store import RoundStore
from lab.vocab.job import LAUNCH_MODULE

log = logging.getLogger(LAUNCH_MODULE)  # the launcher's one log

# rdzv-conf keys read here; torch's own create_handler would reject fractions in them.
FRACTIONAL_KEYS = ("join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout", "keep_alive_interval")
POLL_KEY = "poll_interval"
OUTAGE_KEY = "server_outage"
STATE_TTL_KEY = "state_ttl"  # etcd-v2: seconds etcd keeps the rendezvous state nobody writes
# How long the participants of a round written back to an empty server are counted alive
# without a heartbeat: the time the other agents take to reconnect.
RESTORED_HEARTBEAT_GRACE_S = 5.0
ETCD_READ_TIMEOUT_S = 5
# The rendezvous handlers this agent made (torchrun makes one): a signal leaves their rounds.
HANDLERS: list[ResilientRendezvousHandler] = []


def install() -> None:
    """Route torch's c10d and etcd-v2 backends through our handler, and name the rendezvous's
    events without reading the stack."""
    torch_seam.replace_rendezvous_backends({"etcd-v2": etcd_v2, "c10d": c10d})
    torch_seam.name_rendezvous_events_from_frames()


def _seconds(params: RendezvousParameters, key: str) -> timedelta | None:
    value = params.get(key)
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"rdzv-conf {key}={value!r} is invalid: expected seconds (a number > 0)") from None
    if seconds <= 0:
        raise ValueError(f"rdzv-conf {key}={value!r} is invalid: expected seconds > 0")
    return timedelta(seconds=seconds)


def _create_handler(
    create_backend: Callable[[RendezvousParameters], tuple[Any, Any]], params: RendezvousParameters
) -> Any:
    """Our dynamic-rendezvous handler, built from fractional-second settings."""
    backend, store = create_backend(params)
    timeout = RendezvousTimeout(
        *(_seconds(params, k) for k in ("join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout"))
    )
    keep_alive = _seconds(params, "keep_alive_interval") or timedelta(seconds=5)
    # torch annotates the interval as whole seconds (int) and computes with any number.
    heartbeats: dict[str, Any] = {
        "keep_alive_interval": keep_alive.total_seconds(),
        "keep_alive_max_attempt": params.get_as_int("keep_alive_max_attempt", 3),
    }
    handler = ResilientRendezvousHandler.from_backend(
        params.run_id,
        store,
        backend,
        params.min_nodes,
        params.max_nodes,
        params.local_addr,
        timeout,
        **heartbeats,
    )
    handler.server_outage_s = _server_outage_s(params)
    _restoring(handler, backend)
    HANDLERS.append(handler)
    torch_seam.replace_rendezvous_store(
        handler, RoundStore(torch_seam.rendezvous_store(handler), handler.rank0_present)
    )
    poll = _seconds(params, POLL_KEY)
    poll_s = poll.total_seconds() if poll is not None else 1.0  # torch's own: 1 s
    # torch's state holder answers reads within `cache_duration` (1 s) of the last from its
    # cache, whatever the poll: the monitor's check for nodes waiting to join and a waiting
    # agent's look for an open round would see the server's state up to a second late.
    torch_seam.cache_rendezvous_state_for(handler, poll_s)
    # The rendezvous op loop's poll of the shared state takes `poll_s`; at each, a waiting
    # agent stops once the job is done (with or without a poll interval of the job's own), and
    # ends the round's last call once every node it expects has joined. torch's jitter before
    # a first join is left out where this agent rejoins.
    torch_seam.replace_rendezvous_poll_delay(poll_s, _at_each_poll, _rejoining)
    return handler


def _at_each_poll() -> None:
    for handler in HANDLERS:
        handler.stop_waiting_if_the_job_is_done()
        handler.end_the_last_call_once_all_are_in()


def _rejoining() -> bool:
    return any(handler.rejoining() for handler in HANDLERS)


def etcd_v2(params: RendezvousParameters) -> Any:
    """The handler of an etcd-v2 rendezvous (torch's backend name)."""
    # Seconds one etcd request may take (torch's default: 60). The agent's monitor loop waits
    # on these requests, and a restarting or vanished etcd answers none of them.
    params.config.setdefault("read_timeout", str(ETCD_READ_TIMEOUT_S))
    handler = _reach_server(lambda: _create_handler(_etcd_backend, params), params)
    handler.reconnect = functools.partial(_reconnect_etcd, handler, params)
    container_ledger.check_in(handler)
    return handler


def _etcd_backend(params: RendezvousParameters) -> tuple[Any, Any]:
    """torch's etcd-v2 backend and store, the state kept `state_ttl` seconds (rdzv-conf key;
    torch's own 2 hours without it) after its last write."""
    backend, store = create_etcd_backend(params)
    ttl = params.get_as_int(STATE_TTL_KEY)
    if ttl is not None:
        if ttl <= 0:
            raise ValueError(f"rdzv-conf {STATE_TTL_KEY}={ttl!r} is invalid: expected whole seconds > 0")
        torch_seam.keep_etcd_rendezvous_state_for(backend, ttl)
    return backend, store


def _reach_server(create: Callable[[], Any], params: RendezvousParameters) -> Any:
    """`create()`, tried once a second while it cannot reach the server, for up to the job's
    server_outage: a pod can start while the etcd pod restarts or is still being scheduled."""
    limit = _server_outage_s(params)
    since: float | None = None
    while True:
        try:
            made = create()
        except RendezvousConnectionError as exc:
            now = time.monotonic()
            if since is None:
                since = now
                outage_began(exc, "the agent waits for it", limit)
            if now - since > limit:
                outage_gave_up(now - since)
                raise
            time.sleep(RECONNECT_EVERY_S)
            continue
        if since is not None:
            outage_ended(time.monotonic() - since)
            made.waited_for_server = True
        return made


def _server_outage_s(params: RendezvousParameters) -> float:
    outage = _seconds(params, OUTAGE_KEY)
    return outage.total_seconds() if outage else DEFAULT_SERVER_OUTAGE_S


class _RestoringBackend:
    """torch's rendezvous backend, except that a server with no state at all, asked by an
    agent that is in a round (the server came back empty), first gets that agent's view of the
    round written back. torch's state holder takes "no state" for an empty round: whichever read
    reached the restarted server first (the monitor's, the heartbeat thread's) would report
    every participant gone and restart every worker."""

    def __init__(self, backend: Any, handler: Any) -> None:
        self.backend, self._handler = backend, handler

    @property
    def name(self) -> str:
        return str(self.backend.name)

    def get_state(self) -> Any:
        got = self.backend.get_state()
        if got is None:
            # Read again whether this agent wrote the round back or another did meanwhile.
            _restore_round(self._handler, self.backend)
            got = self.backend.get_state()
        return got

    def set_state(self, state: bytes, token: Any = None) -> Any:
        if not token:
            # A write with no version creates the state (torch's backends write it only where
            # there is none). After a reconnect the holder has no version, and a write left
            # pending by the outage (a heartbeat) holds a view from before it, whose heartbeats
            # have all expired: created from that view, the round would lose every participant
            # at the next read, on every agent. The round goes back first, with fresh
            # heartbeats; this write then fails as against any state, and the holder reads it.
            _restore_round(self._handler, self.backend)
        got = self.backend.set_state(state, token)
        if got is None:
            _restore_round(self._handler, self.backend)
            current = self.backend.get_state()
            got = None if current is None else (*current, False)  # not this write: the restored round
        return got


def _restoring(handler: Any, backend: Any) -> None:
    torch_seam.replace_rendezvous_backend(handler, _RestoringBackend(backend, handler))


def _use_backend(handler: Any, backend: Any, store: Any) -> None:
    """Make `handler` talk to the server through `backend` and `store` from now on. The state's
    version token is dropped: a server that restarted empty has no such version, and writes
    made against it would fail for good; without one the next write re-reads the state. A
    server that came back empty gets the round back at the first read (`_RestoringBackend`)."""
    _restoring(handler, backend)
    torch_seam.forget_rendezvous_state_version(handler)
    torch_seam.replace_rendezvous_store(handler, RoundStore(store, handler.rank0_present))


def _restore_round(handler: Any, backend: Any) -> None:
    """A server that came back empty (an etcd pod that moved, any c10d store) lost the round the
    workers train in, and with it the participants' heartbeats: a node that vanishes later
    would never be seen to stop heartbeating. Write this agent's last view of the state back,
    with every participant's heartbeat counted from now (the outage was nobody's fault), if
    this agent's workers run in a round and the server has no state (it may have kept its
    data, or another agent wrote it back first: the write only creates an absent state)."""
    if not handler.in_a_round():
        # No round of its workers to lose. The first agent to join a new rendezvous gets here
        # too (its write creates the state, with no version), its own pending join in its
        # view: written back, that join's heartbeat would be dated the grace into the future,
        # and a node that vanished in the round's first seconds would be found that much later.
        return
    if backend.get_state() is not None:
        return
    state = copy.deepcopy(torch_seam.rendezvous_state(handler))
    # torch's heartbeat clock. Every participant's heartbeat is dated a grace into the future: the
    # others reconnect one by one (each tries once a second, slower on a loaded machine), and a
    # heartbeat dated now would expire (keep-alive window, 1.5 s) before a slow one's first
    # renewal, so the agents that are back would declare it dead and restart for nothing.
    now = datetime.now(UTC) + timedelta(seconds=RESTORED_HEARTBEAT_GRACE_S)
    state.last_heartbeats = dict.fromkeys(state.last_heartbeats, now)
    backend.set_state(pickle.dumps(state), None)
    log.warning("the rendezvous server came back empty: round %d written back", state.round)


def _reconnect_etcd(handler: Any, params: RendezvousParameters) -> None:
    """Point `handler` at a new etcd client, once the server answers it."""
    try:
        if params.get("protocol", "http") == "http":
            # One short request first: a restarting etcd accepts connections before it answers.
            with urllib.request.urlopen(f"http://{params.endpoint}/version", timeout=1) as answer:
                answer.read()
        backend, store = _etcd_backend(params)
        backend.get_state()
    except SignalException:
        raise  # the agent's stop, not an unreachable server
    except Exception as exc:  # the client raises etcd, urllib3 and socket errors alike
        raise RendezvousConnectionError(f"etcd at {params.endpoint} is unreachable") from exc
    _use_backend(handler, backend, store)


def c10d(params: RendezvousParameters) -> Any:
    """The handler of a c10d rendezvous (torch's backend name)."""
    handler = _create_handler(create_c10d_backend, params)
    if params.get_as_bool("is_host") is False:
        # The store is a server of its own (our setup): after it restarts, talk to the new one.
        handler.reconnect = functools.partial(_reconnect_c10d, handler, params)
        container_ledger.check_in(handler)  # a store an agent hosts (per-step groups) dies with its container
    return handler


def _reconnect_c10d(handler: Any, params: RendezvousParameters) -> None:
    """Point `handler` at a new connection to the c10d store. A TCPStore client never
    reconnects, so after the store restarts the old connection fails for good. Connecting
    gives up within a second while the store is down (the agent's monitor loop waits for
    it); the connection then gets the store's usual read timeout."""
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=29400)
    try:
        store = TCPStore(host, port, is_master=False, multi_tenant=True, timeout=timedelta(seconds=1))
    except (RuntimeError, ValueError, TimeoutError) as exc:
        raise RendezvousConnectionError(f"the c10d store at {host}:{port} is unreachable") from exc
    store.set_timeout(timedelta(seconds=params.get_as_int("read_timeout", 60) or 60))
    # A new backend on the new connection: it writes the empty-state sentinel that keeps
    # its reads from blocking on a store that restarted empty.
    _use_backend(handler, C10dRendezvousBackend(store, params.run_id), store)

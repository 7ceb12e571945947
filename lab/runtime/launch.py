"""torchrun, with a rendezvous that notices a lost node in about a second and a half and
survives its server restarting.

Usage is torchrun's: `python -m lab.runtime.launch [torchrun flags] -m lab.runtime.train [script args]`;
flags can come from torchrun's PET_* environment as well (what the training operator sets).

Why:
- torch's dynamic rendezvous (c10d and etcd-v2 backends) reads its timeouts as whole
  seconds and polls the shared state once a second. A node that vanishes is only dropped
  after keep_alive_interval x keep_alive_max_attempt, so at best 3 s, and every round change
  costs up to another second of polling. This launcher registers the same two backends with
  a handler that accepts fractional seconds (`keep_alive_interval=0.5`,
  `last_call_timeout=0.2`) and an extra `poll_interval` key (default 1, torch's own).
- torch's agent asks the rendezvous server whether nodes are waiting on every monitor tick;
  one failed request (etcd restarting on an upgrade, its node drained) raises out of the
  agent and torchrun exits 1, which the training operator treats as a permanent failure.
  Here workers keep training while the server is unreachable, for up to `server_outage`
  seconds (rdzv-conf key, default 60); past that, or when a join times out, the launcher
  exits with a retryable code (>= 128, see EXIT_*) and leaves the rendezvous open, so the
  restarted pod joins the same job again. torch closes the rendezvous for good in both cases.
- A node that vanishes (a spot VM taken back without a word: its sockets stay open) stops
  heartbeating, and torch's agents see it dropped from the rendezvous within
  keep_alive_interval x keep_alive_max_attempt, but act on it only when their workers' next
  collective times out (the process-group timeout). Here an agent whose round lost a
  participant restarts its workers at once (SIGTERM: they save the last completed step), as
  it does when a new node is waiting, and the survivors rendezvous without it. Workers
  that fail because a peer of that lost round went away (the first survivor to act stops
  its workers, and the others' collectives break) count as that membership change, not as
  a failure: the job's restart budget is kept for real failures.
- A round's rank 0 shares its workers' address through the rendezvous store, and torch's other
  agents wait for it for the store's whole timeout (300 s): a node evicted right after a round
  completed holds its peers for five minutes. Here that wait ends once the rendezvous drops
  rank 0 (its heartbeats stopped), and the others join the next round (lab.runtime.round_store).
- torch's agents record structured events (worker starts with the round's world size and
  restart count, the agents' success or failure) to a named handler that torchrun's
  `--event-log-handler` picks and nothing registers by default. With `LAB_AGENT_EVENTS=<file>`
  this launcher registers one that writes them to that file as JSON lines, so a drill can
  time the rounds of a script that emits no events of its own.
- A node that joins as the job ends: torch's agents restart their workers for it even when
  another agent's workers already finished, and that agent, in its exit barrier, holds the
  round for 300 s (the barrier's timeout) while the others wait for the next one; an agent that
  did restart and finds the rendezvous closed exits 1 (on a cluster: a failed pod, which fails
  the PyTorchJob). Here agents whose workers succeeded say so in the rendezvous store before
  their exit barrier: the others then let their workers finish instead of restarting them for
  a joining node, an agent that finds the rendezvous closed exits 0, and one that restarted its
  workers a moment before the success was recorded stops waiting for a round at its next poll
  and exits 0. An agent that leaves so, or gives up on workers that failed with no restart
  left, counts itself in to its last round's exit barrier, where the agents whose workers
  finished would otherwise wait its 300 s for it.
- Workers start warm: from a forkserver that imported torch once (lab.runtime.warm), not as new
  Pythons that import it on every restart. `LAB_WARM_WORKERS=0` turns it off; a
  `--no-python` entrypoint always runs as torchrun runs it.
Without these keys it behaves like torchrun, but for those exits, that restart and the
warm start.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import re
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from datetime import UTC, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.runtime import events, spot_notice
from lab.runtime.process_title import set_title, where
from lab.runtime.stack_dumps import dump_stacks_on_request
from lab.vocab.events import Event
from lab.vocab.job import CONTAINER_KILLS, ENV_AGENT_EVENTS, ENV_K8S_NODE, ENV_NODE, EXIT_PEER_LOST
from lab.vocab.stack_dumps import AGENT

PROG = "lab.runtime.launch"
log = logging.getLogger(PROG)

if TYPE_CHECKING:
    from torch.distributed.elastic.rendezvous import RendezvousParameters

# rdzv-conf keys read here; torch's own create_handler would reject fractions in them.
FRACTIONAL_KEYS = ("join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout", "keep_alive_interval")
ENV_WARM_WORKERS = "LAB_WARM_WORKERS"
# The name torchrun's --event-log-handler (PET_EVENT_LOG_HANDLER) selects our handler by.
EVENT_LOG_HANDLER = "lab-jsonl"
POLL_KEY = "poll_interval"
OUTAGE_KEY = "server_outage"
DEFAULT_SERVER_OUTAGE_S = 60.0
RECONNECT_EVERY_S = 1.0
# A participant silent for this many keep-alive intervals, after a peer's connection closed
# on this agent's workers, is the one that went (a live agent beats every interval).
LOST_PEER_INTERVALS = 1.5
# How long an agent stopped by a signal tries to take its node out of the round.
LEAVE_TIMEOUT_S = 3.0
# The rendezvous handlers this agent made (torchrun makes one): a signal leaves their rounds.
_HANDLERS: list[Any] = []
# How long the participants of a round written back to an empty server are counted alive
# without a heartbeat: the time the other agents take to reconnect.
RESTORED_HEARTBEAT_GRACE_S = 5.0
ETCD_READ_TIMEOUT_S = 5


class ContainerKillLoop(Exception):
    """This worker pod's containers were killed again and again on its node, each time without a
    word from its agent (see ContainerLedger): the job should fail rather than be recreated."""


class JobAlreadyDone(Exception):
    """The rendezvous closed after other agents' workers finished the job: this agent, which was
    rejoining, has nothing left to do."""


# Exit codes. The training operator (restartPolicy: ExitCode) retries a pod only for codes
# 128-255; torchrun's 1 would end the job. A signal exits 128 + its number, as a shell does.
EXIT_RENDEZVOUS_UNREACHABLE = 170  # the rendezvous server stayed unreachable past server_outage
EXIT_RENDEZVOUS_TIMEOUT = 171  # fewer than min_nodes joined within join_timeout


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


def _handler_class() -> type[Any]:
    """torch's dynamic-rendezvous handler, made to ride out an unreachable server and to
    leave the rendezvous open when this agent gives up on it (defined lazily: torch is
    imported only when a rendezvous is built, so its type is Any to the callers)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.rendezvous.api import (
        RendezvousClosedError,
        RendezvousConnectionError,
        RendezvousInfo,
        RendezvousTimeoutError,
    )
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

    from lab.runtime.round_store import RoundLost

    class ResilientRendezvousHandler(DynamicRendezvousHandler):
        server_outage_s: float = DEFAULT_SERVER_OUTAGE_S
        # Called (at most once a second) while the server is unreachable: a new client for a
        # server that came back. c10d's TCPStore never reconnects, and an etcd that restarts
        # empty (its pod moved, its emptyDir gone) is a new cluster its old client refuses.
        reconnect: Callable[[], None] | None = None
        _unreachable_since: float | None = None
        _peers_lost_marker: Path | None = None
        _reconnected_at = 0.0
        _gave_up = False  # this agent leaves on a rendezvous error: keep the rendezvous open
        waited_for_server = False  # its creation waited for the rendezvous server to come back
        ledger: ContainerLedger | None = None  # this pod's containers, in the rendezvous store
        # The round this agent's workers run in, and its participants when it completed.
        _round: int | None = None
        _members: frozenset[object] = frozenset()  # the round's node descriptors
        _lost_reported = False
        waiting_thread: int | None = None  # the thread waiting in next_rendezvous (None: none)
        # The last round this agent's workers ran in: its store and size, for its exit barrier.
        _last_round: RendezvousInfo | None = None

        def _succeeded_key(self) -> str:
            return f"lab/{self.get_run_id()}/succeeded"

        def mark_succeeded(self) -> None:
            """Record that this agent's workers finished the job, before the rendezvous closes."""
            try:
                self._store.set(self._succeeded_key(), "1")
            except SignalException:
                raise  # the agent's stop (SIGTERM), raised wherever its main thread was: never swallowed
            except Exception as exc:  # noqa: BLE001 - the job is done either way; only late agents lose
                log.warning("could not record the job's success in the rendezvous store (%s)", exc)

        def job_succeeded(self) -> bool:
            """Whether an agent of this run recorded that its workers finished the job."""
            try:
                return bool(self._store.check([self._succeeded_key()]))
            except SignalException:
                raise
            except Exception:  # noqa: BLE001 - unknown: not known to have succeeded
                return False

        def _rank0_present(self) -> bool:
            """Whether the round this agent completed still has its rank 0 (the agent that
            writes the round's addresses): False once it is dropped, or the round is over."""
            state = self._state_holder.state
            return state.complete and self._this_node in state.participants and 0 in state.participants.values()

        def num_nodes_waiting(self) -> int:
            """Nodes waiting to join; 0 while the server is unreachable (the workers keep
            training), until `server_outage_s` has passed. While it is down, the server is
            tried only through `reconnect` (a new client, short timeouts): a restarting server
            accepts connections before it answers, and the old client would hang on one."""
            now = time.monotonic()
            if self._unreachable_since is not None and self.reconnect is not None:
                if now - self._reconnected_at < RECONNECT_EVERY_S:
                    return self._still_down(now)
                self._reconnected_at = now
                try:
                    self.reconnect()
                except RendezvousConnectionError:
                    return self._still_down(now)
            try:
                waiting = super().num_nodes_waiting()
            except RendezvousConnectionError as exc:
                if self._unreachable_since is None:
                    self._unreachable_since = self._reconnected_at = now
                    _outage_began(exc, "workers keep training", self.server_outage_s)
                return self._still_down(now)
            self._server_back()
            if waiting and self.job_succeeded():
                # Another agent's workers finished the job and it waits in its exit barrier for
                # this one: restarting for a node that joins now would stop workers that are
                # finishing, and the next round could never form while that agent holds this one.
                waiting = 0
            return waiting + len(self._lost_members())

        def find_the_lost_peer(self) -> frozenset[object]:
            """This agent's workers failed because a peer went (a closed connection): find
            which participant before its heartbeats have fully expired. A live agent beats
            every keep-alive interval, so one silent for 1.5 intervals is dropped from the
            round, in the server's state too (the others' next round waits for that); tried
            every 0.1 s for up to the usual keep-alive window. The lost participants, or none."""
            holder: Any = self._state_holder  # torch's backend state holder: its settings and cache
            normal = holder._settings
            window = (normal.keep_alive_interval * normal.keep_alive_max_attempt).total_seconds()
            short = dataclasses.replace(
                normal, keep_alive_interval=normal.keep_alive_interval * LOST_PEER_INTERVALS, keep_alive_max_attempt=1
            )
            deadline = time.monotonic() + window
            while True:
                holder._settings = short
                try:
                    holder._last_sync_time = -math.inf  # read the server's state now
                    holder.sync()
                    if holder._dead_nodes:  # dropped here by the short window: write that back
                        holder.mark_dirty()
                        holder.sync()  # a lost race re-reads; the next turn tries again
                except RendezvousConnectionError:
                    return frozenset()  # the server is away: the usual path rides that out
                finally:
                    holder._settings = normal
                lost = self._lost_members()
                if lost or time.monotonic() >= deadline:
                    return lost
                time.sleep(0.1)

        def lost_members(self) -> frozenset[object]:
            """The lost participants of this agent's round, from a fresh read of the state."""
            self.num_nodes_waiting()
            return self._lost_members()

        def _lost_members(self) -> frozenset[object]:
            """Participants of this agent's round that the rendezvous dropped since it
            completed: their heartbeats stopped (a vanished node) or they left."""
            state = self._state_holder.state
            if self._round is None or state.round != self._round or state.closed:
                # Closed: the job is over (an agent whose workers finished closes it), and the
                # nodes leaving now are done, not lost; a restart would train nothing.
                return frozenset()
            # A member on the wait list left only to rejoin (its agent restarts for a node that
            # joins): it is not lost.
            lost = self._members - set(state.participants) - set(state.wait_list)
            if lost and not self._lost_reported:
                self._lost_reported = True
                # Before the agent stops the workers: sharded workers then leave at once
                # instead of waiting for a step boundary to save with the lost peer.
                if self._peers_lost_marker is not None:
                    spot_notice.mark_peers_lost(self._peers_lost_marker)
                names = sorted(str(n) for n in lost)
                log.warning("participant(s) %s left round %d; restarting the workers", ", ".join(names), state.round)
                events.emit(Event.RDZV_MEMBER_LOST, nodes=names, round=state.round, source="agent")
            return lost

        def _server_back(self) -> None:
            """Note the end of an outage, if one was going on."""
            if self._unreachable_since is not None:
                _outage_ended(time.monotonic() - self._unreachable_since)
                self._unreachable_since = None

        def _wait_for_server(self, exc: Exception) -> bool:
            """A rendezvous (a restart's, or the first) met an unreachable server: wait for it,
            trying a new client once a second, until `server_outage_s` of outage has passed
            (counted from when the monitor first saw it, if it did). True: try the rendezvous
            again; False: give up. An etcd pod moved by an upgrade while a node is lost must
            not end the agents: their pods would be restarted, a far slower recovery."""
            now = time.monotonic()
            if self._unreachable_since is None:
                self._unreachable_since = self._reconnected_at = now
                _outage_began(exc, "joining a round waits for it", self.server_outage_s)
            while time.monotonic() - self._unreachable_since <= self.server_outage_s:
                time.sleep(RECONNECT_EVERY_S)
                if self.reconnect is None:
                    return True  # the old client is all there is: try it again
                self._reconnected_at = time.monotonic()
                try:
                    self.reconnect()
                except RendezvousConnectionError:
                    continue
                return True
            _outage_gave_up(time.monotonic() - self._unreachable_since)
            return False

        def _still_down(self, now: float) -> int:
            """0 (nobody waits) while the outage is within `server_outage_s`; past it, give up."""
            assert self._unreachable_since is not None
            if now - self._unreachable_since > self.server_outage_s:
                self._gave_up = True
                _outage_gave_up(now - self._unreachable_since)
                raise RendezvousConnectionError(
                    f"the rendezvous server has been unreachable for {now - self._unreachable_since:.0f} s"
                )
            return 0

        def next_rendezvous(self) -> RendezvousInfo:
            self.waiting_thread = threading.get_ident()
            try:
                return self._next_round()
            finally:
                self.waiting_thread = None

        def stop_waiting_if_the_job_is_done(self) -> None:
            """Called at each poll while this agent waits for a round: the others' workers may
            have finished the job meanwhile (an agent that restarted its workers for a joining
            node just as another's finished), and that agent holds the round in its exit
            barrier, so no round would form until its barrier times out (300 s)."""
            if self.waiting_thread == threading.get_ident() and self.job_succeeded():
                self._check_in_to_the_exit_barrier()
                raise JobAlreadyDone(
                    f"while this agent waited for a round of the rendezvous {self.get_run_id()!r}, "
                    "the other agents' workers finished the job"
                )

        def _check_in_to_the_exit_barrier(self) -> None:
            """This agent leaves without its workers finishing: it stopped them for a node that
            joined as the others' finished, or they failed with no restart left. An agent whose
            workers finished waits in torch's exit barrier for every agent of its round: count
            this one in, without waiting, or that agent waits out the barrier's timeout (300 s)
            for one that has gone."""
            from torch.distributed.elastic.agent.server.api import _TERMINAL_STATE_SYNC_ID
            from torch.distributed.elastic.utils.store import _barrier_nonblocking

            last, self._last_round = self._last_round, None
            if last is None:
                return  # a newcomer: no round of its own to leave
            try:
                _barrier_nonblocking(last.store, last.world_size, _TERMINAL_STATE_SYNC_ID)
            except SignalException:
                raise
            except Exception as exc:  # noqa: BLE001 - the other agent's barrier then times out, as torch's would
                log.warning("could not check in to the finished round's exit barrier (%s)", exc)

        def _next_round(self) -> RendezvousInfo:
            self._round = None
            if self._peers_lost_marker is not None:
                self._peers_lost_marker.unlink(missing_ok=True)  # the round it marked is over
                self._peers_lost_marker = None
            while True:
                started = time.monotonic()
                try:
                    info = super().next_rendezvous()
                except RoundLost as exc:
                    waited = time.monotonic() - started
                    log.warning("%s; joining the next round", exc)
                    state = self._state_holder.state
                    events.emit(
                        Event.RDZV_ROUND_ABANDONED, round=state.round, waited_s=round(waited, 3), source="agent"
                    )
                    continue
                except RendezvousConnectionError as exc:
                    if self._wait_for_server(exc):
                        continue
                    self._gave_up = True
                    raise
                except RendezvousTimeoutError:
                    self._gave_up = True
                    raise
                except RendezvousClosedError:
                    if self.job_succeeded():
                        self._check_in_to_the_exit_barrier()
                        raise JobAlreadyDone(
                            f"the rendezvous {self.get_run_id()!r} closed: the other agents' workers finished the job"
                        ) from None
                    raise
                break
            self._server_back()
            state = self._state_holder.state
            self._round, self._members, self._lost_reported = state.round, frozenset(state.participants), False
            self._last_round = info
            store = info.bootstrap_store_info
            if store is not None:
                self._peers_lost_marker = spot_notice.peers_lost_marker(
                    self.get_run_id(), store.master_addr, store.master_port
                )
            return info

        def leave_round(self, signal_name: str) -> None:
            """This agent was stopped by a signal (a spot notice, a drain, its pod deleted) and its
            workers have exited, after their emergency save: take its node out of the round now,
            so that the others form the next one without waiting for its heartbeats to expire.
            Best effort: if the server does not answer in time, they expire as before."""
            from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _RendezvousExitOp

            started = time.monotonic()
            try:
                self._stop_heartbeats()
                self._op_executor.run(_RendezvousExitOp(), started + LEAVE_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - its heartbeats stop either way and expire
                log.warning("could not leave the round (%s: %s); its heartbeats will expire", type(exc).__name__, exc)
                return
            seconds = round(time.monotonic() - started, 3)
            log.info("left round %s after %s (%.3f s)", self._round, signal_name, seconds)
            events.emit(Event.RDZV_LEFT, round=self._round, signal=signal_name, seconds=seconds, source="agent")

        def shutdown(self) -> bool:
            """torch closes the rendezvous for good here; after a rendezvous error this agent's
            pod is retried and must find it open, so only the heartbeats stop."""
            if self._gave_up:
                self._stop_heartbeats()
                return False
            return super().shutdown()

    return ResilientRendezvousHandler


def _create_handler(
    create_backend: Callable[[RendezvousParameters], tuple[Any, Any]], params: RendezvousParameters
) -> Any:
    """Our dynamic-rendezvous handler, built from fractional-second settings."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousTimeout

    from lab.runtime.round_store import RoundStore

    backend, store = create_backend(params)
    timeout = RendezvousTimeout(
        *(_seconds(params, k) for k in ("join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout"))
    )
    keep_alive = _seconds(params, "keep_alive_interval") or timedelta(seconds=5)
    attempts = params.get_as_int("keep_alive_max_attempt", 3)
    handler = _handler_class().from_backend(
        params.run_id,
        store,
        backend,
        params.min_nodes,
        params.max_nodes,
        params.local_addr,
        timeout,
        keep_alive_interval=keep_alive.total_seconds(),
        keep_alive_max_attempt=attempts,
    )
    handler.server_outage_s = _server_outage_s(params)
    _restoring(handler, backend)
    _HANDLERS.append(handler)
    handler._store = RoundStore(handler._store, handler._rank0_present)
    poll = _seconds(params, POLL_KEY)
    poll_s = poll.total_seconds() if poll is not None else 1.0  # torch's own: 1 s
    # torch's state holder answers reads within `cache_duration` (1 s) of the last from its
    # cache, whatever the poll: the monitor's check for nodes waiting to join and a waiting
    # agent's look for an open round would see the server's state up to a second late.
    handler._state_holder._cache_duration = poll_s
    _set_poll_interval(poll_s)
    return handler


def _set_poll_interval(poll: float) -> None:
    """The rendezvous op loop sleeps `_delay(seconds=1)` between polls of the shared state;
    make that sleep `poll` seconds, and stop waiting once the job is done (with or without a
    poll interval of the job's own). Other delays (jittered retries) are left as they are."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous, utils

    original = utils._delay

    def delay(seconds: float | tuple[float, float]) -> None:
        if seconds == 1:  # a poll of the shared state
            for handler in _HANDLERS:
                handler.stop_waiting_if_the_job_is_done()
        original(seconds=poll if seconds == 1 else seconds)

    dynamic_rendezvous._delay = delay  # type: ignore[attr-defined]  # torch imports it there without re-exporting


def _etcd_v2(params: RendezvousParameters) -> Any:
    from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import create_backend

    # Seconds one etcd request may take (torch's default: 60). The agent's monitor loop waits
    # on these requests, and a restarting or vanished etcd answers none of them.
    params.config.setdefault("read_timeout", str(ETCD_READ_TIMEOUT_S))
    handler = _reach_server(lambda: _create_handler(create_backend, params), params)
    handler.reconnect = functools.partial(_reconnect_etcd, handler, params)
    _check_in(handler)
    return handler


def _reach_server(create: Callable[[], Any], params: RendezvousParameters) -> Any:
    """`create()`, tried once a second while it cannot reach the server, for up to the job's
    server_outage: a pod can start while the etcd pod restarts or is still being scheduled."""
    from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError

    limit = _server_outage_s(params)
    since: float | None = None
    while True:
        try:
            made = create()
        except RendezvousConnectionError as exc:
            now = time.monotonic()
            if since is None:
                since = now
                _outage_began(exc, "the agent waits for it", limit)
            if now - since > limit:
                _outage_gave_up(now - since)
                raise
            time.sleep(RECONNECT_EVERY_S)
            continue
        if since is not None:
            _outage_ended(time.monotonic() - since)
            made.waited_for_server = True
        return made


def _server_outage_s(params: RendezvousParameters) -> float:
    outage = _seconds(params, OUTAGE_KEY)
    return outage.total_seconds() if outage else DEFAULT_SERVER_OUTAGE_S


# What an agent says of a rendezvous server outage, in its log and as events (the drill reads them).
def _outage_began(exc: BaseException, meanwhile: str, limit_s: float) -> None:
    log.warning("rendezvous server unreachable (%s); %s for up to %g s", type(exc).__name__, meanwhile, limit_s)
    events.emit(Event.RDZV_UNREACHABLE, error=type(exc).__name__, source="agent")


def _outage_ended(down_s: float) -> None:
    log.warning("rendezvous server reachable again after %.1f s", down_s)
    events.emit(Event.RDZV_REACHABLE, down_s=round(down_s, 3), source="agent")


def _outage_gave_up(down_s: float) -> None:
    events.emit(Event.RDZV_GAVE_UP, down_s=round(down_s, 3), source="agent")


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
    handler._state_holder._backend = _RestoringBackend(backend, handler)


def _use_backend(handler: Any, backend: Any, store: Any) -> None:
    """Make `handler` talk to the server through `backend` and `store` from now on. The state's
    version token is dropped: a server that restarted empty has no such version, and writes
    made against it would fail for good; without one the next write re-reads the state. A
    server that came back empty gets the round back at the first read (`_RestoringBackend`)."""
    _restoring(handler, backend)
    from lab.runtime.round_store import RoundStore

    handler._state_holder._token = None
    handler._store = RoundStore(store, handler._rank0_present)


def _restore_round(handler: Any, backend: Any) -> None:
    """A server that came back empty (an etcd pod that moved, any c10d store) lost the round the
    workers train in, and with it the participants' heartbeats: a node that vanishes later
    would never be seen to stop heartbeating. Write this agent's last view of the state back,
    with every participant's heartbeat counted from now (the outage was nobody's fault), unless
    the server has a state (it kept its data, or another agent wrote it back first: the
    write only creates an absent state)."""
    import copy
    import pickle
    from datetime import datetime

    if backend.get_state() is not None:
        return
    state = copy.deepcopy(handler._state_holder.state)
    if not state.participants:
        return  # no round yet: nothing was lost
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
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError
    from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import create_backend

    try:
        if params.get("protocol", "http") == "http":
            # One short request first: a restarting etcd accepts connections before it answers.
            with urllib.request.urlopen(f"http://{params.endpoint}/version", timeout=1) as answer:
                answer.read()
        backend, store = create_backend(params)
        backend.get_state()
    except SignalException:
        raise  # the agent's stop, not an unreachable server
    except Exception as exc:  # the client raises etcd, urllib3 and socket errors alike
        raise RendezvousConnectionError(f"etcd at {params.endpoint} is unreachable") from exc
    _use_backend(handler, backend, store)


def _c10d(params: RendezvousParameters) -> Any:
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend

    handler = _create_handler(create_backend, params)
    if params.get_as_bool("is_host") is False:
        # The store is a server of its own (our setup): after it restarts, talk to the new one.
        handler.reconnect = functools.partial(_reconnect_c10d, handler, params)
        _check_in(handler)  # a store an agent hosts (per-step groups) dies with its container
    return handler


# ------------------------------------------------------------------ containers killed without a word
@dataclasses.dataclass(frozen=True)
class ContainerEntry:
    """What the rendezvous store keeps of a worker pod's latest container: the Kubernetes node it
    ran on, whether it is still running as far as anyone knows (its agent checked in and not out
    yet), and how many of the pod's containers before it were killed in a row on that node."""

    node: str
    running: bool
    killed: int


class ContainerLedger:
    """A worker pod's containers, one entry in the job's rendezvous store (which outlives them).

    A container whose memory limit is reached is killed whole: with cgroup v2, Kubernetes (1.28+)
    sets memory.oom.group, so the kernel's OOM killer takes the agent with its workers, the pod
    ends with exit 137 (reason OOMKilled), and nothing in it can say so. The training operator
    (v1.9, restartPolicy ExitCode) recreates a pod that exits with 128 or more under the same name,
    with no limit: runPolicy.backoffLimit sums the restarts of containers of running pods, and the
    pods it recreates have none. So each container checks in when its agent starts and out when
    the agent ends, however it ends. A container that finds the previous one of its pod checked in
    on its own node knows that one was killed without a word (the OOM killer, or a hard eviction of
    the kubelet: the node is up, it did not vanish); after CONTAINER_KILLS in a row, the agent
    exits 1 and the job fails, its pod's termination message saying why. One recreated on another
    node (its node was evicted, or vanished) counts nothing, nor one that had to wait for the
    rendezvous server (its predecessor may have left on the server's outage, unable to check out)."""

    def __init__(self, store: Any, run_id: str, pod: str, node: str) -> None:
        self.store, self.pod, self.node = store, pod, node
        self.key = f"lab/{run_id}/containers/{pod}"

    @classmethod
    def of_this_pod(cls, store: Any, run_id: str) -> ContainerLedger | None:
        """The ledger of the pod this agent runs in; None off a cluster (the pod's own fields
        LAB_NODE and LAB_K8S_NODE unset: the local target names no machine)."""
        pod, node = os.environ.get(ENV_NODE), os.environ.get(ENV_K8S_NODE)
        return cls(store, run_id, pod, node) if pod and node else None

    def _read(self) -> ContainerEntry | None:
        if not self.store.check([self.key]):
            return None
        try:
            values = json.loads(self.store.get(self.key))
            return ContainerEntry(str(values["node"]), bool(values["running"]), int(values["killed"]))
        except (ValueError, KeyError, TypeError):
            return None  # unreadable: start counting again

    def _write(self, entry: ContainerEntry) -> None:
        self.store.set(self.key, json.dumps(dataclasses.asdict(entry)))

    def check_in(self, *, server_was_down: bool) -> None:
        """This container starts: count the previous one if it was killed without a word on this
        node, and raise ContainerKillLoop at CONTAINER_KILLS in a row."""
        previous = self._read()
        killed_before = previous is not None and previous.running and previous.node == self.node
        killed = previous.killed + 1 if previous is not None and killed_before and not server_was_down else 0
        if killed < CONTAINER_KILLS:
            self._write(ContainerEntry(self.node, True, killed))
            return
        self._write(ContainerEntry(self.node, False, 0))
        events.emit(Event.CONTAINERS_KILL_LOOP, pod=self.pod, k8s_node=self.node, kills=killed, source="agent")
        raise ContainerKillLoop(
            f"the containers of pod {self.pod} were killed {killed} times in a row on node {self.node}, each "
            "without a word from its agent: OOMKilled (exit 137), most likely, at the container's memory limit "
            "(`elastic-lab status` shows it); giving up (exit 1, the job fails) instead of being recreated for ever"
        )

    def check_out(self) -> None:
        """This container's agent ends, whatever the reason: not a kill."""
        self._write(ContainerEntry(self.node, False, 0))


def _check_in(handler: Any) -> None:
    """The container ledger of the pod this agent runs in, checked in (best effort: a store
    that cannot be reached or read leaves the count alone, never the start)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    store = getattr(handler._store, "inner", handler._store)  # the store itself, not the round's waits
    ledger = ContainerLedger.of_this_pod(store, handler.get_run_id())
    if ledger is None:
        return
    try:
        ledger.check_in(server_was_down=handler.waited_for_server)
    except (ContainerKillLoop, SignalException):
        raise
    except Exception as exc:  # noqa: BLE001 - etcd's and the c10d store's clients raise anything
        log.warning("could not check this container in to the rendezvous store (%s)", exc)
        return
    handler.ledger = ledger


def _check_out() -> None:
    """Every container ledger this agent checked in, checked out: its agent ends (best effort)."""
    for handler in _HANDLERS:
        if handler.ledger is None:
            continue
        try:
            handler.ledger.check_out()
        except Exception as exc:  # noqa: BLE001 - the next container of the pod counts this one killed
            log.warning("could not check this container out of the rendezvous store (%s)", exc)


def _reconnect_c10d(handler: Any, params: RendezvousParameters) -> None:
    """Point `handler` at a new connection to the c10d store. A TCPStore client never
    reconnects, so after the store restarts the old connection fails for good. Connecting
    gives up within a second while the store is down (the agent's monitor loop waits for
    it); the connection then gets the store's usual read timeout."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]  # not re-exported by torch
    from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=29400)
    try:
        store = TCPStore(host, port, is_master=False, multi_tenant=True, timeout=timedelta(seconds=1))
    except (RuntimeError, ValueError, TimeoutError) as exc:
        raise RendezvousConnectionError(f"the c10d store at {host}:{port} is unreachable") from exc
    store.set_timeout(timedelta(seconds=params.get_as_int("read_timeout", 60) or 60))
    # A new backend on the new connection: it writes the empty-state sentinel that keeps
    # its reads from blocking on a store that restarted empty.
    _use_backend(handler, C10dRendezvousBackend(store, params.run_id), store)


def install() -> None:
    """Route the c10d and etcd-v2 backends through our handler. The registry has no public
    way to replace a built-in backend, so this writes its table; a torch without it fails
    loudly here instead of silently running with slow settings."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry as registry

    table = getattr(registry, "_registry", None)
    if not isinstance(table, dict) or "c10d" not in table or "etcd-v2" not in table:
        raise RuntimeError(
            "this torch's rendezvous registry has an unknown layout: run plain torchrun with "
            "whole-second rdzv-conf values instead"
        )
    table["etcd-v2"] = _etcd_v2
    table["c10d"] = _c10d
    _remember_the_agents_stop()
    _forgive_failures_of_a_lost_round()
    _record_success_before_the_exit_barrier()
    _name_rendezvous_events_cheaply()
    _format_exceptions_without_dynamo()


def _format_exceptions_without_dynamo() -> None:
    """torch's log formatter imports torch._dynamo (for one of its settings) to format any
    record that carries an exception, and the agent logs one when its workers fail: on the
    survivors of an eviction that import took 1.2-3.4 s of the recovery here, before the
    agent even looked at the rendezvous. While dynamo is not loaded, the exception goes into
    the record as text, which the formatter prints the same way."""
    from torch._logging import _internal

    formatter = _internal.TorchLogsFormatter
    original: Callable[[logging.Formatter, logging.LogRecord], str] = formatter.format  # type: ignore[assignment]
    if getattr(original, "without_dynamo", False):
        return

    @functools.wraps(original)
    def format(self: logging.Formatter, record: logging.LogRecord) -> str:
        if record.exc_info and "torch._dynamo" not in sys.modules:
            if not record.exc_text:
                record.exc_text = self.formatException(record.exc_info)
            record.exc_info = None
        return str(original(self, record))

    format.without_dynamo = True  # type: ignore[attr-defined]
    formatter.format = format  # type: ignore[method-assign]


# The signal that told this agent to stop (SIGTERM: a spot notice, a scale-in, its pod
# deleted), once torch's handler has seen it; None before.
_STOP: signal.Signals | None = None


def _remember_the_agents_stop() -> None:
    """torch's agent stops on a SignalException its signal handler raises wherever the main
    thread is, and code of any library on the way may catch it as any other error (a rendezvous
    request's handling, an etcd client's): the agent then trains on, in a job it was told to
    leave. The handler also remembers the signal here, and the agent's next look at its workers
    raises it again (`_raise_a_swallowed_stop`)."""
    from torch.distributed.elastic.multiprocessing import api

    original = api._terminate_process_handler
    if getattr(original, "remembers_the_stop", False):
        return

    @functools.wraps(original)
    def handler(signum: int, frame: Any) -> None:
        global _STOP
        _STOP = signal.Signals(signum)
        original(signum, frame)

    handler.remembers_the_stop = True  # type: ignore[attr-defined]
    api._terminate_process_handler = handler  # torch registers it by this name at each start of workers


def _raise_a_swallowed_stop() -> None:
    """The stop torch's handler raised, again: it never reached the agent's loop."""
    if _STOP is None:
        return
    from torch.distributed.elastic.multiprocessing.api import SignalException

    log.warning("this agent's %s was lost on its way up; stopping now", _STOP.name)
    raise SignalException(f"Process {os.getpid()} got signal: {_STOP}", sigval=_STOP)


def _forgive_failures_of_a_lost_round() -> None:
    """torch's agent counts any failed worker against max_restarts, and checks for a
    membership change only while its workers are healthy. When a node vanishes, the first
    survivor to notice stops its workers, and the other survivors' collectives fail at once:
    a race decides whether they see a failure or the change. A join races the same way: the
    first agent to see the new node waiting stops its workers for the next round, and the
    others' workers fail on the closed connections before their agents look. Here a failure
    seen while this agent's round has lost a participant, or one caused by a peer while a node
    waits to join, is reported healthy, so the agent takes the membership-change path
    (restart without counting) on the same tick."""
    from torch.distributed.elastic.agent.server.api import RunResult, WorkerState
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    monitor = LocalElasticAgent._monitor_workers
    if getattr(monitor, "forgives_lost_rounds", False):
        return

    @functools.wraps(monitor)
    def monitor_workers(self, worker_group):  # type: ignore[no-untyped-def]
        _raise_a_swallowed_stop()
        polled = time.monotonic()
        result = monitor(self, worker_group)
        if result.state != WorkerState.FAILED:
            return result
        killed = killed_on_its_own(getattr(self, "_pcontext", None), worker_group, time.monotonic() - polled)
        if killed and failure_signature(killed) != failure_signature(result.failures):
            # torch reports the first worker its poll found dead: often a peer of the killed one,
            # whose collective broke on it. The kill is this node's own failure.
            log.warning("a worker of this node was killed (SIGKILL): that is its failure, not its peers' errors")
            result = RunResult(state=WorkerState.FAILED, failures=killed)
        handler = worker_group.spec.rdzv_handler
        lost = hasattr(handler, "lost_members") and handler.lost_members()
        by_a_peer = a_peer_failed(result.failures)
        # torch restarts the group for a waiting node on the same tick once this is healthy.
        joining = not lost and by_a_peer and handler.num_nodes_waiting() > 0
        if not lost and not joining and by_a_peer and hasattr(handler, "find_the_lost_peer"):
            lost = handler.find_the_lost_peer()
        if lost or joining:
            log.warning(
                "workers of a round that %s exited (%s); a membership change, not a failure",
                "lost a participant" if lost else "a node waits to join",
                ", ".join(f"rank {r}: {f.exitcode}" for r, f in sorted(result.failures.items())),
            )
            self._lab_crash_streak = CrashStreak()
            return RunResult(state=WorkerState.HEALTHY)
        _count_towards_a_crash_loop(self, result)
        return result

    monitor_workers.forgives_lost_rounds = True  # type: ignore[attr-defined]
    LocalElasticAgent._monitor_workers = monitor_workers  # type: ignore[method-assign]


# Attempts that end with the same exception, in a row, before the agent gives up: a script that
# fails deterministically (a bad path, a missing module, a shape error at step 1000 of every
# resume) would otherwise be restarted max_restarts times inside its pod, seen by no one.
CRASH_LOOP_ATTEMPTS = 3
# What a worker sees when a peer fails or vanishes: a consequence elsewhere, never a crash loop
# of its own (an eviction must not use up this budget).
_PEER_FAILURE = re.compile(
    r"DistBackendError|DistNetworkError|DistStoreError|Connection closed by peer|Connection reset by peer"
    r"|[Bb]roken pipe|NCCL|[Gg]loo|timed out|Timeout|ProcessGroup|watchdog|Socket Timeout"
)


# How long torch waits for workers to leave on SIGTERM before it SIGKILLs them (torch.multiprocessing's
# ProcessContext.join and elastic's PContext.close, 30 s each): a worker found killed by SIGKILL
# within a monitor tick shorter than this was killed by someone else than its agent.
TORCH_KILL_GRACE_S = 30


def killed_on_its_own(pcontext: Any, worker_group: Any, poll_s: float) -> dict[int, Any]:
    """{global rank: failure} of a worker of this node that ended by SIGKILL that its agent did not
    send (the poll that found the failure, `poll_s` long, was shorter than torch's grace before
    its own SIGKILL): the kernel's OOM killer, as a rule, which kills the worker alone where the
    container's cgroup is not killed as a whole (cgroup v1, or the kubelet's singleProcessOOMKill),
    and the biggest process on a node out of memory. Empty when none was."""
    from torch.distributed.elastic.multiprocessing.api import MultiprocessContext, SubprocessContext
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    if poll_s >= TORCH_KILL_GRACE_S:
        return {}
    if isinstance(pcontext, MultiprocessContext) and pcontext._pc is not None:  # warm workers (forkserver)
        ended = [(rank, p.pid, p.exitcode) for rank, p in enumerate(pcontext._pc.processes)]
    elif isinstance(pcontext, SubprocessContext):
        ended = [(rank, h.proc.pid, h.proc.poll()) for rank, h in pcontext.subprocess_handlers.items()]
    else:
        return {}
    for local_rank, pid, code in ended:
        if code == -signal.SIGKILL:
            error_file = pcontext.error_files.get(local_rank, "")  # none: killed before it could write one
            failure = ProcessFailure(local_rank=local_rank, pid=pid, exitcode=code, error_file=error_file)
            return {worker_group.workers[local_rank].global_rank: failure}
    return {}


@dataclasses.dataclass
class CrashStreak:
    """The exception the agent's last counted failures ended with, and how many in a row."""

    error: str | None = None
    attempts: int = 0


def a_peer_failed(failures: Mapping[int, Any]) -> bool:
    """Whether a worker failed because a peer went: our trainers' exit code for it, or a
    script's exception that says so (a collective on a closed connection)."""
    return any(f.exitcode == EXIT_PEER_LOST for f in failures.values()) or (
        bool(failures) and failure_signature(failures) is None
    )


def failure_signature(failures: Mapping[int, Any]) -> tuple[str, int] | None:
    """(what the first worker to fail died of, its global rank), or None when that was the
    consequence of a peer's failure. The exception's message comes from the worker's error
    file; a worker killed by a signal, or one that exited without one, is named by that."""
    if not failures:
        return None
    rank, first = min(failures.items(), key=lambda item: (item[1].timestamp, item[0]))
    # torch keeps the error file's structured message as it is, a dict with the text inside.
    text = first.message.get("message") if isinstance(first.message, dict) else first.message
    message = str(text or "").strip()
    if first.exitcode == EXIT_PEER_LOST:
        return None
    if not message or not os.path.isfile(first.error_file):
        # No error file: torch's own words name the worker's PID, a new one each attempt.
        signal = first.exitcode < 0
        message = f"Signal {-first.exitcode} ({first.signal_name()})" if signal else f"exit code {first.exitcode}"
    if caused_by_a_peer(message):
        return None
    return message.splitlines()[0][:300], rank


def caused_by_a_peer(message: str) -> bool:
    """Whether a worker's exception says a peer failed or vanished (a consequence elsewhere)."""
    return bool(_PEER_FAILURE.search(message))


def _count_towards_a_crash_loop(agent: Any, result: Any) -> None:
    """A failure torch counts against max_restarts: after CRASH_LOOP_ATTEMPTS in a row with the
    same exception, none is left, so the agent stops and torchrun exits 1 (the PyTorchJob
    fails, where exit codes >= 128 would have its pod recreated for ever); the log's last lines,
    which Kubernetes keeps as the pod's termination message, say why."""
    streak = getattr(agent, "_lab_crash_streak", None) or CrashStreak()
    signature = failure_signature(result.failures)
    if signature is None:
        agent._lab_crash_streak = CrashStreak()
        return
    error, rank = signature
    streak = CrashStreak(error, streak.attempts + 1 if streak.error == error else 1)
    agent._lab_crash_streak = streak
    if streak.attempts < CRASH_LOOP_ATTEMPTS or agent._remaining_restarts <= 0:
        return
    agent._remaining_restarts = 0
    events.emit(Event.WORKERS_CRASH_LOOP, error=error, attempts=streak.attempts, rank=rank, source="agent")
    log.error(
        "workers crash loop: rank %d failed %d times in a row with %s; giving up (torchrun exits 1, "
        "the job fails) instead of using the rest of max_restarts on the same failure%s",
        rank,
        streak.attempts,
        error,
        " (a worker killed by SIGKILL that its agent did not send: the kernel's OOM killer, most likely; "
        "`elastic-lab status` shows the workers' memory limit)"
        if error.startswith(f"Signal {int(signal.SIGKILL)} ")
        else "",
    )


def _record_success_before_the_exit_barrier() -> None:
    """torch's agent enters its exit barrier only when its workers succeeded, and closes the
    rendezvous after it: record the success first, for agents that find it closed."""
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent

    barrier = SimpleElasticAgent._exit_barrier
    if getattr(barrier, "records_success", False):
        return

    @functools.wraps(barrier)
    def exit_barrier(self: SimpleElasticAgent) -> None:
        handler = self._worker_group.spec.rdzv_handler
        if hasattr(handler, "mark_succeeded"):
            handler.mark_succeeded()
        barrier(self)  # type: ignore[no-untyped-call]  # torch leaves it untyped

    exit_barrier.records_success = True  # type: ignore[attr-defined]
    SimpleElasticAgent._exit_barrier = exit_barrier  # type: ignore[method-assign]


def _name_rendezvous_events_cheaply() -> None:
    """torch names each rendezvous event after the method that records it with
    `inspect.stack()`, twice per event: that reads the source lines of every frame on the
    stack, milliseconds per event on a deep stack, and a rendezvous operation records an event
    at each step. On a loaded node the closing agent's compare-and-set then loses to the other
    agents' heartbeats until its close times out (seen: 4 closes of 10 s in a row), and a
    node that joins as the job ends waits out its join timeout. The frame's name is all the
    event needs."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    if getattr(dynamic_rendezvous.get_method_name, "reads_frames_only", False):
        return

    def get_method_name(depth: int = 2) -> str:
        try:
            # depth counts from this function's frame, as inspect.stack()[depth] does.
            return sys._getframe(depth).f_code.co_name
        except ValueError:  # a stack shallower than depth
            return "no_method_name"

    get_method_name.reads_frames_only = True  # type: ignore[attr-defined]
    dynamic_rendezvous.get_method_name = get_method_name


class _TorchEventLines(logging.Formatter):
    """One JSON object per line: when the event was recorded and torch's event as it
    serialized it."""

    def format(self, record: logging.LogRecord) -> str:
        try:
            event = json.loads(record.getMessage())
        except ValueError:
            event = {"message": record.getMessage()}
        return json.dumps({"t": record.created, "pid": record.process, "torch": event})


def record_agent_events(path: str) -> None:
    """Write torch's elastic events to `path`: register a handler under EVENT_LOG_HANDLER in
    torch's handler table (the names --event-log-handler accepts). `with_event_log_handler`
    selects it on the command line."""
    from torch.distributed.elastic.events import handlers

    table = getattr(handlers, "_log_handlers", None)
    if not isinstance(table, dict):
        raise RuntimeError("this torch's elastic event handlers have an unknown layout: unset " + ENV_AGENT_EVENTS)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(_TorchEventLines())
    table[EVENT_LOG_HANDLER] = handler


def with_event_log_handler(argv: list[str]) -> list[str]:
    """torchrun's arguments with our event handler selected, unless the command line or
    PET_EVENT_LOG_HANDLER (torchrun reads it as the flag's default) chose another."""
    chosen = any(a.split("=", 1)[0] in ("--event-log-handler", "--event_log_handler") for a in argv)
    if chosen or os.environ.get("PET_EVENT_LOG_HANDLER"):
        return argv
    return ["--event-log-handler", EVENT_LOG_HANDLER, *argv]


def start_warm_workers() -> None:
    """Start python entrypoints' workers from lab.runtime.warm's forkserver, started now as a
    fork of this agent (which has imported torch): every worker start, first and restarts
    alike, is a fork of it."""
    from torch.distributed import run
    from torch.distributed.launcher.api import elastic_launch

    from lab.runtime.warm import run_script, start_forkserver, wait_until_warm

    def launch(config: Any, entrypoint: Any) -> Any:
        if entrypoint != sys.executable:  # --no-python: a program of its own
            return elastic_launch(config=config, entrypoint=entrypoint)
        config.start_method = "forkserver"
        return elastic_launch(config=config, entrypoint=run_script)

    start_forkserver()  # before the agent starts threads or connects to the rendezvous
    run.elastic_launch = launch  # type: ignore[attr-defined,assignment]  # torchrun's own entry, replaced
    # Joining a running job restarts every node's workers, and they wait for this node's: its
    # forkserver's imports happen before it joins, while the others still train.
    waited = wait_until_warm()
    log.info("workers ready to fork after %.2f s", waited)


def main(argv: list[str] | None = None) -> int:
    warm = os.environ.get(ENV_WARM_WORKERS, "1") != "0"
    from torch.distributed import run

    install()
    dump_stacks_on_request(AGENT)
    args = list(sys.argv[1:] if argv is None else argv)
    set_title(f"agent{where()} " + " ".join(args))
    if os.environ.get(ENV_AGENT_EVENTS):
        record_agent_events(os.environ[ENV_AGENT_EVENTS])
        args = with_event_log_handler(args)
    if warm:
        start_warm_workers()
    try:
        return _run(run.main, args)
    finally:
        _check_out()


def _run(torchrun: Callable[[list[str]], None], args: list[str]) -> int:
    """torchrun's main, with the exits it leaves to us."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError, RendezvousTimeoutError

    try:
        torchrun(args)
    except SignalException as exc:
        # The agent stopped its workers (they saved on the notice) and left the rendezvous
        # as it was: take this node out of the round for the others.
        for handler in _HANDLERS:
            handler.leave_round(exc.sigval.name)
        # torchrun exits 1 on SIGTERM; a spot notice must look retryable to the training
        # operator (restartPolicy: ExitCode retries 128-255), so exit 128 + signal.
        print(f"{PROG}: stopped by signal {exc.sigval.name}", file=sys.stderr)
        return 128 + int(exc.sigval)
    except RendezvousTimeoutError as exc:
        print(
            f"{PROG}: rendezvous timed out ({exc}); exiting {EXIT_RENDEZVOUS_TIMEOUT} to be retried",
            file=sys.stderr,
        )
        return EXIT_RENDEZVOUS_TIMEOUT
    except RendezvousConnectionError as exc:
        print(
            f"{PROG}: rendezvous server unreachable ({exc}); exiting {EXIT_RENDEZVOUS_UNREACHABLE} to be retried",
            file=sys.stderr,
        )
        return EXIT_RENDEZVOUS_UNREACHABLE
    except JobAlreadyDone as exc:
        print(f"{PROG}: {exc}; nothing left to do", file=sys.stderr)
        return 0
    except ContainerKillLoop as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except ChildFailedError:
        # Its workers failed with no restart left (a crash loop given up on): torch enters the
        # exit barrier only when they succeed, and the agents of its last round whose workers
        # did wait there for this one until the barrier's timeout (300 s). Count it in.
        for handler in _HANDLERS:
            handler._check_in_to_the_exit_barrier()
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())

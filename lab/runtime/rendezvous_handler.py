"""The launcher's rendezvous handler: torch's dynamic-rendezvous handler, made to ride out an
unreachable server, to see a lost participant and a finished job, and to leave the rendezvous
open when this agent gives up on it. Built from the job's settings by
lab.runtime.rendezvous_backends; it reaches torch's private state only through
lab.runtime.torch_seam."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.rendezvous.api import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousInfo,
    RendezvousTimeoutError,
)
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

from lab.runtime import events, spot_notice, torch_seam
from lab.runtime.agent_exits import JobAlreadyDone
from lab.runtime.container_ledger import ContainerLedger
from lab.runtime.round_store import RoundLost
from lab.vocab.events import Event
from lab.vocab.job import LAUNCH_MODULE

log = logging.getLogger(LAUNCH_MODULE)  # the launcher's one log

DEFAULT_SERVER_OUTAGE_S = 60.0
RECONNECT_EVERY_S = 1.0
# A participant silent for this many keep-alive intervals, after a peer's connection closed
# on this agent's workers, is the one that went (a live agent beats every interval).
LOST_PEER_INTERVALS = 1.5
# How long an agent stopped by a signal tries to take its node out of the round.
LEAVE_TIMEOUT_S = 3.0


class ResilientRendezvousHandler(DynamicRendezvousHandler):
    """torch's dynamic-rendezvous handler (a public class), made to ride out an unreachable
    server and to leave the rendezvous open when this agent gives up on it. Of torch's methods
    it overrides three public ones, `num_nodes_waiting`, `next_rendezvous` and `shutdown`
    (their signatures pinned in tests/runtime/test_torch_seam.py); torch's private state it
    reaches only through lab.runtime.torch_seam."""

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
    _had_a_round = False  # a round of this agent's completed before
    # The nodes waiting to join when this agent last left a round, with their last heartbeats.
    _left_round_for: Mapping[object, object] = MappingProxyType({})
    # The nodes this agent expects in the round it rejoins for: its last round's members still
    # there and the nodes that waited to join when it left (none before its first round).
    _expected: frozenset[object] = frozenset()
    # The last round this agent's workers ran in: its store and size, for its exit barrier.
    _last_round: RendezvousInfo | None = None

    def _succeeded_key(self) -> str:
        return f"lab/{self.get_run_id()}/succeeded"

    def mark_succeeded(self) -> None:
        """Record that this agent's workers finished the job, before the rendezvous closes."""
        try:
            torch_seam.rendezvous_store(self).set(self._succeeded_key(), "1")
        except SignalException:
            raise  # the agent's stop (SIGTERM), raised wherever its main thread was: never swallowed
        except Exception as exc:  # noqa: BLE001 - the job is done either way; only late agents lose
            log.warning("could not record the job's success in the rendezvous store (%s)", exc)

    def job_succeeded(self) -> bool:
        """Whether an agent of this run recorded that its workers finished the job."""
        try:
            return bool(torch_seam.rendezvous_store(self).check([self._succeeded_key()]))
        except SignalException:
            raise
        except Exception:  # noqa: BLE001 - unknown: not known to have succeeded
            return False

    def in_a_round(self) -> bool:
        """Whether this agent's workers run in a round it completed (not while it waits for one)."""
        return self._round is not None

    def rank0_present(self) -> bool:
        """Whether the round this agent completed still has its rank 0 (the agent that
        writes the round's addresses): False once it is dropped, or the round is over."""
        state = torch_seam.rendezvous_state(self)
        return state.complete and torch_seam.this_node(self) in state.participants and 0 in state.participants.values()

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
            super().num_nodes_waiting()  # the state, read afresh (at most once a poll interval)
        except RendezvousConnectionError as exc:
            if self._unreachable_since is None:
                self._unreachable_since = self._reconnected_at = now
                outage_began(exc, "workers keep training", self.server_outage_s)
            return self._still_down(now)
        self._server_back()
        waiting = len(self._waiting(torch_seam.rendezvous_state(self)))
        if waiting and self.job_succeeded():
            # Another agent's workers finished the job and it waits in its exit barrier for
            # this one: restarting for a node that joins now would stop workers that are
            # finishing, and the next round could never form while that agent holds this one.
            waiting = 0
        return waiting + len(self._lost_members())

    def _waiting(self, state: Any) -> set[object]:
        """The nodes on the wait list of `state`, but those this agent last left its round for
        that have not beaten since. A live waiter joins the round that forms for it (torch
        moves it from the wait list to the participants at its next poll) and beats every
        keep-alive interval while it waits; one that died on the wait list (a node killed as
        it joined) stays listed until torch drops it, a whole keep-alive window later, and
        every round that completed meanwhile would be restarted for it: workers stopped and
        started again for a node that never comes. A waiter that is only slow is counted
        again at its next beat."""
        left_for = self._left_round_for
        return {
            node
            for node in state.wait_list
            if node not in left_for or state.last_heartbeats.get(node) != left_for[node]
        }

    def find_the_lost_peer(self) -> frozenset[object]:
        """This agent's workers failed because a peer went (a closed connection): find
        which participant before its heartbeats have fully expired. A live agent beats
        every keep-alive interval, so one silent for 1.5 intervals is dropped from the
        round, in the server's state too (the others' next round waits for that); tried
        every 0.1 s for up to the usual keep-alive window. The lost participants, or none."""
        settings = self.settings
        window = (settings.keep_alive_interval * settings.keep_alive_max_attempt).total_seconds()
        deadline = time.monotonic() + window
        while True:
            try:
                torch_seam.drop_participants_silent_for(self, LOST_PEER_INTERVALS)
            except RendezvousConnectionError:
                return frozenset()  # the server is away: the usual path rides that out
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
        state = torch_seam.rendezvous_state(self)
        if self._round is None or state.round != self._round or state.closed:
            # Closed: the job is over (an agent whose workers finished closes it), and the
            # nodes leaving now are done, not lost; a restart would train nothing.
            return frozenset()
        # A member on the wait list left only to rejoin (its agent restarts for a node that
        # joins): it is not lost. One whose heartbeats expired in this agent's view of the
        # state is: torch drops it at its next read of the state, up to a poll interval later.
        lost = self._members - self._present(state)
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

    def _present(self, state: Any) -> set[object]:
        """The nodes in `state`'s round or on its wait list whose heartbeats have not expired."""
        return (set(state.participants) | set(state.wait_list)) - self._expired(state)

    def _expired(self, state: Any) -> set[object]:
        """The nodes whose last heartbeat in `state` is older than the keep-alive window now
        (torch's test, `_BackendRendezvousStateHolder._sanitize`, made when it reads)."""
        settings = self.settings
        oldest = datetime.now(UTC) - settings.keep_alive_interval * settings.keep_alive_max_attempt
        return {node for node, beat in state.last_heartbeats.items() if beat < oldest}

    def _server_back(self) -> None:
        """Note the end of an outage, if one was going on."""
        if self._unreachable_since is not None:
            outage_ended(time.monotonic() - self._unreachable_since)
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
            outage_began(exc, "joining a round waits for it", self.server_outage_s)
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
        outage_gave_up(time.monotonic() - self._unreachable_since)
        return False

    def _still_down(self, now: float) -> int:
        """0 (nobody waits) while the outage is within `server_outage_s`; past it, give up."""
        assert self._unreachable_since is not None
        if now - self._unreachable_since > self.server_outage_s:
            self._gave_up = True
            outage_gave_up(now - self._unreachable_since)
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

    def rejoining(self) -> bool:
        """Whether this agent, waiting for a round on the calling thread, was in a round before."""
        return self.waiting_thread == threading.get_ident() and self._had_a_round

    def stop_waiting_if_the_job_is_done(self) -> None:
        """Called at each poll while this agent waits for a round: the others' workers may
        have finished the job meanwhile (an agent that restarted its workers for a joining
        node just as another's finished), and that agent holds the round in its exit
        barrier, so no round would form until its barrier times out (300 s)."""
        if self.waiting_thread == threading.get_ident() and self.job_succeeded():
            self.check_in_to_the_exit_barrier()
            raise JobAlreadyDone(
                f"while this agent waited for a round of the rendezvous {self.get_run_id()!r}, "
                "the other agents' workers finished the job"
            )

    def end_the_last_call_once_all_are_in(self) -> None:
        """Called at each poll while this agent waits for a round. torch completes a round a
        last call (`last_call_timeout`) after min_nodes joined, for stragglers to join too; a
        round of an eviction's survivors never reaches max_nodes, so every recovery waited the
        whole last call. Once every node this agent expects has joined, no straggler is known
        to come: the round's last call ends now, and a participant marks it complete at its
        next step (one that comes later joins the round after, as after any last call)."""
        if self.waiting_thread != threading.get_ident() or not self._expected:
            return
        state = torch_seam.rendezvous_state(self)
        # torch sets the deadline once min_nodes have joined (and clears it below that).
        if state.complete or state.deadline is None or torch_seam.this_node(self) not in state.participants:
            return
        if self._expected <= set(state.participants):
            torch_seam.end_last_call(self)

    def check_in_to_the_exit_barrier(self) -> None:
        """This agent leaves without its workers finishing: it stopped them for a node that
        joined as the others' finished, or they failed with no restart left. An agent whose
        workers finished waits in torch's exit barrier for every agent of its round: count
        this one in, without waiting, or that agent waits out the barrier's timeout (300 s)
        for one that has gone."""
        last, self._last_round = self._last_round, None
        if last is None:
            return  # a newcomer: no round of its own to leave
        try:
            torch_seam.check_in_to_exit_barrier(last.store, last.world_size)
        except SignalException:
            raise
        except Exception as exc:  # noqa: BLE001 - the other agent's barrier then times out, as torch's would
            log.warning("could not check in to the finished round's exit barrier (%s)", exc)

    def _next_round(self) -> RendezvousInfo:
        state = torch_seam.rendezvous_state(self)
        if self._round is not None:  # leaving a round: for a node that waits, or a lost one
            self._expected = frozenset((self._members & self._present(state)) | self._waiting(state))
        else:
            self._expected = frozenset()
        self._left_round_for = {node: state.last_heartbeats.get(node) for node in state.wait_list}
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
                state = torch_seam.rendezvous_state(self)
                events.emit(Event.RDZV_ROUND_ABANDONED, round=state.round, waited_s=round(waited, 3), source="agent")
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
                    self.check_in_to_the_exit_barrier()
                    raise JobAlreadyDone(
                        f"the rendezvous {self.get_run_id()!r} closed: the other agents' workers finished the job"
                    ) from None
                raise
            break
        self._server_back()
        state = torch_seam.rendezvous_state(self)
        self._round, self._members, self._lost_reported = state.round, frozenset(state.participants), False
        self._had_a_round = True
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
        started = time.monotonic()
        try:
            torch_seam.leave_rendezvous(self, started + LEAVE_TIMEOUT_S)
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
            torch_seam.stop_heartbeats(self)
            return False
        return super().shutdown()


# What an agent says of a rendezvous server outage, in its log and as events (the drill reads them).
def outage_began(exc: BaseException, meanwhile: str, limit_s: float) -> None:
    log.warning("rendezvous server unreachable (%s); %s for up to %g s", type(exc).__name__, meanwhile, limit_s)
    events.emit(Event.RDZV_UNREACHABLE, error=type(exc).__name__, source="agent")


def outage_ended(down_s: float) -> None:
    log.warning("rendezvous server reachable again after %.1f s", down_s)
    events.emit(Event.RDZV_REACHABLE, down_s=round(down_s, 3), source="agent")


def outage_gave_up(down_s: float) -> None:
    events.emit(Event.RDZV_GAVE_UP, down_s=round(down_s, 3), source="agent")

"""lab.runtime.rendezvous_backends: the round written back to a server that came back empty."""

import time
from datetime import UTC, timedelta

from lab.runtime import rendezvous_backends
from tests.runtime.test_rendezvous_handler import _handler_in_a_round, _round_of


class _Holder:
    def __init__(self, state):
        self.state = state


class _Agent:
    def __init__(self, state, in_a_round: bool = True):
        self._state_holder = _Holder(state)
        self._in_a_round = in_a_round

    def in_a_round(self) -> bool:
        return self._in_a_round


def test_a_server_that_came_back_empty_gets_the_round_back_with_fresh_heartbeats():
    """After an empty restart the agents' round (and the heartbeats a vanished node is found
    by) is written back once; a server that has a state keeps it."""
    import pickle
    from datetime import datetime

    from torch.distributed import HashStore
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend

    backend = C10dRendezvousBackend(HashStore(), "t-restore")  # a store that restarted empty
    assert backend.get_state() is None
    rendezvous_backends._restore_round(_Agent(_round_of({"a": 0, "b": 1, "c": 2}, heartbeat_age_s=30)), backend)
    restored = pickle.loads(backend.get_state()[0])
    assert restored.round == 7 and restored.complete
    assert sorted(n.addr for n in restored.participants) == ["a", "b", "c"]
    # The outage is counted against no one, and the agents still reconnecting are not declared
    # dead (torch's keep-alive window here is 1.5 s) before the grace is over; afterwards a node
    # that never heartbeats again is.
    grace = timedelta(seconds=rendezvous_backends.RESTORED_HEARTBEAT_GRACE_S)
    for beat in restored.last_heartbeats.values():
        ahead = beat - datetime.now(UTC)
        assert grace - timedelta(seconds=1) < ahead <= grace  # alive for the grace plus the window, no longer
    # Another agent comes back later, with its own (older) view: the written round stays.
    rendezvous_backends._restore_round(_Agent(_round_of({"x": 0}, heartbeat_age_s=0)), backend)
    assert sorted(n.addr for n in pickle.loads(backend.get_state()[0]).participants) == ["a", "b", "c"]


def test_an_agent_with_no_round_yet_writes_nothing_back():
    from torch.distributed import HashStore
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _RendezvousState

    backend = C10dRendezvousBackend(HashStore(), "t-restore")
    rendezvous_backends._restore_round(_Agent(_RendezvousState(), in_a_round=False), backend)
    assert backend.get_state() is None


def test_the_first_agent_to_join_a_new_rendezvous_is_written_as_it_joined():
    """The first join's write creates the state (no version yet), with that agent's join in its
    view: the round is not written back in its place, so its heartbeat is dated by its join, not
    the restore's grace into the future. Were it, a node that vanished in the round's first
    seconds (the first to join, among others) would be found seconds after its heartbeats
    stopped. torch's own join runs here (one node, max 1: it completes the round at once)."""
    import pickle
    from datetime import datetime

    from torch.distributed import HashStore
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _RendezvousJoinOp

    from lab.runtime.rendezvous_handler import ResilientRendezvousHandler

    store = HashStore()
    backend = C10dRendezvousBackend(store, "t-first")
    handler = ResilientRendezvousHandler.from_backend(
        "t-first", store, backend, 1, 1, "127.0.0.1", keep_alive_interval=0.5, keep_alive_max_attempt=3
    )
    rendezvous_backends._restoring(handler, backend)  # as the launcher builds its handlers
    handler._op_executor.run(_RendezvousJoinOp(), time.monotonic() + 10)
    written = pickle.loads(backend.get_state()[0])
    assert written.complete and [n.addr for n in written.participants] == ["127.0.0.1"]
    (joined,) = written.last_heartbeats.values()
    assert joined <= datetime.now(UTC), f"the first join's heartbeat is dated {joined - datetime.now(UTC)} ahead"


def test_any_read_that_meets_a_server_come_back_empty_writes_the_round_back_first():
    """Whichever read reaches the restarted server first (the monitor's, the heartbeat
    thread's through the old client) restores the round: torch's holder would take the
    missing state for an empty round, every participant lost."""
    import math
    import pickle

    handler, backend = _handler_in_a_round({"a": 0.1, "b": 0.1, "c": 0.1})
    rendezvous_backends._restoring(handler, backend)  # as the launcher builds its handlers
    backend._store.set(backend._key, backend._NULL_SENTINEL)  # the store restarted empty (torch's "no state")
    assert backend.get_state() is None
    handler._state_holder._last_sync_time = -math.inf
    handler._state_holder.sync()
    assert sorted(n.addr for n in handler._state_holder.state.participants) == ["a", "b", "c"]
    assert sorted(n.addr for n in pickle.loads(backend.get_state()[0]).participants) == ["a", "b", "c"]
    assert handler.lost_members() == frozenset()


def test_a_heartbeat_left_unwritten_by_the_outage_does_not_recreate_the_round_from_a_stale_view():
    """The heartbeat thread's write failed when the server went down, so the holder is still
    dirty when the agent reconnects, with no version token: torch's backends create the state
    from such a write. Its view dates from before the outage: every participant's heartbeat has
    expired, so every agent would drop them all, move to a new round and never see a node that
    vanishes later. The round is written back first, with fresh heartbeats, and read."""
    import pickle
    from datetime import datetime

    handler, backend = _handler_in_a_round({"a": 0.1, "b": 0.1, "c": 0.1})
    rendezvous_backends._restoring(handler, backend)
    backend._store.set(backend._key, backend._NULL_SENTINEL)  # the store restarted empty
    holder = handler._state_holder
    for node in holder.state.last_heartbeats:  # the outage lasted 6 s
        holder.state.last_heartbeats[node] -= timedelta(seconds=6)
    holder._token = None  # as after a reconnect
    holder.mark_dirty()  # a heartbeat written during the outage
    holder.sync()
    assert holder.state.round == 7 and sorted(n.addr for n in holder.state.participants) == ["a", "b", "c"]
    on_server = pickle.loads(backend.get_state()[0])
    assert on_server.round == 7 and all(beat > datetime.now(UTC) for beat in on_server.last_heartbeats.values())
    assert handler.lost_members() == frozenset()


def test_a_round_another_agent_wrote_back_first_is_read_not_taken_for_empty():
    """Two agents reach the empty server together: this one reads nothing, the other writes
    the round back before this one tries: this one reads that round."""
    import pickle

    handler, backend = _handler_in_a_round({"a": 0.1, "b": 0.1, "c": 0.1})
    written = backend.get_state()

    class RacedServer:
        name = "c10d"
        reads = 0

        def get_state(self):
            self.reads += 1
            return None if self.reads == 1 else written  # the other agent wrote in between

        def set_state(self, state, token=None):
            raise AssertionError("this agent must not write over the other's round")

    rendezvous_backends._restoring(handler, RacedServer())
    got = handler._state_holder._backend.get_state()
    assert got is written and sorted(n.addr for n in pickle.loads(got[0]).participants) == ["a", "b", "c"]

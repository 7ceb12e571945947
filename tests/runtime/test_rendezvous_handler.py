"""lab.runtime.rendezvous_handler: a lost peer found before its heartbeats expire, a member that
left to rejoin told from a lost one."""

import time
from datetime import UTC, timedelta

from lab.runtime import rendezvous_handler
from lab.runtime.rendezvous_handler import ResilientRendezvousHandler


def _round_of(participants: dict, heartbeat_age_s: float):
    from datetime import datetime

    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

    state = _RendezvousState()
    state.round = 7
    state.complete = True
    old = datetime.now(UTC) - timedelta(seconds=heartbeat_age_s)
    for i, name in enumerate(participants):
        node = _NodeDesc(name, 1, 0)
        state.participants[node] = i
        state.last_heartbeats[node] = old
    return state


def _handler_in_a_round(heartbeat_ages_s: dict[str, float]):
    """Our rendezvous handler whose completed round (7) is written in a store, its participants'
    heartbeats the given seconds old; it is node "a"'s view."""
    import pickle

    from torch.distributed import HashStore
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend

    store = HashStore()
    backend = C10dRendezvousBackend(store, "t-lost-peer")
    handler = ResilientRendezvousHandler.from_backend(
        "t-lost-peer", store, backend, 1, 3, "127.0.0.1", keep_alive_interval=0.5, keep_alive_max_attempt=3
    )
    state = _round_of(dict.fromkeys(heartbeat_ages_s, 0), heartbeat_age_s=0)
    for node in list(state.last_heartbeats):
        state.last_heartbeats[node] -= timedelta(seconds=heartbeat_ages_s[node.addr])
    backend.set_state(pickle.dumps(state))
    handler._state_holder.sync()
    handler._round, handler._members = 7, frozenset(state.participants)
    return handler, backend


class _SearchClock:
    """The rendezvous handler's clock, for the lost-peer search: its time moves only when the search
    sleeps between turns (it sleeps for real too, so heartbeats go on), so a test counts turns
    instead of timing them."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
        self.slept.append(seconds)
        self.now += seconds

    def __getattr__(self, name: str):
        return getattr(time, name)


def test_a_closed_connection_finds_the_silent_peer_before_its_heartbeats_expire(monkeypatch):
    import pickle

    handler, backend = _handler_in_a_round({"a": 0.1, "b": 0.2, "c": 0.9})  # c: silent 0.9 s, under 1.5 s
    clock = _SearchClock()
    monkeypatch.setattr(rendezvous_handler, "time", clock)
    lost = handler.find_the_lost_peer()
    assert [n.addr for n in lost] == ["c"] and clock.slept == [], "found on the first read, without a wait"
    # written back: the other survivors' next round does not wait for c
    assert sorted(n.addr for n in pickle.loads(backend.get_state()[0]).participants) == ["a", "b"]


def test_a_member_whose_heartbeats_expired_in_the_agents_view_is_lost_before_the_next_read():
    """The agent's view of the state was read when c's last heartbeat was 1.4 s old (within the
    1.5 s keep-alive window); c beats no more. At the agent's next look, within its cache of the
    view, c's heartbeat is past the window: it is lost then, not at the next read of the server."""
    handler, _ = _handler_in_a_round({"a": 0.1, "b": 0.1, "c": 0.1})
    view = handler._state_holder.state
    assert handler._lost_members() == frozenset()
    c = next(n for n in view.participants if n.addr == "c")
    view.last_heartbeats[c] -= timedelta(seconds=1.5)  # the same view, now that c has been silent 1.6 s
    assert handler._lost_members() == {c}


def test_a_member_that_left_to_rejoin_is_waiting_not_lost():
    """An agent restarting for a node that joins leaves its round and waits for the next
    one: the others' closed connection must not report it lost."""
    import pickle

    handler, backend = _handler_in_a_round({"a": 0.1, "b": 0.1, "c": 0.1})
    bits, token = backend.get_state()
    state = pickle.loads(bits)
    rejoining = next(n for n in state.participants if n.addr == "c")
    del state.participants[rejoining]
    state.wait_list.add(rejoining)
    backend.set_state(pickle.dumps(state), token)
    handler._state_holder._cache_duration = 0  # every read goes to the server
    assert handler.num_nodes_waiting() == 1 and rejoining not in handler._state_holder.state.participants
    assert handler.lost_members() == frozenset()


def test_live_peers_are_not_dropped_and_the_search_ends_with_the_usual_window(monkeypatch):
    """Every participant beats every 0.2 s (their agents): none is dropped, and the search
    gives up after the keep-alive window (1.5 s), leaving the failure to the usual path."""
    import pickle
    import threading
    from datetime import datetime

    handler, backend = _handler_in_a_round({"a": 0.0, "b": 0.0, "c": 0.0})
    beating = threading.Event()

    def beat():
        while not beating.wait(0.2):
            bits, token = backend.get_state()
            state = pickle.loads(bits)
            for node in state.last_heartbeats:
                state.last_heartbeats[node] = datetime.now(UTC)
            backend.set_state(pickle.dumps(state), token)

    beats = threading.Thread(target=beat, daemon=True)
    beats.start()
    clock = _SearchClock()
    monkeypatch.setattr(rendezvous_handler, "time", clock)
    try:
        assert handler.find_the_lost_peer() == frozenset()
        # Looked until the window (3 keep-alives of 0.5 s) was over, and no turn longer.
        window = 1.5
        assert sum(clock.slept) >= window > sum(clock.slept[:-1]), clock.slept
    finally:
        beating.set()
        beats.join()


def _agents_meeting(run_id: str, count: int, keep_alive_s: float, last_call_s: float = 0.1, max_nodes: int = 3):
    """`count` of our handlers on one store (a round needs two)."""
    from torch.distributed import HashStore
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousTimeout

    store = HashStore()
    timeout = RendezvousTimeout(last_call=timedelta(seconds=last_call_s))
    return [
        ResilientRendezvousHandler.from_backend(
            run_id, store, C10dRendezvousBackend(store, run_id), 2, max_nodes, "127.0.0.1", timeout, keep_alive_s, 3
        )
        for _ in range(count)
    ]


def _polls_ending_the_last_call(handlers) -> None:
    """The op loop's poll as the launcher wires it (lab.runtime.rendezvous_backends): each waiting
    handler ends its round's last call once every node it expects has joined."""
    from lab.runtime import torch_seam

    def at_each_poll() -> None:
        for handler in handlers:
            handler.end_the_last_call_once_all_are_in()

    torch_seam.replace_rendezvous_poll_delay(0.05, at_each_poll, lambda: False)


def _meet(handlers) -> list:
    """Every handler's next_rendezvous at once, as the agents of a round call it: their worlds."""
    import threading

    worlds: list = [None] * len(handlers)

    def join(i: int) -> None:
        worlds[i] = handlers[i].next_rendezvous().world_size

    threads = [threading.Thread(target=join, args=(i,), daemon=True) for i in range(len(handlers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return worlds


def test_a_node_that_died_on_the_wait_list_is_left_for_once(restored_torch, monkeypatch):
    """Agents a and b train; node c joined the wait list and died there (killed as it joined). a
    and b leave their round for it, as torch's agents do for a waiting node, and form the next
    one without it (it never moves to the participants). torch keeps c listed until its
    heartbeats expire, a keep-alive window later: counted as waiting, it would restart every
    round that completed meanwhile. Once c beats again (a live but slow waiter) it is counted."""
    import pickle
    from datetime import datetime

    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc

    from lab.runtime import torch_seam

    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # as in every agent (lab.vocab.job)
    torch_seam.replace_rendezvous_poll_delay(0.05, lambda: None, lambda: False)
    # A keep-alive window (3 x 2 s) torch's own drop of c does not reach while the test runs.
    a, b = _agents_meeting("t-dead-waiter", 2, keep_alive_s=2.0)
    try:
        assert _meet([a, b]) == [2, 2]
        for handler in (a, b):
            torch_seam.cache_rendezvous_state_for(handler, 0)  # every read goes to the server

        backend = torch_seam.rendezvous_backend(a)

        def c_beats() -> None:
            bits, token = backend.get_state()
            state = pickle.loads(bits)
            c = _NodeDesc("c", 1, 0)
            state.wait_list.add(c)
            state.last_heartbeats[c] = datetime.now(UTC)
            assert backend.set_state(pickle.dumps(state), token)[2], "written"

        c_beats()  # c joins the wait list
        assert a.num_nodes_waiting() == b.num_nodes_waiting() == 1
        assert _meet([a, b]) == [2, 2]  # the round formed for c, without it
        assert a.num_nodes_waiting() == b.num_nodes_waiting() == 0, "c, dead on the wait list, is waited for again"
        c_beats()
        assert a.num_nodes_waiting() == b.num_nodes_waiting() == 1
    finally:
        for handler in (a, b):
            handler._stop_heartbeats()


# torch's own last call in the tests below: a round that waited it out would outlast the test.
LONG_LAST_CALL_S = 600


def test_the_survivors_round_completes_once_both_have_joined(restored_torch, monkeypatch):
    """a, b and c train (the round reached max_nodes); c vanishes. a and b find it lost and
    rejoin: each expects the other, and their round completes once both are in, not a last
    call later (a round of survivors never reaches max_nodes)."""
    from lab.local.procs import wait_until

    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # as in every agent (lab.vocab.job)
    a, b, c = _agents_meeting("t-survivors", 3, keep_alive_s=0.5, last_call_s=LONG_LAST_CALL_S)
    _polls_ending_the_last_call([a, b, c])
    try:
        assert _meet([a, b, c]) == [3, 3, 3]  # max_nodes: complete at once
        c._stop_heartbeats()  # c vanishes
        assert wait_until(lambda: a.num_nodes_waiting() and b.num_nodes_waiting(), 30), "c was not found lost"
        assert _meet([a, b]) == [2, 2], "the survivors waited out the last call"
    finally:
        for handler in (a, b, c):
            handler._stop_heartbeats()


def test_a_node_waiting_to_join_when_the_agents_leave_their_round_is_waited_for(restored_torch, monkeypatch):
    """a and b train (their first round waited out its last call: they expected nobody); c asks
    to join. a and b leave their round for it and expect it: their next round has c in it (a
    round of a and b alone would have completed as soon as both were in)."""
    import threading

    from lab.local.procs import wait_until

    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    a, b, c = _agents_meeting("t-joiner", 3, keep_alive_s=0.5, last_call_s=2.0, max_nodes=4)
    _polls_ending_the_last_call([a, b, c])
    try:
        assert _meet([a, b]) == [2, 2]
        joined: list = []
        waiting = threading.Thread(target=lambda: joined.append(c.next_rendezvous().world_size), daemon=True)
        waiting.start()
        assert wait_until(lambda: a.num_nodes_waiting() == 1 == b.num_nodes_waiting(), 30), "c did not ask to join"
        assert _meet([a, b]) == [3, 3]
        waiting.join(30)
        assert joined == [3]
    finally:
        for handler in (a, b, c):
            handler._stop_heartbeats()

"""lab.runtime.launch: torchrun with fractional-second rendezvous settings, against a real etcd."""

import json
import os
import time
from datetime import UTC, timedelta

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters, dynamic_rendezvous, utils
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

from lab.local.etcd import EtcdServer
from lab.runtime import agent_hooks, launch, rendezvous_backends, rendezvous_handler, torch_seam, worker_failures
from lab.runtime.rendezvous_handler import ResilientRendezvousHandler
from lab.vocab.job import JobSpec


@pytest.fixture
def etcd(workdir):
    server = EtcdServer(workdir).start()
    yield server
    server.stop()


def _params(endpoint, conf):
    return RendezvousParameters(
        backend="etcd-v2",
        endpoint=endpoint,
        run_id="t-launch",
        min_nodes=1,
        max_nodes=2,
        local_addr="127.0.0.1",
        **conf,
    )


def test_plain_torch_rejects_our_fractional_settings(etcd):
    """Why lab.runtime.launch exists: torch parses these timeouts as whole seconds."""
    conf = JobSpec().rdzv_conf()
    with pytest.raises(ValueError):
        dynamic_rendezvous.create_handler(None, None, _params(etcd.endpoint, conf))


def test_launcher_builds_a_handler_with_the_fractional_settings(etcd, installed, monkeypatch):
    spec = JobSpec()
    handler = get_rendezvous_handler(_params(etcd.endpoint, spec.rdzv_conf()))
    settings = handler.settings
    t = spec.rdzv_timeouts
    assert settings.keep_alive_interval == timedelta(seconds=t.keep_alive_interval_s) == timedelta(seconds=0.5)
    assert settings.keep_alive_max_attempt == 3
    assert settings.timeout.last_call == timedelta(seconds=t.last_call_s)
    assert settings.timeout.join == timedelta(seconds=t.join_s)
    # the once-a-second state poll now waits poll_interval
    slept = []
    monkeypatch.setattr(utils.time, "sleep", slept.append)
    dynamic_rendezvous._delay(seconds=1)
    assert slept == [t.poll_interval_s]


def test_an_agent_sees_a_node_waiting_to_join_within_a_poll_interval(etcd, installed):
    """torch answers a read within a second of the last from its cache; the launcher's
    handlers read the server again once `poll_interval_s` has passed."""
    spec = JobSpec()
    params = _params(etcd.endpoint, spec.rdzv_conf())
    training, joining = get_rendezvous_handler(params), get_rendezvous_handler(params)
    assert training.num_nodes_waiting() == 0  # read now, and cached
    holder = joining._state_holder
    holder.sync()
    holder.state.wait_list.add(joining._this_node)
    holder.mark_dirty()
    assert holder.sync() is True  # written
    time.sleep(spec.rdzv_timeouts.poll_interval_s)
    assert training.num_nodes_waiting() == 1


def test_bad_fractional_value_is_a_clear_error(etcd, installed):
    conf = {**JobSpec().rdzv_conf(), "keep_alive_interval": "fast"}
    with pytest.raises(ValueError, match="rdzv-conf keep_alive_interval='fast' is invalid: expected seconds"):
        get_rendezvous_handler(_params(etcd.endpoint, conf))


def test_agent_events_go_to_the_file_torchrun_is_told_of(tmp_path, monkeypatch):
    from torch.distributed.elastic import events as torch_events
    from torch.distributed.elastic.events import handlers

    from lab.runtime.launch import EVENT_LOG_HANDLER, record_agent_events

    monkeypatch.setitem(handlers._log_handlers, EVENT_LOG_HANDLER, None)  # restored afterwards
    path = tmp_path / "agent-events.jsonl"
    environ = dict(os.environ)
    record_agent_events(str(path))
    assert dict(os.environ) == environ  # the caller's environment is left alone
    event = torch_events.Event("torchelastic.worker.status.START", torch_events.EventSource.WORKER, metadata={"x": 1})
    before = time.time()
    torch_events.record(event, EVENT_LOG_HANDLER)
    after = time.time()
    (line,) = path.read_text().splitlines()
    rec = json.loads(line)
    assert rec["torch"]["name"] == "torchelastic.worker.status.START" and rec["torch"]["metadata"] == {"x": 1}
    assert before - 1e-4 <= rec["t"] <= after + 1e-4  # Unix seconds to 0.1 ms, stamped when recorded


@pytest.mark.parametrize(
    "argv,env,selected",
    [
        (["--nnodes=2", "-m", "lab.runtime.train"], None, True),
        (["--event-log-handler=console", "-m", "lab.runtime.train"], None, False),
        (["--event_log_handler", "console", "-m", "lab.runtime.train"], None, False),
        (["--nnodes=2", "-m", "lab.runtime.train"], "console", False),
    ],
    ids=["selected", "flag-given", "underscore-flag-given", "environment-chose"],
)
def test_the_agent_event_handler_is_selected_on_torchruns_command_line(monkeypatch, argv, env, selected):
    """Unless the user chose a handler, torchrun is told ours by a flag; the environment of
    the process is never changed for it."""
    from lab.runtime.launch import EVENT_LOG_HANDLER, with_event_log_handler

    if env is None:
        monkeypatch.delenv("PET_EVENT_LOG_HANDLER", raising=False)
    else:
        monkeypatch.setenv("PET_EVENT_LOG_HANDLER", env)
    expected = ["--event-log-handler", EVENT_LOG_HANDLER, *argv] if selected else argv
    assert with_event_log_handler(argv) == expected


class _Handler:
    def __init__(self, lost, waiting=0):
        self.lost = frozenset(lost)
        self.waiting = waiting

    def lost_members(self):
        return self.lost

    def num_nodes_waiting(self):
        return self.waiting


def _monitored(monkeypatch, state, lost, waiting=0, exitcode=1):
    """The agent's monitor as lab.runtime.launch wraps it, around a monitor that reports `state`."""
    from types import SimpleNamespace

    from torch.distributed.elastic.agent.server.api import RunResult
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    failures = {0: ProcessFailure(local_rank=0, pid=1, exitcode=exitcode, error_file="/nonexistent")}
    monkeypatch.setattr(LocalElasticAgent, "_monitor_workers", lambda self, group: RunResult(state, failures=failures))
    agent_hooks.forgive_failures_of_a_lost_round()
    group = SimpleNamespace(spec=SimpleNamespace(rdzv_handler=_Handler(lost, waiting)))
    return LocalElasticAgent._monitor_workers(_Budget(100), group)


def test_workers_failing_in_a_round_that_lost_a_node_are_a_membership_change(monkeypatch):
    from torch.distributed.elastic.agent.server.api import WorkerState

    assert _monitored(monkeypatch, WorkerState.FAILED, {"node-2"}).state == WorkerState.HEALTHY


def test_workers_a_peer_failed_while_a_node_waits_to_join_are_a_membership_change(monkeypatch):
    """Another agent stopped its workers for a joining node first: this agent's workers failed on
    the closed connections (our trainers' exit code for a lost peer). Not a failure; a crash of
    the worker's own while a node waits still is."""
    from torch.distributed.elastic.agent.server.api import WorkerState

    from lab.vocab.job import EXIT_PEER_LOST

    joined = _monitored(monkeypatch, WorkerState.FAILED, (), waiting=1, exitcode=EXIT_PEER_LOST)
    assert joined.state == WorkerState.HEALTHY
    alone = _monitored(monkeypatch, WorkerState.FAILED, (), waiting=0, exitcode=EXIT_PEER_LOST)
    assert alone.state == WorkerState.FAILED  # nobody lost, nobody joining: counted
    crashed = _monitored(monkeypatch, WorkerState.FAILED, (), waiting=1, exitcode=1)
    assert crashed.state == WorkerState.FAILED  # its own failure (exit code 1, no peer's error)


def test_a_stop_lost_on_its_way_up_is_raised_again_at_the_next_look_at_the_workers(monkeypatch):
    """torch's handler raises the agent's SIGTERM as a SignalException wherever the main thread
    is; caught on the way as any other error, the agent would train on in a job it was told to
    leave. The handler remembers the signal, and the next look at the workers stops the agent."""
    import signal

    from torch.distributed.elastic.agent.server.api import WorkerState
    from torch.distributed.elastic.multiprocessing import api

    monkeypatch.setattr(api, "_terminate_process_handler", api._terminate_process_handler)
    monkeypatch.setattr(agent_hooks, "_STOP", None)
    agent_hooks.remember_the_agents_stop()
    agent_hooks.remember_the_agents_stop()  # once only
    assert _monitored(monkeypatch, WorkerState.HEALTHY, ()).state == WorkerState.HEALTHY  # no stop yet
    with pytest.raises(api.SignalException):
        # what the agent's SIGTERM runs (called here: no signal is sent to the test runner)
        api._terminate_process_handler(signal.SIGTERM, None)
    with pytest.raises(api.SignalException) as raised:
        _monitored(monkeypatch, WorkerState.HEALTHY, ())
    assert raised.value.sigval == signal.SIGTERM


@pytest.mark.parametrize("state_name,lost", [("FAILED", ()), ("SUCCEEDED", {"node-2"}), ("HEALTHY", {"node-2"})])
def test_other_results_pass_through_the_monitor(monkeypatch, state_name, lost):
    """A failure with every participant present is a failure; other states are untouched."""
    from torch.distributed.elastic.agent.server.api import WorkerState

    result = _monitored(monkeypatch, WorkerState[state_name], lost)
    assert result.state == WorkerState[state_name]


def test_rendezvous_events_keep_their_names_without_reading_the_stack(monkeypatch):
    """torch names each rendezvous event after the method that records it; ours finds the
    same name from the frame alone, without inspect.stack() (source reads of every frame)."""
    import inspect

    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    original = dynamic_rendezvous.get_method_name
    monkeypatch.setattr(dynamic_rendezvous, "get_method_name", original)

    def _record():
        return dynamic_rendezvous.get_method_name()

    def _close():
        return _record()

    by_torch = _close()
    torch_seam.name_rendezvous_events_from_frames()
    assert dynamic_rendezvous.get_method_name is not original

    def stack_read(*args, **kwargs):
        raise AssertionError("the event's name read the whole stack")

    monkeypatch.setattr(inspect, "stack", stack_read)
    assert _close() == by_torch == "_close"
    assert dynamic_rendezvous.get_method_name(100_000) == "no_method_name"


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


class _Holder:
    def __init__(self, state):
        self.state = state


class _Agent:
    def __init__(self, state):
        self._state_holder = _Holder(state)


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
    rendezvous_backends._restore_round(_Agent(_RendezvousState()), backend)
    assert backend.get_state() is None


def _failure(tmp_path, rank: int, message: str | None, t: int, exitcode: int = 1):
    """A worker failure as torch's agent reports it: from its error file when it left one."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    path = tmp_path / f"error-{rank}-{t}.json"
    if message is not None:
        body = {"message": {"message": message, "extraInfo": {"py_callstack": message, "timestamp": str(t)}}}
        path.write_text(json.dumps(body))
    failure = ProcessFailure(local_rank=rank, pid=100 + rank, exitcode=exitcode, error_file=str(path))
    failure.timestamp = t
    return failure


class _Budget:
    """The agent's side of torch's restart budget."""

    def __init__(self, remaining: int):
        self._remaining_restarts = remaining


@pytest.mark.parametrize(
    "message,exitcode,signature",
    [
        ("ValueError: shapes (3,) and (4,) not aligned", 1, "ValueError: shapes (3,) and (4,) not aligned"),
        (None, 1, "exit code 1"),
        (None, -9, "Signal 9 (SIGKILL)"),  # an OOM kill of the worker, inside the pod
        ("torch.distributed.DistBackendError: NCCL communicator was aborted", 1, None),
        ("RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.5]:4504", 1, None),
    ],
)
def test_a_failure_is_named_by_what_the_first_worker_died_of(tmp_path, message, exitcode, signature):
    """A peer's failure seen through a collective is no crash of this node's own."""
    failures = {1: _failure(tmp_path, 1, message, t=10, exitcode=exitcode), 0: _failure(tmp_path, 0, None, t=11)}
    assert launch.failure_signature(failures) == ((signature, 1) if signature else None)


def _fail(agent, tmp_path, message: str, t: int) -> None:
    from torch.distributed.elastic.agent.server.api import RunResult, WorkerState

    worker_failures.count_towards_a_crash_loop(
        agent, RunResult(WorkerState.FAILED, failures={0: _failure(tmp_path, 0, message, t)})
    )


def test_the_same_crash_three_times_in_a_row_ends_the_restart_budget(tmp_path, monkeypatch):
    from lab.vocab.job import ENV_EVENTS_FILE

    monkeypatch.setenv(ENV_EVENTS_FILE, str(tmp_path / "events.jsonl"))
    agent = _Budget(100)
    for t in range(launch.CRASH_LOOP_ATTEMPTS - 1):
        _fail(agent, tmp_path, "FileNotFoundError: [Errno 2] No such file: '/data/train.bin'", t)
    assert agent._remaining_restarts == 100  # torch takes one per restart; this rule none yet
    _fail(agent, tmp_path, "FileNotFoundError: [Errno 2] No such file: '/data/train.bin'", 9)
    assert agent._remaining_restarts == 0
    recorded = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    (event,) = [e for e in recorded if e["event"] == "workers_crash_loop"]
    assert event["attempts"] == launch.CRASH_LOOP_ATTEMPTS and event["error"].startswith("FileNotFoundError")


def test_different_crashes_or_a_peers_failure_in_between_start_the_count_again(tmp_path):
    agent = _Budget(100)
    _fail(agent, tmp_path, "ValueError: a", 1)
    _fail(agent, tmp_path, "ValueError: a", 2)
    _fail(agent, tmp_path, "RuntimeError: Connection closed by peer [10.0.0.5]:4504", 3)  # an eviction
    _fail(agent, tmp_path, "ValueError: a", 4)
    _fail(agent, tmp_path, "KeyError: 'b'", 5)
    _fail(agent, tmp_path, "ValueError: a", 6)
    _fail(agent, tmp_path, "ValueError: a", 7)
    assert agent._remaining_restarts == 100 and worker_failures.crash_streak(agent).attempts == 2


AGENT_LOGS_A_FAILURE = """
import logging, sys
import torch  # torch's logging handlers, as in the agent
from lab.runtime import launch

launch.install()
try:
    raise RuntimeError("process 0 terminated with exit code 1")
except RuntimeError:
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").exception("failed (exitcode: 1)")
print("dynamo loaded:", "torch._dynamo" in sys.modules)
"""


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_an_agent_logs_its_workers_failure_without_importing_dynamo():
    """torch's log formatter imports torch._dynamo for a record with an exception: seconds of an
    eviction's recovery on the agents that saw their workers fail."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", AGENT_LOGS_A_FAILURE], capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dynamo loaded: False" in done.stdout
    assert (
        "failed (exitcode: 1)" in done.stderr and "RuntimeError: process 0 terminated with exit code 1" in done.stderr
    )


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


@pytest.mark.parametrize(
    "exitcode,message,peer",
    [
        (launch.EXIT_PEER_LOST, None, True),  # our trainers' code for it
        (1, "RuntimeError: Connection closed by peer [127.0.0.1]:5555", True),  # a script's gloo error
        (1, "ValueError: shapes (3,) and (4,) not aligned", False),
        (-9, None, False),
    ],
)
def test_a_peer_failure_is_told_from_a_crash(tmp_path, exitcode, message, peer):
    assert launch.a_peer_failed({0: _failure(tmp_path, 0, message, 1, exitcode=exitcode)}) is peer


def test_a_containers_kills_count_only_on_its_node_and_not_after_a_rendezvous_outage(monkeypatch):
    """The ledger of a worker pod's containers (lab.runtime.launch.ContainerLedger), in a real store:
    each check-in finds the one before still checked in (killed without a word) or not."""
    from torch.distributed import HashStore

    from lab.vocab.job import CONTAINER_KILLS, ENV_K8S_NODE, ENV_NODE

    store = HashStore()
    monkeypatch.delenv(ENV_K8S_NODE, raising=False)
    monkeypatch.setenv(ENV_NODE, "node-0")
    assert launch.ContainerLedger.of_this_pod(store, "run") is None  # the local target: no machine named
    monkeypatch.setenv(ENV_NODE, "demo-worker-0")
    monkeypatch.setenv(ENV_K8S_NODE, "gpu-0")
    ledger = launch.ContainerLedger.of_this_pod(store, "run")
    assert ledger is not None
    for _ in range(CONTAINER_KILLS):
        ledger.check_in(server_was_down=False)  # each container killed after it checked in
    ledger.check_in(server_was_down=True)  # its predecessor may have left on the outage: no count
    for _ in range(CONTAINER_KILLS - 1):
        ledger.check_in(server_was_down=False)
    with pytest.raises(launch.ContainerKillLoop, match=r"killed 3 times in a row on node gpu-0"):
        ledger.check_in(server_was_down=False)
    ledger.check_in(server_was_down=False)  # the refusal checked the pod out: it starts afresh
    other_pod = launch.ContainerLedger(store, "run", "demo-worker-1", "gpu-0")
    other_pod.check_in(server_was_down=False)  # its own entry
    assert json.loads(store.get("lab/run/containers/demo-worker-1"))["killed"] == 0

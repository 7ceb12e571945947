"""lab.runtime.launch against rendezvous failures, with a real etcd and real agents: an unreachable
server is ridden out, and an agent that gives up exits with a retryable code and leaves the
rendezvous open for its restarted pod."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

from lab.local import procs
from lab.local.etcd import EtcdServer
from lab.runtime import launch, rendezvous_backends, torch_seam
from lab.vocab import events
from lab.vocab.job import JobSpec
from lab.vocab.thread_dumps import ENV_THREAD_DUMPS
from tests.patience import within


@pytest.fixture
def etcd(workdir):
    server = EtcdServer(workdir).start()
    yield server
    server.stop()


def _agent(spec: JobSpec, workdir, name: str, *torchrun_args: str) -> subprocess.Popen:
    env = {
        **os.environ,
        **spec.worker_env(),
        "LAB_EVENTS_FILE": str(workdir / "events.jsonl"),
        "LAB_NODE": name,
    }
    with open(workdir / f"{name}.log", "ab") as out:
        return subprocess.Popen(
            [
                *spec.launcher(sys.executable),
                *spec.torchrun_args(local_addr="127.0.0.1"),
                *torchrun_args,
                *spec.entrypoint(),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_an_unreachable_server_is_ridden_out_then_given_up(etcd, installed):
    """The agent's poll of waiting nodes answers 0 while the server is down (its workers keep
    training), until server_outage has passed; then the connection error goes up."""
    conf = {**JobSpec().rdzv_conf(), "server_outage": "1.5"}
    params = RendezvousParameters(
        backend="etcd-v2",
        endpoint=etcd.endpoint,
        run_id="t-outage",
        min_nodes=1,
        max_nodes=2,
        local_addr="127.0.0.1",
        **conf,
    )
    handler = get_rendezvous_handler(params)
    assert handler.server_outage_s == 1.5
    # etcd requests give up after seconds, not torch's 60: the agent's loop waits on them.
    assert handler._state_holder._backend.backend._client.read_timeout == rendezvous_backends.ETCD_READ_TIMEOUT_S
    assert handler.num_nodes_waiting() == 0
    etcd.stop()
    time.sleep(1.1)  # past the handler's cache of the state (poll_interval)
    assert handler.num_nodes_waiting() == 0  # down: ridden out
    assert handler._unreachable_since is not None
    etcd.start()  # back on the same port, with its data
    # While it is down the handler tries the server once a second: back within two.
    assert procs.wait_until(lambda: handler.num_nodes_waiting() == 0 and handler._unreachable_since is None, 3)
    etcd.stop()
    time.sleep(1.1)
    assert handler.num_nodes_waiting() == 0
    time.sleep(1.6)
    with pytest.raises(RendezvousConnectionError):
        handler.num_nodes_waiting()


@pytest.mark.timeout(120)
def test_join_timeout_exits_retryable_and_leaves_the_rendezvous_open(etcd, workdir, installed):
    """One agent of a job that needs two: its join times out, it exits 171 (the operator
    retries 128-255), and the rendezvous stays open: two agents then train under the same id.
    torchrun exits 1 and closes the rendezvous for good, so the retried pod could never join."""
    spec = JobSpec(
        name="join",
        min_nodes=2,
        max_nodes=2,
        rdzv_endpoint=etcd.endpoint,
        rdzv_timeouts={"join_s": 2},
        checkpoint_dir=str(workdir / "ckpt"),
        script_args=("--steps", "20", "--step-time", "0.01"),
    )
    lonely = _agent(spec, workdir, "lonely")
    assert lonely.wait(90) == launch.EXIT_RENDEZVOUS_TIMEOUT >= 128, (workdir / "lonely.log").read_text()[-3000:]
    assert "rendezvous timed out" in (workdir / "lonely.log").read_text()

    pair = [_agent(spec.replace(rdzv_timeouts={"join_s": 60}), workdir, f"n{i}") for i in range(2)]
    try:
        codes = [p.wait(90) for p in pair]
    finally:
        for p in pair:
            procs.stop(p)
    assert codes == [0, 0], [(workdir / f"n{i}.log").read_text()[-2000:] for i in range(2)]
    done = [e for e in events.read(workdir / "events.jsonl") if e["event"] == "exit" and e.get("reason") == "done"]
    assert done
    # Their agents recorded the job's success before closing the rendezvous, for a late agent.
    (reader,) = _handlers(etcd, spec.rdzv_id, 1)
    assert reader.job_succeeded()


# Node "a"'s worker ends as soon as the test says so; every other node's trains until stopped.
FINISHING_AS_A_NODE_JOINS = textwrap.dedent("""
    import os, pathlib, time
    import torch.distributed as dist

    marks, node = pathlib.Path(__file__).parent, os.environ["LAB_NODE"]
    dist.init_process_group("gloo")
    (marks / f"running-{node}").touch()
    while node != "a" or not (marks / "finish").exists():
        time.sleep(0.01)
    (marks / "finished").touch()
""")


@pytest.mark.timeout(200)
@pytest.mark.long
def test_every_agent_ends_when_the_job_finishes_as_a_node_joins(etcd, workdir):
    """Agents a and b train; a's workers finish the job while its agent has not looked yet (it
    looks every 45 s here), a node joins, b stops its workers for it and waits for a round, and
    a's agent then finds its workers done and enters torch's exit barrier. 45 s: the newcomer
    must be on the wait list before a's agent looks (one that comes later is not restarted for:
    b's workers then finish with a's, in a real job), and on a loaded machine it takes 20 s to
    start. b leaves for good,
    counted in that barrier, and the newcomer too: every agent ends with 0 when a's agent looks,
    instead of a's waiting out the barrier's 300 s for b."""
    script = workdir / "finishing.py"
    script.write_text(FINISHING_AS_A_NODE_JOINS)
    spec = JobSpec(min_nodes=2, max_nodes=3, rdzv_endpoint=etcd.endpoint, module=None, script=str(script))
    agents = {"a": _agent(spec, workdir, "a", "--monitor-interval=45"), "b": _agent(spec, workdir, "b")}
    try:
        assert procs.wait_until(lambda: len(list(workdir.glob("running-*"))) == 2, within(60)), "no workers"
        (workdir / "finish").touch()
        assert procs.wait_until(lambda: (workdir / "finished").exists(), within(10))
        agents["late"] = _agent(spec, workdir, "late")
        # a's agent looks within 45 s of its workers' start; the barrier would hold it 300 s
        ended = procs.wait_until(lambda: all(p.poll() is not None for p in agents.values()), within(90))
        codes = {name: p.poll() for name, p in agents.items()}
        logs = {name: (workdir / f"{name}.log").read_text()[-3000:] for name in agents}
        assert ended and codes == {"a": 0, "b": 0, "late": 0}, (codes, logs)
        said = (workdir / "b.log").read_text()
        assert "the other agents' workers finished the job; nothing left to do" in said, said[-3000:]
    finally:
        for p in agents.values():
            procs.stop(p)


@pytest.mark.timeout(90)
def test_no_server_at_all_exits_retryable(workdir):
    """Nothing listens at the rendezvous address: the agent tries it for server_outage, then
    exits 170 (retryable), not 1."""
    spec = JobSpec(
        min_nodes=1,
        max_nodes=1,
        rdzv_endpoint=f"127.0.0.1:{procs.free_port()}",
        rdzv_timeouts={"server_outage_s": 2},
        checkpoint_dir=str(workdir / "ckpt"),
        script_args=("--steps", "5"),
    )
    agent = _agent(spec, workdir, "alone")
    log = workdir / "alone.log"
    assert agent.wait(60) == launch.EXIT_RENDEZVOUS_UNREACHABLE, log.read_text()[-3000:]
    assert "rendezvous server unreachable" in log.read_text()
    gave_up = [e for e in events.read(workdir / "events.jsonl") if e["event"] == "rdzv_gave_up"]
    assert len(gave_up) == 1 and gave_up[0]["down_s"] >= 2


@pytest.mark.timeout(120)
def test_an_agent_that_starts_before_its_server_waits_for_it(etcd, workdir):
    """The etcd pod is still starting (or restarting) when a worker pod starts: the agent tries
    the server until it answers, then trains to the end."""
    etcd.stop()
    spec = JobSpec(
        min_nodes=1,
        max_nodes=1,
        rdzv_endpoint=etcd.endpoint,
        checkpoint_dir=str(workdir / "ckpt"),
        script_args=("--steps", "5"),
    )
    agent = _agent(spec, workdir, "early")

    def rdzv_events() -> list[str]:
        found = workdir / "events.jsonl"
        return [e["event"] for e in events.read(found) if e["event"].startswith("rdzv_")] if found.exists() else []

    try:
        # The agent has met the missing server (a loaded machine takes seconds to import torch).
        assert procs.wait_until(lambda: "rdzv_unreachable" in rdzv_events() or agent.poll() is not None, 60)
        time.sleep(1.5)  # and keeps waiting for it
        assert agent.poll() is None, (workdir / "early.log").read_text()[-3000:]
        etcd.start()
        assert agent.wait(60) == 0, (workdir / "early.log").read_text()[-3000:]
    finally:
        procs.stop(agent)
    assert rdzv_events()[:2] == ["rdzv_unreachable", "rdzv_reachable"]


@pytest.mark.timeout(120)
def test_a_round_whose_rank0_vanishes_before_sharing_its_address_is_left(etcd, installed, monkeypatch):
    """Three agents complete a round; its rank 0 vanishes (heartbeats stop, nothing more said)
    before it writes the address its workers will meet at. torch's other agents would wait for
    it for the store's 300 s; ours leave the round once the rendezvous drops it and meet again
    without it."""
    from torch.distributed.elastic.rendezvous import api

    original = api.RendezvousStoreInfo.build
    handlers = _handlers(etcd, "t-rank0-vanishes", 3)
    mine = threading.local()
    vanished: list[object] = []
    lock = threading.Lock()

    class Vanished(Exception):
        pass

    def build(rank, store, local_addr, server_port=None):
        with lock:
            first = rank == 0 and not vanished
            if first:
                vanished.append(mine.handler)
        if first:
            mine.handler._stop_heartbeats()  # a VM taken back: no goodbye, no more heartbeats
            raise Vanished
        return original(rank, store, local_addr, server_port)

    monkeypatch.setattr(api.RendezvousStoreInfo, "build", staticmethod(build))
    results: dict[int, object] = {}

    def join(i: int) -> None:
        mine.handler = handlers[i]
        try:
            results[i] = handlers[i].next_rendezvous()
        except Exception as exc:  # noqa: BLE001 - the vanished one's, or a survivor's failure to report
            results[i] = exc

    threads = [threading.Thread(target=join, args=(i,), daemon=True) for i in range(3)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)  # far short of the store's 300 s that torch's agents would wait
        assert len(vanished) == 1, "no round's rank 0 vanished: the drill did not happen"
        gone = handlers.index(vanished[0])
        assert isinstance(results[gone], Vanished)
        survivors = [results[i] for i in range(3) if i != gone]
        assert all(isinstance(r, api.RendezvousInfo) for r in survivors), results
        assert sorted(r.rank for r in survivors) == [0, 1] and {r.world_size for r in survivors} == {2}
        stores = {(r.bootstrap_store_info.master_addr, r.bootstrap_store_info.master_port) for r in survivors}
        assert len(stores) == 1, f"the survivors must meet at one address: {stores}"
    finally:
        for h in handlers:
            h._stop_heartbeats()


def test_agents_with_the_job_environment_rank_their_workers_without_rank0(monkeypatch):
    """After a round torch's agents exchange worker ranks through the store, and all wait for
    the round's rank 0 to publish them: for 300 s if it was evicted just then. The agents'
    environment (JobSpec.worker_env) makes each compute its own from its group rank."""
    from types import SimpleNamespace

    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent

    class NoStore:
        def __getattr__(self, name):
            raise AssertionError(f"the agent used the rendezvous store ({name}): it would wait on rank 0")

    for key, value in JobSpec().worker_env().items():
        monkeypatch.setenv(key, value)
    spec = SimpleNamespace(role="default", local_world_size=2)
    workers = SimpleElasticAgent._assign_worker_ranks(None, NoStore(), 1, 3, spec)  # type: ignore[arg-type]
    assert [(w.global_rank, w.world_size, w.role_rank, w.role_world_size) for w in workers] == [
        (2, 6, 2, 6),
        (3, 6, 3, 6),
    ]


def _handlers(etcd, run_id: str, count: int) -> list:
    params = {"min_nodes": 2, "max_nodes": 3, "local_addr": "127.0.0.1", **JobSpec().rdzv_conf()}
    return [
        get_rendezvous_handler(RendezvousParameters(backend="etcd-v2", endpoint=etcd.endpoint, run_id=run_id, **params))
        for _ in range(count)
    ]


def _meet(handlers: list) -> list:
    """Every handler's next_rendezvous, concurrently (a round needs two of them)."""
    results: list = [None] * len(handlers)

    def join(i: int) -> None:
        results[i] = handlers[i].next_rendezvous()

    threads = [threading.Thread(target=join, args=(i,), daemon=True) for i in range(len(handlers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


@pytest.mark.timeout(90)
@pytest.mark.parametrize("finished", [True, False], ids=["job-finished", "job-failed"])
def test_an_agent_that_finds_the_rendezvous_closed_learns_whether_the_job_finished(etcd, installed, finished):
    """Two agents train and close the rendezvous at the end, while a third rejoins (it restarted
    its workers for a late node). torch's agent fails there; ours ends cleanly when the others'
    workers finished the job, and fails as torch does when the rendezvous closed on a failure."""
    from torch.distributed.elastic.rendezvous.api import RendezvousClosedError

    a, b, late = _handlers(etcd, f"t-closed-{finished}", 3)
    try:
        assert [info.world_size for info in _meet([a, b])] == [2, 2]
        if finished:
            a.mark_succeeded()  # what its agent does before its exit barrier
        assert a.shutdown() and a.is_closed()
        if finished:
            with pytest.raises(launch.JobAlreadyDone, match="finished the job"):
                late.next_rendezvous()
        else:
            with pytest.raises(RendezvousClosedError) as raised:
                late.next_rendezvous()
            assert not isinstance(raised.value, launch.JobAlreadyDone)
    finally:
        for h in (a, b, late):
            h._stop_heartbeats()


def test_a_late_agent_of_a_finished_job_exits_0(monkeypatch, installed, capsys):
    from torch.distributed import run

    def finished_without_this_agent(args):
        raise launch.JobAlreadyDone("the rendezvous 'x' closed: the other agents' workers finished the job")

    monkeypatch.setenv(launch.ENV_WARM_WORKERS, "0")
    monkeypatch.delenv(ENV_THREAD_DUMPS, raising=False)  # no handler for thread dumps in this process
    monkeypatch.setattr(run, "main", finished_without_this_agent)
    assert launch.main(["--nnodes=2:3", "train.py"]) == 0
    assert "nothing left to do" in capsys.readouterr().err


@pytest.mark.timeout(90)
def test_a_node_joining_a_finished_job_restarts_nobody_and_ends_cleanly(etcd, installed):
    """Two agents train; a third node arrives as they finish. Once one agent's workers
    succeeded (it then waits in its exit barrier for the other), the other no longer counts
    the newcomer as waiting: restarting would stop its finishing workers, and no new round could
    form while the first holds this one. The newcomer ends cleanly when the rendezvous closes."""
    a, b, late = _handlers(etcd, "t-late-joiner", 3)
    outcome: list[BaseException | object] = []

    def join_late() -> None:
        try:
            outcome.append(late.next_rendezvous())
        except BaseException as exc:  # noqa: BLE001 - what the newcomer's join ended with is the result
            outcome.append(exc)

    try:
        assert [info.world_size for info in _meet([a, b])] == [2, 2]
        newcomer = threading.Thread(target=join_late, daemon=True)
        newcomer.start()
        assert procs.wait_until(lambda: a.num_nodes_waiting() == 1, 10), "the newcomer never showed as waiting"
        b.mark_succeeded()  # b's workers finished: its agent enters the exit barrier
        assert a.num_nodes_waiting() == 0
        # The barrier passed (a's workers finished too): the rendezvous closes (its close op may time out
        # on a loaded machine: torch then says False, and the agent would be retried).
        assert procs.wait_until(lambda: b.shutdown() or b.is_closed(), 30)
        newcomer.join(20)
        assert len(outcome) == 1 and isinstance(outcome[0], launch.JobAlreadyDone), outcome
    finally:
        for h in (a, b, late):
            h._stop_heartbeats()


@pytest.mark.timeout(90)
def test_an_agent_that_restarted_as_the_job_finished_stops_waiting_for_a_round(etcd, installed):
    """A node joins as the job ends: one agent restarts its workers for it a moment before the
    other's workers finish (its own had just trained the last step), and rejoins the rendezvous,
    where the other agent holds the round in its exit barrier. torch's agent waits there for
    the barrier's 300 s; ours sees the job's success at its next poll and ends cleanly, and
    checks in to that barrier as it goes: the other agent, which waits there for every agent
    of its round, ends too instead of waiting out the barrier's timeout."""
    from torch.distributed.elastic.agent.server.api import _TERMINAL_STATE_SYNC_ID
    from torch.distributed.elastic.utils import store as store_util

    a, b, late = _handlers(etcd, "t-restarted-at-the-end", 3)
    outcome: list[BaseException | object] = []
    barrier_passed = threading.Event()

    def exit_barrier(info) -> None:
        """torch's agent's exit barrier, on the round's store, as its agent enters it."""
        store_util.barrier(info.store, info.world_size, _TERMINAL_STATE_SYNC_ID, barrier_timeout=60)
        barrier_passed.set()

    def rejoin(handler) -> None:
        try:
            outcome.append(handler.next_rendezvous())
        except BaseException as exc:  # noqa: BLE001 - what the rejoin ended with is the result
            outcome.append(exc)

    try:
        infos = _meet([a, b])
        assert [info.world_size for info in infos] == [2, 2]
        threading.Thread(target=rejoin, args=(late,), daemon=True).start()
        assert procs.wait_until(lambda: a.num_nodes_waiting() == 1, 10), "the newcomer never showed as waiting"
        restarted = threading.Thread(target=rejoin, args=(a,), daemon=True)
        restarted.start()
        time.sleep(1.0)  # several polls: b holds the round, nobody can form the next
        assert restarted.is_alive() and outcome == []
        b.mark_succeeded()  # b's workers finished the job: its agent enters the exit barrier
        threading.Thread(target=exit_barrier, args=(infos[1],), daemon=True).start()
        restarted.join(5)
        assert not restarted.is_alive(), "the restarted agent still waits for a round of a finished job"
        assert any(isinstance(o, launch.JobAlreadyDone) and "waited for a round" in str(o) for o in outcome), outcome
        assert barrier_passed.wait(10), "b's agent still waits in its exit barrier for the agent that left"
    finally:
        for h in (a, b, late):
            h._stop_heartbeats()


@pytest.mark.timeout(90)
def test_a_rendezvous_that_meets_a_restarting_server_waits_for_it(etcd, installed):
    """Two agents restart their workers (a peer was lost) while etcd is down, and it comes back
    empty (its pod moved): the rendezvous waits for the server and the two meet again, instead
    of exiting 170 and having their pods restarted."""
    import shutil

    a, b = _handlers(etcd, "t-join-outage", 2)
    try:
        assert [info.world_size for info in _meet([a, b])] == [2, 2]
        etcd.stop()
        shutil.rmtree(etcd.data_dir)
        infos: list = []
        # The server comes back from this thread: a server's lifetime is tied to the thread
        # that started it.
        meeting = threading.Thread(target=lambda: infos.extend(_meet([a, b])), daemon=True)
        meeting.start()
        time.sleep(2.5)
        assert meeting.is_alive()  # they wait for the server
        etcd.start()
        meeting.join(40)
        assert [info.world_size if info else None for info in infos] == [2, 2]
        assert a._unreachable_since is None and b._unreachable_since is None
        assert not a._gave_up and not b._gave_up
    finally:
        for h in (a, b):
            h._stop_heartbeats()


@pytest.mark.timeout(60)
def test_the_agents_stop_is_never_taken_for_a_rendezvous_store_error(etcd, installed, monkeypatch):
    """torch's agent learns of its SIGTERM (a spot notice, a scale-in, its pod deleted) as a
    SignalException raised wherever its main thread was, in our requests to the rendezvous
    store among them: their error handling lets it through. Swallowed, it left a node told to
    leave training on in the job."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    def stopped(*args, **kwargs):
        raise SignalException("Process 1 got signal: 15", sigval=signal.SIGTERM)

    (handler,) = _handlers(etcd, "t-stopped", 1)
    try:
        for request in ("check", "set", "add"):
            monkeypatch.setattr(handler._store, request, stopped)
        with pytest.raises(SignalException):
            handler.job_succeeded()
        with pytest.raises(SignalException):
            handler.mark_succeeded()
        handler._last_round = types.SimpleNamespace(store=handler._store, world_size=2)  # a round to leave
        with pytest.raises(SignalException):
            handler.check_in_to_the_exit_barrier()
        # reconnecting to a server that seemed away: the stop, not "unreachable"
        monkeypatch.setattr(rendezvous_backends.urllib.request, "urlopen", stopped)
        params = RendezvousParameters(
            backend="etcd-v2", endpoint=etcd.endpoint, run_id="t-stopped", min_nodes=1, max_nodes=1
        )
        with pytest.raises(SignalException):
            rendezvous_backends._reconnect_etcd(handler, params)
    finally:
        handler._stop_heartbeats()


def test_etcd_keeps_the_rendezvous_state_through_a_wipeout_of_hours(etcd, installed):
    """While every node of the job is gone nobody writes the rendezvous state, and etcd drops it
    when its TTL runs out (torch's: 2 hours). The job's settings keep it 30 days: the key's TTL
    as etcd reports it after a write."""
    import etcd as etcd_client

    conf = JobSpec().rdzv_conf()
    params = RendezvousParameters(
        backend="etcd-v2", endpoint=etcd.endpoint, run_id="wipeout", min_nodes=1, max_nodes=1, **conf
    )
    handler = get_rendezvous_handler(params)
    torch_seam.rendezvous_backend(handler).set_state(b"a round", None)  # as the first agent's join writes it
    host, port = etcd.endpoint.split(":")
    key = etcd_client.Client(host=host, port=int(port)).read("/torch/elastic/rendezvous/wipeout")
    assert conf["state_ttl"] == "2592000" and 2592000 - 60 <= key.ttl <= 2592000

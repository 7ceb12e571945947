"""lab.runtime.launch against rendezvous failures, with a real etcd and real agents: an unreachable
server is ridden out, and an agent that gives up exits with a retryable code and leaves the
rendezvous open for its restarted pod."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

from lab.local import procs
from lab.local.etcd import EtcdServer
from lab.runtime import launch
from lab.vocab import events
from lab.vocab.job import JobSpec


@pytest.fixture
def etcd(workdir):
    server = EtcdServer(workdir).start()
    yield server
    server.stop()


def _agent(spec: JobSpec, workdir, name: str) -> subprocess.Popen:
    env = {
        **os.environ,
        **spec.worker_env(),
        "LAB_EVENTS_FILE": str(workdir / "events.jsonl"),
        "LAB_NODE": name,
    }
    with open(workdir / f"{name}.log", "ab") as out:
        return subprocess.Popen(
            [*spec.launcher(sys.executable), *spec.torchrun_args(local_addr="127.0.0.1"), *spec.entrypoint()],
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
    assert handler._state_holder._backend._client.read_timeout == launch.ETCD_READ_TIMEOUT_S
    assert handler.num_nodes_waiting() == 0
    etcd.stop()
    time.sleep(1.1)  # past the handler's one-second cache of the state
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
def test_join_timeout_exits_retryable_and_leaves_the_rendezvous_open(etcd, workdir):
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


@pytest.mark.timeout(90)
def test_no_server_at_all_exits_retryable(workdir):
    """Nothing listens at the rendezvous address: the agent exits 170 (retryable), not 1."""
    spec = JobSpec(
        min_nodes=1,
        max_nodes=1,
        rdzv_endpoint=f"127.0.0.1:{procs.free_port()}",
        checkpoint_dir=str(workdir / "ckpt"),
        script_args=("--steps", "5"),
    )
    agent = _agent(spec, workdir, "alone")
    log = workdir / "alone.log"
    assert agent.wait(60) == launch.EXIT_RENDEZVOUS_UNREACHABLE, log.read_text()[-3000:]
    assert "rendezvous server unreachable" in log.read_text()

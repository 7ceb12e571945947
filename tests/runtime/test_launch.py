"""lab.runtime.launch: torchrun with fractional-second rendezvous settings, against a real etcd."""

import json
import os
import time
from datetime import timedelta

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters, dynamic_rendezvous, utils
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

from lab.local.etcd import EtcdServer
from lab.runtime import torch_seam
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


def test_an_agent_that_rejoins_the_first_round_waits_no_jitter(etcd, installed, monkeypatch):
    """torch jitters each join (up to 0.3 s) while the state's round is 0, meant for the nodes'
    first join; the round stays 0 until the job's first round ends, so the agents that leave it
    for an eviction's recovery would each wait up to 0.3 s more. Ours jitter at their first join
    only."""
    from torch.distributed.elastic.rendezvous import utils

    from tests.runtime.test_launch_rendezvous_errors import _handlers, _meet

    jitters = []
    uniform = utils.random.uniform
    monkeypatch.setattr(utils.random, "uniform", lambda low, high: jitters.append((low, high)) or uniform(low, high))
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # as in every agent (lab.vocab.job)
    agents = _handlers(etcd, "t-jitter", 2)
    try:
        assert [info.world_size for info in _meet(agents)] == [2, 2]
        assert jitters == [torch_seam.TORCH_FIRST_JOIN_JITTER_S] * 2  # each agent's first join
        assert [info.world_size for info in _meet(agents)] == [2, 2]  # both leave round 0 and meet again
        assert torch_seam.rendezvous_state(agents[0]).round == 1
        assert jitters == [torch_seam.TORCH_FIRST_JOIN_JITTER_S] * 2, "a rejoin waited torch's first-join jitter"
    finally:
        for agent in agents:
            agent._stop_heartbeats()


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

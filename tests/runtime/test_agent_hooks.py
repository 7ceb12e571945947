"""lab.runtime.agent_hooks: torch's agent monitor, stop and exit barrier as the launcher changes them."""

import pytest

from lab.runtime import agent_hooks
from tests.runtime.test_worker_failures import _Budget


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


class _Searching(_Handler):
    """A handler that finds no lost peer, and counts its searches (each would wait out the
    keep-alive window)."""

    searches = 0

    def find_the_lost_peer(self):
        self.searches += 1
        return frozenset()


@pytest.mark.parametrize(("nodes", "searched"), [(1, 0), (3, 1)])
def test_a_round_of_this_node_alone_does_not_look_for_a_lost_peer(monkeypatch, nodes, searched):
    """A per-step replica group's round holds its own node only: a worker failure that reads
    like a peer's cannot be one, and the agent restarts its workers at once instead of searching
    the keep-alive window for a peer that does not exist."""
    from types import SimpleNamespace

    from torch.distributed.elastic.agent.server.api import RunResult, WorkerState
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from lab.vocab.job import EXIT_PEER_LOST

    failures = {0: ProcessFailure(local_rank=0, pid=1, exitcode=EXIT_PEER_LOST, error_file="/nonexistent")}
    monkeypatch.setattr(
        LocalElasticAgent, "_monitor_workers", lambda self, group: RunResult(WorkerState.FAILED, failures=failures)
    )
    agent_hooks.forgive_failures_of_a_lost_round()
    handler = _Searching(())
    group = SimpleNamespace(spec=SimpleNamespace(rdzv_handler=handler), group_world_size=nodes)
    assert LocalElasticAgent._monitor_workers(_Budget(100), group).state == WorkerState.FAILED
    assert handler.searches == searched


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

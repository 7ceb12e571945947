"""lab.runtime.worker_failures: a worker's own crash told from a peer's consequence, and crash loops."""

import json

import pytest

from lab.runtime import worker_failures
from lab.vocab.job import EXIT_PEER_LOST


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
    assert worker_failures.failure_signature(failures) == ((signature, 1) if signature else None)


def _fail(agent, tmp_path, message: str, t: int) -> None:
    from torch.distributed.elastic.agent.server.api import RunResult, WorkerState

    worker_failures.count_towards_a_crash_loop(
        agent, RunResult(WorkerState.FAILED, failures={0: _failure(tmp_path, 0, message, t)})
    )


def test_the_same_crash_three_times_in_a_row_ends_the_restart_budget(tmp_path, monkeypatch):
    from lab.vocab.job import ENV_EVENTS_FILE

    monkeypatch.setenv(ENV_EVENTS_FILE, str(tmp_path / "events.jsonl"))
    agent = _Budget(100)
    for t in range(worker_failures.CRASH_LOOP_ATTEMPTS - 1):
        _fail(agent, tmp_path, "FileNotFoundError: [Errno 2] No such file: '/data/train.bin'", t)
    assert agent._remaining_restarts == 100  # torch takes one per restart; this rule none yet
    _fail(agent, tmp_path, "FileNotFoundError: [Errno 2] No such file: '/data/train.bin'", 9)
    assert agent._remaining_restarts == 0
    recorded = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    (event,) = [e for e in recorded if e["event"] == "workers_crash_loop"]
    assert event["attempts"] == worker_failures.CRASH_LOOP_ATTEMPTS and event["error"].startswith("FileNotFoundError")


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


@pytest.mark.parametrize(
    "exitcode,message,peer",
    [
        (EXIT_PEER_LOST, None, True),  # our trainers' code for it
        (1, "RuntimeError: Connection closed by peer [127.0.0.1]:5555", True),  # a script's gloo error
        (1, "ValueError: shapes (3,) and (4,) not aligned", False),
        (-9, None, False),
        # The port chosen for the worker's store was taken before it bound it: its own failure.
        (
            1,
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            "address. port: 43949, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
            False,
        ),
        (1, "torch.distributed.DistNetworkError: Connection reset by peer", True),
    ],
)
def test_a_peer_failure_is_told_from_a_crash(tmp_path, exitcode, message, peer):
    assert worker_failures.a_peer_failed({0: _failure(tmp_path, 0, message, 1, exitcode=exitcode)}) is peer

"""How the launcher's agent leaves: the exit code it picks, and the other agents it lets go."""

from __future__ import annotations

import signal

import pytest
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from lab.runtime.agent_exits import run_torchrun


class Handler:
    """A rendezvous handler's part in leaving, as calls in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def leave_round(self, why: str) -> None:
        self.calls.append(f"leave {why}")

    def check_in_to_the_exit_barrier(self) -> None:
        self.calls.append("check in")


def _raising(exc: BaseException):
    def torchrun(_args: list[str]) -> None:
        raise exc

    return torchrun


def test_a_noticed_agent_leaves_its_round_and_counts_itself_in_to_the_exit_barrier(capsys):
    """A notice that said when was trained through to the job's end: the other agents, their
    workers done, wait in the round's exit barrier for this one, which leaves with 143."""
    handler = Handler()
    code = run_torchrun(_raising(SignalException("notice", signal.SIGTERM)), [], [handler])
    assert code == 128 + signal.SIGTERM
    assert handler.calls == ["leave SIGTERM", "check in"]
    assert "stopped by signal SIGTERM" in capsys.readouterr().err


def test_an_agent_whose_workers_failed_for_good_counts_itself_in_and_fails(tmp_path):
    handler = Handler()
    failure = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=str(tmp_path / "none.json"))
    with pytest.raises(ChildFailedError):
        run_torchrun(_raising(ChildFailedError("train", {0: failure})), [], [handler])
    assert handler.calls == ["check in"]


def test_an_agent_whose_workers_finished_leaves_with_0():
    handler = Handler()
    assert run_torchrun(lambda _args: None, [], [handler]) == 0
    assert handler.calls == []

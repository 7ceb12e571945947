"""The node forker: nodes started as forks of one process that imported torch, each what a
new `python -m lab.runtime.launch` would have been (session, directory, environment, log,
exit status), and none outliving the forker."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from lab.local.node_forker import ForkerError, NodeForker
from tests.patience import within

pytestmark = pytest.mark.processes  # a forker and the nodes it forks

# What each node's one worker runs (the agent runs it as a script, in a fork of its forkserver).
PROBE = textwrap.dedent(
    """
    import json, os, sys, tempfile, time
    mode = sys.argv[1]
    if mode == "report":
        print(json.dumps({
            "name": __name__, "cwd": os.getcwd(), "only_here": os.environ.get("ONLY_HERE"),
            "shared": os.environ.get("SHARED"), "dropped": os.environ.get("DROPPED"), "tmp": tempfile.gettempdir(),
        }))
    if mode == "sleep":
        time.sleep(60)
    if mode == "fail":
        raise ValueError("the probe failed")
    """
)


def _node(home, *args: str) -> list[str]:
    """A node's command: the agent, one worker, a rendezvous of its own."""
    return [sys.executable, "-m", "lab.runtime.launch", "--standalone", "--nproc-per-node=1", "probe.py", *args]


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def forker(tmp_path_factory):
    home = tmp_path_factory.mktemp("forker")
    forker = NodeForker({**os.environ, "SHARED": "yes", "DROPPED": "forker's"}, home, home / "forker.log")
    forker.start()
    yield forker
    forker.close()


@pytest.fixture
def node_home(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    # The node's TMPDIR, short as the local target makes it (a Unix socket's path is at most
    # 107 bytes, and pytest's directories grow with their count): a link to it marks it here.
    short = Path(tempfile.mkdtemp(prefix="nf-"))
    (tmp_path / "tmp").symlink_to(short)
    yield tmp_path
    shutil.rmtree(short, ignore_errors=True)


def _tmp(node_home) -> str:
    return os.readlink(node_home / "tmp")


def _env(node_home, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DROPPED"}
    return {**env, "SHARED": "yes", "TMPDIR": _tmp(node_home), **extra}


def test_a_node_runs_the_agent_in_its_own_place_with_its_own_environment(forker, node_home):
    node = forker.fork(_node(node_home, "report"), _env(node_home, ONLY_HERE="1"), node_home, node_home / "log")
    assert node.wait(within(120)) == 0 and node.returncode == 0 and node.poll() == 0
    log = (node_home / "log").read_text()
    report = json.loads(next(line for line in log.splitlines() if line.startswith("{")))
    assert report == {
        "name": "__main__",
        "cwd": str(node_home),
        "only_here": "1",
        "shared": "yes",
        "dropped": None,  # the forker's, not the node's
        "tmp": _tmp(node_home),
    }


def test_a_node_killed_by_a_signal_reports_it_as_subprocess_does(forker, node_home):
    node = forker.fork(_node(node_home, "sleep"), _env(node_home), node_home, node_home / "log")
    assert node.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        node.wait(within(0.2))
    agent = psutil.Process(node.pid)
    assert forker.proc is not None and agent.ppid() == forker.proc.pid
    assert os.getsid(node.pid) == node.pid and agent.cwd() == str(node_home)  # a session of its own
    node.kill()
    assert node.wait(within(30)) == -signal.SIGKILL


def test_an_uncaught_exception_ends_the_node_with_1_and_its_traceback(forker, node_home):
    """As Python ends: torchrun raises ChildFailedError when its worker failed."""
    node = forker.fork(_node(node_home, "fail"), _env(node_home), node_home, node_home / "log")
    assert node.wait(within(120)) == 1
    log = (node_home / "log").read_text()
    assert "Traceback" in log and "ChildFailedError" in log and "ValueError: the probe failed" in log


def test_a_command_without_a_script_ends_the_node_as_argparse_does(forker, node_home):
    """Exit 2 and the usage, under the name `python -m lab.runtime.launch` shows."""
    node = forker.fork(_node(node_home)[:4], _env(node_home), node_home, node_home / "log")
    assert node.wait(within(60)) == 2
    assert "launch.py: error: the following arguments are required: training_script" in (node_home / "log").read_text()


def test_a_command_that_is_not_the_agent_is_refused_and_the_forker_goes_on(forker, node_home):
    expected = r"is invalid: expected \[python, '-m', 'lab.runtime.launch', args...\]"
    for argv in ([sys.executable, "probe.py"], [sys.executable, "-m", "probe", "report"]):
        with pytest.raises(ForkerError, match=rf"argv=.*'probe.*{expected}"):
            forker.fork(argv, _env(node_home), node_home, node_home / "log")
    node = forker.fork(_node(node_home, "report"), _env(node_home), node_home, node_home / "log")
    assert node.wait(within(120)) == 0


def test_nodes_die_with_the_forker_even_when_it_is_killed(node_home):
    forker = NodeForker(os.environ, node_home, node_home / "forker.log")
    forker.start()
    try:
        node = forker.fork(_node(node_home, "sleep"), _env(node_home), node_home, node_home / "log")
        assert forker.proc is not None
        forker.proc.kill()
        assert _wait_gone(node.pid), "a node outlived its forker"
        assert node.wait(within(30)) == -signal.SIGKILL  # reported as what happened to it
        with pytest.raises(ForkerError, match="is gone"):
            forker.fork(_node(node_home, "sleep"), _env(node_home), node_home, node_home / "log")
    finally:
        forker.close()

"""lab.local.thread_dumps: asking a node's process tree for its thread dumps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from lab.local import procs
from lab.local.thread_dumps import ask_for_thread_dumps
from lab.vocab.thread_dumps import AGENT, ENV_THREAD_DUMPS, WORKER, dump_file_name

# A node in miniature: an "agent" that registers, and its child "worker" that registers too,
# and a grandchild that does not (a forkserver, a data loader).
NODE = textwrap.dedent("""
    import os, subprocess, sys, time
    from lab.runtime.thread_dumps import dump_threads_on_request

    def agent_loop():
        open(sys.argv[1] + ".up", "w").close()
        while True:
            time.sleep(0.05)

    dump_threads_on_request(sys.argv[1])
    if sys.argv[1] == "agent":
        subprocess.Popen([sys.executable, __file__, "worker"])
    elif sys.argv[1] == "worker":
        subprocess.Popen([sys.executable, __file__, "helper"], env={**os.environ, "LAB_THREAD_DUMPS": ""})
    agent_loop()
""")


@pytest.fixture
def node(workdir):
    """The miniature node, its agent and worker registered and in their loops."""
    script = workdir / "node.py"
    script.write_text(NODE)
    env = {**os.environ, ENV_THREAD_DUMPS: str(workdir / "stacks")}
    proc = subprocess.Popen([sys.executable, str(script), AGENT], env=env, cwd=workdir, start_new_session=True)
    try:

        def up() -> bool:
            registered = len(list((workdir / "stacks").glob("*.txt"))) == 2  # the helper never registers
            return registered and (workdir / "agent.up").exists() and (workdir / "worker.up").exists()

        assert procs.wait_until(up, 20), "the node's processes did not start"
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_every_registered_process_of_the_tree_answers(workdir, node):
    dumps = ask_for_thread_dumps("node-0", node.pid, workdir / "stacks")
    assert sorted(d.role for d in dumps) == [AGENT, WORKER]
    assert all(d.node == "node-0" and "agent_loop" in d.text for d in dumps), dumps
    (agent,) = [d for d in dumps if d.role == AGENT]
    assert agent.pid == node.pid and agent.path == workdir / "stacks" / dump_file_name(AGENT, node.pid)
    # asked again, each answers with the new dump only
    again = ask_for_thread_dumps("node-0", node.pid, workdir / "stacks")
    assert [d.text.count("Current thread") for d in again] == [1, 1]


def test_a_file_of_a_process_outside_the_tree_is_not_signalled(workdir, node):
    # a stale file whose PID is now this test runner's: never signalled (it would die of it)
    (workdir / "stacks" / dump_file_name(WORKER, os.getpid())).write_text("")
    dumps = ask_for_thread_dumps("node-0", node.pid, workdir / "stacks")
    assert os.getpid() not in {d.pid for d in dumps} and len(dumps) == 2


def test_a_stopped_process_is_left_out(workdir, node):
    os.kill(node.pid, signal.SIGSTOP)  # the agent, as a vanished node's: the signal waits
    dumps = ask_for_thread_dumps("node-0", node.pid, workdir / "stacks", wait_s=0.5)
    assert [d.role for d in dumps] == [WORKER]


def test_no_directory_no_dumps(workdir):
    assert ask_for_thread_dumps("node-0", os.getpid(), workdir / "absent") == []

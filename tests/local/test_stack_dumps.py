"""lab.local.stack_dumps: asking a node's process tree for its stacks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from lab.local.stack_dumps import ask_for_stacks
from lab.vocab.stack_dumps import AGENT, ENV_STACK_DUMPS, WORKER, dump_file_name

# A node in miniature: an "agent" that registers, and its child "worker" that registers too,
# and a grandchild that does not (a forkserver, a data loader).
NODE = textwrap.dedent("""
    import os, subprocess, sys, time
    from lab.runtime.stack_dumps import dump_stacks_on_request

    def agent_loop():
        open(sys.argv[1] + ".up", "w").close()
        while True:
            time.sleep(0.05)

    dump_stacks_on_request(sys.argv[1])
    if sys.argv[1] == "agent":
        subprocess.Popen([sys.executable, __file__, "worker"])
    elif sys.argv[1] == "worker":
        subprocess.Popen([sys.executable, __file__, "helper"], env={**os.environ, "LAB_STACK_DUMPS": ""})
    agent_loop()
""")


def _node(workdir) -> subprocess.Popen[bytes]:
    script = workdir / "node.py"
    script.write_text(NODE)
    env = {**os.environ, ENV_STACK_DUMPS: str(workdir / "stacks")}
    return subprocess.Popen([sys.executable, str(script), AGENT], env=env, cwd=workdir, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _registered(workdir, count: int) -> bool:
    """`count` processes registered and in their loop (the helper never registers)."""
    from lab.local import procs

    def up() -> bool:
        return len(list((workdir / "stacks").glob("*.txt"))) == count and (workdir / "worker.up").exists()

    return procs.wait_until(lambda: up() and (workdir / "agent.up").exists(), 20)


def test_every_registered_process_of_the_tree_answers(workdir):
    proc = _node(workdir)
    try:
        assert _registered(workdir, 2)
        dumps = ask_for_stacks("node-0", proc.pid, workdir / "stacks")
        assert sorted(d.role for d in dumps) == [AGENT, WORKER]
        assert all(d.node == "node-0" and "agent_loop" in d.text for d in dumps), dumps
        (agent,) = [d for d in dumps if d.role == AGENT]
        assert agent.pid == proc.pid and agent.path == workdir / "stacks" / dump_file_name(AGENT, proc.pid)
        # asked again, each answers with the new dump only
        again = ask_for_stacks("node-0", proc.pid, workdir / "stacks")
        assert [d.text.count("Current thread") for d in again] == [1, 1]
    finally:
        _stop(proc)


def test_a_file_of_a_process_outside_the_tree_is_not_signalled(workdir):
    proc = _node(workdir)
    try:
        assert _registered(workdir, 2)
        # a stale file whose PID is now this test runner's: never signalled (it would die of it)
        (workdir / "stacks" / dump_file_name(WORKER, os.getpid())).write_text("")
        dumps = ask_for_stacks("node-0", proc.pid, workdir / "stacks")
        assert os.getpid() not in {d.pid for d in dumps} and len(dumps) == 2
    finally:
        _stop(proc)


def test_a_stopped_process_is_left_out(workdir):
    proc = _node(workdir)
    try:
        assert _registered(workdir, 2)
        os.kill(proc.pid, signal.SIGSTOP)  # the agent, as a vanished node's: the signal waits
        dumps = ask_for_stacks("node-0", proc.pid, workdir / "stacks", wait_s=0.5)
        assert [d.role for d in dumps] == [WORKER]
    finally:
        _stop(proc)


def test_no_directory_no_dumps(workdir):
    assert ask_for_stacks("node-0", os.getpid(), workdir / "absent") == []

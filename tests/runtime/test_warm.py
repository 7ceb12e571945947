"""Warm workers: the forkserver is a fork of its agent, preloads torch's heavy modules once,
forks the workers, and dies with the agent."""

import os
import signal
import subprocess
import textwrap
import time

import psutil

# An "agent": imports torch, starts the forkserver, runs one worker through it, reports
# what each process had imported and who its parent is, then waits to be killed.
AGENT = textwrap.dedent("""
    import json, multiprocessing, os, sys, time
    import torch
    from lab.runtime import warm

    def worker(queue):
        queue.put({"pid": os.getpid(), "ppid": os.getppid(),
                   "dynamo_imported": "torch._dynamo" in sys.modules})

    warm.start_forkserver()
    warm.start_forkserver()  # a no-op the second time
    from multiprocessing import forkserver
    server_pid = forkserver._forkserver._forkserver_pid
    ctx = multiprocessing.get_context("forkserver")
    queue = ctx.Queue()
    proc = ctx.Process(target=worker, args=(queue,))
    proc.start()
    seen = queue.get(timeout=60)
    proc.join(60)
    print(json.dumps({"agent": os.getpid(), "server": server_pid, "worker": seen,
                      "agent_has_dynamo": "torch._dynamo" in sys.modules}), flush=True)
    time.sleep(600)
""")


def test_the_forkserver_is_a_fork_of_the_agent_and_dies_with_it(workdir, python):
    import json

    script = workdir / "agent.py"
    script.write_text(AGENT)
    env = {**os.environ, "DRILL_MARK": str(workdir)}  # lets `workdir` find what survives
    agent = subprocess.Popen([python, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        report = json.loads(agent.stdout.readline())
        server = psutil.Process(report["server"])
        # A fork of the agent (its command line), not the new Python multiprocessing starts.
        assert server.ppid() == report["agent"] and server.cmdline() == psutil.Process(agent.pid).cmdline()
        assert report["worker"]["ppid"] == report["server"]  # workers are forks of the forkserver
        # The forkserver preloaded what workers would import on every restart; the agent did not.
        assert report["worker"]["dynamo_imported"] and not report["agent_has_dynamo"]
        agent.send_signal(signal.SIGKILL)
        agent.wait(30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and server.is_running() and server.status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.1)
        assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(30)

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
    waited = warm.wait_until_warm()  # the forkserver has imported its preload and forks
    from multiprocessing import forkserver
    server_pid = forkserver._forkserver._forkserver_pid
    ctx = multiprocessing.get_context("forkserver")
    queue = ctx.Queue()
    proc = ctx.Process(target=worker, args=(queue,))
    proc.start()
    seen = queue.get(timeout=60)
    proc.join(60)
    print(json.dumps({"agent": os.getpid(), "server": server_pid, "worker": seen, "waited": waited,
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
        assert isinstance(report["waited"], float) and report["waited"] > 0
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


# A user's script as the DDP tutorials write it: destroy_process_group imported at the top.
DESTROYS = textwrap.dedent("""
    import json, time
    import torch.distributed as dist
    from torch.distributed import destroy_process_group

    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=0, world_size=1)
    dist.all_reduce(__import__("torch").ones(3))
    started = time.monotonic()
    destroy_process_group()
    print(json.dumps({{"drains": getattr(destroy_process_group, "drains_gloo", False),
                       "same": destroy_process_group is dist.destroy_process_group,
                       "took_s": time.monotonic() - started,
                       "initialized": dist.is_initialized()}}), flush=True)
""")


def test_a_warm_worker_lets_gloo_threads_drain_when_the_script_destroys_its_group(tmp_path, python):
    """In a warm worker the script's destroy_process_group (imported before the worker ran it)
    destroys the group, then leaves the GIL to gloo's threads for a moment: a DDP model freed
    after it would otherwise join a gloo thread that waits for the GIL, for ever."""
    import json
    import socket

    from lab.runtime.warm import GLOO_DRAIN_S

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "destroys.py"
    script.write_text(DESTROYS.format(port=port))
    out = subprocess.run(
        [python, "-c", f"from lab.runtime.warm import run_script; run_script({str(script)!r})"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["drains"] and seen["same"] and not seen["initialized"]
    assert seen["took_s"] >= GLOO_DRAIN_S

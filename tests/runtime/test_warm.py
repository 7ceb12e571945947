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
        # A fork of the agent, not the new Python multiprocessing starts, named for `ps`.
        assert server.ppid() == report["agent"]
        assert [part for part in server.cmdline() if part] == ["elastic-lab worker forkserver"]
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


def test_a_temporary_directory_too_long_for_the_forkservers_socket_is_named(tmp_path, python):
    """multiprocessing would fail with a bare "AF_UNIX path too long"."""
    long_dir = tmp_path / ("t" * 100)
    long_dir.mkdir()
    done = subprocess.run(
        [python, "-c", "from lab.runtime import warm; warm.start_forkserver()"],
        env={**os.environ, "TMPDIR": str(long_dir)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert f"TMPDIR={str(long_dir)!r} is too long" in done.stderr and "at most 107" in done.stderr


# A user's script as the DDP tutorials write it: destroy_process_group imported at the top.
DESTROYS = textwrap.dedent("""
    import json, time
    import torch.distributed as dist
    from torch.distributed import destroy_process_group

    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=0, world_size=1)
    dist.all_reduce(__import__("torch").ones(3))
    started = time.monotonic()
    destroy_process_group()
    title = open("/proc/self/cmdline").read().strip("\\0")
    print(json.dumps({{"title": title, "drains": getattr(destroy_process_group, "lab_seam", False),
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
        [python, "-c", f"from lab.runtime.warm import run_script; run_script({str(script)!r}, '--epochs', '2')"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LAB_NODE": "node-7"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["drains"] and seen["same"] and not seen["initialized"]
    # `ps` tells the worker from its agent and forkserver: its rank, node and script.
    assert seen["title"] == f"elastic-lab worker rank 0/1 [node-7] {script} --epochs 2"
    assert seen["took_s"] >= GLOO_DRAIN_S


def _store_env(port, rank="1", **extra):
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": rank, **extra}


def test_a_worker_of_rank_above_0_waits_for_rank_0s_store_to_listen():
    """Rank 0 starts listening a moment after the others start: they wait for it here rather
    than in torch's store client, which backs off 0.25-0.75 s after a refused connection."""
    import socket
    import threading

    from lab.runtime.warm import wait_for_the_store_server

    server = socket.socket()
    server.bind(("127.0.0.1", 0))  # bound, not yet listening: connections are refused
    port = server.getsockname()[1]
    listening = threading.Event()

    def listen_later():
        time.sleep(0.3)
        listening.set()
        server.listen()

    later = threading.Thread(target=listen_later)
    later.start()
    try:
        waited = wait_for_the_store_server(_store_env(port), timeout_s=30)
        assert listening.is_set() and waited >= 0.25
    finally:
        later.join()
        server.close()


def test_rank_0_a_shared_agent_store_or_no_store_address_do_not_wait():
    import socket

    from lab.runtime.warm import wait_for_the_store_server

    with socket.socket() as refused:  # bound, never listening
        refused.bind(("127.0.0.1", 0))
        port = refused.getsockname()[1]
        assert wait_for_the_store_server(_store_env(port, rank="0"), timeout_s=30) == 0.0
        shared = _store_env(port, TORCHELASTIC_USE_AGENT_STORE="True")
        assert wait_for_the_store_server(shared, timeout_s=30) == 0.0
        assert wait_for_the_store_server({"RANK": "1"}, timeout_s=30) == 0.0
        # a server that never comes: the wait ends with its timeout (torch's own retries go on)
        assert wait_for_the_store_server(_store_env(port), timeout_s=0.2) >= 0.2

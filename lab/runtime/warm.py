"""Warm workers: restarts that do not pay for importing torch again.

Every elastic restart (an eviction, a node joining) starts every worker again, and a fresh
Python pays for `import torch` and for the first use of `torch.optim` and
`DistributedDataParallel` (which import torch._dynamo) before the first step: seconds per
restart, all of them recovery time. lab.runtime.launch starts workers from a multiprocessing
*forkserver* instead: one process per agent that imported all of that once (`PRELOAD`, run
imported by the forkserver itself) and forks a worker in milliseconds on every restart. Each worker
then runs the training script as `python -u [-m] script args` would (`run_script`).

Only the import state is shared: the forkserver never initialises CUDA, opens a process
group or starts threads, and each worker is a fresh fork of that state.

The forkserver is itself a fork of its agent, made once the agent has imported torch
(`start_forkserver`), so torch is imported once per node, not once by the agent and once
more by a new Python that multiprocessing would start: on a node whose cores are busy that
is a second and a half of CPU off every node's start.

Process lifetime: the forkserver and each worker are killed (SIGKILL) when their parent
dies, whatever killed it, so nothing outlives an agent.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import socket
import sys
import time
from collections.abc import Mapping

from lab.runtime import script_watch, torch_seam
from lab.runtime.process_title import set_title, where
from lab.runtime.thread_dumps import dump_threads_on_request
from lab.vocab.thread_dumps import WORKER

_PR_SET_PDEATHSIG = 1

# What the forkserver imports once (multiprocessing takes module names).
PRELOAD = ["lab.runtime.warm_server"]
# True in a worker that run_script runs: it must return to torch's wrapper (which hands the
# agent its result), and its process then ends without tearing Python down.
IN_WARM_WORKER = False


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent exits (Linux only;
    elsewhere nothing happens). The parent is the thread that started us."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request was made
        os.kill(os.getpid(), sig)


def start_forkserver() -> None:
    """Start multiprocessing's forkserver as a fork of this process, preloading `PRELOAD`;
    a no-op when it runs already. What multiprocessing's `ForkServer.ensure_running` does,
    but for the start: a fork of this process (with what it imported) where multiprocessing
    would start a new Python (lab.runtime.torch_seam). Call it before this process starts
    threads or connections."""
    torch_seam.start_forkserver_by_fork(PRELOAD, lambda: set_title(f"worker forkserver{where()}"))


def _nothing() -> None:
    """What the forkserver forks to show it is ready."""


def wait_until_warm() -> float:
    """Block until the forkserver has imported `PRELOAD` and forks: it forks one process that
    does nothing. A node that joins a running job waits here before it tells the rendezvous,
    so that the workers it asks every node to restart do not wait for its imports; the
    seconds waited."""
    import multiprocessing

    started = time.monotonic()
    ready = multiprocessing.get_context("forkserver").Process(target=_nothing, name="warm-check")
    ready.start()
    ready.join()
    return time.monotonic() - started


def script_argv(cmd_args: tuple[str, ...]) -> tuple[str | None, str, list[str]]:
    """(module or None, script path or module name, its arguments) from torchrun's
    `[-u] [-m] script args...` (what it would pass to a new Python)."""
    args = list(cmd_args)
    if args[:1] == ["-u"]:
        args = args[1:]
    if args[:1] == ["-m"]:
        if len(args) < 2:
            raise ValueError("a module name after -m")
        return args[1], args[1], args[2:]
    if not args:
        raise ValueError("a training script to run")
    return None, args[0], args[1:]


# How long a worker's `destroy_process_group()` leaves the GIL to gloo's threads
# (lab.runtime.torch_seam.drain_gloo_after_destroy says why).
GLOO_DRAIN_S = 0.2


# How long a worker of rank > 0 waits for rank 0's store server to listen (then torch's own
# connection retries take over).
STORE_WAIT_S = 10.0
STORE_PROBE_EVERY_S = 0.005


def wait_for_the_store_server(environ: Mapping[str, str] | None = None, timeout_s: float = STORE_WAIT_S) -> float:
    """A worker of rank > 0 whose process group's store is served by the rank-0 worker
    (torchrun without a shared agent store) waits here until that server accepts connections;
    the seconds waited. Every worker of a round starts at once, and torch's store client backs
    off 0.25-0.75 s (500 ms +- 50 %) after a refused connection, so without this wait every
    restart of the workers (a recovery, a node joining) paid that for the milliseconds rank 0
    takes to listen. Probes are plain connections, closed at once (the server drops them)."""
    env = os.environ if environ is None else environ
    host, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if env.get("RANK", "0") == "0" or env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" or not host or not port:
        return 0.0
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                break
        except OSError:
            time.sleep(STORE_PROBE_EVERY_S)
    return time.monotonic() - started


def run_script(*cmd_args: str) -> None:
    """Run the training script in this (forked, warm) worker as `__main__`, as `python -u`
    would: unbuffered output, `sys.argv`, the script's directory first on `sys.path`. A
    script that exits non-zero exits this process with its code; one that returns or exits
    0 returns (the agent then reads a clean return)."""
    global IN_WARM_WORKER
    IN_WARM_WORKER = True
    die_with_parent()  # multiprocessing's children otherwise outlive a killed forkserver
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the forkserver ignores it (lab.runtime.warm_server)
    dump_threads_on_request(WORKER)
    torch_seam.drain_gloo_after_destroy(GLOO_DRAIN_S)  # the script's, imported before or after
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(write_through=True)
    module, target, args = script_argv(cmd_args)
    rank = f" rank {os.environ['RANK']}/{os.environ.get('WORLD_SIZE', '?')}" if "RANK" in os.environ else ""
    set_title(f"worker{rank}{where()} " + " ".join([target, *args]))
    wait_for_the_store_server()
    sys.argv = [target, *args]
    watched = script_watch.watching()
    if watched:
        script_watch.install()
        script_watch.started()
    code, error = 0, None  # how the script ended, for the watch
    try:
        if module is not None:
            sys.path.insert(0, os.getcwd())
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code not in (None, 0):
            raise
    except BaseException as exc:
        code, error = 1, exc
        raise
    finally:
        if watched:
            script_watch.ended(code, error)

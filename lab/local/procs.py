"""Process plumbing: free loopback ports, whole-tree kills, no orphans."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from lab.runtime.warm import die_with_parent
from lab.vocab.errors import LabError


class ServerError(LabError):
    """A local server (etcd, the lighthouse) cannot be found or did not start; the message
    says which, why and what to install."""


_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def is_subreaper() -> bool:
    """Whether orphaned descendants re-parent to this process (Linux; False elsewhere)."""
    flag = ctypes.c_int(0)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
    except (OSError, AttributeError):
        return False
    return bool(flag.value)


def set_subreaper(on: bool) -> None:
    """Orphaned descendants (a killed agent's workers) re-parent to us while `on`, not to
    init, so we can always find and stop them. Linux only; harmless elsewhere."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)
    except (OSError, AttributeError):
        pass


# How many free ports a server started on a fresh port tries: between the pick (the port is
# free) and the server's bind, another process on the machine may take it.
PORT_TRIES = 3


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def lost_the_port(log_path: Path, since: int) -> bool:
    """Whether a server that exited at start wrote, after byte `since` of its log, that its
    address was taken (another process bound the free port picked for it first)."""
    try:
        with open(log_path, "rb") as log:
            log.seek(since)
            text = log.read().decode(errors="replace").lower()
    except OSError:
        return False
    return "address already in use" in text or "eaddrinuse" in text


def start_on_free_ports(
    fresh: bool, pick: Callable[[], None], start: Callable[[], subprocess.Popen[bytes]], log_path: Path
) -> subprocess.Popen[bytes]:
    """`start()` a server (after `pick()` chose free ports for it, when `fresh`), again on
    other ports while it exits saying in its log that its address was taken (up to
    PORT_TRIES times; a restart on its own ports is tried once); the last process, running or
    exited."""
    for _ in range(PORT_TRIES if fresh else 1):
        if fresh:
            pick()
        since = log_size(log_path)
        proc = start()
        if proc.poll() is None or not (fresh and lost_the_port(log_path, since)):
            break
    return proc


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants (workers run in sessions of their own, so a
    process group does not reach them)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def signal_tree(pid: int, sig: int) -> list[psutil.Process]:
    """Send `sig` to a whole tree at once. For SIGKILL and SIGSTOP the root is frozen first
    so that it cannot start a new child between listing and signalling (a node dies, or
    vanishes, all at once)."""
    if sig in (signal.SIGKILL, signal.SIGSTOP):
        _send(pid, signal.SIGSTOP)
    procs = tree(pid)
    for p in procs:
        _send(p.pid, sig)
    return procs


def _send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def start_server(cmd: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """A server (etcd, a c10d store, the lighthouse) in a session of its own, its output
    appended to `log_path`, no stdin; it dies with this process even when that is killed."""
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )


def stop(proc: subprocess.Popen[bytes] | None, timeout: float = 5.0) -> None:
    """SIGTERM a child we started, SIGKILL it if it has not exited after `timeout`."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


def kill_descendants(timeout: float = 5.0, spare: subprocess.Popen[bytes] | None = None) -> list[int]:
    """Stop every descendant of this process but `spare`: SIGTERM, then SIGKILL after `timeout`."""
    me = psutil.Process()
    procs = [p for p in me.children(recursive=True) if spare is None or p.pid != spare.pid]
    for p in procs:
        _send(p.pid, signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        _send(p.pid, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=timeout)
    reap()
    return [p.pid for p in procs]


def reap() -> None:
    """Collect exited children (including adopted orphans) so no zombie is left."""
    for _ in exited_children():
        pass


def exited_children() -> Iterator[tuple[int, int]]:
    """(pid, wait status) of each child that has exited by now (adopted orphans too), each
    collected as it is yielded; it never waits for one that still runs."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())

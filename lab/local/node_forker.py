"""The node forker: one process per local target that has imported what a node imports
(torch, torchrun's agent, what its workers import: lab.runtime.preload), and starts each of the
target's nodes as a fork of itself.

A node started as a new `python -m lab.runtime.launch` spends about 2.5 s of CPU importing
torch and what its workers need before it does anything, and on one machine every node pays
that again, on the cores the other nodes train on. A fork of a process that imported it once
starts in milliseconds. What a node is does not change: its own session and process tree
(evictions signal it whole), working directory, environment, log and exit status, and it runs
the agent, `lab.runtime.launch`, with the arguments it was given, as `python -m` would.

The forker runs with the environment every node shares, so what torch and OpenMP read from
the environment at import (OMP_NUM_THREADS, TORCH_* settings) is what each node would have
read; a node gets its own variables (its name, its event log) before its module runs.
/proc/PID/environ of a node shows the shared ones only: the kernel keeps the block a process
was started with.

Protocol, JSON lines. Forker to client: `{"ready": pid}` once it has imported everything;
`{"forked": pid}` or `{"refused": why}` for each request; `{"exited": pid, "code": n}` when a
node ends (n as subprocess's returncode: minus the signal that killed it). Client to forker:
`{"argv": [python, "-m", "lab.runtime.launch", ...], "env": {...}, "cwd": dir, "log": file}`. The forker
ends when its input closes, and dies with the process that started it; each node dies with
the forker (so with that process too).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from lab.local.procs import exited_children
from lab.runtime.process_title import set_title
from lab.runtime.warm import die_with_parent
from lab.vocab.errors import LabError
from lab.vocab.job import LAUNCH_MODULE

READY_TIMEOUT_S = 180.0


class ForkerError(LabError, RuntimeError):
    """The forker did not start, or is gone; the message names its log."""


# ------------------------------------------------------------------------ the forker itself
def _send(fd: int, message: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


def _refusal(request: object) -> str | None:
    """Why a request cannot be run, or None."""
    if not isinstance(request, dict) or not {"argv", "env", "cwd", "log"} <= request.keys():
        return f"request={request!r} is invalid: expected argv, env, cwd and log"
    argv = request["argv"]
    if not isinstance(argv, list) or argv[1:3] != ["-m", LAUNCH_MODULE]:
        return f"argv={argv!r} is invalid: expected [python, '-m', {LAUNCH_MODULE!r}, args...]"
    return None


def _reap(out: int) -> None:
    for pid, status in exited_children():
        _send(out, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def serve(inp: int, out: int) -> dict[str, Any] | None:
    """Fork a node for each request on `inp` and report on `out`; in a forked node, return
    its request (the caller runs it); in the forker, return None when `inp` closes."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    pending = b""
    while True:
        readable, _, _ = select.select([inp, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
        _reap(out)
        if inp not in readable:
            continue
        data = os.read(inp, 1 << 16)
        if not data:
            return None
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            request = json.loads(line)
            refusal = _refusal(request)
            if refusal:
                _send(out, {"refused": refusal})
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (inp, out, wake_r, wake_w):
                    os.close(fd)
                return dict(request)
            _send(out, {"forked": pid})


def run_node(request: Mapping[str, Any]) -> int:
    """In a forked node: become the process `python -m lab.runtime.launch args` in `cwd` with
    `env` would have been, run the agent, and end as Python would, but without
    tearing down the modules it shares with the forker (the exit handlers run, the streams are
    flushed): freeing torch's objects one by one writes to every page the fork shares, a
    second of CPU for nothing at the end of every node."""
    os.setsid()
    die_with_parent()
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # read from TMPDIR again
    import multiprocessing

    multiprocessing.current_process().authkey = os.urandom(32)  # a new Python's own key
    from lab.runtime import launch

    sys.argv = [str(launch.__file__), *request["argv"][3:]]
    sys.path[0] = os.getcwd()  # what `python -m` puts first
    code, interrupted = 0, False
    try:
        code = _exit_code(launch.main())
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException as exc:  # noqa: BLE001 - what Python does with an uncaught exception
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code, interrupted = 1, isinstance(exc, KeyboardInterrupt)
    # Python's own order at exit: its threads joined, then the exit handlers.
    getattr(threading, "_shutdown", lambda: None)()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if interrupted:  # Python ends by the signal itself, as the shell expects of a Ctrl-C
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _exit_code(code: object) -> int:
    """What Python exits with for SystemExit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def main() -> None:
    die_with_parent()
    set_title("node forker")
    # The protocol on descriptors of its own: nothing an import prints can reach it.
    inp, out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    # What the agent imports before its first rendezvous, and what its workers import.
    import torch.distributed.elastic.agent.server.local_elastic_agent
    import torch.distributed.run  # noqa: F401

    import lab.runtime.launch
    import lab.runtime.preload  # noqa: F401

    _send(out, {"ready": os.getpid()})
    request = serve(inp, out)
    # Both end without tearing down what they imported (see run_node).
    os._exit(0 if request is None else run_node(request))


# ------------------------------------------------------------------------------ the client
class ForkedAgent:
    """A process the forker started: what a subprocess.Popen offers that the local target
    uses (pid, poll, wait, returncode, terminate, kill)."""

    def __init__(self, forker: NodeForker, pid: int, args: list[str]):
        self._forker = forker
        self.pid = pid
        self.args = args

    @property
    def returncode(self) -> int | None:
        return self._forker.exit_code(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._forker.wait_for(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class NodeForker:
    """The client: starts the forker (`start`), asks it for nodes (`fork`), hears when they
    end. Nodes are reported killed (-SIGKILL) once the forker is gone: they die with it."""

    def __init__(self, env: Mapping[str, str], cwd: Path, log_path: Path):
        self.env = dict(env)
        self.cwd = cwd
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._codes: dict[int, int] = {}
        self._gone = False
        self._changed = threading.Condition()
        self._asking = threading.Lock()
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        """Start the forker; it imports while the caller goes on (`fork` waits for it)."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", f"from {__name__} import main; main()"],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,  # a Ctrl-C to the caller's terminal is not for it
                preexec_fn=die_with_parent,
            )
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), name="node-forker", daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        """The forker's messages, until it is gone (or says something unreadable)."""
        try:
            for line in stream:
                message = json.loads(line)
                if "ready" in message:
                    self._ready.set()
                elif "exited" in message:
                    with self._changed:
                        self._codes[int(message["exited"])] = int(message["code"])
                        self._changed.notify_all()
                else:
                    self._replies.put(message)
        finally:
            with self._changed:
                self._gone = True
                self._changed.notify_all()
            self._ready.set()
            self._replies.put({"refused": "the forker is gone"})

    def _problem(self, what: str) -> ForkerError:
        tail = self.log_path.read_text(errors="replace").splitlines()[-10:] if self.log_path.exists() else []
        return ForkerError(f"the node forker {what} (log: {self.log_path}){''.join(chr(10) + t for t in tail)}")

    @property
    def proc_pid(self) -> int:
        """The forker's process id (each node is its child)."""
        if self.proc is None:
            raise ForkerError("the node forker was not started")
        return self.proc.pid

    def wait_until_ready(self, timeout: float) -> bool:
        """Whether the forker has finished its imports (or is gone) within `timeout` seconds."""
        return self._ready.wait(timeout)

    def fork(self, argv: list[str], env: Mapping[str, str], cwd: Path, log_path: Path) -> ForkedAgent:
        """Start `argv` (`[python, "-m", "lab.runtime.launch", args...]`) as a fork of the forker."""
        if self.proc is None or self.proc.stdin is None:
            raise ForkerError("the node forker was not started")
        if not self.wait_until_ready(READY_TIMEOUT_S):
            raise self._problem(f"did not finish its imports in {READY_TIMEOUT_S:g} s")
        request = {"argv": list(argv), "env": dict(env), "cwd": str(cwd), "log": str(log_path)}
        with self._asking:
            if self._gone:
                raise self._problem("is gone")
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
            except OSError:
                raise self._problem("is gone") from None
            reply = self._replies.get()
        if "forked" not in reply:
            raise self._problem(f"refused to start {argv[:3]}: {reply.get('refused')}")
        return ForkedAgent(self, int(reply["forked"]), list(argv))

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._codes.get(pid, -signal.SIGKILL if self._gone else None)

    def wait_for(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._codes or self._gone, timeout)
        return self.exit_code(pid)

    def close(self, timeout: float = 5.0) -> None:
        """End the forker (its input closed) after its nodes; it is killed if it lingers."""
        proc = self.proc
        if proc is None:
            return
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout)
        if proc.stdout is not None:
            proc.stdout.close()

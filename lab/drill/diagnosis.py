"""Why workers fail: torchelastic's error files, read while the drill runs.

Every worker that dies of an exception leaves an error file (torch's `@record`, which the
agent wraps around each worker): `<log-dir>/<run>/round_<n>/attempt_<restart>/<local rank>/error.json`
(a folder per round: lab.runtime.round_logs)
with the exception's message and its traceback. A script that fails the same way on the same
node in `CRASH_LOOP_ATTEMPTS` attempts in a row, and gets no further in the later ones than in
the first (no step at all, or the same steps again, as when every checkpoint save fails), is in
a crash loop: the drill stops it instead of letting it restart until the timeout, and says why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CRASH_LOOP_ATTEMPTS = 3
_ATTEMPT = re.compile(r"attempt_(\d+)$")

# (what the message says, what it means): the exception's own words, not log lines.
_HINTS = (
    (
        re.compile(r"Torch not compiled with CUDA|no NVIDIA driver|No CUDA GPUs are available|CUDA driver"),
        "the script needs CUDA (torch.cuda ...) and this machine has no GPU: run on CPU when "
        "torch.cuda.is_available() is False (gloo instead of nccl)",
    ),
    (re.compile(r"\[Errno 28\]|No space left on device"), "the disk is full (No space left on device)"),
    (re.compile(r"\[Errno 30\]|Read-only file system"), "a directory the script writes is read-only"),
    (re.compile(r"\[Errno 13\]|Permission denied"), "a path the script writes is not writable (Permission denied)"),
    (
        re.compile(r"^ModuleNotFoundError: No module named '([^']+)'"),
        "the script imports a module that is not installed here",
    ),
    (re.compile(r"^SyntaxError"), "the script is not Python (a shell script passed as --script?)"),
)


@dataclass(frozen=True)
class WorkerError:
    """One worker's death by exception."""

    node: str
    attempt: int  # the agent's restart count when it happened
    rank: str  # the worker's local rank
    t: float  # when it was recorded (the file's modification time)
    message: str  # "ExceptionType: text"
    traceback: str

    @property
    def hint(self) -> str | None:
        for pattern, meaning in _HINTS:
            if pattern.search(self.message):
                return meaning
        return None

    def last_lines(self, n: int = 6) -> str:
        return "\n".join(self.traceback.rstrip().splitlines()[-n:])


def read_error_file(path: Path, node: str) -> WorkerError | None:
    """The error file at `path` (written by node `node`), or None if it is not one."""
    info: dict[str, Any]
    try:
        body = json.loads(path.read_text())
        msg = body["message"]
        if isinstance(msg, str):  # a plain message: torch writes this form for some errors
            message, info = msg, {}
        else:
            message, info = str(msg.get("message", "")), msg.get("extraInfo") or {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    attempt = _ATTEMPT.match(path.parent.parent.name)
    try:
        t = path.stat().st_mtime  # the file's own timestamp is in whole seconds
    except OSError:
        return None
    return WorkerError(
        node=node,
        attempt=int(attempt.group(1)) if attempt else -1,
        rank=path.parent.name,
        t=t,
        message=message.strip(),
        traceback=str(info.get("py_callstack", "")),
    )


def worker_errors(nodes: Iterable[tuple[str, Path]]) -> list[WorkerError]:
    """Every error file under each (node name, its torchelastic log directory), oldest first."""
    found = []
    for node, log_dir in nodes:
        if log_dir.is_dir():
            # A folder per round (lab.runtime.round_logs), or torch's own layout without one.
            for path in [*log_dir.glob("*/round_*/attempt_*/*/error.json"), *log_dir.glob("*/attempt_*/*/error.json")]:
                error = read_error_file(path, node)
                if error is not None:
                    found.append(error)
    return sorted(found, key=lambda e: (e.t, e.node, e.attempt))


def crash_loop(errors: list[WorkerError], steps: list[tuple[float, int]]) -> tuple[WorkerError, int] | None:
    """(the error, how many attempts it ended) when one node's last CRASH_LOOP_ATTEMPTS
    attempts all ended with the same exception and the last of them got no further than the
    first: `steps` are the job's (time, step) events."""
    by_node: dict[str, dict[int, WorkerError]] = {}
    for e in errors:
        by_node.setdefault(e.node, {}).setdefault(e.attempt, e)
    for attempts in by_node.values():
        last = [attempts[a] for a in sorted(attempts)][-CRASH_LOOP_ATTEMPTS:]
        if len(last) < CRASH_LOOP_ATTEMPTS or len({e.message for e in last}) != 1:
            continue
        if [a.attempt for a in last] != list(range(last[0].attempt, last[0].attempt + CRASH_LOOP_ATTEMPTS)):
            continue
        reached = [max((s for t, s in steps if t <= e.t), default=-1) for e in last]
        if reached[-1] > reached[0]:
            continue  # it got further: training goes on between failures
        return last[-1], len(attempts)
    return None


def describe(error: WorkerError, attempts: int | None = None) -> str:
    """The report's words for a worker error: what, where, what it means, and the traceback's end."""
    times = f" ({attempts} attempts in a row)" if attempts else ""
    lines = [f"workers fail with {error.message} on {error.node}{times}"]
    if error.hint:
        lines.append(f"    meaning: {error.hint}")
    if error.traceback:
        lines.append("    traceback (last lines):")
        lines += [f"      {line}" for line in error.last_lines().splitlines()]
    return "\n".join(lines)

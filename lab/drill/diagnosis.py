"""Why workers fail, in the words of the script that failed: torchelastic's error files and the
workers' own stderr, read while the drill runs.

Every worker that dies of an exception leaves an error file (torch's `@record`, which the
agent wraps around each worker): `<log-dir>/<run>/round_<n>/attempt_<restart>/<local rank>/error.json`
(a folder per round: lab.runtime.round_logs) with the exception's message and its traceback.
A worker that exits instead (SystemExit: argparse refusing its arguments exits 2) leaves none,
only what it printed, in `stderr.log` beside it (torchrun's `--tee`).

Each failure is said the way its script's author would fix it (`diagnose`): a script that needs a
GPU, in each of the usual forms; arguments argparse refused, with the usage text; a module that is
not installed, with its `pip install`; any other exception at the innermost frame of the script's
own files. The drill stops a job that fails deterministically instead of letting it restart until
the timeout: every node's workers failing the same way at their first start (`failed_at_first_start`),
or one node's in `CRASH_LOOP_ATTEMPTS` attempts in a row getting no further (`crash_loop`);
`deterministic` says which, if any (a `CrashLoop`).
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.drill.agent_events import AgentEvent
from lab.runtime.launch import caused_by_a_peer
from lab.vocab.events import Event
from lab.vocab.job import ROUND_DIR_PREFIX

CRASH_LOOP_ATTEMPTS = 3
_ATTEMPT = re.compile(r"attempt_(\d+)$")
_ROUND = re.compile(re.escape(ROUND_DIR_PREFIX) + r"(\d+)$")
# How much of a worker's stderr.log is read: argparse's usage and error lines end it.
STDERR_TAIL_BYTES = 8192
# This project's own code (the warm worker that runs the script, the runtime it may call): never
# "the script's" frame, even where the script's folder holds it.
_LAB = Path(__file__).resolve().parents[1]

# (what the message says, what it means): conditions of the machine, not of the script's code.
_HINTS = (
    (re.compile(r"\[Errno 28\]|No space left on device"), "the disk is full (No space left on device)"),
    (re.compile(r"\[Errno 30\]|Read-only file system"), "a directory the script writes is read-only"),
    (re.compile(r"\[Errno 13\]|Permission denied"), "a path the script writes is not writable (Permission denied)"),
)


@dataclass(frozen=True)
class WorkerError:
    """One worker's failure: its exception (from its error file), or the usage error argparse
    printed before it exited (from its stderr)."""

    node: str
    attempt: int  # the agent's restart count when it happened
    rank: str  # the worker's local rank
    t: float  # when it was recorded (the file's modification time)
    message: str  # "ExceptionType: text", or argparse's "prog: error: text"
    traceback: str
    round: int | None = None  # the node's n-th start of workers (round_<n>); None in torch's own layout
    usage: str = ""  # argparse's usage text, for a usage error

    @property
    def hint(self) -> str | None:
        for pattern, meaning in _HINTS:
            if pattern.search(self.message):
                return meaning
        return None

    @property
    def signature(self) -> tuple[str, str]:
        """What failed and where: the same for workers that failed the same way."""
        last = frames(self.traceback)[-1:]
        return self.message, f"{last[0].file}:{last[0].line}" if last else ""

    def last_lines(self, n: int = 6) -> str:
        return "\n".join(self.traceback.rstrip().splitlines()[-n:])


@dataclass(frozen=True)
class Frame:
    """One frame of a traceback, as Python prints it."""

    file: str
    line: int
    function: str  # "" at a SyntaxError's location
    source: str  # the line's text, "" where none was printed (frozen modules)


_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<function>.+))?$')
_TRACEBACK_START = "Traceback (most recent call last):"


def frames(traceback: str) -> list[Frame]:
    """The frames of the exception a traceback ends with, outermost first (those of the
    exceptions chained before it are left out)."""
    lines = traceback.rsplit(_TRACEBACK_START, 1)[-1].splitlines()
    found = []
    for i, line in enumerate(lines):
        m = _FRAME.match(line)
        if m is None:
            continue
        after = lines[i + 1] if i + 1 < len(lines) else ""
        source = after.strip() if after.startswith("    ") else ""
        found.append(Frame(m["file"], int(m["line"]), m["function"] or "", source))
    return found


def script_frame(traceback: str, script: str | None) -> Frame | None:
    """The innermost frame in the script's own files: the script, or a file under its folder
    outside installed packages (a virtual environment kept beside the script) and this project's
    code. None when the script is not known or no frame is its."""
    if not script:
        return None
    path = Path(script).resolve()
    for frame in reversed(frames(traceback)):
        if not frame.file.startswith("<") and _in_script(Path(frame.file).resolve(), path):
            return frame
    return None


def _in_script(file: Path, script: Path) -> bool:
    if file == script:
        return True
    installed = any(part in ("site-packages", "dist-packages") for part in file.parts)
    return script.parent in file.parents and not installed and _LAB not in file.parents


def where(frame: Frame, script: str) -> str:
    """`file:line` of a frame, the file relative to the script's folder."""
    return f"{Path(frame.file).resolve().relative_to(Path(script).resolve().parent)}:{frame.line}"


# ------------------------------------------------------------------ the script's words
@dataclass(frozen=True)
class Diagnosis:
    cause: str  # the report's first line: what failed, in the script's terms, and where
    change: str | None = None  # what to change


# What each of CUDA's absences says. torch 2.13's CPU build: set_device finds no
# `torch._C._cuda_setDevice`; `.to("cuda")`, `.cuda()`, `device="cuda"` fail in
# torch.cuda._lazy_init; init_process_group("nccl") finds no NCCL; a `device_id` finds no
# accelerator. A CUDA build where no GPU is visible (torch 2.11+cu130, CUDA_VISIBLE_DEVICES=""):
# "No CUDA GPUs are available" from torch._C._cuda_init, ProcessGroupNCCL's "no GPUs found",
# and a `device_id` "out of range"; without a driver, torch's "Found no NVIDIA driver on your
# system", and the CUDA runtime's error 100 (cudaErrorNoDevice).
_NO_CUDA_BUILD = re.compile(
    r"Torch not compiled with CUDA enabled|has no attribute '_cuda_|doesn't have NCCL built in"
    r"|current compilation's accelerator support: None"
)
_NO_GPU = re.compile(
    r"No CUDA GPUs are available|no GPUs found|Found no NVIDIA driver|no CUDA-capable device is detected"
    r"|number of accelerators available: 0"
)
# The CUDA call a line of the script makes, as it wrote it: torch.cuda's functions, `.cuda()`,
# `.to(...)`, or any call with a "cuda" argument (device="cuda", torch.device("cuda", 0)).
_CUDA_CALLS = (
    re.compile(r"(?:torch\.)?cuda\.\w+(?=\()"),
    re.compile(r"\w*\.cuda\([^()]*\)"),
    re.compile(r"\w*\.to\([^()]*\)"),
    re.compile(r"[\w.]+\([^()]*[\"']cuda(?::\d+)?[\"'][^()]*\)"),
)
_CUDA_CHECK = re.compile(r"(?:torch\.)?cuda\.(?:is_available|device_count)\(\)")
_ON_CPU = (
    'pick the device where the script starts: device = torch.device("cuda" if torch.cuda.is_available() '
    'else "cpu"), backend = "nccl" if torch.cuda.is_available() else "gloo", and call torch.cuda.set_device '
    "only when there is a GPU (or drill it on a machine with one)"
)


def torch_has_cuda() -> bool:
    """Whether the installed torch is a CUDA build (its CUDA library is there), without
    importing it."""
    spec = importlib.util.find_spec("torch")
    roots = spec.submodule_search_locations if spec is not None else None
    return any(any((Path(root) / "lib").glob("*torch_cuda*")) for root in roots or ())


def _needs_cuda(error: WorkerError, frame: Frame | None, script: str | None) -> Diagnosis | None:
    """Each usual form of "no CUDA here": the call that needed it, and what is missing."""
    message = error.message
    if _NO_CUDA_BUILD.search(message):
        missing = "the installed torch has no CUDA"
    elif _NO_GPU.search(message):
        missing = "this machine has no GPU"
    elif message.startswith("AssertionError") and _asserts_cuda(error, frame):
        missing = "the installed torch has no CUDA" if not torch_has_cuda() else "this machine has no GPU"
    else:
        return None
    if frame is None or script is None:
        return Diagnosis(f"this script needs a GPU (CUDA) and {missing}", _ON_CPU)
    check = _CUDA_CHECK.search(frame.source) if message.startswith("AssertionError") else None
    if check:
        return Diagnosis(
            f"this script needs a GPU (CUDA): it checks {check[0]} at {where(frame, script)} and {missing}", _ON_CPU
        )
    call = _cuda_call(message, frame)
    return Diagnosis(
        f"this script needs a GPU (CUDA): it calls {call} at {where(frame, script)} and {missing}", _ON_CPU
    )


def _asserts_cuda(error: WorkerError, frame: Frame | None) -> bool:
    """An `assert` of the script's own on torch.cuda (is_available(), device_count()): the
    traceback ends at that line."""
    last = frames(error.traceback)[-1:]
    return frame is not None and last == [frame] and bool(_CUDA_CHECK.search(frame.source))


def _cuda_call(message: str, frame: Frame) -> str:
    """The call that needed CUDA, as the script's line writes it (the first one in the line)."""
    if "device_id" in message:
        return "init_process_group(device_id=...)"
    if "NCCL" in message:
        return 'init_process_group("nccl")'
    found = [m for pattern in _CUDA_CALLS if (m := pattern.search(frame.source))]
    if found:
        return min(found, key=lambda m: m.start())[0]
    return frame.source or "CUDA"


# An import name and the distribution that installs it, where the two differ.
DISTRIBUTIONS = {
    "attr": "attrs",
    "bs4": "beautifulsoup4",
    "Crypto": "pycryptodome",
    "cv2": "opencv-python",
    "dateutil": "python-dateutil",
    "docx": "python-docx",
    "dotenv": "python-dotenv",
    "faiss": "faiss-cpu",
    "fitz": "pymupdf",
    "git": "GitPython",
    "hydra": "hydra-core",
    "jwt": "PyJWT",
    "PIL": "pillow",
    "serial": "pyserial",
    "skimage": "scikit-image",
    "sklearn": "scikit-learn",
    "yaml": "pyyaml",
    "zmq": "pyzmq",
}
_NO_MODULE = re.compile(r"^ModuleNotFoundError: No module named '([^']+)'")
_NO_NAME = re.compile(r"^ImportError: cannot import name '([^']+)' from '([^']+)'")


def _import_error(error: WorkerError, frame: Frame | None, script: str | None) -> Diagnosis | None:
    """A module that is not installed (and the distribution to install), or a name the
    installed version of a module does not have."""
    at = f" at {where(frame, script)}" if frame is not None and script is not None else ""
    if m := _NO_NAME.match(error.message):
        name, module = m.groups()
        return Diagnosis(
            f"the script imports {name} from {module}{at}, and the installed {module} has no {name}",
            f"install the version of {module.split('.')[0]} the script was written for",
        )
    m = _NO_MODULE.match(error.message)
    if m is None:
        return None
    module = m[1]
    top = module.split(".")[0]
    folder = Path(script).resolve().parent if script else None
    if folder is not None and ((folder / top).is_dir() or (folder / f"{top}.py").is_file()):
        return Diagnosis(
            f"the script imports {module}{at}, and its folder's {top} has no {module.removeprefix(top + '.')}",
            f"add it under {folder / top}, or import what is there",
        )
    if top != module and importlib.util.find_spec(top) is not None:
        return Diagnosis(
            f"the script imports {module}{at}, and the installed {top} has no such module",
            f"install the version of {top} the script was written for",
        )
    install = f"pip install {DISTRIBUTIONS.get(top, top)}"
    return Diagnosis(f"the script imports {module}{at}, which is not installed here: {install}", install)


def _usage_error(error: WorkerError, frame: Frame | None, script: str | None) -> Diagnosis | None:
    if not error.usage:
        return None
    refused = error.message.split(": error: ", 1)[-1]
    name = Path(script).name if script else "SCRIPT"
    return Diagnosis(
        f"the script refused its arguments (argparse, exit code 2): {refused}",
        f"give the script's arguments after `--`: elastic-lab drill --script {name} -- ARGS",
    )


def _not_python(error: WorkerError, frame: Frame | None, script: str | None) -> Diagnosis | None:
    """A SyntaxError in the script itself when it is not a .py file, or its first line runs
    another interpreter (`#!/bin/sh`): a shell script, as a rule."""
    if not error.message.startswith("SyntaxError") or script is None or frame is None:
        return None
    if Path(frame.file).resolve() != Path(script).resolve():
        return None
    shebang = _first_line(script)
    other_interpreter = shebang.startswith("#!") and "python" not in shebang
    if Path(script).suffix == ".py" and not other_interpreter:
        return None
    return Diagnosis(
        f"the script is not Python ({error.message} at {where(frame, script)})",
        "pass a Python training script as --script (a shell script that starts one is not run by torchrun)",
    )


def _first_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().strip()
    except OSError:
        return ""


def _crash(error: WorkerError, frame: Frame | None, script: str | None) -> Diagnosis:
    """Any other exception: where in the script's own files it came from."""
    if frame is None or script is None:
        return Diagnosis(f"workers fail with {error.message}")
    function = f" in {frame.function}" if frame.function else ""  # none at a SyntaxError's place
    return Diagnosis(f"the script fails at {where(frame, script)}{function}: {error.message}")


# In order: the first that recognises the failure says it.
_DIAGNOSES = (_usage_error, _needs_cuda, _import_error, _not_python)


def diagnose(error: WorkerError, script: str | None) -> Diagnosis:
    """What a worker's failure means for its script, and where in it."""
    frame = script_frame(error.traceback, script)
    for known in _DIAGNOSES:
        if (found := known(error, frame, script)) is not None:
            return found
    return _crash(error, frame, script)


def describe(error: WorkerError, script: str | None, how: str | None = None) -> str:
    """The report's words for a worker failure: its cause in the script's terms and where
    (the first line), how it went (`how`), the error, what to change, and the traceback's end
    from the script's own frame on."""
    found = diagnose(error, script)
    lines = [found.cause]
    if how:
        lines.append(f"    {how}")
    if error.usage:
        lines += [f"    {line}" for line in [*error.usage.splitlines(), error.message]]
    else:
        lines.append(f"    error: {error.message} (on {error.node})")
    if error.hint:
        lines.append(f"    meaning: {error.hint}")
    if found.change:
        lines.append(f"    change: {found.change}")
    if error.traceback:
        lines.append("    traceback (last lines):")
        lines += [f"      {line}" for line in _traceback_end(error, script).splitlines()]
    return "\n".join(lines)


def _traceback_end(error: WorkerError, script: str | None) -> str:
    """The traceback's last lines, with the script's own frame first when it is above them."""
    end = error.last_lines()
    frame = script_frame(error.traceback, script)
    if frame is None or f'"{frame.file}", line {frame.line},' in end:
        return end
    own = [f'  File "{frame.file}", line {frame.line}, in {frame.function}', f"    {frame.source}", "  ..."]
    return "\n".join([*own, end])


# ------------------------------------------------------------------ reading the files
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
    try:
        t = path.stat().st_mtime  # the file's own timestamp is in whole seconds
    except OSError:
        return None
    return _error_in(path, node, t, message.strip(), traceback=str(info.get("py_callstack", "")))


def read_usage_error(path: Path, node: str) -> WorkerError | None:
    """The usage error a worker's stderr (`path`) ends with, or None: argparse prints its usage,
    then `<prog>: error: <what>`, and exits 2 (ArgumentParser.error), leaving no error file."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - STDERR_TAIL_BYTES))
            lines = f.read().decode("utf-8", errors="replace").rstrip().splitlines()
        t = path.stat().st_mtime
    except OSError:
        return None
    error = re.match(r"^(?P<prog>.+?): error: .+$", lines[-1]) if lines else None
    if error is None:
        return None
    usage_at = max((i for i, line in enumerate(lines) if line.startswith(f"usage: {error['prog']}")), default=None)
    if usage_at is None:
        return None
    return _error_in(path, node, t, lines[-1], usage="\n".join(lines[usage_at:-1]))


def _error_in(path: Path, node: str, t: float, message: str, traceback: str = "", usage: str = "") -> WorkerError:
    """A worker's error read from `path`, a file of its rank's folder: the folder names its
    local rank, the folders above it its attempt and round."""
    return WorkerError(
        node=node,
        attempt=_attempt(path),
        rank=path.parent.name,
        t=t,
        message=message,
        traceback=traceback,
        round=_round(path),
        usage=usage,
    )


def _attempt(path: Path) -> int:
    m = _ATTEMPT.match(path.parent.parent.name)
    return int(m.group(1)) if m else -1


def _round(path: Path) -> int | None:
    m = _ROUND.match(path.parent.parent.parent.name)
    return int(m.group(1)) if m else None


def worker_errors(nodes: Iterable[tuple[str, Path]]) -> list[WorkerError]:
    """Every worker failure under each (node name, its torchelastic log directory), oldest
    first: error files, and the usage errors of workers that left none."""
    found = []
    for node, log_dir in nodes:
        if not log_dir.is_dir():
            continue
        # A folder per round (lab.runtime.round_logs), or torch's own layout without one.
        for worker_dir in [*log_dir.glob("*/round_*/attempt_*/*"), *log_dir.glob("*/attempt_*/*")]:
            error_file = worker_dir / "error.json"
            if error_file.is_file():
                error = read_error_file(error_file, node)
            else:
                error = read_usage_error(worker_dir / "stderr.log", node)
            if error is not None:
                found.append(error)
    return sorted(found, key=lambda e: (e.t, e.node, e.attempt))


# ------------------------------------------------------------- deterministic failures
def failed_at_first_start(errors: list[WorkerError], nodes: Collection[str]) -> WorkerError | None:
    """The failure every node's workers died of at their node's first start (round 1), when
    every failure of those starts is the same one (message and innermost frame) and none is
    the consequence of a peer's: a failure of the script, which a restart repeats. None
    otherwise, or in torch's own layout (no rounds: attempt 0 is not a node's first start).

    An eviction never reads so: the evicted node's workers die by a signal (no error file,
    no usage error) and the survivors' by a peer's failure. The caller asks only before any
    fault of the drill's and before any step."""
    first = [e for e in errors if e.round == 1]
    if not nodes or {e.node for e in first} != set(nodes):
        return None
    if len({e.signature for e in first}) != 1 or _a_peers_failure(first[0].message):
        return None
    return first[-1]


def _a_peers_failure(message: str) -> bool:
    """What a worker says when a peer failed or vanished (lab.runtime.launch's words for it,
    which name NCCL), unless it says CUDA or NCCL is not there at all."""
    return caused_by_a_peer(message) and not (_NO_CUDA_BUILD.search(message) or _NO_GPU.search(message))


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


class CrashLoop(Exception):
    """The script fails the same way at every start (`how` says how that was seen): stop the drill."""

    def __init__(self, error: WorkerError, how: str) -> None:
        super().__init__(error.message)
        self.error, self.how = error, how


# Before any of these, a failure of every node's workers at their first start is the script's.
_FAULTS_AND_STEPS = (Event.EVICT, Event.RDZV_DOWN, Event.SCALE, Event.STEP)


def deterministic(errors: list[WorkerError], seen: list[dict[str, Any]], nodes: list[str]) -> CrashLoop | None:
    """A failure a restart repeats: one node's in a crash loop, or every node's at its first
    start before the drill did anything."""
    if not any(e["event"] in _FAULTS_AND_STEPS for e in seen) and (first := failed_at_first_start(errors, nodes)):
        return CrashLoop(
            first, f"every worker of all {len(nodes)} node(s) failed so at its first start, before any fault"
        )
    steps = [(e["t"], e["step"]) for e in seen if e["event"] == Event.STEP]
    if looping := crash_loop(errors, steps):
        error, attempts = looping
        return CrashLoop(error, f"{error.node}'s workers failed so {attempts} attempts in a row")
    return None


def last_unrecovered(errors: list[WorkerError], agents: list[AgentEvent]) -> WorkerError | None:
    """The newest worker failure that no new start of workers on its node followed: the one
    that can have ended the job (an earlier one, an eviction's, was recovered from)."""
    for error in reversed(errors):
        if not any(a.node == error.node and a.kind == "started" and a.t > error.t for a in agents):
            return error
    return None

"""Where a process that outlived the drill's time was, from the thread dump it wrote when asked
(lab.local.thread_dumps): faulthandler's text, read into frames and said in one line."""

from __future__ import annotations

import functools
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-fA-F]+")
_FRAME = re.compile(r'^\s+File "(?P<path>.*)", line (?P<line>\d+) in (?P<function>.*)$')
# Frames shown before the innermost frame of the script's own code.
INNERMOST = 2


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    function: str

    def short(self) -> str:
        """`function (file:line)`, the file from its package down (site-packages' part cut)."""
        path = self.path.split("/site-packages/", 1)[-1]
        for root in _library_roots():
            if path.startswith(root + "/"):
                path = path[len(root) + 1 :]
                break
        return f"{self.function} ({path}:{self.line})"


@functools.cache
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(sorted({paths["stdlib"], paths["platstdlib"]}))


def is_library(frame: Frame) -> bool:
    """A frame of an installed package or of Python's standard library: not the script's code."""
    return "/site-packages/" in frame.path or any(frame.path.startswith(root + "/") for root in _library_roots())


def threads(text: str) -> list[tuple[Frame, ...]]:
    """Every thread's frames in a faulthandler dump, innermost first; the thread that took
    the signal is listed last, as faulthandler writes it."""
    found: list[list[Frame]] = []
    for line in text.splitlines():
        if _THREAD.match(line):
            found.append([])
        elif found and (frame := _FRAME.match(line)):
            found[-1].append(Frame(frame["path"], int(frame["line"]), frame["function"]))
    return [tuple(frames) for frames in found if frames]


def main_thread(stacks: list[tuple[Frame, ...]]) -> tuple[Frame, ...] | None:
    """The process's main thread: the one not started by `threading` (whose outermost frame
    is its bootstrap)."""
    for frames in stacks:
        outermost = frames[-1]
        if not (Path(outermost.path).name == "threading.py" and outermost.function.startswith("_bootstrap")):
            return frames
    return None


def where(text: str) -> str | None:
    """Where a dump's main thread was: its innermost frames, then the innermost of the
    script's own code when that is further out. None when the dump holds no frames."""
    frames = main_thread(threads(text))
    if not frames:
        return None
    said = " < ".join(f.short() for f in frames[:INNERMOST])
    own = next((i for i, f in enumerate(frames) if not is_library(f)), None)
    if own is not None and own >= INNERMOST:
        said += f", called from {Path(frames[own].path).name}:{frames[own].line} in {frames[own].function}"
    return said

"""Asking a node's processes for their thread dumps (lab.vocab.thread_dumps): each process of
the node's tree that registered a dump file gets the signal, and what it wrote is read back."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lab.local import procs
from lab.vocab.thread_dumps import DUMP_SIGNAL, read_dump_file_name


@dataclass(frozen=True)
class ThreadDump:
    """What one process wrote when asked: every thread's stack, faulthandler's text."""

    node: str
    role: str  # lab.vocab.thread_dumps.AGENT or WORKER
    pid: int
    path: Path
    text: str


def ask_for_thread_dumps(node: str, root_pid: int, dump_dir: Path, wait_s: float = 2.0) -> list[ThreadDump]:
    """The stacks of every live process under `root_pid` that registered a file in `dump_dir`,
    in PID order. A process that wrote nothing within `wait_s` (stopped, or its handler replaced
    by the script's own) is left out."""
    if not dump_dir.is_dir():
        return []
    in_tree = {p.pid for p in procs.tree(root_pid)}
    asked: dict[int, tuple[str, Path, int]] = {}
    for path in sorted(dump_dir.iterdir()):
        named = read_dump_file_name(path.name)
        if named is None or named[1] not in in_tree:
            continue
        role, pid = named
        before = path.stat().st_size
        try:
            os.kill(pid, DUMP_SIGNAL)
        except ProcessLookupError:
            continue
        asked[pid] = (role, path, before)

    def wrote(pid: int) -> bool:
        _, path, before = asked[pid]
        return path.stat().st_size > before

    procs.wait_until(lambda: all(wrote(pid) for pid in asked), wait_s)
    # A dump is several writes, one per frame: read once the files stop growing.
    sizes: dict[int, int] = {}

    def settled() -> bool:
        now = {pid: asked[pid][1].stat().st_size for pid in asked}
        same = now == sizes
        sizes.update(now)
        return same

    procs.wait_until(settled, 1.0, interval=0.1)
    dumps = []
    for pid, (role, path, before) in sorted(asked.items()):
        if not wrote(pid):
            continue
        with path.open(encoding="utf-8", errors="replace") as f:
            f.seek(before)
            dumps.append(ThreadDump(node, role, pid, path, f.read()))
    return dumps

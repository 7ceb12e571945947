"""A local run's work directory: held by one run at a time, and what an earlier run left in it.

A run holds its directory with an advisory lock (`flock`) on a file in it, which the kernel
drops when the holder exits, however it exits (a SIGKILL included): a directory is never left
locked by a run that is gone, and a second run on a directory in use is refused at once instead
of starting a second etcd on the first one's data. The lock file holds the holder's PID, to
name it.

An earlier run's directory (its events file or its nodes' folder) is taken again only on
request: `set_aside` moves what that run recorded into `earlier-<n>/` and keeps its
checkpoints, so that the job resumes from them and the new records are this run's alone.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from lab.vocab.errors import Refused

LOCK_FILE = ".lock"
# What a local run (lab.local.target.LocalTarget) writes first, in every run.
EVENTS_FILE = "events.jsonl"
NODES_DIR = "nodes"
CHECKPOINTS_DIR = "checkpoints"
EARLIER_PREFIX = "earlier-"


class WorkdirInUse(Refused):
    """Another run holds the work directory; the message names its PID."""


def in_use_message(workdir: Path, pid: int | None) -> str:
    by = f"pid {pid}" if pid else "a process that did not say its pid"
    return (
        f"workdir={str(workdir)!r} is in use by another local run ({by}): expected a folder no run is using "
        f"(wait for that run, stop it with `elastic-lab teardown --local {workdir}`, or choose another folder)"
    )


def holder(workdir: Path) -> int | None:
    """The PID of the run that holds `workdir` (0 when it holds it without saying), None when
    no run does."""
    try:
        with open(workdir / LOCK_FILE, "rb") as lock:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = lock.read(32).decode(errors="replace").strip()
                return int(text) if text.isdigit() else 0
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
            return None
    except (FileNotFoundError, NotADirectoryError):
        return None


class WorkdirLock:
    """The work directory held for one run: `acquire()` before anything starts (WorkdirInUse
    when another run holds it), `release()` when the run is over."""

    def __init__(self, workdir: Path) -> None:
        self.path = workdir / LOCK_FILE
        self._file: IO[bytes] | None = None

    def acquire(self) -> None:
        lock = open(self.path, "a+b")  # noqa: SIM115 - held open for the run's whole life
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise WorkdirInUse(in_use_message(self.path.parent, holder(self.path.parent))) from None
        lock.truncate(0)
        lock.write(str(os.getpid()).encode())
        lock.flush()
        self._file = lock

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # the lock goes with the file; the file stays (removing it would race)
            self._file = None


def is_earlier_run(workdir: Path) -> bool:
    """Whether `workdir` holds what a local run recorded, or kept of it when set aside."""
    return (
        (workdir / EVENTS_FILE).is_file()
        or (workdir / NODES_DIR).is_dir()
        or (workdir / CHECKPOINTS_DIR).is_dir()
        or any(name.startswith(EARLIER_PREFIX) for name in other_entries(workdir))
    )


def other_entries(workdir: Path) -> list[str]:
    """What `workdir` holds besides a lock file, sorted (none for a new or empty folder)."""
    try:
        return sorted(entry.name for entry in workdir.iterdir() if entry.name != LOCK_FILE)
    except (FileNotFoundError, NotADirectoryError):
        return []


def set_aside(workdir: Path) -> Path | None:
    """Move an earlier run's records (everything but its checkpoints, the records set aside
    before, and the lock file) into a new `earlier-<n>/`; the folder, or None when nothing
    needed moving."""
    keep = {CHECKPOINTS_DIR, LOCK_FILE}
    moving = [name for name in other_entries(workdir) if name not in keep and not name.startswith(EARLIER_PREFIX)]
    if not moving:
        return None
    n = 1
    while (workdir / f"{EARLIER_PREFIX}{n}").exists():
        n += 1
    aside = workdir / f"{EARLIER_PREFIX}{n}"
    aside.mkdir()
    for name in moving:
        (workdir / name).rename(aside / name)
    return aside

"""Thread dumps on request (every thread's Python call stack): a node's agent and workers each register a file under the
directory `ENV_THREAD_DUMPS` names, and write every thread's stack there when `DUMP_SIGNAL`
reaches them. The drill asks before it kills a job that ran out of time, and names where each
process was (a worker hung in a collective, an agent held in a barrier)."""

from __future__ import annotations

import re
import signal

ENV_THREAD_DUMPS = "LAB_THREAD_DUMPS"
# SIGUSR1 is the cluster schedulers' usual notice to a job (Slurm's --signal): left to scripts.
DUMP_SIGNAL = signal.SIGUSR2

AGENT = "agent"
WORKER = "worker"

_FILE_NAME = re.compile(r"^(?P<role>[a-z]+)-(?P<pid>\d+)\.txt$")


def dump_file_name(role: str, pid: int) -> str:
    """The file a process of `role` with `pid` writes its thread dump to."""
    return f"{role}-{pid}.txt"


def read_dump_file_name(name: str) -> tuple[str, int] | None:
    """(role, pid) of a dump file's name; None for any other file."""
    found = _FILE_NAME.match(name)
    return (found["role"], int(found["pid"])) if found else None

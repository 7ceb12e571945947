"""Emitting the training script's events (names, fields and format: lab.vocab.events).

They go to the file named by $LAB_EVENTS_FILE (appended with one write per line, so lines
from concurrent workers do not interleave), or to stdout when it is unset (a cluster's logs).
Human-readable logs go to stderr through `logging` and stay separate.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from lab.vocab.events import IDENTITY_FIELDS, Event, to_line
from lab.vocab.job import ENV_EVENTS_FILE


def _identity() -> dict[str, Any]:
    """Who emits: the process and its torchrun identity. Read on every event: a worker forked
    from a warm server (lab.runtime.warm) gets its rank and round in the environment after
    this module was imported."""
    out: dict[str, Any] = {"pid": os.getpid()}
    for env, key in IDENTITY_FIELDS.items():
        value = os.environ.get(env)
        if value is not None:
            out[key] = int(value) if value.isdigit() else value
    return out


def emit(event: Event | str, *, sink: str | Path | None = None, **fields: Any) -> dict[str, Any]:
    """Record one event; `sink` (a file) overrides $LAB_EVENTS_FILE. A user's script may
    emit names of its own: readers skip what they do not know."""
    record = {"t": round(time.time(), 4), "event": str(event), **_identity(), **fields}
    line = to_line(record)
    path = sink or os.environ.get(ENV_EVENTS_FILE)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    else:
        sys.stdout.buffer.write(line)
        sys.stdout.flush()
    return record

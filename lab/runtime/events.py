"""Structured JSON-lines events: what the training script did, for the drill to measure.

Each event is one JSON object on one line: {"t": unix time, "event": name, ...fields}.
They go to the file named by $LAB_EVENTS_FILE (appended with one write per line, so lines
from concurrent workers do not interleave), or to stdout when it is unset (a cluster's logs).
Human-readable logs go to stderr through `logging` and stay separate.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lab.vocab.job import ENV_EVENTS_FILE, ENV_K8S_NODE, ENV_NODE

# Fields describing the emitting process, read once from torchrun's environment.
_IDENTITY_KEYS = {
    "RANK": "rank",
    "WORLD_SIZE": "world_size",
    "GROUP_RANK": "group_rank",
    "TORCHELASTIC_RESTART_COUNT": "restart_count",
    ENV_NODE: "node",  # the local target's node, a cluster's worker pod
    ENV_K8S_NODE: "k8s_node",  # a cluster's node (the machine)
    "MASTER_PORT": "round",  # torchrun picks a new master port for every rendezvous round
}


def _identity() -> dict[str, Any]:
    out: dict[str, Any] = {"pid": os.getpid()}
    for env, key in _IDENTITY_KEYS.items():
        value = os.environ.get(env)
        if value is not None:
            out[key] = int(value) if value.isdigit() else value
    return out


def emit(event: str, *, sink: str | Path | None = None, **fields: Any) -> dict[str, Any]:
    """Record one event; `sink` (a file) overrides $LAB_EVENTS_FILE (the drill records its own)."""
    # Read on every event: a worker forked from a warm server (lab.runtime.warm) gets its rank and
    # round in the environment after this module was imported.
    record = {"t": round(time.time(), 4), "event": event, **_identity(), **fields}
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
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


def read(path: str | Path) -> list[dict[str, Any]]:
    """All well-formed events of a file, in time order; a torn last line is skipped."""
    return sorted(iter_events(path), key=lambda e: e["t"])


def iter_events(path: str | Path) -> Iterator[dict[str, Any]]:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return
    for line in text.splitlines():
        record = parse_line(line)
        if record is not None:
            yield record


def parse_line(line: str) -> dict[str, Any] | None:
    """The event on one line (a file's, or a pod log's), or None for any other line."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(record, dict) and "event" in record and "t" in record:
        return record
    return None


class Tail:
    """Reads the events appended to a file since the last call (for live progress)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._offset = 0
        self._partial = b""

    def poll(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for the next poll
        out = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "event" in record:
                out.append(record)
        return out

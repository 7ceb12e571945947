"""What an elastic job has lived through, for its derived checkpoint interval: how many nodes it
lost, in how many seconds.

Every start of the job's workers (the first, and each restart after a node left or joined)
appends one small record beside the checkpoints: when, at how many nodes, and the counts so
far. A start at fewer nodes than the start before it lost the difference. Rank 0 reads and
writes it; the other ranks learn the counts when the ranks agree on the interval.

A record is a new object each time (write-once storage, such as an S3 mount, cannot overwrite
one); the newest few are kept. A job that starts fresh (no checkpoint to resume) starts new
counts. A job stopped and started again whole, at its full size, counts no eviction: only a
start at fewer nodes says a node was lost.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass

from lab.runtime.object_store import ObjectStore

PREFIX = "job-history/"
RECORD = "start.json"
KEEP = 5


@dataclass(frozen=True)
class Start:
    t: float  # Unix seconds
    nodes: int
    evictions: int  # nodes lost since the job's first start
    trained_s: float  # seconds from the job's first start to this one


def _key(t: float) -> str:
    """A record's key: a folder of its own (a local directory's pruning removes folders)."""
    return f"{PREFIX}{int(t * 1e6):020d}-{os.getpid()}/{RECORD}"


def _records(store: ObjectStore) -> list[str]:
    """The records' keys, oldest first (a write in flight, or its temporary file, is none)."""
    return sorted(key for key in store.sizes(PREFIX) if key.endswith("/" + RECORD))


def record_start(store: ObjectStore, nodes: int, resumed: bool, now: float | None = None) -> Start:
    """This start's record, written after the newest one (if the job resumed)."""
    now = time.time() if now is None else now
    keys = _records(store)
    previous = _read(store, keys[-1]) if keys and resumed else None
    if previous is None:
        start = Start(now, nodes, 0, 0.0)
    else:
        start = Start(
            now,
            nodes,
            previous.evictions + max(0, previous.nodes - nodes),
            previous.trained_s + max(0.0, now - previous.t),
        )
    key = _key(now)
    store.put(key, json.dumps(asdict(start)).encode())
    for old in [*keys, key][:-KEEP]:
        store.delete_prefix(old.rpartition("/")[0])
    return start


def _read(store: ObjectStore, key: str) -> Start | None:
    """A record, or None when it cannot be read (a torn write: the counts start again)."""
    try:
        values = json.loads(store.get(key))
        return Start(float(values["t"]), int(values["nodes"]), int(values["evictions"]), float(values["trained_s"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None

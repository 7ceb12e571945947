"""One JSON object per line for each action of the handler, on stdout (the pod's log).

    {"time": "2026-03-22T10:04:05.123Z", "t": 1774173845.123, "event": "eviction_asked", ...}

Lines are written whole under a lock: evictions log from several threads at once. Nothing
logged comes from the Kubernetes configuration, so no token can reach the log.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

Log = Callable[..., None]


class JsonLog:
    def __init__(self, stream: TextIO | None = None, clock: Callable[[], float] = time.time) -> None:
        self._stream = stream
        self._clock = clock
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields: Any) -> None:
        now = self._clock()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
        line = json.dumps({"time": stamp, "t": round(now, 3), "event": event, **fields}, default=str)
        stream = self._stream or sys.stdout
        with self._lock:
            stream.write(line + "\n")
            stream.flush()

"""What the torchrun agents' own logs show (for scripts that emit none of our events):
rendezvous rounds with their world size and restart count, and worker-group completion."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

# glog-style prefix torch elastic writes: I1122 04:24:35.127000 <pid> <file>:<line>] message
_LINE = re.compile(r"^([IWE])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?) +\d+ \S+\] ?(.*)$")
_FIELD = re.compile(r"^\s*(restart_count|group_world_size|group_rank)=(\d+)")


@dataclass(frozen=True)
class AgentEvent:
    t: float
    node: str
    kind: str  # "rendezvous" | "group_failed" | "group_succeeded"
    restart_count: int | None = None
    group_world_size: int | None = None


def _epoch(month: str, day: str, hh: str, mm: str, ss: str, year: int) -> float:
    whole, _, frac = ss.partition(".")
    base = time.mktime((year, int(month), int(day), int(hh), int(mm), int(whole), 0, 0, -1))
    return base + (float("0." + frac) if frac else 0.0)


def parse_agent_log(path: Path, node: str, year: int | None = None) -> list[AgentEvent]:
    year = year or time.localtime().tm_year
    found: list[AgentEvent] = []
    pending: dict | None = None
    for raw in path.read_text(errors="replace").splitlines():
        m = _LINE.match(raw)
        if not m:
            continue
        t = _epoch(m.group(2), m.group(3), m.group(4), m.group(5), m.group(6), year)
        msg = m.group(7)
        if "Rendezvous complete for workers" in msg:
            pending = {"t": t}
        elif pending is not None and (f := _FIELD.match(msg)):
            pending[f.group(1)] = int(f.group(2))
            if "restart_count" in pending and "group_world_size" in pending:
                found.append(
                    AgentEvent(pending["t"], node, "rendezvous", pending["restart_count"], pending["group_world_size"])
                )
                pending = None
        elif "Worker group FAILED" in msg:
            found.append(AgentEvent(t, node, "group_failed"))
        elif "worker group successfully finished" in msg:
            found.append(AgentEvent(t, node, "group_succeeded"))
    return found

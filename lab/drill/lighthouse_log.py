"""Why a per-step job's lighthouse left a live group out of a quorum, read from its log.

TorchFT's lighthouse logs each change of its quorum status ("... [2/2 participants healthy][3
heartbeating] ...") and each quorum it issues with its members' replica ids (a group's id
carries its process's uuid, so a restarted group has a new one). A group in one quorum, missing
from the next and back in a later one under the same id was alive all along: the lighthouse
left it out either because its heartbeats had lapsed (fewer groups heartbeating than before,
every heartbeating one asked), or because the join wait ran out while it, heartbeating, had not
asked yet (fewer participants than heartbeating groups).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

HEARTBEAT = "heartbeat"  # its heartbeats had lapsed
JOIN_WAIT = "join wait"  # it was heartbeating but asked after the join wait ran out

_STATUS = re.compile(r"^(\S+) .*Quorum status: .*\[(\d+)/\d+ participants healthy\]\[(\d+) heartbeating\]")
_QUORUM = re.compile(r"^(\S+) .*Quorum! Quorum \{ quorum_id: \d+, participants: \[(.*)\], created")
_REPLICA = re.compile(r'replica_id: "([^"]+)"')


@dataclass(frozen=True)
class LeftOut:
    """A live group the lighthouse left out of a quorum."""

    t: datetime  # when the quorum without it was issued
    group: str  # its node (the replica id's part before the uuid)
    cause: str  # HEARTBEAT or JOIN_WAIT
    # HEARTBEAT: how long fewer groups were heartbeating around it, from the log's status
    # changes (the lapse beyond the heartbeat timeout, to the lighthouse's tick)
    lapse_s: float | None = None


@dataclass
class _Status:
    t: datetime
    asked: int
    heartbeating: int


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def left_out(text: str) -> list[LeftOut]:
    """Every live group the lighthouse left out of a quorum, in the log's order."""
    statuses: list[_Status] = []
    quorums: list[tuple[datetime, list[str], _Status | None]] = []
    for line in text.splitlines():
        if m := _STATUS.match(line):
            statuses.append(_Status(_time(m[1]), int(m[2]), int(m[3])))
        elif m := _QUORUM.match(line):
            quorums.append((_time(m[1]), _REPLICA.findall(m[2]), statuses[-1] if statuses else None))
    later: dict[str, int] = {}  # replica id -> the last quorum it was in
    for i, (_, members, _) in enumerate(quorums):
        for r in members:
            later[r] = i
    out = []
    for i in range(1, len(quorums)):
        t, members, status = quorums[i]
        for r in quorums[i - 1][1]:
            if r in members or later.get(r, -1) <= i:
                continue
            if status is not None and status.asked < status.heartbeating:
                out.append(LeftOut(t, r.split(":")[0], JOIN_WAIT))
            else:
                out.append(LeftOut(t, r.split(":")[0], HEARTBEAT, _lapse(statuses, t)))
    return out


def _lapse(statuses: list[_Status], t: datetime) -> float | None:
    """How long fewer groups heartbeated around `t`: from the last drop in the count at or
    before it to the first status after it with the count back where it was."""
    before = [i for i, s in enumerate(statuses) if s.t <= t]
    drop = next(
        (i for i in reversed(before) if i > 0 and statuses[i].heartbeating < statuses[i - 1].heartbeating), None
    )
    if drop is None:
        return None
    level = statuses[drop - 1].heartbeating
    back = next((s for s in statuses[drop:] if s.t > t and s.heartbeating >= level), None)
    return None if back is None else (back.t - statuses[drop].t).total_seconds()


def read_left_out(path: Path) -> tuple[LeftOut, ...] | None:
    """`left_out` of the log at `path`; None when there is none (not a per-step job, or the
    lighthouse is not ours to read)."""
    try:
        return tuple(left_out(path.read_text(errors="replace")))
    except FileNotFoundError:
        return None

"""What the torchrun agents recorded through torch's structured elastic events (written by
lab.runtime.launch, see LAB_AGENT_EVENTS), for scripts that emit none of our events: rendezvous rounds
with their world size and restart count, worker starts, and each agent's final result."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

_PREFIX = "torchelastic.worker.status."


@dataclass(frozen=True)
class AgentEvent:
    t: float
    node: str
    # "rendezvous": the agent completed a rendezvous round;
    # "started": it started that round's workers (local rank 0's start);
    # "group_succeeded": its last worker group finished (exit 0);
    # "group_failed": a worker of it failed, or the agent itself did.
    kind: str
    restart_count: int | None = None
    group_world_size: int | None = None


def _kind(source: str, state: str, local_rank: object) -> str | None:
    # The agent's own SUCCEEDED says only that its run() returned, whatever its workers did:
    # torch's launch_agent records it before it raises for failed workers ("records that
    # agent.run() has succeeded NOT that workers have succeeded", torch/distributed/launcher/api.py).
    # The workers' final states say how the group ended: each worker's SUCCEEDED or FAILED
    # (TERMINATED where its agent stopped it), recorded once the agent's run ends.
    if source == "AGENT":
        return {"RENDEZVOUS": "rendezvous", "FAILED": "group_failed"}.get(state)
    if source != "WORKER":
        return None
    if state == "FAILED":
        return "group_failed"
    if local_rank in ([0], 0):  # one event per group: its first worker's
        return {"START": "started", "SUCCEEDED": "group_succeeded"}.get(state)
    return None


def read_agent_events(path: Path, node: str) -> list[AgentEvent]:
    """The events in `path` (JSON lines; a line the agent was killed while writing is
    skipped). A round's world size is known only once its workers start, so a "rendezvous"
    event takes it from the same agent's next "started" event."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    found: list[tuple[int | None, AgentEvent]] = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
            event = rec["torch"]
            meta = event["metadata"]
            inner = json.loads(meta.get("metadata") or "{}")
            t = float(rec["t"])
        except (ValueError, KeyError, TypeError):
            continue
        name = str(event.get("name", ""))
        state = meta.get("state") or name.removeprefix(_PREFIX)
        kind = _kind(str(event.get("source")), str(state), inner.get("local_rank"))
        if kind is None:
            continue
        world = inner.get("group_world_size") if kind == "started" else None
        found.append((rec.get("pid"), AgentEvent(t, node, kind, meta.get("agent_restarts"), world)))
    events: list[AgentEvent] = []
    for i, (pid, ev) in enumerate(found):
        if ev.kind == "rendezvous":
            start = next((e for p, e in found[i + 1 :] if p == pid and e.kind in ("started", "rendezvous")), None)
            if start is not None and start.kind == "started":
                ev = replace(ev, group_world_size=start.group_world_size)
        events.append(ev)
    return events

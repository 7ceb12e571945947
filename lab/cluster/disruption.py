"""What the cluster drill saw of an eviction it asked a cloud for: when the disruption reached
the job, and which kind it was.

A cloud's eviction call returns before anything happens: Azure's simulateEviction answers 204
and evicts after a Preempt event at least 30 s later; an EKS managed node group drains a spot
node on its two-minute notice or once a replacement is Ready. Counting recovery from the call
would count that lead time as the job's. The drill counts from the first sign it saw instead:
the evicted worker leaving on a notice, its pod going from Running, a peer's collective failing,
the node leaving the Ready nodes, or the survivors restarting (the drill sees pods and nodes only
when it polls; the workers' events carry their own time). The kind is what the job went through:

- notice: the evicted worker was told (SIGTERM) and left on it;
- hard: its pod ended with no notice to the worker, before its node went;
- silent: nothing from the worker or its pod, only the node going and the peers' failures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lab.vocab.events import EXIT_NOTICE, SAVE_NOTICE, Event

Record = dict[str, Any]
# How far before its first consequence seen in the workers' events (a peer's failed collective,
# the survivors' restart) a disruption is placed: they carry the workers' clock, the drill's own
# signs come later, at its polls.
CONSEQUENCE_S = 0.001


@dataclass(frozen=True)
class Observed:
    t: float  # the first sign of the disruption
    kind: str  # notice | hard | silent
    sign: str  # what that first sign was


def observe(events: Iterable[Record], evict: Record) -> Observed | None:
    """The disruption `evict` (the drill's request) led to, from the events after it; None
    when nothing was seen."""
    requested, pod, node = evict["t"], evict.get("node"), evict.get("k8s_node")
    after = sorted((e for e in events if e["t"] >= requested and e is not evict), key=lambda e: e["t"])

    def first(match: Any) -> Record | None:
        return next((e for e in after if match(e)), None)

    notice = first(
        lambda e: (
            e.get("node") == pod
            and (
                (e["event"] == Event.EXIT and e.get("reason") == EXIT_NOTICE)
                or (e["event"] == Event.CHECKPOINT_SAVED and e.get("reason") == SAVE_NOTICE)
            )
        )
    )
    pod_left = first(lambda e: e["event"] == Event.K8S_POD and e.get("pod") == pod and e.get("phase") != "Running")
    node_gone = first(lambda e: e["event"] == Event.K8S_NODE_GONE and e.get("k8s_node") == node)
    peer_failed = first(lambda e: e["event"] == Event.COLLECTIVE_FAILED and e.get("node") != pod)
    # The drill sees pods and nodes only when it polls, the workers' events carry their own
    # time: a survivor restarting bounds a disruption the drill saw late.
    before = [e.get("world_size") for e in events if e["event"] == Event.STEP and e["t"] < requested]
    world = before[-1] if before and isinstance(before[-1], int) else None
    restarted = first(
        lambda e: (
            (e["event"] in (Event.RESUME, Event.FRESH) and e.get("node") != pod)
            or (
                e["event"] == Event.STEP
                and world is not None
                and isinstance(e.get("world_size"), int)
                and e["world_size"] < world
            )
        )
    )
    signs = {
        "the evicted worker's notice": notice,
        "its pod leaving Running": pod_left,
        "a peer's failed collective": peer_failed,
        "its node leaving the Ready nodes": node_gone,
        "the survivors' restart": restarted,
    }
    seen = {what: e for what, e in signs.items() if e is not None}
    if not seen:
        return None
    sign, earliest = min(seen.items(), key=lambda item: item[1]["t"])
    t = float(earliest["t"])
    if earliest is restarted or earliest is peer_failed:
        # A consequence of the disruption: it came before, not with it; and after the request.
        t = max(t - CONSEQUENCE_S, requested)
    if notice is not None:
        kind = "notice"
    elif pod_left is not None and (node_gone is None or pod_left["t"] <= node_gone["t"]):
        kind = "hard"
    else:
        kind = "silent"
    return Observed(t, kind, sign)


def as_observed(events: list[Record]) -> list[Record]:
    """`events` with each of the drill's eviction requests moved to the disruption it saw: `t`
    the first sign, `kind` what it was, and the request kept (`requested_t`, `backend`,
    `lead_s`: the cloud's lead time). A request nothing followed keeps its time and kind."""
    out = []
    for e in events:
        if e["event"] == Event.EVICT and e.get("source") == "drill" and "requested_t" not in e:
            seen = observe(events, e)
            if seen is not None:
                e = {
                    **e,
                    "t": seen.t,
                    "kind": seen.kind,
                    "backend": e.get("kind"),
                    "requested_t": e["t"],
                    "lead_s": round(seen.t - e["t"], 3),
                    "first_sign": seen.sign,
                }
        out.append(e)
    return sorted(out, key=lambda e: e["t"])

"""A window of a real spot trace replayed on a cluster: the cluster drill evicts, through its
backend (Azure VMSS simulateEviction, an AWS FIS experiment, a Kubernetes drain), the node of
each slot the ReplaySchedule loses, at the loss's time in the replay's (compressed) clock.

Slot i is the job's worker i (the training operator's replica index): a loss evicts the node that
worker's pod runs on at that moment. Capacity is not added by the drill: a cloud gives nodes
back when it has them (the autoscaler asks for one as soon as a worker pod is Pending), so a
slot the trace gives back is only said, and the capacity the job was offered is counted from
when the cloud did give a node back (a worker pod running on a node it did not run on before).
A slot whose worker has no running pod at its loss (the cloud has not given it back yet) loses
nothing: the trace's loss is recorded as missed.

The window's time starts when the job trained at full size (the drill's usual start). The
eviction requests go out at the losses' times; each backend's own notice follows them (AKS:
a Scheduled Events Preempt at least 30 s ahead; FIS: its template's durationBeforeInterruption;
a drain: each pod's grace period), so the schedule's notice is recorded, not imposed.

Waits go through `sleep` and `clock`, so tests replay a window on a simulated clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from lab.cluster.eviction import EvictionStarted, Node
from lab.vocab.events import Event
from lab.vocab.replay_schedule import LOST, ReplaySchedule, SlotChange


class ReplayHost(Protocol):
    """What the replay needs of the cluster drill that runs it."""

    def poll(self) -> None: ...
    def running_workers(self) -> dict[int, str]: ...  # {replica index: the node its pod runs on}
    def node_of(self, name: str) -> Node: ...
    def evict(self, node: Node) -> EvictionStarted: ...
    def emit(self, name: str, **fields: Any) -> None: ...
    def finished(self) -> bool: ...
    def nodes_added(self) -> int: ...


class ClusterReplay:
    """The losses of `schedule` played on the cluster through `host` (the drill)."""

    def __init__(
        self,
        host: ReplayHost,
        schedule: ReplaySchedule,
        poll_s: float,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.host, self.schedule, self.poll_s = host, schedule, poll_s
        self._sleep, self._clock = sleep, clock
        self.alive = 0  # the slots the cloud gives a node to, as far as the drill saw
        self.evicted: list[EvictionStarted] = []
        self._added_seen = 0

    def run(self, deadline: float) -> bool:
        """Play every change at its time from now; True once the window's end was reached with
        the job still on (False: it finished, or the drill's deadline came first)."""
        host, schedule = self.host, self.schedule
        self.alive = min(len(host.running_workers()), schedule.slots)
        self._added_seen = host.nodes_added()
        t0 = self._clock()
        self._record("start", None, None, 0.0)
        played = True
        for change in schedule.changes:
            if not self._wait_until(t0 + change.t_s, deadline):
                played = False
                break
            if change.kind == LOST:
                self._lose(change)
        if played:
            played = self._wait_until(t0 + schedule.duration_s, deadline)
        self._record("end", None, None, min(self._clock() - t0, schedule.duration_s))
        return played

    def _wait_until(self, due: float, deadline: float) -> bool:
        """Watch the cluster until `due`, counting the nodes the cloud gives back; False when the
        job finished or the drill's time ran out."""
        while True:
            self.host.poll()
            self._count_returns()
            if self.host.finished() or self._clock() > deadline:
                return False
            if self._clock() >= due:
                return True
            self._sleep(min(self.poll_s, max(due - self._clock(), 0.0)))

    def _count_returns(self) -> None:
        """A worker running on a node it did not run on before the last eviction: the cloud gave
        a slot's capacity back."""
        added = self.host.nodes_added()
        while self._added_seen < added:
            self._added_seen += 1
            self.alive = min(self.alive + 1, self.schedule.slots)
            self._record("back", None, None, None)

    def _lose(self, change: SlotChange) -> None:
        """The node of the slot's worker evicted, or the loss recorded as missed when that worker
        has no node now."""
        node = self.host.running_workers().get(change.slot)
        if node is None:
            self._record("missed", change.slot, change.notice_s, change.t_s)
            return
        started = self.host.evict(self.host.node_of(node))
        self.evicted.append(started)
        self.alive = max(self.alive - 1, 0)
        self._record(LOST, change.slot, change.notice_s, change.t_s)

    def _record(self, change: str, slot: int | None, notice_s: float | None, t_s: float | None) -> None:
        schedule = self.schedule
        fields: dict[str, Any] = {"alive": self.alive, "slots": schedule.slots, "change": change}
        if t_s is not None:
            fields["window_t"] = round(schedule.window_s[0] + t_s * schedule.speedup, 3)
        if slot is not None:
            fields["slot"] = slot
        if notice_s is not None:
            fields["notice_s"] = notice_s
        self.host.emit(Event.CAPACITY, **fields)

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
eviction requests go out at the losses' times, the slots lost at one time together (a backend
that waits for each eviction to start, as FIS's experiments do, starts them all before it waits
for any); each backend's own notice follows them (AKS: a Scheduled Events Preempt at least 30 s
ahead; FIS: its template's durationBeforeInterruption; a drain: each pod's grace period), so the
schedule's notice is recorded, not imposed. A cloud takes its time to act on a request (Azure
evicts within 30 minutes, FIS after the notice): a slot lost again while its worker still runs on
the node already asked for loses nothing more, and is recorded as missed too. A slot given back
is recorded when the drill sees its worker on a new node, with that slot and the window's time.

Waits go through `sleep` and `clock`, so tests replay a window on a simulated clock.
"""

from __future__ import annotations

import itertools
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
    def evict_all(self, nodes: list[Node]) -> list[EvictionStarted]: ...
    def emit(self, name: str, **fields: Any) -> None: ...
    def finished(self) -> bool: ...
    def nodes_added(self) -> list[str]: ...  # the node of each worker started on a new node, in order


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
        self._asked: set[tuple[str, str]] = set()  # (name, providerID) of each node asked to go
        self._added_seen = 0
        self._t0 = 0.0  # the window's start on the clock

    def run(self, deadline: float) -> bool:
        """Play every change at its time from now; True once the window's end was reached with
        the job still on (False: it finished, or the drill's deadline came first)."""
        host, schedule = self.host, self.schedule
        self.alive = min(len(host.running_workers()), schedule.slots)
        self._added_seen = len(host.nodes_added())
        self._t0 = self._clock()
        self._record("start", None, None, 0.0)
        played = True
        for t_s, together in itertools.groupby(schedule.changes, key=lambda change: change.t_s):
            if not self._wait_until(self._t0 + t_s, deadline):
                played = False
                break
            self._lose([change for change in together if change.kind == LOST])
        if played:
            played = self._wait_until(self._t0 + schedule.duration_s, deadline)
        self._record("end", None, None, min(self._clock() - self._t0, schedule.duration_s))
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
        """Each worker running on a node it did not run on before the last eviction: the cloud
        gave its slot's capacity back, recorded with that slot at the time the drill saw it."""
        added = self.host.nodes_added()[self._added_seen :]
        if not added:
            return
        slot_of = {node: slot for slot, node in self.host.running_workers().items()}
        for node in added:
            self._added_seen += 1
            self.alive = min(self.alive + 1, self.schedule.slots)
            self._record("back", slot_of.get(node), None, self._clock() - self._t0)

    def _lose(self, changes: list[SlotChange]) -> None:
        """The nodes of the slots lost at one time evicted together; a loss recorded as missed
        when its worker has no node now, or runs on a node already asked to go."""
        if not changes:
            return
        workers = self.host.running_workers()
        nodes = {c.slot: self.host.node_of(workers[c.slot]) for c in changes if c.slot in workers}
        lost = {slot: node for slot, node in nodes.items() if (node.name, node.provider_id) not in self._asked}
        going = list({(node.name, node.provider_id): node for node in lost.values()}.values())
        if going:
            self.evicted += self.host.evict_all(going)
            self._asked.update((node.name, node.provider_id) for node in going)
        for change in changes:
            if change.slot in lost:
                self.alive = max(self.alive - 1, 0)
            self._record(LOST if change.slot in lost else "missed", change.slot, change.notice_s, change.t_s)

    def _record(self, change: str, slot: int | None, notice_s: float | None, t_s: float) -> None:
        """A capacity record: `t_s` seconds into the window, as the trace's own seconds."""
        self.host.emit(Event.CAPACITY, **self.schedule.capacity_fields(self.alive, change, t_s, slot, notice_s))

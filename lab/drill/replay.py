"""A window of a real spot trace replayed on the local target: the drill's nodes are lost and
capacity comes back exactly as its ReplaySchedule says, several nodes at once and the whole
pool included.

The window's time starts when the job first trains. A lost slot's node gets the schedule's
notice (SIGTERM, then SIGKILL when it runs out, at the loss's time) or, with none, the drill's
no-notice fault at the loss's time (SIGKILL, or SIGSTOP of its whole tree: a VM gone without a
word). A slot given back gets a new node once
the pool has room (a noticed node still saving holds its place, as it would hold its VM). When
the window ends every slot is given back, so that the job can finish; its goodput is counted
over the window only (lab.drill.replay_goodput).

Restart-everything, the baseline without elasticity, replays the same capacity another way: a
job of fixed size stops every node at each loss (a noticed loss gives every node that notice: the
whole job goes at its time; without one, the other nodes are killed with the lost one, as a
fixed-size job's survivors have nothing to save from once a peer is gone), and is started again
at full size, from its checkpoint, once every slot is back. The capacity records are the same
either way: the bound is the capacity offered, not the nodes the job chose to run.
"""

from __future__ import annotations

import time
from typing import Protocol

from lab.local import LocalTarget, LocalTargetError
from lab.local.target import Agent
from lab.vocab.events import Event
from lab.vocab.job import JobSpec
from lab.vocab.replay_schedule import LOST, ReplaySchedule, SlotChange

# How often the replay looks at the job while it waits for the next change.
TICK_S = 0.05
# The cause of a node that restart-everything stopped with a lost one (lab.local.LocalTarget.evict).
RESTART_CAUSE = "restart-everything"


def knowing_the_windows_rate(spec: JobSpec, replay: ReplaySchedule | None) -> JobSpec:
    """The job a replay runs knows its window's rate of evictions, as a job on a pool with a
    record knows the pool's, unless it was given one: a derived interval starts from it."""
    if replay is None or spec.eviction_mtbf_s is not None:
        return spec
    mtbf = replay.mean_s_between_losses()
    return spec if mtbf is None else spec.replace(eviction_mtbf_s=round(mtbf, 3))


class ReplayHost(Protocol):
    """What the replay needs of the drill that runs it."""

    local: LocalTarget

    def pump(self, phase: str) -> None: ...
    def done(self) -> bool: ...
    def remaining(self) -> float: ...
    def first_step_seen(self) -> bool: ...


class Replay:
    def __init__(
        self, host: ReplayHost, schedule: ReplaySchedule, no_notice: str, *, restart_everything: bool = False
    ) -> None:
        self.host, self.schedule, self.no_notice = host, schedule, no_notice
        self.restart_everything = restart_everything
        self.offered: set[int] = set(schedule.alive_at_start)  # the slots the capacity offers now
        self.slots: dict[int, Agent] = {}  # the slots with a node of the job
        self.restarts = 0
        self.rdzv_id = host.local.spec.rdzv_id  # the job's first; each restart's is named from it

    def start_nodes(self) -> None:
        """A node for every slot alive when the window starts (restart-everything: only when
        every slot is)."""
        if self.restart_everything and len(self.offered) < self.schedule.slots:
            return
        for slot in sorted(self.schedule.alive_at_start):
            self.slots[slot] = self.host.local.add_node()

    def run(self) -> None:
        """Wait for the job's first step (none to wait for when the window starts with no node),
        then play the window's changes at their times, and give every slot back at its end."""
        host, schedule = self.host, self.schedule
        deadline = time.monotonic() + host.remaining()
        # A window that starts with no capacity starts once a node can start at once (the
        # nodes' forker imports torch first): its first slot given back starts the job.
        if not self.slots:
            host.local.ready_to_add(host.remaining())
        while self.slots and not host.first_step_seen():
            if host.done() or time.monotonic() > deadline or not host.local.alive_nodes:
                return
            host.pump("warming up")
            time.sleep(TICK_S)
        t0 = time.monotonic()
        self._record("start", None, None, 0.0)
        played = self._play(t0, deadline)
        # The window's end, or the job's if it finished first: the goodput counts up to here.
        self._record("end", None, None, min(time.monotonic() - t0, schedule.duration_s))
        if played:
            for slot in sorted(set(range(schedule.slots)) - self.offered):
                self._give_back(slot, deadline)

    def _play(self, t0: float, deadline: float) -> bool:
        """Each change at its time; True once the window's end was reached with the job on. A
        slot lost with a notice is gone at its change's time: its notice starts that much
        earlier (lab.vocab.trace_schedule keeps it after the window's start and the slot's
        last node's arrival)."""
        for at, kind, change in self._actions():
            if not self._wait_until(t0 + at, deadline):
                return False
            if kind == "notice":
                self._lose(change, change.t_s - at)
                continue
            if change.kind == LOST:
                if change.notice_s is None:
                    self._lose(change, None)
                self.offered.discard(change.slot)
                self.slots.pop(change.slot, None)
                if self.restart_everything:
                    self.slots.clear()
            else:
                self._give_back(change.slot, deadline)
            self._record(change.kind, change.slot, change.notice_s, change.t_s)
        return self._wait_until(t0 + self.schedule.duration_s, deadline)

    def _actions(self) -> list[tuple[float, str, SlotChange]]:
        """(when, what, change) in time order: each change, and before a loss with notice its
        notice; at one time, notices before changes and changes in the schedule's order."""
        actions = [(c.t_s, "change", i, c) for i, c in enumerate(self.schedule.changes)]
        actions += [
            (max(c.t_s - c.notice_s, 0.0), "notice", i, c)
            for i, c in enumerate(self.schedule.changes)
            if c.kind == LOST and c.notice_s is not None
        ]
        actions.sort(key=lambda a: (a[0], a[1] != "notice", a[2]))
        return [(at, kind, c) for at, kind, _, c in actions]

    def _wait_until(self, due: float, deadline: float) -> bool:
        """Watch the job until `due`; False when it finished or the drill's time ran out."""
        host = self.host
        phase = "replaying" if self.slots else "replaying: no capacity"
        while time.monotonic() < due:
            if host.done() or time.monotonic() > deadline:
                return False
            host.pump(phase)
            time.sleep(min(TICK_S, max(due - time.monotonic(), 0.0)))
        return not host.done()

    def _lose(self, change: SlotChange, notice_s: float | None) -> None:
        """The slot's node evicted: with `notice_s` of notice, until the change's time (its
        slot counts as alive until then), or without, at once. Restart-everything stops the
        other nodes with it: with the same notice, or at once (SIGKILL)."""
        node = self.slots.get(change.slot)
        if node is None or not node.alive:
            return
        if notice_s is not None:
            self._evict(node, max(notice_s, 0.01))
        else:
            self._evict(node, None, silent=self.no_notice == "silent")
        if self.restart_everything:
            for other in [n for slot, n in sorted(self.slots.items()) if slot != change.slot and n.alive]:
                self._evict(other, None if notice_s is None else max(notice_s, 0.01), cause=RESTART_CAUSE)

    def _evict(self, node: Agent, notice_s: float | None, *, silent: bool = False, cause: str | None = None) -> None:
        try:
            # A trace's notice rule gives each notice its length, which the clouds' notices say
            # (AWS's instance-action time, Azure's NotBefore, GCP's fixed 30 s): the job may
            # train on through it.
            self.host.local.evict(node, notice_s, silent=silent, cause=cause, says_when=notice_s is not None)
        except LocalTargetError:
            pass  # it exited between the look and the eviction (its job just finished)

    def _give_back(self, slot: int, deadline: float) -> None:
        """Capacity back in `slot`: a new node there, once a node still leaving has made room
        for it. Restart-everything starts the whole job again, on every slot, once all are
        back."""
        self.offered.add(slot)
        if not self.restart_everything:
            self._add_node(slot, deadline)
        elif len(self.offered) == self.schedule.slots and not self.slots:
            self._restart(deadline)

    def _restart(self, deadline: float) -> None:
        """The job started again at full size under a rendezvous of its own (the stopped
        nodes' round left nothing to join): it resumes from its newest checkpoint."""
        local = self.host.local
        self.restarts += 1
        local.spec = local.spec.replace(rdzv_id=f"{self.rdzv_id}-restart-{self.restarts}")
        for slot in sorted(self.offered):
            self._add_node(slot, deadline)

    def _add_node(self, slot: int, deadline: float) -> None:
        local, host = self.host.local, self.host
        while len(local.alive_nodes) >= local.spec.max_nodes:
            if host.done() or time.monotonic() > deadline:
                return
            host.pump("replaying: waiting for a node to leave")
            time.sleep(TICK_S)
        if not host.done():
            self.slots[slot] = local.add_node()

    def _record(self, change: str, slot: int | None, notice_s: float | None, t_s: float) -> None:
        fields = self.schedule.capacity_fields(len(self.offered), change, t_s, slot, notice_s)
        self.host.local.record(Event.CAPACITY, **fields)

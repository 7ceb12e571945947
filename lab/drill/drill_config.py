"""A drill on the local target, as asked: the job, its nodes, the fault and its timings, and
every bad value among them (refused before anything starts)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from lab.vocab.job import JobSpec
from lab.vocab.problems import InvalidInput, Problem, Problems
from lab.vocab.replay_schedule import ReplaySchedule

FAULTS = ("node", "rendezvous-restart", "scale", "trace", "reclaim")
# A scale-in's grace: the node's workers save and leave within it (a pod deleted by a scale-in gets
# its terminationGracePeriodSeconds; the platform keeps it under the eviction notice).
SCALE_IN_GRACE_S = 25.0
EVICTIONS = ("hard", "notice", "silent")
# A reclaim's grace unless the drill says otherwise: the worker pods' terminationGracePeriodSeconds
# (the job chart's), which a preemption by another team's pod gives them.
RECLAIM_GRACE_S = SCALE_IN_GRACE_S
# After a reclaim (at a quarter of the job's steps) the job trains on through the borrowed nodes'
# grace and the capacity kept, then for the nodes to come back, join and train at full size.
RECLAIM_REJOIN_S = 20.0
# A step's floor where its simulated compute is less (the demo model's own work on this machine).
STEP_FLOOR_S = 0.01


def reclaim_steps(step_time_s: float, grace_s: float | None, reclaim_for_s: float, least: int) -> int:
    """Steps a demo job needs (at least `least`) for a reclaim at a quarter of them to play out,
    counted at the step's simulated compute: a real step takes longer, which only adds room."""
    after_s = (grace_s or 0.0) + reclaim_for_s + RECLAIM_REJOIN_S
    return max(least, math.ceil(after_s / max(step_time_s, STEP_FLOOR_S) * 4 / 3))


@dataclass(frozen=True)
class DrillConfig:
    """One drill: start `nodes` nodes, evict one after warm-up, optionally add one back.

    spec: the job (its min/max nodes, rendezvous, checkpoints, script).
    fault: "node" (evict a node) or "rendezvous-restart": after warm-up the rendezvous server
      is stopped for `outage_s` seconds and started again at the same address (etcd keeps its
      data), as an etcd pod restarts on an upgrade; then a node is evicted and one added as
      usual, to show the restarted server still runs the rendezvous. With
      `outage_keeps_data=False` etcd comes back empty, as a rescheduled etcd pod does. Or
      "scale": no fault; after warm-up the job is made to run at each of `scale_to` nodes in
      turn, as `elastic-lab scale` does on a cluster: nodes added (joins), or the newest ones
      told to leave (SIGTERM with SCALE_IN_GRACE_S to save and go, as a deleted pod), each size
      held until the job trains at it. Or "reclaim": the job's borrowed nodes (its
      `burst_nodes`, started last) are taken back together by their owners' work, as a
      preemption does on a cluster: each told to go with `reclaim_grace_s` (the pod's grace
      period: the node says when it goes, and its workers train on through it), or killed
      without one (None); once the job trains at its core the capacity stays taken for
      `reclaim_for_s`, then as many nodes join again.
    target_steps: the step the job must reach (None for a script without our events).
    eviction: "hard" (SIGKILL), "notice" (SIGTERM, SIGKILL after notice_s) or "silent"
      (SIGSTOP: the node vanishes with its sockets open, as a VM taken back without a word).
    evict_at_step: evict once rank 0 reports this step; scripts without our events are
      evicted `evict_after_s` seconds after every node's workers started at full size instead.
    scale_out_after_s: add a node back this many seconds after the job recovered (None: never).
    replacement_rank, replacement_capacity: the GPU capacity the node added back stands for:
      a capacity fault is a replacement that comes late (a long `scale_out_after_s`: no spot
      capacity at rank 1 until the autoscaler gave up on it) from a fallback rank; the report
      shows the job at reduced size meanwhile and its goodput.
    baselines: after the drill, run the same job this many times more without any fault, each
      drawing samples in another order, and compare the losses (lab.drill.convergence).
    """

    spec: JobSpec
    workdir: Path
    nodes: int = 3
    fault: str = "node"
    outage_s: float = 3.0
    outage_keeps_data: bool = True
    target_steps: int | None = None
    eviction: str = "hard"
    notice_s: float = 30.0
    evict_at_step: int = 60
    evict_after_s: float = 10.0
    victim: int = -1
    scale_out_after_s: float | None = 2.0
    timeout_s: float = 240.0
    agent_log_level: str = "INFO"
    etcd_binary: str | None = None
    baselines: int = 0
    scale_to: tuple[int, ...] = ()
    replacement_rank: int | None = None
    replacement_capacity: str | None = None
    # Findings on a script of one's own that the user accepts (lab.drill.findings): in the
    # report as accepted, not failing the drill.
    accept: tuple[str, ...] = ()
    # fault "trace": the window of a real spot trace to replay (lab.drill.replay); `nodes` is
    # its slots, and `eviction` what a loss with no notice is (hard or silent).
    replay: ReplaySchedule | None = None
    # ... replayed by restart-everything instead: every node stopped at each loss, the job
    # started again at full size once every slot is back (lab.drill.replay).
    restart_everything: bool = False
    # fault "reclaim": the borrowed nodes' grace period (None: none) and how long their owners
    # keep the capacity.
    reclaim_grace_s: float | None = RECLAIM_GRACE_S
    reclaim_for_s: float = 5.0

    def validate(self) -> None:
        """Every bad value at once (InvalidInput), before anything is started."""
        problems = drill_problems(
            self.spec,
            fault=self.fault,
            outage_s=self.outage_s,
            nodes=self.nodes,
            eviction=self.eviction,
            notice_s=self.notice_s,
            evict_at_step=self.evict_at_step,
            target_steps=self.target_steps,
            victim=self.victim,
            scale_to=self.scale_to,
        )
        if self.fault != "trace":
            problems.extend(
                [Problem("replay", self.replay.source, "none without fault 'trace'")] if self.replay else []
            )
            if self.restart_everything:
                problems.append(Problem("restart_everything", True, "False without fault 'trace'"))
        elif self.replay is None:
            problems.append(Problem("replay", None, "a trace window to replay with fault 'trace'"))
        else:
            problems.extend(replay_problems(self.spec, self.nodes, self.eviction, self.replay, self.timeout_s))
            if self.restart_everything:
                problems.extend(restart_everything_problems(self.spec, self.replay))
        problems.extend(reclaim_problems(self.spec, self.fault, self.nodes, self.reclaim_grace_s, self.reclaim_for_s))
        if self.baselines and self.target_steps is None:
            problems.append(
                Problem(
                    "baselines", self.baselines, "0 for a script of your own: runs are compared by their step events"
                )
            )
        elif not 0 <= self.baselines <= 5:
            problems.append(Problem("baselines", self.baselines, "0..5 uninterrupted runs to compare with"))
        if problems:
            raise InvalidInput(problems)


def reclaim_problems(
    spec: JobSpec | None, fault: str, nodes: int, grace_s: float | None, for_s: float
) -> list[Problem]:
    """A reclaim takes the job's borrowed nodes back: the job has some and starts with all of
    them; the grace period and the time the owners keep the capacity are seconds."""
    found = Problems()
    if grace_s is not None and not (_seconds(grace_s) and 0 < grace_s <= 600):
        found.add("reclaim_grace_s", grace_s, "seconds in (0, 600], or none: taken back without a grace period")
    if not (_seconds(for_s) and 0 <= for_s <= 3600):
        found.add("reclaim_for_s", for_s, "seconds in [0, 3600] that the owners keep their capacity")
    if fault != "reclaim" or spec is None:
        return found.items
    if spec.burst_nodes < 1:
        found.add("burst_nodes", spec.burst_nodes, "at least 1 with fault 'reclaim': the nodes taken back")
    elif nodes != spec.max_nodes:
        found.add(
            "nodes", nodes, f"max_nodes ({spec.max_nodes}) with fault 'reclaim': the core and every borrowed node"
        )
    return found.items


def _seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def restart_everything_problems(spec: JobSpec, replay: ReplaySchedule) -> list[Problem]:
    """Restart-everything is a job of fixed size (elastic fault tolerance with min_nodes at the
    window's slots), and its window starts with every slot alive (it waits for all of them)."""
    found = Problems()
    if spec.per_step_mode:
        found.add("fault_tolerance", spec.fault_tolerance.value, "elastic with restart_everything")
    if spec.min_nodes != replay.slots:
        found.add("min_nodes", spec.min_nodes, f"the replayed window's slots ({replay.slots}) with restart_everything")
    if len(replay.alive_at_start) != replay.slots:
        found.add(
            "replay",
            replay.source,
            f"a window that starts with all {replay.slots} slots alive with restart_everything "
            f"(it starts with {len(replay.alive_at_start)})",
        )
    return found.items


def drill_problems(
    spec: JobSpec | None,
    *,
    fault: str = "node",
    outage_s: float = 3.0,
    nodes: int,
    eviction: str,
    notice_s: float,
    evict_at_step: int,
    target_steps: int | None,
    victim: int,
    scale_to: tuple[int, ...] = (),
) -> list[Problem]:
    """The drill's own bad values; those measured against the job's node range only when
    there is a valid `spec`."""
    found = Problems()
    if fault not in FAULTS:
        found.add("fault", fault, "one of " + ", ".join(FAULTS))
    if fault == "rendezvous-restart" and not (
        isinstance(outage_s, (int, float)) and not isinstance(outage_s, bool) and 0 < outage_s <= 600
    ):
        found.add("outage_s", outage_s, "seconds in (0, 600]")
    if nodes < 1:
        found.add("nodes", nodes, "at least 1")
    elif spec is None:
        pass
    elif nodes > spec.max_nodes:
        found.add("nodes", nodes, f"at most max_nodes={spec.max_nodes}")
    elif nodes < spec.min_nodes:
        found.add("nodes", nodes, f"at least min_nodes={spec.min_nodes}")
    elif fault not in ("scale", "trace") and nodes - 1 < spec.min_nodes:
        found.add(
            "nodes", nodes, f"at least {spec.min_nodes + 1}: evicting one must leave min_nodes={spec.min_nodes} running"
        )
    if eviction not in EVICTIONS:
        found.add("eviction", eviction, "one of " + ", ".join(EVICTIONS))
    if eviction == "notice" and not 0 < notice_s <= 600:
        found.add("notice_s", notice_s, "seconds in (0, 600]")
    if fault != "trace" and target_steps is not None and not 0 < evict_at_step < target_steps:
        found.add("evict_at_step", evict_at_step, f"1..{target_steps - 1} (before the job ends)")
    if not -nodes <= victim < nodes:
        found.add("victim", victim, f"a node index in {-nodes}..{nodes - 1}")
    found.extend(_scale_problems(spec, fault, nodes, scale_to))
    return found.items


def _scale_problems(spec: JobSpec | None, fault: str, nodes: int, scale_to: tuple[int, ...]) -> list[Problem]:
    """A scale drill's sizes: one or more, each within the job's node range and other than the
    size before it."""
    if fault != "scale":
        return [Problem("scale_to", list(scale_to), "none without fault 'scale'")] if scale_to else []
    if not scale_to:
        return [Problem("scale_to", [], "one or more node counts to scale the job to, in turn")]
    low, high = (spec.min_nodes, spec.max_nodes) if spec is not None else (1, None)
    sizes = [nodes, *scale_to]
    bad = [n for before, n in itertools.pairwise(sizes) if n == before or n < low or (high is not None and n > high)]
    if bad:
        where = f"{low}..{high}" if high is not None else f"{low} or more"
        return [
            Problem(
                "scale_to",
                list(scale_to),
                f"node counts in the job's range {where}, each other than the one before it (starting from {nodes})",
            )
        ]
    return []


def replay_problems(
    spec: JobSpec, nodes: int, eviction: str, replay: ReplaySchedule, timeout_s: float
) -> list[Problem]:
    """A trace replay's schedule against the drill: as many slots as nodes, room for them in
    the job, a loss without notice that is a kill or a vanishing, and the time to play it all:
    the replay plays each change at its time, and a drill that gives up first ends it part-way,
    the rest of its capacity never offered."""
    found = Problems()
    if not timeout_s > replay.duration_s:
        found.add(
            "timeout_s",
            timeout_s,
            f"more seconds than the replayed window's {replay.duration_s:g} s of replay (the job starts, plays the "
            "window, then trains to its end)",
        )
    if replay.slots != nodes:
        found.add("nodes", nodes, f"the replayed window's slots ({replay.slots})")
    if replay.slots > spec.max_nodes:
        found.add("max_nodes", spec.max_nodes, f"at least the replayed window's slots ({replay.slots})")
    if eviction == "notice":
        found.add("eviction", eviction, "hard or silent: what a loss without notice is (notices come from the trace)")
    return found.items

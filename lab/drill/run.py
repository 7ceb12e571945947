"""Run the eviction drill on the local target."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from lab.drill import per_step_report
from lab.drill.agent_events import AgentEvent, read_agent_events
from lab.drill.analysis import measure
from lab.drill.convergence import Curve, compare
from lab.drill.diagnosis import (
    CrashLoop,
    WorkerError,
    describe,
    deterministic,
    diagnose,
    last_unrecovered,
    worker_errors,
)
from lab.drill.drill_config import (
    EVICTIONS,
    FAULTS,
    SCALE_IN_GRACE_S,
    DrillConfig,
    drill_problems,
    reclaim_problems,
    replay_problems,
)
from lab.drill.findings import after_each_change, script_findings
from lab.drill.ledger import recording_samples
from lab.drill.lighthouse_log import read_left_out
from lab.drill.parity import parity
from lab.drill.replay import Replay, knowing_the_windows_rate
from lab.drill.report import DrillReport, StillRunning
from lab.drill.script_runs import read_positions, script_rounds
from lab.drill.thread_dumps import where
from lab.drill.verdict import Finding, LocalSeen, Observed, judged
from lab.local import LocalTarget
from lab.local.lighthouse import LIGHTHOUSE_LOG
from lab.local.target import AGENT_EVENTS, TORCHELASTIC_LOGS, Agent
from lab.local.thread_dumps import ThreadDump
from lab.vocab import events
from lab.vocab.events import CAUSE_RECLAIM, CAUSE_SCALE_IN, EXIT_DONE, Event

# What callers import from here: the drill's configuration lives in lab.drill.drill_config.
__all__ = [
    "EVICTIONS",
    "FAULTS",
    "DrillConfig",
    "Progress",
    "drill_problems",
    "reclaim_problems",
    "replay_problems",
    "run_drill",
    "run_uninterrupted",
]


class Progress:
    """A line every couple of seconds so a person sees the drill move."""

    def __init__(self, out: TextIO = sys.stderr, every_s: float = 2.0, target: int | None = None) -> None:
        self.out, self.every_s, self.target = out, every_s, target
        self.start = time.time()
        self._last = 0.0
        self.step = 0
        self.world = 0
        self.groups = 0  # per-step mode: replica groups in the last step's quorum

    def see(self, records: list[dict[str, Any]]) -> None:
        for r in records:
            if r["event"] == Event.STEP:
                self.step, self.world = r["step"], r["world_size"]
                self.groups = r.get("participants", 0)

    def say(self, phase: str, alive: int, force: bool = False) -> None:
        now = time.time()
        if not force and now - self._last < self.every_s:
            return
        self._last = now
        if self.target:
            where = f"step {self.step}/{self.target}  world {self.world}  "
        else:
            where = "(the script reports no steps)  "
        print(f"[{now - self.start:6.1f}s] {phase:<22} {where}nodes up {alive}", file=self.out, flush=True)


def _errors(local: LocalTarget) -> list[WorkerError]:
    return worker_errors((n.name, local.node_dir(n.name) / TORCHELASTIC_LOGS) for n in local.nodes)


def run_drill(cfg: DrillConfig, progress: Progress | None = None) -> DrillReport:
    """Run the drill `cfg` describes (every bad value is refused before anything starts),
    measure it and judge it (lab.drill.verdict); every process it started is stopped when it
    returns, or raises. The demo trainer records its samples for the ledger (lab.drill.ledger)."""
    cfg.validate()
    cfg = dataclasses.replace(cfg, spec=recording_samples(knowing_the_windows_rate(cfg.spec, cfg.replay)))
    progress = progress or Progress(target=cfg.target_steps)
    seen = _Drill(cfg, progress).run()
    if cfg.baselines and seen.finished and seen.local is not None:
        unfinished = compare_with_baselines(cfg, seen.report, progress)
        seen = dataclasses.replace(seen, local=dataclasses.replace(seen.local, baseline_unfinished=unfinished))
    return judged(seen)


def compare_with_baselines(cfg: DrillConfig, report: DrillReport, progress: Progress) -> tuple[int, int] | None:
    """Run the drilled job without faults: once in the drilled run's own sample order (its
    twin), then `cfg.baselines` times, each drawing its samples in another order; set the
    drilled run's loss against theirs in `report` (lab.drill.convergence, lab.drill.parity); or
    (run, of runs): an uninterrupted run that did not finish, and no comparison."""
    drilled = Curve.of(events.read(cfg.workdir / "events.jsonl"))
    curves = []
    for i, order in enumerate((None, *range(1, cfg.baselines + 1)), start=1):
        recorded = run_uninterrupted(cfg, order_seed=order, progress=progress)
        if not _done(recorded):
            return i, cfg.baselines + 1
        curves.append(Curve.of(recorded))
    twin, others = curves[0], curves[1:]
    result = compare(drilled, others)
    report.convergence = {
        **result.to_dict(),
        "parity": parity(drilled, twin, others).to_dict(),
        "curves": {
            "drilled": [list(drilled.samples), list(drilled.loss)],
            "twin": [list(twin.samples), list(twin.loss)],
            "baselines": [[list(c.samples), list(c.loss)] for c in others],
        },
    }
    return None


def run_uninterrupted(cfg: DrillConfig, *, order_seed: int | None, progress: Progress) -> list[dict[str, Any]]:
    """The drilled job on as many nodes, without any fault, its samples drawn in order
    `order_seed` (None: the drilled run's own), in a directory of its own under the drill's:
    its events."""
    name = "twin" if order_seed is None else f"baseline-{order_seed}"
    workdir = cfg.workdir / name
    order = () if order_seed is None else ("--order-seed", str(order_seed))
    spec = cfg.spec.replace(script_args=(*cfg.spec.script_args, *order), checkpoint_dir=str(workdir / "checkpoints"))
    what = "uninterrupted run, same order" if order_seed is None else f"uninterrupted run {order_seed}"
    with LocalTarget(spec, workdir, etcd_binary=cfg.etcd_binary, env={"LOGLEVEL": cfg.agent_log_level}) as local:
        for _ in range(cfg.nodes):
            local.add_node()
        progress.say(what, cfg.nodes, force=True)
        tail = events.Tail(local.events_file)

        def tick() -> None:
            progress.see(tail.poll())
            progress.say(what, len(local.alive_nodes))

        local.wait(cfg.timeout_s, on_tick=tick)
        progress.say(f"{what} done", len(local.alive_nodes), force=True)
        return local.events()


class _Drill:
    """One drill on the local target: its nodes, the events seen so far, and its phases, in
    the order `run` takes them."""

    def __init__(self, cfg: DrillConfig, progress: Progress) -> None:
        self.cfg, self.progress = cfg, progress
        # The target checks its inputs (work directory, checkpoints, script, etcd) here.
        self.local = LocalTarget(
            cfg.spec, cfg.workdir, etcd_binary=cfg.etcd_binary, env={"LOGLEVEL": cfg.agent_log_level}
        )
        self.tail = events.Tail(self.local.events_file)
        self.seen: list[dict[str, Any]] = []
        self.diagnosed_at = 0.0
        self.server_died: list[str] = []
        self.thread_dumps: list[ThreadDump] = []  # of the processes still running when the time ran out
        self.t_start = time.monotonic()

    def run(self) -> Observed:
        cfg, local = self.cfg, self.local
        stopped: CrashLoop | None = None
        timed_out = False
        try:
            with local:
                if cfg.replay is not None:
                    replay = Replay(self, cfg.replay, cfg.eviction, restart_everything=cfg.restart_everything)
                    replay.start_nodes()
                    self.progress.say("starting", len(local.alive_nodes), force=True)
                    replay.run()
                    return self.observe(None, self.train_to_the_end())
                started = [local.add_node(part=self.part_of(i)) for i in range(cfg.nodes)]
                self.progress.say("starting", cfg.nodes, force=True)
                warm = self.warm_up()
                if warm and cfg.fault == "rendezvous-restart" and local.alive_nodes and not self.done():
                    warm = self.restart_the_rendezvous()
                if cfg.fault == "reclaim":
                    if warm:
                        self.reclaim(started[cfg.spec.core_nodes :])
                elif cfg.fault == "scale":
                    for size in cfg.scale_to if warm else ():
                        if not self.scale(size):
                            break
                elif warm and started[cfg.victim].alive:
                    self.evict(started[cfg.victim])
                    if cfg.scale_out_after_s is not None:
                        self.scale_out(cfg.scale_out_after_s)
                timed_out = self.train_to_the_end()
        except CrashLoop as exc:
            stopped, timed_out = exc, False
            self.progress.say("stopped: the script fails at every start", 0, force=True)
        return self.observe(stopped, timed_out)

    # ------------------------------------------------------------------ watching the job
    def pump(self, phase: str) -> None:
        """New events and progress; once a second, the workers' error files (a script that
        fails at every start stops the drill) and the rendezvous server's health."""
        new = self.tail.poll()
        self.seen.extend(new)
        self.progress.see(new)
        self.progress.say(phase, len(self.local.alive_nodes))
        if time.monotonic() - self.diagnosed_at >= 1.0:
            self.diagnosed_at = time.monotonic()
            if stop := deterministic(_errors(self.local), self.seen, self.node_names()):
                raise stop
            if not self.server_died and (died := self.local.rendezvous_died()):
                self.server_died.append(f"{died} at {time.monotonic() - self.t_start:.1f} s, while the job ran")

    def node_names(self) -> list[str]:
        return [n.name for n in self.local.nodes]

    def wait_for(self, phase: str, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump(phase)
            if predicate():
                return True
            if not self.local.alive_nodes:
                return False
            time.sleep(0.1)
        return False

    def hold(self, phase: str, seconds: float) -> None:
        """Let the job run for `seconds` (less if it finishes), showing progress."""
        self.wait_for(phase, self.done, seconds)

    def remaining(self) -> float:
        return max(1.0, self.cfg.timeout_s - (time.monotonic() - self.t_start))

    def done(self) -> bool:
        return _done(self.seen)

    def first_step_seen(self) -> bool:
        return any(e["event"] == Event.STEP for e in self.seen)

    def going_on(self) -> bool:
        """Nodes still train and the job has not finished."""
        return bool(self.local.alive_nodes) and not self.done()

    # ---------------------------------------------------------------------- the phases
    def warm_up(self) -> bool:
        """Our script reports steps: until the eviction's step. Any other script is given
        `evict_after_s` once every node's workers run at full size (a node slow to start joins
        the job in a round of its own, and a notice before the script trains tests nothing)."""
        cfg = self.cfg
        if cfg.target_steps is not None:
            # ... and at full size: in per-step mode a quorum forms as soon as min_nodes groups
            # are up, and a group slow to start (a loaded machine) joins it later.
            spec, progress = cfg.spec, self.progress
            size = cfg.nodes if spec.per_step_mode else cfg.nodes * spec.nproc_per_node

            def ready() -> bool:
                reached = progress.groups if spec.per_step_mode else progress.world
                return progress.step >= cfg.evict_at_step and reached >= size

            return self.wait_for("warming up", ready, self.remaining())
        if not self.wait_for("warming up", lambda: _workers_at_full_size(self.local, cfg.nodes), self.remaining()):
            return False
        self.hold("warming up", cfg.evict_after_s)
        return self.going_on()

    def restart_the_rendezvous(self) -> bool:
        """The server down for `outage_s`, then back (with its data or empty): training must
        go on; then the usual eviction shows the restarted server at work."""
        local, say = self.local, self.progress.say
        local.stop_rendezvous()
        say("rendezvous server down", len(local.alive_nodes), force=True)
        self.hold("rendezvous server down", self.cfg.outage_s)
        local.start_rendezvous(keep_data=self.cfg.outage_keeps_data)
        say("rendezvous server back", len(local.alive_nodes), force=True)
        self.hold("training on", 2.0)
        return self.going_on()

    def evict(self, victim: Agent) -> None:
        cfg = self.cfg
        self.local.evict(victim, cfg.notice_s if cfg.eviction == "notice" else None, silent=cfg.eviction == "silent")
        self.progress.say(f"evicted {victim.name} ({cfg.eviction})", len(self.local.alive_nodes), force=True)

    def part_of(self, index: int) -> str | None:
        """Of a job with borrowed nodes, the part its `index`th node is: the core first."""
        spec = self.cfg.spec
        if not spec.burst_nodes:
            return None
        return "core" if index < spec.core_nodes else "burst"

    def reclaim(self, borrowed: list[Agent]) -> None:
        """The borrowed nodes taken back together by their owners' work (each told with the
        pod's grace period, or killed); once the job trains at its core the capacity stays
        taken `reclaim_for_s`, then as many borrowed nodes join again, and the job trains at
        its full size."""
        cfg, local = self.cfg, self.local
        grace = cfg.reclaim_grace_s
        for node in borrowed:
            if node.alive:
                local.evict(node, grace, cause=CAUSE_RECLAIM, says_when=grace is not None)
        how = f"a grace of {grace:g} s" if grace is not None else "no grace"
        self.progress.say(f"reclaimed {len(borrowed)} borrowed node(s), {how}", len(local.alive_nodes), force=True)
        if not self.trains_at(cfg.spec.core_nodes, "shrinking to the core"):
            return
        self.hold("at the core, the capacity taken", cfg.reclaim_for_s)
        leaving = [n for n in local.nodes if n.eviction and n.running]
        self.wait_for("the borrowed nodes leaving", lambda: not any(n.running for n in leaving), self.remaining())
        if not self.going_on():
            return
        for _ in borrowed:
            local.add_node(part="burst")
        self.progress.say("capacity free again: borrowed nodes back", len(local.alive_nodes), force=True)
        self.trains_at(cfg.nodes, "growing back")

    def trains_at(self, size: int, phase: str) -> bool:
        """Wait until the job trains at `size` nodes with none still leaving, and let it train
        there a moment; False when it never did, or finished first."""
        local, spec, progress = self.local, self.cfg.spec, self.progress
        wanted = size if spec.per_step_mode else size * spec.nproc_per_node

        def there() -> bool:
            reached = progress.groups if spec.per_step_mode else progress.world
            leaving = [n for n in local.nodes if n.eviction and n.running]
            return reached == wanted and not leaving

        if self.cfg.target_steps is None:
            trains = self.wait_for(phase, lambda: _workers_at_full_size(local, size) or self.done(), self.remaining())
        else:
            trains = self.wait_for(phase, lambda: there() or self.done(), self.remaining())
        if trains:
            self.hold(f"training at {size}", 2.0)
        return trains and self.going_on()

    def scale_out(self, after_s: float) -> None:
        """A node back, `after_s` after the job recovered, if it still trains then."""
        emits = self.cfg.target_steps is not None
        recovered = self.wait_for("recovering", lambda: _recovered(self.seen, self.local, emits), self.remaining())
        if not (recovered and self.going_on()):
            return
        self.hold("recovered", after_s)
        # The evicted node may still be leaving (a notice's save, a loaded machine): the pool
        # has room for the new one once it is gone, as a cloud's would.
        local = self.local
        self.wait_for("recovered", lambda: len(local.alive_nodes) < local.spec.max_nodes, self.remaining())
        if self.going_on() and len(local.alive_nodes) < local.spec.max_nodes:
            cfg = self.cfg
            self.local.add_node(rank=cfg.replacement_rank, capacity=cfg.replacement_capacity)
            rank = f" from rank {cfg.replacement_rank}" if cfg.replacement_rank else ""
            self.progress.say(f"node added{rank} (scale-out)", len(self.local.alive_nodes), force=True)

    def scale(self, size: int) -> bool:
        """Make the job run at `size` nodes, as `elastic-lab scale` does on a cluster: add nodes,
        or tell the newest ones to leave (a scale-in's grace to save and go); then wait until it
        trains at that size and let it train there a moment. False when it never did."""
        local = self.local
        alive = local.alive_nodes
        local.record(Event.SCALE, nodes=size, from_nodes=len(alive))
        if size > len(alive):
            for _ in range(size - len(alive)):
                local.add_node()
        else:
            for node in sorted(alive, key=lambda n: n.started_at)[size:]:
                local.evict(node, SCALE_IN_GRACE_S, cause=CAUSE_SCALE_IN)
        self.progress.say(f"scaled to {size} node(s)", len(local.alive_nodes), force=True)
        return self.trains_at(size, f"scaling to {size}")

    def train_to_the_end(self) -> bool:
        """Wait for every node to finish; True when the drill's time ran out first."""
        local = self.local
        local.wait(self.remaining(), on_tick=lambda: self.pump("training"))
        self.pump("finished")
        self.progress.say("finished" if not local.alive_nodes else "timed out", len(local.alive_nodes), force=True)
        if local.alive_nodes:
            # Before the nodes are killed: where their agents and workers were.
            self.thread_dumps = local.thread_dumps()
        return bool(local.alive_nodes)

    # ------------------------------------------------------------------------ what it saw
    def observe(self, stopped: CrashLoop | None, timed_out: bool) -> Observed:
        """The figures from the events, and what the drill saw beyond them for the verdict."""
        cfg, local = self.cfg, self.local
        recorded = local.events()
        agents = [a for n in local.nodes for a in _agent_events(local, n)]
        seen = measure(
            recorded,
            agents,
            target_steps=cfg.target_steps,
            checkpoint_every=cfg.spec.checkpoint_every_steps,
            node_exit_codes={n.name: n.exit_code for n in local.nodes},
        )
        report, script = seen.report, cfg.spec.script
        report.duration_s = time.monotonic() - self.t_start
        errors = _errors(local)
        report.worker_errors = [_worker_error(e, script) for e in errors]
        if timed_out:
            report.still_running = [
                StillRunning(d.node, d.role, d.pid, where(d.text) or "no Python frame", str(d.path))
                for d in self.thread_dumps
            ]
        report.node_local_checkpoints = _node_local_checkpoints(local)
        ending = last_unrecovered(errors, agents)
        # The agents give up on a crash loop too (lab.runtime.launch): when theirs came before
        # the drill's next look, the error files still say what it was.
        found = deterministic(errors, recorded, self.node_names()) if stopped is None else None
        return dataclasses.replace(
            seen,
            local=LocalSeen(
                fault=cfg.fault,
                # A script of one's own (whether or not it reports its steps); a per-step job's
                # groups heal from one another without loading checkpoints: no round of theirs
                # is a restart.
                script_findings=self.judge_the_script(report, recorded)
                if script is not None and not cfg.spec.per_step_mode
                else (),
                stopped=_described(stopped, script, "the drill"),
                agents_stopped=_described(found, script, "its agents"),
                unrecovered=describe(
                    ending, script, f"a worker failed so on {ending.node}, and its node started no workers after it"
                )
                if ending is not None
                else None,
                failures=len(errors),
                timed_out_s=cfg.timeout_s if timed_out else None,
                rendezvous_died=tuple(self.server_died),
                left_out=read_left_out(local.workdir / LIGHTHOUSE_LOG) if cfg.spec.per_step_mode else None,
            ),
        )

    def judge_the_script(self, report: DrillReport, recorded: list[dict[str, Any]]) -> tuple[Finding, ...]:
        """A script of one's own, by what its workers did: its findings (lab.drill.findings), the
        accepted ones marked; and what its workers did after each membership change, in `report`."""
        local = self.local
        rounds = script_rounds(recorded, local.spec.nproc_per_node)
        read_positions(rounds, {n.name: local.node_dir(n.name) / TORCHELASTIC_LOGS for n in local.nodes})
        found = script_findings(
            rounds, recorded, report.evictions, workdir=str(local.workdir), accepted=self.cfg.accept
        )
        report.script_rounds = after_each_change(rounds, recorded, str(local.workdir))
        return tuple(found)


def _described(loop: CrashLoop | None, script: str | None, who: str) -> str | None:
    """A crash loop in the script's terms, and who stopped the job on it."""
    return describe(loop.error, script, f"{loop.how}: {who} stopped the job") if loop is not None else None


def _worker_error(e: WorkerError, script: str | None) -> dict[str, Any]:
    return {
        "node": e.node,
        "round": e.round,
        "attempt": e.attempt,
        "message": e.message,
        "cause": diagnose(e, script).cause,
        "hint": e.hint,
    }


def _done(seen: list[dict[str, Any]]) -> bool:
    return any(e["event"] == Event.EXIT and e.get("reason") == EXIT_DONE for e in seen)


def _recovered(seen: list[dict[str, Any]], local: LocalTarget, emits: bool) -> bool:
    evict = max((e for e in seen if e["event"] == Event.EVICT), key=lambda e: e["t"])
    evict_t = evict["t"]
    if emits and local.spec.per_step_mode:
        return per_step_report.survivors_step(seen, evict_t, evict["node"]) is not None
    if emits:
        resumed = [e["t"] for e in seen if e["event"] in (Event.RESUME, Event.FRESH) and e["t"] > evict_t]
        return any(e["event"] == Event.STEP and resumed and e["t"] > min(resumed) for e in seen)
    return any(a.kind == "started" and a.t > evict_t for n in local.alive_nodes for a in _agent_events(local, n))


# What torch.save / torch.distributed.checkpoint and the usual snapshot helpers write (the
# ImageNet example's checkpoint.pth.tar among them).
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".distcp", ".safetensors", ".bin", ".pth.tar", ".pt.tar")


def _node_local_checkpoints(local: LocalTarget) -> list[str]:
    """Checkpoint-like files under the nodes' own directories (their working directories),
    outside what the target writes there (torchelastic's logs), as `node/relative/path`."""
    found = []
    for node in local.nodes:
        home = local.node_dir(node.name)
        if not home.is_dir():
            continue
        for path in sorted(home.rglob("*")):
            rel = path.relative_to(home)
            if rel.parts[0] == TORCHELASTIC_LOGS or not path.is_file():
                continue
            if path.name.endswith(CHECKPOINT_SUFFIXES) or path.name == ".metadata":
                found.append(f"{node.name}/{rel}")
    return found


def _workers_at_full_size(local: LocalTarget, nodes: int) -> bool:
    """Every running node's agent started workers in a round of `nodes` nodes."""
    alive = local.alive_nodes
    return bool(alive) and all(
        any(a.kind == "started" and (a.group_world_size or 0) >= nodes for a in _agent_events(local, n)) for n in alive
    )


def _agent_events(local: LocalTarget, node: Agent) -> list[AgentEvent]:
    return read_agent_events(local.node_dir(node.name) / AGENT_EVENTS, node.name)

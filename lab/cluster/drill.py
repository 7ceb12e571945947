"""The eviction drill on a real cluster: submit (or attach to) the elastic PyTorchJob, wait
until it trains at full size, evict one GPU spot node through a backend (Azure VMSS
simulateEviction, an AWS FIS experiment, a Kubernetes drain), follow the job until it has
trained again and finished or a deadline passed, and report with the local drill's analysis
and verdict (lab.drill.analysis, lab.drill.verdict), from one stream of events. Given a window
of a spot trace (a ReplaySchedule), it evicts the nodes the window loses at its times instead
of one node (lab.cluster.replay). With `reclaim_for_s`, the job's borrowed part is taken back by
real preemption instead, kept that long and given back (lab.cluster.reclaim).

The stream:

- the job's own JSON-lines events, read from every worker pod's log (each pod's log is
  followed from the moment it runs; a pod recreated under the same name is a new stream);
- what Kubernetes says, as events of the same stream: pod phases (`k8s_pod`), nodes of the
  GPU pool going Ready or away (`k8s_node_ready`, `k8s_node_gone`), the PyTorchJob's
  conditions (`k8s_job`), and the drill's own `evict` and `node_added` (a worker pod running
  on a node it did not run on before the eviction).

The stream is written to <workdir>/events.jsonl as it grows, so a drill cut short keeps it.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.client.rest import ApiException

from lab.cluster import disruption, jobs
from lab.cluster.eviction import EvictionError, EvictionRefused, EvictionStarted, Evictor, Node, pool_refusal
from lab.cluster.kube import KubeApi, KubeError, api_error
from lab.cluster.reclaim import ClusterReclaim, PreemptionReclaim
from lab.cluster.replay import ClusterReplay
from lab.drill.analysis import measure
from lab.drill.report import DrillReport
from lab.drill.verdict import ClusterSeen, judged
from lab.vocab import events
from lab.vocab.capacity import rank_in
from lab.vocab.events import Event
from lab.vocab.job_parts import burst_job_name, part_of
from lab.vocab.placeholders import placeholder
from lab.vocab.pools import CAPACITY_LABEL
from lab.vocab.replay_schedule import LOST, ReplaySchedule

# How long the drill waits, once the job has ended, for its followed logs to deliver their last
# lines (each stream ends with its pod's container): a busy machine's reader lags the workers.
LAST_LINES_S = 10.0


class DrillRefused(KubeError):
    """The drill will not evict the node it was given or found (and was not forced)."""


@dataclass
class ClusterDrillConfig:
    namespace: str
    job: str
    evictor: Evictor | PreemptionReclaim  # a reclaim's: the owners' work that preempts the burst
    gpu_labels: Mapping[str, str]
    workdir: Path
    objects: list[dict[str, Any]] | None = None  # the job to submit; None: attach to `job`
    replace: bool = False
    node: str | None = None  # the node to evict; None: the node of the highest-index worker
    force: bool = False
    evict_at_step: int = 1  # evict once the job trained this step at full size
    full_world: int | None = None  # workers that make "full size"; None: the job's maxReplicas
    target_steps: int | None = None
    checkpoint_every: int = 50
    timeout_s: float = 1800.0
    poll_s: float = 2.0
    # A window of a spot trace: its losses are evicted at their times (slot i: worker i's node)
    # from the moment the job trained at full size; None: one eviction.
    replay: ReplaySchedule | None = None
    # The job's burst taken back by preemption once it trains at full size, and given back this
    # many seconds after the job trains without it; None: an eviction (or a replay).
    reclaim_for_s: float | None = None


@dataclass
class _Seen:
    """What the watcher knows of the cluster, to turn changes into events."""

    pods: dict[str, tuple[str, str, str | None]] = field(default_factory=dict)  # uid -> (name, phase, node)
    followed: set[str] = field(default_factory=set)  # pod uids whose log is followed
    exit_codes: dict[str, int | None] = field(default_factory=dict)  # pod name -> last exit code
    ready_nodes: set[str] = field(default_factory=set)
    # Each GPU node's capacity rank and capacity, from its labels (lab/vocab/capacity.py).
    node_ranks: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodes_before: set[str] = field(default_factory=set)  # nodes the job ran on before the eviction
    returning: set[str] = field(default_factory=set)  # pods taken back: running again, nodes added
    conditions: tuple[str, ...] = ()


class ClusterDrill:
    def __init__(
        self,
        cfg: ClusterDrillConfig,
        kube: KubeApi,
        say: Callable[[str], None] = lambda line: None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.cfg, self.kube, self.say = cfg, kube, say
        # The waits (and a replay's) go through these, so tests drive a simulated cluster on a
        # simulated clock; events keep the wall clock the job's own events carry.
        self._sleep, self._clock = sleep, clock
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.seen = _Seen()
        self.evicted: EvictionStarted | None = None
        self.started = time.time()
        self._sink: Any = None  # the events file, opened when the drill runs (a dry run writes nothing)
        self._pumps: list[threading.Thread] = []  # one reader of each followed pod's log

    # ------------------------------------------------------------------ the event stream
    def record(self, event: dict[str, Any]) -> None:
        with self.lock:
            if self._sink is None or self._sink.closed:  # before the run, or a log line after it ended
                return
            self.events.append(event)
            self._sink.write(json.dumps(event, separators=(",", ":")) + "\n")
            self._sink.flush()

    def emit(self, name: str, **fields: Any) -> None:
        self.record({"t": round(time.time(), 4), "event": name, "source": "drill", **fields})

    def _follow(self, pod: str, uid: str) -> None:
        """The pod's log, for as long as the pod runs: its JSON lines become events."""

        def pump() -> None:
            try:
                for _, line in jobs.logs_of_pod(self.kube, pod, self.cfg.namespace, follow=True):
                    event = events.parse_line(line)
                    if event is not None:
                        event.setdefault("node", pod)
                        self.record(event)
            except (KubeError, OSError, ApiException, urllib3.exceptions.HTTPError) as exc:
                self.emit(Event.LOG_LOST, pod=pod, error=str(exc)[:200])

        self.seen.followed.add(uid)
        reader = threading.Thread(target=pump, name=f"log-{pod}", daemon=True)
        self._pumps.append(reader)
        reader.start()

    def _last_lines(self) -> None:
        """Wait for the followed logs' last lines: up to LAST_LINES_S for every stream to end
        when the job has ended, a poll's time (at most 1 s) when its pods may still run (the
        deadline passed, the drill failed). Real threads: real time."""
        limit = LAST_LINES_S if self.finished() else min(self.cfg.poll_s, 1.0)
        until = time.monotonic() + limit
        for reader in list(self._pumps):
            reader.join(max(0.0, until - time.monotonic()))

    # ------------------------------------------------------------------ watching
    def poll(self) -> None:
        """One look at the job, its pods and the GPU pool's nodes; changes become events."""
        status = jobs.status(self.kube, self.cfg.job, self.cfg.namespace)
        conditions = tuple(c[0] for c in status.conditions)
        if conditions != self.seen.conditions:
            new = [c for c in status.conditions if c[0] not in self.seen.conditions]
            for kind, reason, message in new:
                self.emit(Event.K8S_JOB, condition=kind, reason=reason, message=message[:200])
            self.seen.conditions = conditions
        listed = set()
        for pod in self._job_pods():
            uid, state = pod.metadata.uid, jobs.pod_state(pod)
            listed.add(uid)
            if getattr(pod.metadata, "deletion_timestamp", None) and state.phase in ("Pending", "Running"):
                state = dataclasses.replace(state, phase="Terminating")  # drained, deleted: the first sign
            before = self.seen.pods.get(uid)
            if before != (state.name, state.phase, state.node):
                self.seen.pods[uid] = (state.name, state.phase, state.node)
                self.emit(Event.K8S_POD, pod=state.name, phase=state.phase, k8s_node=state.node, uid=uid)
                if state.phase == "Running" and (before is None or before[1] != "Running") and self._added(state):
                    named = part_of({"metadata": {"labels": pod.metadata.labels or {}}})
                    part = {"part": named} if named else {}
                    self.emit(
                        Event.NODE_ADDED, node=state.name, k8s_node=state.node, **part, **self._rank_of(state.node)
                    )
            code = _exit_code(pod)
            if code is not None:
                self.seen.exit_codes[state.name] = code
            elif state.phase == "Running":
                self.seen.exit_codes[state.name] = None
            if uid not in self.seen.followed and state.phase in ("Running", "Succeeded", "Failed"):
                self._follow(state.name, uid)
        for uid in set(self.seen.pods) - listed:
            name, phase, node = self.seen.pods[uid]
            if phase != "Deleted":
                self.seen.pods[uid] = (name, "Deleted", node)
                self.emit(Event.K8S_POD, pod=name, phase="Deleted", k8s_node=node, uid=uid)
        self._poll_nodes()

    def _job_pods(self) -> list[Any]:
        """The job's worker pods; a reclaim's, its burst's too."""
        pods = jobs.job_pods(self.kube, self.cfg.job, self.cfg.namespace)
        if self.cfg.reclaim_for_s is not None:
            pods += jobs.job_pods(self.kube, burst_job_name(self.cfg.job), self.cfg.namespace)
        return pods

    def _added(self, state: Any) -> bool:
        """Whether a worker pod that just went Running is a node added to the job: on a node it
        did not run on before an eviction; in a reclaim, each of the job's at the start (with its
        part) and each taken back, running again."""
        if state.name in self.seen.returning:
            self.seen.returning.discard(state.name)
            return True
        if self.cfg.reclaim_for_s is not None:
            return not any(e["event"] == Event.EVICT for e in self.events)
        return self.evicted is not None and state.node not in self.seen.nodes_before

    def _rank_of(self, node: str | None) -> dict[str, Any]:
        """The capacity rank and capacity of a GPU node, from its labels (read when the node is
        newer than the last look at the pool)."""
        if node and node not in self.seen.node_ranks:
            try:
                self.seen.node_ranks[node] = _rank_fields(Node.from_k8s(self.kube.core.read_node(node)))
            except ApiException:
                return {}
        return self.seen.node_ranks.get(node or "", {})

    def _poll_nodes(self) -> None:
        selector = ",".join(f"{k}={v}" for k, v in sorted(self.cfg.gpu_labels.items()))
        try:
            nodes = self.kube.core.list_node(label_selector=selector).items
        except ApiException as exc:
            raise api_error(exc, "listing the GPU pool's nodes") from None
        seen = [Node.from_k8s(n) for n in nodes]
        ready = {n.name for n in seen if n.ready}
        for n in seen:
            self.seen.node_ranks[n.name] = _rank_fields(n)
        for name in sorted(ready - self.seen.ready_nodes):
            self.emit(Event.K8S_NODE_READY, k8s_node=name, **self.seen.node_ranks.get(name, {}))
        for name in sorted(self.seen.ready_nodes - ready):
            self.emit(Event.K8S_NODE_GONE, k8s_node=name)
        self.seen.ready_nodes = ready

    def _wait(self, what: str, done: Callable[[], bool], deadline: float) -> bool:
        last_said = 0.0
        while self._clock() < deadline:
            self.poll()
            if done():
                return True
            if self._clock() - last_said > 15:
                last_said = self._clock()
                self.say(f"[{time.time() - self.started:6.0f}s] {what}; {self._where()}")
            self._sleep(self.cfg.poll_s)
        return False

    def _where(self) -> str:
        steps = [e for e in self.events if e["event"] == Event.STEP]
        running = sum(1 for _, phase, _ in self.seen.pods.values() if phase == "Running")
        if not steps:
            return f"no step yet, {running} worker pod(s) running"
        return f"step {steps[-1]['step']} at world size {steps[-1].get('world_size')}, {running} pod(s) running"

    # ------------------------------------------------------------------ the drill
    def full_world(self) -> int:
        if self.cfg.full_world is not None:
            return self.cfg.full_world
        status = jobs.status(self.kube, self.cfg.job, self.cfg.namespace)
        return int(status.max_replicas or 1)

    def _at_full_size(self, world: int) -> bool:
        return any(
            e["event"] == Event.STEP and e.get("world_size", 0) >= world and e["step"] >= self.cfg.evict_at_step
            for e in self.events
        )

    def finished(self) -> bool:
        return any(c in ("Succeeded", "Failed") for c in self.seen.conditions)

    def choose_node(self) -> Node:
        """The node to evict: the one named, or the node of the highest-index running worker;
        refused unless it is in the stack's GPU spot pool (or `force`)."""
        name = self.cfg.node
        if name is None:
            running = self._running_pods()
            if not running:
                raise KubeError(f"job {self.cfg.namespace}/{self.cfg.job} has no running worker on a node to evict")
            name = max(running, key=lambda p: (p.index or 0, p.name)).node
        assert name is not None
        return self.node_of(name)

    def node_of(self, name: str) -> Node:
        """Node `name` of the cluster, refused unless it is in the stack's GPU spot pool (or
        `force`)."""
        try:
            node = Node.from_k8s(self.kube.core.read_node(name))
        except ApiException as exc:
            if exc.status == 404:
                raise KubeError(f"node {name} does not exist in {self.kube.source}") from None
            raise api_error(exc, f"reading node {name}") from None
        reason = pool_refusal(node, self.cfg.gpu_labels)
        if reason and not self.cfg.force:
            raise DrillRefused(f"{reason}; pass --force to evict it anyway")
        if reason:
            self.say(f"warning: {reason}; evicting it because of --force")
        return node

    def planned_calls(self) -> list[str]:
        """Every API call a run would make, in order, without making any that changes
        anything (a dry run): reading the cluster picks the node as a run would."""
        if self.cfg.reclaim_for_s is not None:
            burst = self.burst_pods()
            where = burst[0].spec.node_name if burst else placeholder("the node of a burst worker, when the drill runs")
            return planned_calls(self.cfg, Node.to_be_found(where))
        return planned_calls(self.cfg, self._node_for_plan())

    def _node_for_plan(self) -> Node:
        if self.cfg.node or (self.cfg.objects is None and self._running_pods()):
            return self.choose_node()
        selector = ",".join(f"{k}={v}" for k, v in sorted(self.cfg.gpu_labels.items()))
        try:
            nodes = [Node.from_k8s(n) for n in self.kube.core.list_node(label_selector=selector).items]
        except ApiException as exc:
            raise api_error(exc, "listing the GPU pool's nodes") from None
        ready = [n for n in nodes if n.ready]
        if not ready:
            raise KubeError(
                "no Ready node in the GPU spot pool to show the eviction calls for (the pool may be scaled to zero "
                "until a job runs): pass --node, or submit the job first"
            )
        return ready[-1]

    # ------------------------------------------------------------------ a reclaim's host
    def burst_pods(self) -> list[Any]:
        """The burst's running worker pods (V1Pods), none of them already going."""
        pods = jobs.job_pods(self.kube, burst_job_name(self.cfg.job), self.cfg.namespace)
        return [p for p in pods if jobs.pod_state(p).phase == "Running" and p.spec.node_name and not _going(p)]

    def returning(self, pods: list[str]) -> None:
        self.seen.returning |= set(pods)

    def trains_below(self, world: int, since: float) -> bool:
        return any(
            e["event"] == Event.STEP and e["t"] > since and 0 < e.get("world_size", world) < world for e in self.events
        )

    def wait(self, what: str, done: Callable[[], bool], deadline: float) -> bool:
        return self._wait(what, done, deadline)

    def running_workers(self) -> dict[int, str]:
        """{replica index: node} of the job's running worker pods."""
        return {p.index: p.node for p in self._running_pods() if p.index is not None}

    def nodes_added(self) -> list[str]:
        """The node of each worker that started on a node it did not run on before an eviction,
        in order."""
        return [str(e.get("k8s_node", "")) for e in self.events if e["event"] == Event.NODE_ADDED]

    def _running_pods(self) -> list[Any]:
        try:
            pods = jobs.job_pods(self.kube, self.cfg.job, self.cfg.namespace)
        except KubeError:
            return []
        return [p for p in map(jobs.pod_state, pods) if p.phase == "Running" and p.node]

    def evict(self, node: Node) -> EvictionStarted:
        return self.evict_all([node])[0]

    def evict_all(self, nodes: list[Node]) -> list[EvictionStarted]:
        """Evict `nodes` together: each checked first (refused unless forced), then evicted, all
        started before any is waited for where the backend can (its `evict_all`: FIS's
        experiments), else one after another."""
        for node in nodes:
            self._check(node)
        workers = {
            node.name: [s[0] for s in self.seen.pods.values() if s[2] == node.name and s[1] == "Running"]
            for node in nodes
        }
        self.seen.nodes_before = {n for _, phase, n in self.seen.pods.values() if n and phase == "Running"}
        evictor = self.cfg.evictor
        if isinstance(evictor, PreemptionReclaim):
            raise KubeError("a reclaim takes the burst back by preemption: it evicts no node")
        together = getattr(evictor, "evict_all", None)
        started = together(nodes) if callable(together) else [evictor.evict(node) for node in nodes]
        for node, accepted in zip(nodes, started, strict=True):
            self.evicted = accepted
            self.record(
                {
                    "t": round(accepted.at, 4),
                    "event": Event.EVICT,
                    "source": "drill",
                    "node": workers[node.name][0] if workers[node.name] else node.name,
                    "kind": accepted.backend,
                    "k8s_node": node.name,
                    "detail": accepted.detail,
                }
            )
        return started

    def _reclaim(self) -> PreemptionReclaim:
        if not isinstance(self.cfg.evictor, PreemptionReclaim):
            raise KubeError(
                "a reclaim takes the burst back through the owners' work (PreemptionReclaim), not a node's eviction"
            )
        return self.cfg.evictor

    def _check(self, node: Node) -> None:
        """The backend's check of `node`: a refusal ends the drill unless forced."""
        if isinstance(self.cfg.evictor, PreemptionReclaim):
            return
        try:
            self.cfg.evictor.check(node)
        except EvictionRefused as exc:
            if not self.cfg.force:
                raise DrillRefused(f"{exc}; pass --force to evict it anyway") from None
            self.say(f"warning: {exc}; evicting it because of --force")

    def run(self) -> DrillReport:
        cfg = self.cfg
        cfg.workdir.mkdir(parents=True, exist_ok=True)
        self._sink = (cfg.workdir / "events.jsonl").open("a", encoding="utf-8")
        deadline = self._clock() + cfg.timeout_s
        cleanup_error: str | None = None
        try:
            if cfg.objects is not None:
                created = jobs.submit(self.kube, cfg.objects, cfg.namespace, replace=cfg.replace)
                self.emit(Event.K8S_SUBMITTED, objects=created)
                self.say(f"submitted {', '.join(created)} to namespace {cfg.namespace}")
            world = self.full_world()
            self.say(f"waiting for the job to train at full size ({world} workers) and reach step {cfg.evict_at_step}")
            at_full_size = self._wait("waiting for full size", lambda: self._at_full_size(world), deadline)
            if at_full_size and cfg.reclaim_for_s is not None:
                reclaim = self._reclaim()
                self.say(
                    f"taking the burst back by preemption, for {cfg.reclaim_for_s:g} s once the job trains without it"
                )
                ClusterReclaim(self, reclaim, cfg.reclaim_for_s, self._clock).run(deadline, time.time)
                self._wait("following the job after the reclaim", self.finished, deadline)
            elif at_full_size and cfg.replay is not None:
                self.say(
                    f"replaying {cfg.replay.source}: {len(cfg.replay.changes)} changes in {cfg.replay.duration_s:.0f} s"
                )
                ClusterReplay(self, cfg.replay, cfg.poll_s, sleep=self._sleep, clock=self._clock).run(deadline)
                self._wait("following the job after the window", self.finished, deadline)
            elif at_full_size:
                node = self.choose_node()
                started = self.evict(node)
                self.say(f"evicted {node.name} through {started.backend}: {started.detail}")
                self._wait("following the job after the eviction", self.finished, deadline)
        finally:
            cleanup = getattr(cfg.evictor, "cleanup", None)
            if callable(cleanup):
                try:
                    cleanup()
                except (EvictionError, KubeError) as exc:
                    cleanup_error = str(exc)
            self._last_lines()
            self._sink.close()
        seen = measure(
            disruption.as_observed(list(self.events)),
            [],
            target_steps=cfg.target_steps,
            checkpoint_every=cfg.checkpoint_every,
            node_exit_codes=dict(self.seen.exit_codes),
        )
        cluster = ClusterSeen(
            timeout_s=cfg.timeout_s,
            full_world=world,
            evict_at_step=cfg.evict_at_step,
            evicted=self.evicted is not None or any(e["event"] == Event.EVICT for e in self.events),
            job_ended=self.finished(),
            cleanup_error=cleanup_error,
        )
        return judged(dataclasses.replace(seen, cluster=cluster))


def _going(pod: Any) -> bool:
    return getattr(pod.metadata, "deletion_timestamp", None) is not None


def planned_calls(cfg: ClusterDrillConfig, node: Node) -> list[str]:
    """Every API call a drill of `cfg` makes, in order, when it evicts `node`: one of the
    cluster's, or one a dry run that cannot ask the cluster stands in for (`Node.to_be_found`)."""
    out = []
    if cfg.objects is not None:
        for obj in cfg.objects:
            how = (
                "kubeflow-training: TrainingClient.create_job"
                if obj["kind"] == jobs.PYTORCHJOB
                else "kubernetes: create"
            )
            out.append(f"{how}({obj['kind']} {cfg.namespace}/{obj['metadata']['name']})")
    jobs_named = f"{cfg.job} and {burst_job_name(cfg.job)}" if cfg.reclaim_for_s is not None else cfg.job
    out.append(
        f"kubernetes: poll every {cfg.poll_s:g} s: get PyTorchJob {cfg.namespace}/{jobs_named}, list their pods, "
        "follow their logs, list the GPU pool's nodes"
    )
    if cfg.reclaim_for_s is None:
        out.append(f"kubernetes: read_node({node.name}) and check its labels against the GPU spot pool")
    if cfg.replay is not None:
        out += replay_plan(cfg.replay)
    if cfg.reclaim_for_s is not None:
        out.append(
            f"once the job trains at full size: for each node of the burst's running workers (below: {node.name}), "
            "the owners' pod at a PriorityClass that preempts the burst's, which the scheduler places by preempting "
            f"the burst's worker there; deleted {cfg.reclaim_for_s:g} s after the job trains without the burst"
        )
    out += [str(call) + ("  [read]" if call.reads_only else "") for call in cfg.evictor.calls(node)]
    out.append("kubernetes: poll as above until the job succeeds or fails, or the deadline passes")
    return out


def replay_plan(replay: ReplaySchedule) -> list[str]:
    """What a replay adds to the calls: when each loss evicts which slot's node (each eviction
    makes the backend's calls below, for that node)."""
    losses = [c for c in replay.changes if c.kind == LOST]
    out = [
        f"replay {replay.source} {replay.window_s[0]:g}-{replay.window_s[1]:g} s at {replay.speedup:g}x "
        f"({replay.duration_s:g} s from the first step at full size): {len(losses)} loss(es), each evicting the "
        "node of the lost slot's worker (slot i: worker i) through the calls below; capacity comes back as the "
        "cloud gives it"
    ]
    out += [f"  at +{c.t_s:g} s: slot {c.slot}" for c in losses]
    return out


def _exit_code(pod: Any) -> int | None:
    statuses = (pod.status.container_statuses if pod.status else None) or []
    for status in statuses:
        terminated = status.state.terminated if status.state else None
        if terminated is not None:
            return int(terminated.exit_code)
    return None


def _rank_fields(node: Node) -> dict[str, Any]:
    """A GPU node's capacity rank and capacity, as its labels give them (lab/vocab/capacity.py)."""
    rank, capacity = rank_in(node.labels), node.labels.get(CAPACITY_LABEL)
    return {**({"rank": rank} if rank is not None else {}), **({"capacity": capacity} if capacity else {})}

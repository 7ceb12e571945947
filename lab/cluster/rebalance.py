"""A job's workers moved off its fallback GPU ranks, back to rank 1 (`elastic-lab rebalance`).

Why: a worker that the cluster autoscaler placed on a fallback rank (no spot capacity of rank 1
then) stays there. The autoscaler removes a GPU node only when less than half of its GPUs are
requested (`--scale-down-gpu-utilization-threshold`), and its priority expander only picks which
pool to scale up: it never moves a running pod to a pool of a higher priority. On the on-demand
rank the job pays the on-demand price until it ends (lab/plan/cost.py prices it).

How, one worker at a time, the highest rank first:

1. Room on rank 1 first. A placeholder pod (the probe) asks for exactly what the worker asks
   (its container's resources, its affinity, tolerations, priority class, security context and
   image) and selects rank 1's nodes (`elastic-spot-lab/gpu-rank=1`): a free rank-1 GPU takes it
   at once, else the autoscaler scales rank 1 up for it (no other pool matches its selector).
   When it is not running within `probe_timeout_s`, rank 1 has no capacity or quota now: it is
   deleted and nothing moves. It pulls the worker's image meanwhile, so the worker starts
   sooner there. It runs under the namespace's default service account, with no token.
2. The probe is deleted, which frees its place for the worker, and at once the worker's node is
   drained the way the drill's Kubernetes backend drains one (lab/cluster/drain.py: cordon, then the
   Eviction API for every pod but DaemonSet and mirror pods, each with its own grace period):
   the worker gets SIGTERM, trains on until its grace period nearly ends (its pod says when:
   lab.runtime.pod_deadline), saves and leaves, the elastic job re-forms without it,
   and the training operator recreates the pod. The cordoned node takes no pod again; the
   autoscaler removes it once it is empty.
3. The recreated worker is waited for, up to `move_timeout_s`, running on another node; the
   report says on which rank (a pending pod of another job may take the freed GPU first, and
   the worker then goes where the autoscaler finds room).

Waits go through `sleep` and `clock`, so tests drive a simulated cluster step by step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from lab.cluster import jobs
from lab.cluster.drain import KubernetesDrainEvictor
from lab.cluster.eviction import EvictionError, Node
from lab.cluster.kube import KubeApi, KubeError, api_error
from lab.cluster.polling import Poll
from lab.vocab.capacity import RANK_LABEL, REBALANCE_MOVE_TIMEOUT_S, REBALANCE_PROBE_TIMEOUT_S, rank_in
from lab.vocab.names import PROJECT
from lab.vocab.pools import CAPACITY_LABEL

# The probe's labels: what it is, and whose (a probe left by a stopped run is found by them).
PROBE_ROLE_LABEL = f"{PROJECT}/role"
PROBE_ROLE = "rank-probe"
PROBE_JOB_LABEL = f"{PROJECT}/probe-of"
# The probe holds its place with the worker's own image (a PyTorch image has Python).
HOLD_COMMAND = ["python", "-c", "import signal; signal.pause()"]


@dataclass(frozen=True)
class Placement:
    """A running worker of the job and the GPU capacity rank of its node (None: not a rank's)."""

    pod: str
    index: int | None
    node: str
    rank: int | None
    capacity: str | None

    @property
    def on_fallback(self) -> bool:
        return self.rank is not None and self.rank > 1

    def where(self) -> str:
        rank = f"rank {self.rank}" if self.rank is not None else "no GPU rank"
        return f"{self.node} ({rank}{', ' + self.capacity if self.capacity else ''})"


@dataclass(frozen=True)
class Move:
    """What became of one worker on a fallback rank."""

    worker: Placement
    outcome: str  # MOVED | NO_ROOM | NOT_BACK
    to: Placement | None = None
    waited_s: float = 0.0

    MOVED = "moved"
    NO_ROOM = "no room on rank 1"
    NOT_BACK = "not running again in time"

    def line(self) -> str:
        head = f"{self.worker.pod} on {self.worker.where()}"
        if self.outcome == Move.MOVED and self.to is not None:
            return f"{head}: moved to {self.to.where()} in {self.waited_s:.0f} s"
        if self.outcome == Move.NO_ROOM:
            return f"{head}: stays; rank 1 found no room for it within {self.waited_s:.0f} s"
        return f"{head}: evicted, and not running again after {self.waited_s:.0f} s (`elastic-lab status`)"


def probe_pod(worker: Mapping[str, Any], name: str, job: str) -> dict[str, Any]:
    """The probe for `worker` (a pod as the API gives it, camelCase): what the worker asks for,
    on rank 1 only, holding its place; no service account token, no worker labels (it is
    no worker of the job), never restarted, deleted at once."""
    spec = worker.get("spec") or {}
    container = (spec.get("containers") or [{}])[0]
    copied = ("affinity", "tolerations", "priorityClassName", "securityContext", "imagePullSecrets", "runtimeClassName")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": (worker.get("metadata") or {}).get("namespace"),
            "labels": {"app.kubernetes.io/part-of": PROJECT, PROBE_ROLE_LABEL: PROBE_ROLE, PROBE_JOB_LABEL: job},
        },
        "spec": {
            **{key: spec[key] for key in copied if spec.get(key)},
            "nodeSelector": {**(spec.get("nodeSelector") or {}), RANK_LABEL: "1"},
            "automountServiceAccountToken": False,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "hold",
                    "image": container.get("image"),
                    "command": HOLD_COMMAND,
                    **{key: container[key] for key in ("resources", "securityContext") if container.get(key)},
                }
            ],
        },
    }


class Rebalancer:
    """Moves job `job`'s workers off its fallback GPU ranks, one at a time (the module's docstring)."""

    def __init__(
        self,
        kube: KubeApi,
        job: str,
        namespace: str,
        *,
        probe_timeout_s: float = REBALANCE_PROBE_TIMEOUT_S,
        move_timeout_s: float = REBALANCE_MOVE_TIMEOUT_S,
        drain_timeout_s: float = 120.0,
        poll_s: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.kube, self.job, self.namespace = kube, job, namespace
        self.probe_timeout_s, self.move_timeout_s = probe_timeout_s, move_timeout_s
        self.drain_timeout_s = drain_timeout_s
        self._clock, self.say = clock, say
        self._poll = Poll(poll_s, sleep, clock)

    # ------------------------------------------------------------------ what is where
    def placements(self) -> list[Placement]:
        """The job's running workers with their nodes' GPU capacity ranks."""
        if not jobs.job_exists(self.kube, self.job, self.namespace):
            raise KubeError(f"no job {self.namespace}/{self.job} (`elastic-lab status` lists the jobs)")
        states = map(jobs.pod_state, jobs.job_pods(self.kube, self.job, self.namespace))
        running = [(p, p.node) for p in states if p.phase == "Running" and p.node]
        labels = self._node_labels({node for _, node in running})
        return [
            Placement(p.name, p.index, node, rank_in(labels[node]), labels[node].get(CAPACITY_LABEL))
            for p, node in running
            if node in labels
        ]

    def on_fallback(self) -> list[Placement]:
        """The workers on a fallback rank, the highest (dearest, the on-demand one last in the
        list of ranks) first."""
        return sorted((p for p in self.placements() if p.on_fallback), key=lambda p: (-(p.rank or 0), p.pod))

    # ------------------------------------------------------------------ moving
    def run(self, workers: list[Placement] | None = None) -> list[Move]:
        """Each worker on a fallback rank (`workers`, default: on_fallback()) moved in turn;
        stops at the first that rank 1 has no room for (the next would find none either) or
        that does not run again in time."""
        moves: list[Move] = []
        for worker in self.on_fallback() if workers is None else workers:
            move = self.move(worker)
            moves.append(move)
            self.say(move.line())
            if move.outcome != Move.MOVED:
                break
        return moves

    def move(self, worker: Placement) -> Move:
        """One worker: a probe on rank 1, then (once it runs) its place handed to the worker."""
        pod = self._read_pod(worker.pod)
        probe = f"{self.job}-rank1-probe-{worker.index if worker.index is not None else 0}"
        self._delete_pod(probe)  # one left by a run stopped half-way
        self._create(probe_pod(pod, probe, self.job))
        started = self._clock()
        try:
            self.say(f"{worker.pod} on {worker.where()}: asking rank 1 for a node ({probe})")
            room = self._poll.until(lambda: self._running_on(probe), self.probe_timeout_s)
        finally:
            self._delete_pod(probe)  # ran or not: its place goes to the worker, or it never had one
        if room is None:
            return Move(worker, Move.NO_ROOM, waited_s=self._clock() - started)
        self.say(f"{worker.pod}: rank 1 has room on {room}; draining {worker.node}")
        try:
            KubernetesDrainEvictor(self.kube, drain_timeout_s=self.drain_timeout_s).evict(Node(worker.node, ""))
        except EvictionError as exc:
            # The worker still runs there: the node is given back to the scheduler as it was.
            self._uncordon(worker.node)
            raise KubeError(f"moving worker {worker.pod} off {worker.node}: {exc}") from None
        back = self._poll.until(lambda: self._replacement(worker), self.move_timeout_s)
        outcome = Move.MOVED if back is not None else Move.NOT_BACK
        return Move(worker, outcome, back, waited_s=self._clock() - started)

    # ------------------------------------------------------------------ helpers
    def _running_on(self, probe: str) -> str | None:
        """The node the probe runs on; None while it waits (KubeError when it failed)."""
        state = jobs.pod_state(self._read_pod_object(probe))
        if state.phase in ("Failed", "Succeeded"):
            raise KubeError(f"the rank-1 probe {self.namespace}/{probe} ended ({state.phase}) before it held a GPU")
        return state.node if state.phase == "Running" else None

    def _replacement(self, worker: Placement) -> Placement | None:
        """The worker of the same replica index running on another node, once there is one."""
        for placed in self.placements():
            if placed.index == worker.index and placed.node != worker.node:
                return placed
        return None

    def _node_labels(self, names: set[str]) -> dict[str, dict[str, str]]:
        try:
            nodes = self.kube.core.list_node().items
        except ApiException as exc:
            raise api_error(exc, "listing the nodes") from None
        return {n.metadata.name: dict(n.metadata.labels or {}) for n in nodes if n.metadata.name in names}

    def _read_pod_object(self, name: str) -> Any:
        try:
            return self.kube.core.read_namespaced_pod(name, self.namespace)
        except ApiException as exc:
            raise api_error(exc, f"reading pod {self.namespace}/{name}") from None

    def _read_pod(self, name: str) -> dict[str, Any]:
        """The pod as the API gives it (camelCase), to copy from."""
        return dict(self.kube.api.sanitize_for_serialization(self._read_pod_object(name)))

    def _create(self, pod: dict[str, Any]) -> None:
        try:
            self.kube.core.create_namespaced_pod(self.namespace, pod)
        except ApiException as exc:
            raise api_error(exc, f"creating the rank-1 probe {self.namespace}/{pod['metadata']['name']}") from None

    def _uncordon(self, name: str) -> None:
        try:
            self.kube.core.patch_node(name, {"spec": {"unschedulable": False}})
        except ApiException as exc:
            raise api_error(
                exc, f"uncordoning node {name} after its drain failed (`kubectl uncordon {name}`)"
            ) from None

    def _delete_pod(self, name: str) -> None:
        try:
            self.kube.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise api_error(exc, f"deleting the rank-1 probe {self.namespace}/{name}") from None

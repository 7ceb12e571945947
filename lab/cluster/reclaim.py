"""Borrowed GPUs taken back on a cluster by real preemption, as another team's work takes them.

A job with a burst runs it as a second PyTorchJob at a PriorityClass below its core's
(lab.vocab.job_parts). The owners' work here is one pod per node the burst's workers run on: at
a PriorityClass above the burst's that preempts lower priorities (the lowest such class of the
cluster unless one is named: on this project's platform elastic-inference, since the workers'
own class never preempts), pinned to that node (a required node affinity on its name, so the
scheduler still places it, not `nodeName`), tolerating what the burst's worker there tolerates,
and asking for the GPUs the burst holds there (the node's, less what other pods hold). The
scheduler cannot place it without preempting the burst's worker there, and has no need to
preempt more (it spares every victim it can, the higher priorities first): it marks that pod (condition
DisruptionTarget, reason PreemptionByScheduler) and deletes it with the pod's own grace period,
as it would for any higher-priority pod. The drill keeps the owners' pods for a while once the
job trains at its core, then deletes them: the capacity is free again, the training operator
recreates the burst's workers and the job grows back.

The cluster drill (lab.cluster.drill) records each burst worker taken back as an eviction with
the reclaim cause and its grace as the notice, and each burst worker that runs again as a node
added to the burst part: the local drill's analysis (lab.drill.reclaim) reads the stream as it
reads a local reclaim's. Waits go through the drill's clock, so tests run on a simulated one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lab.cluster.eviction import ApiCall, Node
from lab.cluster.kube import KubeApi, KubeError, api_error
from lab.cluster.pytorchjob import read_job, worker_pod_spec
from lab.vocab.events import CAUSE_RECLAIM, Event
from lab.vocab.job_parts import burst_job_name
from lab.vocab.placeholders import placeholder
from lab.vocab.platform_facts import GPU

# The owners' work holds the GPUs and does nothing else.
OWNERS_IMAGE = "registry.k8s.io/pause:3.10"
OWNERS_CONTAINER = "owners-work"
RECLAIM_OF_LABEL = "elastic-spot-lab/reclaim-of"  # on the owners' pods: the job they took back from
PREEMPTED_BY_SCHEDULER = "PreemptionByScheduler"  # the DisruptionTarget reason of a preempted pod
API = "kubernetes"


class ReclaimRefused(KubeError):
    """The job's burst cannot be taken back by preemption (no burst, no GPUs, or a class the
    owners' work could not preempt); the message says which and why."""


@dataclass(frozen=True)
class Borrowed:
    """A burst worker to take back: its pod, its node, the grace it gets (its pod's
    terminationGracePeriodSeconds), what it tolerates, and its node's GPUs."""

    pod: str
    node: str
    grace_s: float
    tolerations: tuple[Mapping[str, Any], ...]
    gpus: int


def owners_pod_name(job: str, index: int) -> str:
    return f"{job}-reclaim-{index}"


def owners_pod(job: str, index: int, borrowed: Borrowed, priority_class: str) -> dict[str, Any]:
    """The owners' pod that takes `borrowed`'s node back."""
    gpus = {GPU: str(borrowed.gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": owners_pod_name(job, index),
            "labels": {RECLAIM_OF_LABEL: job, "app.kubernetes.io/managed-by": "elastic-spot-lab"},
        },
        "spec": {
            "priorityClassName": priority_class,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [borrowed.node]}]}
                        ]
                    }
                }
            },
            "tolerations": [dict(t) for t in borrowed.tolerations],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": OWNERS_CONTAINER,
                    "image": OWNERS_IMAGE,
                    "resources": {"requests": gpus, "limits": gpus},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "runAsNonRoot": True,
                        "runAsUser": 65535,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


class PreemptionReclaim:
    """The owners' pods of job `job` in `namespace`: made, and deleted again."""

    name = "preemption"

    def __init__(self, kube: KubeApi | None, namespace: str, job: str, owners_class: str | None = None) -> None:
        self.kube, self.namespace, self.job = kube, namespace, job
        self.wanted = owners_class  # the owners' PriorityClass; None: the lowest that can take the burst back
        self.made: list[str] = []  # the owners' pods created, deleted by give_back

    def _kube(self) -> KubeApi:
        if self.kube is None:
            raise KubeError("a dry run reclaims nothing")
        return self.kube

    def owners_class(self) -> str:
        """The PriorityClass the owners' work runs at: the one named, else the lowest of the cluster's
        that preempts (PreemptLowerPriority) and is above the burst's workers' class; refused
        when there is none, or `wanted` is not one. On this project's platform the workers'
        class never preempts (training evicts no one): work that takes borrowed GPUs back runs
        at a class that does (inference, or a team's own)."""
        job = read_job(self._kube(), burst_job_name(self.job), self.namespace)
        if job is None:
            raise ReclaimRefused(
                f"no PyTorchJob {self.namespace}/{burst_job_name(self.job)}: a reclaim takes a job's burst back, and "
                f"job {self.job} has none (submit it with --core N --burst M)"
            )
        burst = str(worker_pod_spec(job).get("priorityClassName") or "")
        try:
            classes = {c.metadata.name: c for c in client.SchedulingV1Api(self._kube().api).list_priority_class().items}
        except ApiException as exc:
            raise api_error(exc, "listing the PriorityClasses") from None
        floor = int(classes[burst].value) if burst in classes else None
        if floor is None:
            raise ReclaimRefused(
                f"the burst's workers run at PriorityClass {burst or '(none)'}, which the cluster does not have: "
                "nothing preempts them first (`elastic-lab up` declares elastic-borrowed)"
            )
        able = sorted(
            (int(c.value), name)
            for name, c in classes.items()
            if int(c.value) > floor and (c.preemption_policy or "PreemptLowerPriority") == "PreemptLowerPriority"
        )
        if self.wanted is not None and self.wanted not in {name for _, name in able}:
            raise ReclaimRefused(
                f"PriorityClass {self.wanted} cannot take the burst back: expected one of the cluster's classes above "
                f"{burst} ({floor}) that preempts lower priorities ({', '.join(n for _, n in able) or 'none'})"
            )
        if not able:
            raise ReclaimRefused(
                f"no PriorityClass of the cluster is above the burst's ({burst}, {floor}) and preempts lower "
                "priorities: no work could take the borrowed GPUs back by preemption"
            )
        return self.wanted or able[0][1]

    def borrowed(self, pods: list[Any]) -> list[Borrowed]:
        """What taking back the burst's running worker pods `pods` (V1Pods) needs to know. The
        owners ask for a node's GPUs less what other pods there hold (the core's workers, say):
        the scheduler then has to preempt exactly the burst's workers there, no more."""
        kube = self._kube()
        burst = {p.metadata.name for p in pods}
        free: dict[str, int] = {}  # per node, read once however many burst workers it runs
        out = []
        for pod in pods:
            node, spec = pod.spec.node_name, pod.spec
            if node not in free:
                free[node] = self._node_gpus(node) - self._held_by_others(node, burst)
            gpus = free[node]
            if gpus < 1:
                raise ReclaimRefused(
                    f"node {node} of burst worker {pod.metadata.name} has no {GPU} the burst holds: the owners' work "
                    "asks for the burst's GPUs there, and there are none to take back"
                )
            tolerations = tuple(kube.api.sanitize_for_serialization(t) for t in (spec.tolerations or []))
            grace = spec.termination_grace_period_seconds
            out.append(Borrowed(pod.metadata.name, node, float(30 if grace is None else grace), tolerations, gpus))
        return out

    def _node_gpus(self, node: str) -> int:
        try:
            allocatable = self._kube().core.read_node(node).status.allocatable or {}
        except ApiException as exc:
            raise api_error(exc, f"reading node {node}") from None
        return int(str(allocatable.get(GPU, "0")) or 0)

    def _held_by_others(self, node: str, burst: set[str]) -> int:
        """The GPUs the pods bound to `node` request, the burst's workers' and finished pods' aside."""
        try:
            pods = self._kube().core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        except ApiException as exc:
            raise api_error(exc, f"listing the pods on node {node}") from None
        held = 0
        for pod in pods:
            if pod.metadata.name in burst or (pod.status and pod.status.phase in ("Succeeded", "Failed")):
                continue
            for container in pod.spec.containers or []:
                resources = container.resources
                asked = (resources.requests or resources.limits or {}) if resources else {}
                held += int(str(asked.get(GPU, "0")) or 0)
        return held

    def take(self, borrowed: list[Borrowed], priority_class: str) -> None:
        """The owners' pods created, one per node of `borrowed`."""
        kube = self._kube()
        for index, node in enumerate(dict.fromkeys(b.node for b in borrowed)):
            first = next(b for b in borrowed if b.node == node)
            body = owners_pod(self.job, index, first, priority_class)
            try:
                kube.core.create_namespaced_pod(self.namespace, body)
            except ApiException as exc:
                raise api_error(exc, f"creating the owners' pod {body['metadata']['name']} on node {node}") from None
            self.made.append(body["metadata"]["name"])

    def give_back(self) -> None:
        """The owners' pods deleted (at once): their capacity is free again."""
        kube = self._kube()
        while self.made:
            name = self.made[0]
            try:
                kube.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise api_error(exc, f"deleting the owners' pod {name}") from None
            self.made.pop(0)

    def cleanup(self) -> None:
        """Whatever the drill ends with, no owners' pod is left holding GPUs."""
        if self.kube is not None:
            self.give_back()

    def calls(self, node: Node) -> list[ApiCall]:
        """The requests a reclaim makes, for one burst worker on `node`."""
        pod = owners_pod_name(self.job, 0)
        owners = self.wanted or placeholder("the lowest class of the cluster above the burst's that preempts")
        return [
            ApiCall(API, "read_namespaced_custom_object", {"pytorchjob": burst_job_name(self.job)}, reads_only=True),
            ApiCall(API, "list_priority_class", {}, reads_only=True),
            ApiCall(API, "read_node", {"name": node.name}, reads_only=True),
            ApiCall(API, "list_pod_for_all_namespaces", {"field_selector": f"spec.nodeName={node.name}"}, True),
            ApiCall(API, "create_namespaced_pod", {"name": pod, "node": node.name, "priorityClassName": owners}),
            ApiCall(API, "delete_namespaced_pod", {"name": pod, "grace_period_seconds": 0}),
        ]


class ReclaimHost(Protocol):
    """What the reclaim needs of the cluster drill that runs it."""

    def poll(self) -> None: ...
    def burst_pods(self) -> list[Any]: ...  # the burst's running worker pods (V1Pods)
    def record(self, event: dict[str, Any]) -> None: ...
    def returning(self, pods: list[str]) -> None: ...  # these pods, running again, are nodes added
    def trains_below(self, world: int, since: float) -> bool: ...  # a step since `since` at a smaller world
    def full_world(self) -> int: ...
    def wait(self, what: str, done: Callable[[], bool], deadline: float) -> bool: ...


class ClusterReclaim:
    """The job's burst taken back through `reclaim`, kept `hold_s` once the job trains without
    it, then given back."""

    def __init__(
        self, host: ReclaimHost, reclaim: PreemptionReclaim, hold_s: float, clock: Callable[[], float]
    ) -> None:
        self.host, self.reclaim, self.hold_s, self._clock = host, reclaim, hold_s, clock

    def run(self, deadline: float, wall: Callable[[], float]) -> bool:
        """True once the capacity was given back with the job still on (False: it finished,
        or the drill's deadline came first)."""
        host, reclaim = self.host, self.reclaim
        owners = reclaim.owners_class()
        pods = host.burst_pods()
        if not pods:
            raise ReclaimRefused(f"job {reclaim.job} has no running burst worker to take back")
        borrowed = reclaim.borrowed(pods)
        started = wall()
        reclaim.take(borrowed, owners)
        for b in borrowed:
            host.record(
                {
                    "t": round(started, 4),
                    "event": Event.EVICT,
                    "source": "drill",
                    "node": b.pod,
                    "kind": reclaim.name,
                    "k8s_node": b.node,
                    "notice_s": b.grace_s,
                    "cause": CAUSE_RECLAIM,
                    "detail": f"the owners' work at PriorityClass {owners} asked for node {b.node}'s {b.gpus} GPU(s)",
                }
            )
        host.returning([b.pod for b in borrowed])
        world = host.full_world()
        if not host.wait("the owners taking their GPUs back", lambda: host.trains_below(world, started), deadline):
            return False
        until = min(self._clock() + self.hold_s, deadline)
        host.wait("the owners keeping their GPUs", lambda: self._clock() >= until, deadline)
        if self._clock() >= deadline:
            return False
        reclaim.give_back()
        return True

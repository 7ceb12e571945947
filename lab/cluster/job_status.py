"""A job's status: its conditions, its range, each worker pod's state and how it last ended,
and the workers the training operator saw killed for memory."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.rest import ApiException

from lab.cluster.kube import KubeApi
from lab.cluster.pytorchjob import (
    PYTORCHJOB,
    TRAINING_CONTAINER,
    JobError,
    job_limits,
    job_pods,
    read_job,
    replica_index,
    training_container,
    worker_pod_spec,
)
from lab.vocab.job import CONTAINER_KILLS, RETRYABLE_EXIT_CODE, FaultTolerance
from lab.vocab.job_parts import burst_job_name

# How a container killed at its memory limit ended (its terminated state's reason), and the exit
# code of a process killed by SIGKILL (128 + 9), as the operator reports a worker's.
OOM_KILLED = "OOMKilled"
EXIT_KILLED = 137
# The event the training operator records each time it sees a worker's container ended (v1.9.4,
# pkg/controller.v1/common/pod.go: exitedWithCodeReason, "Pod: %v.%v exited with code %v").
EXITED_WITH_CODE = "ExitedWithCode"
_EXITED = re.compile(r"^Pod: (?P<namespace>[^.]+)\.(?P<pod>\S+) exited with code (?P<code>-?\d+)$")


@dataclass(frozen=True)
class PodState:
    name: str
    index: int | None  # the worker's replica index
    phase: str
    node: str | None
    restarts: int
    ready: bool
    # How its training container last ended, when it failed: exit code and termination message
    # (the last log lines, under the chart's FallbackToLogsOnError).
    ended_with: str | None = None
    oom_killed: bool = False  # its container was killed at its memory limit (reason OOMKilled)
    memory_limit: str | None = None  # its training container's memory limit


@dataclass(frozen=True)
class JobStatus:
    name: str
    namespace: str
    conditions: list[tuple[str, str, str]]  # (type, reason, message) of the true conditions, oldest first
    min_replicas: int | None
    max_replicas: int | None
    max_restarts: int | None
    pods: list[PodState] = field(default_factory=list)
    fault_tolerance: str = FaultTolerance.ELASTIC.value
    # Worker pods the training operator saw exit 137 (killed: OOMKilled at the memory limit, as a
    # rule), with the number of its ExitedWithCode events for them; the pods are recreated at once.
    memory_kills: dict[str, int] = field(default_factory=dict)
    memory_limit: str | None = None  # the workers' memory limit, as the job sets it
    # Worker exits the operator saw, counted apart: preemptions (exit >= 128, recreated without
    # counting) and failures (a script's error).
    preempted_exits: int = 0
    failed_exits: int = 0
    priority_class: str | None = None  # its workers' PriorityClass
    # The job's borrowed part (its `-burst` PyTorchJob, at a priority other teams' work preempts
    # first), where it has one.
    burst: JobStatus | None = None

    @property
    def state(self) -> str:
        """The newest true condition (Created, Running, Restarting, Succeeded, Failed)."""
        return self.conditions[-1][0] if self.conditions else "Pending"

    def as_dict(self) -> dict[str, Any]:
        """The status as `-o json` prints it: every field, the state, conditions as objects."""
        out = dataclasses.asdict(self)
        out["state"] = self.state
        out["conditions"] = [{"type": t, "reason": r, "message": m} for t, r, m in self.conditions]
        return out

    @property
    def running_workers(self) -> int:
        return sum(1 for p in self.pods if p.phase == "Running")

    @property
    def restarts(self) -> int:
        return sum(p.restarts for p in self.pods)

    def _pod_lines(self) -> list[str]:
        out = []
        for p in self.pods:
            out.append(
                f"  pod {p.name} (worker {p.index}): {p.phase}{' ready' if p.ready else ''} "
                f"on {p.node or 'no node yet'}, restarts {p.restarts}"
            )
            if p.ended_with:
                out += [f"    {line}" for line in p.ended_with.splitlines()]
            if p.oom_killed:
                out.append(f"    killed for memory (OOMKilled) at its memory limit {p.memory_limit or 'none set'}")
        return out

    def lines(self) -> list[str]:
        out = [
            f"job {self.namespace}/{self.name}: {self.state}; "
            f"workers running {self.running_workers} "
            f"({self.fault_tolerance} {self.min_replicas}..{self.max_replicas}), "
            f"container restarts {self.restarts} (job allows {self.max_restarts})"
        ]
        out += [f"  condition {t}: {r} {m}".rstrip() for t, r, m in self.conditions]
        if self.preempted_exits or self.failed_exits:
            out.append(
                f"  worker exits the operator saw: {self.preempted_exits} preempted or killed (exit >= 128: pods "
                f"recreated, nothing counted), {self.failed_exits} failed (the script's error)"
            )
        out += self._pod_lines()
        if self.burst is not None:
            b = self.burst
            out.append(
                f"  borrowed part {b.name} (priority {b.priority_class}, preempted first): {b.state}; workers "
                f"running {b.running_workers} of its {len(b.pods)} pod(s); exits the operator saw: "
                f"{b.preempted_exits} preempted or killed, {b.failed_exits} failed"
            )
            out += [f"  {line}" for line in b._pod_lines()]
        if self.memory_kills:
            killed = ", ".join(f"{pod} ({n} event(s))" for pod, n in sorted(self.memory_kills.items()))
            # Per-step groups host their own rendezvous store: no ledger of a pod's containers outlives them.
            bound = (
                f"its agent ends the job after {CONTAINER_KILLS} kills in a row on one node"
                if self.fault_tolerance == FaultTolerance.ELASTIC.value
                else "nothing ends a per-step job for it (`elastic-lab delete` it)"
            )
            out += [
                f"  workers killed for memory (exit 137: OOMKilled, most likely), as the operator saw: {killed}",
                f"    memory limit per worker: {self.memory_limit or 'none set'}; the operator recreates such a pod "
                f"without limit, and {bound}: submit it again with more --memory, or a smaller model or batch",
            ]
        return out


def pod_state(pod: Any) -> PodState:
    statuses = (pod.status.container_statuses if pod.status else None) or []
    containers = (pod.spec.containers if pod.spec else None) or []
    training = next((c for c in containers if c.name == TRAINING_CONTAINER), None)
    limits = (training.resources.limits if training is not None and training.resources else None) or {}
    return PodState(
        name=pod.metadata.name,
        index=replica_index(pod),
        phase=(pod.status.phase if pod.status else None) or "Unknown",
        node=pod.spec.node_name if pod.spec else None,
        restarts=sum(s.restart_count or 0 for s in statuses),
        ready=bool(statuses) and all(s.ready for s in statuses),
        ended_with=_failed_ending(statuses),
        oom_killed=any(_ended_for_memory(s) for s in statuses),
        memory_limit=limits.get("memory"),
    )


def _ended_for_memory(status: Any) -> bool:
    """Whether a container was killed at its memory limit, now or before its last restart."""
    return any(
        state is not None and state.terminated is not None and state.terminated.reason == OOM_KILLED
        for state in (status.state, status.last_state)
    )


# Lines of a failed container's termination message that status shows: the agent's last words
# (a crash loop's exception and where it was raised).
ENDING_LINES = 6


def _failed_ending(statuses: list[Any]) -> str | None:
    """'exited <code> (<reason>)' and the end of the termination message of a container that
    failed, now or before its last restart; None when none did."""
    for s in statuses:
        for state in (s.state, s.last_state):
            ended = state.terminated if state else None
            if ended is None or not ended.exit_code:
                continue
            head = f"ended: exit code {ended.exit_code}" + (f" ({ended.reason})" if ended.reason else "")
            message = [line for line in (ended.message or "").splitlines() if line.strip()][-ENDING_LINES:]
            return "\n".join([head, *(f"  {line[:200]}" for line in message)])
    return None


def _memory_limit(job: Mapping[str, Any]) -> str | None:
    """The memory limit of the job's worker containers, as its spec sets it."""
    return ((training_container(job).get("resources") or {}).get("limits") or {}).get("memory")


def exited_with_code(kube: KubeApi, name: str, namespace: str) -> list[tuple[str, int, int]]:
    """(pod, exit code, events) of the job's worker pods the training operator saw end: its
    ExitedWithCode events (pkg/controller.v1/common/pod.go, "Pod: <namespace>.<pod> exited with
    code <code>"), the only trace left of a pod it deleted and recreated. Empty where events cannot
    be read (they expire after an hour by default; the kubeconfig's user may lack the right)."""
    try:
        found = kube.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.kind={PYTORCHJOB},involvedObject.name={name}"
        ).items
    except ApiException:
        return []
    exits = []
    for event in found:
        involved = event.involved_object
        if event.reason != EXITED_WITH_CODE or involved is None or (involved.kind, involved.name) != (PYTORCHJOB, name):
            continue
        m = _EXITED.match(event.message or "")
        if m and m["namespace"] == namespace:
            exits.append((m["pod"], int(m["code"]), event.count or 1))
    return exits


def memory_kills(exits: list[tuple[str, int, int]]) -> dict[str, int]:
    """{pod: events} of the worker pods seen to exit with 137."""
    kills: dict[str, int] = {}
    for pod, code, count in exits:
        if code == EXIT_KILLED:
            kills[pod] = kills.get(pod, 0) + count
    return kills


def preemptions_and_failures(exits: list[tuple[str, int, int]]) -> tuple[int, int]:
    """Worker exits the operator recreates without counting (exit >= 128: a notice's SIGTERM, a
    kill, a node lost without an exit code: lab.k8s.operator_rules), and the others (a script's
    error, which ends the job under restartPolicy ExitCode)."""
    preempted = sum(count for _, code, count in exits if code >= RETRYABLE_EXIT_CODE)
    return preempted, sum(count for _, _, count in exits) - preempted


def status(kube: KubeApi, name: str, namespace: str) -> JobStatus:
    """The job's status, its borrowed part's within it."""
    found = _status(kube, name, namespace)
    if found is None:
        raise JobError(f"no PyTorchJob {namespace}/{name}")
    burst = _status(kube, burst_job_name(name), namespace)
    return dataclasses.replace(found, burst=burst) if burst is not None else found


def _status(kube: KubeApi, name: str, namespace: str) -> JobStatus | None:
    job = read_job(kube, name, namespace)
    if job is None:
        return None
    fault_tolerance, minimum, maximum, restarts = job_limits(job)
    exits = exited_with_code(kube, name, namespace)
    preempted, failed = preemptions_and_failures(exits)
    conditions = [
        (c.get("type", "?"), c.get("reason", ""), c.get("message", ""))
        for c in ((job.get("status") or {}).get("conditions") or [])
        if c.get("status") == "True"
    ]
    return JobStatus(
        name=name,
        namespace=namespace,
        conditions=conditions,
        min_replicas=minimum,
        max_replicas=maximum,
        max_restarts=restarts,
        pods=[pod_state(p) for p in job_pods(kube, name, namespace)],
        fault_tolerance=fault_tolerance,
        memory_kills=memory_kills(exits),
        preempted_exits=preempted,
        failed_exits=failed,
        memory_limit=_memory_limit(job),
        priority_class=worker_pod_spec(job).get("priorityClassName"),
    )

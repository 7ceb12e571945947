"""A job's whole life on a cluster: submit, status, logs, delete.

The PyTorchJob goes through the kubeflow-training SDK (`TrainingClient`, the operator's own
client): the rendered object is turned into the SDK's `KubeflowOrgV1PyTorchJob` and back, and
refused if that round trip would drop or change anything (a field the SDK does not know would
otherwise vanish silently). The other objects a job renders (a c10d store's or a per-step
job's lighthouse's Deployment, Service, PodDisruptionBudget and NetworkPolicy) and everything
about pods, their logs and nodes go through the `kubernetes` client.
Refusals come back as `JobError` with the server's reason, not as matched text.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import queue
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from lab.cluster.kube import KubeApi, KubeError, api_error
from lab.vocab.job import CONTAINER_KILLS, ENV_CHECKPOINT_EVERY, FaultTolerance
from lab.vocab.names import PROJECT
from lab.vocab.per_step import ENV_MIN_REPLICAS
from lab.vocab.problems import InvalidInput, Problem

# Labels the training operator puts on a job's pods.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
# The label our job chart puts on everything it renders.
JOB_LABEL = f"{PROJECT}/job"
PYTORCHJOB = "PyTorchJob"
SDK_MODEL = "KubeflowOrgV1PyTorchJob"
# The resource metrics API: metrics-server serves it, and an HPA on CPU reads nothing else. EKS
# runs it as the metrics-server add-on (components/eks/cluster.py); AKS has it built in.
METRICS_API_GROUP = "metrics.k8s.io"
# The container of a worker pod that runs the agent (the operator's default container name).
TRAINING_CONTAINER = "pytorch"
# How a container killed at its memory limit ended (its terminated state's reason), and the exit
# code of a process killed by SIGKILL (128 + 9), as the operator reports a worker's.
OOM_KILLED = "OOMKilled"
EXIT_KILLED = 137
# The event the training operator records each time it sees a worker's container ended (v1.9.4,
# pkg/controller.v1/common/pod.go: exitedWithCodeReason, "Pod: %v.%v exited with code %v").
EXITED_WITH_CODE = "ExitedWithCode"
_EXITED = re.compile(r"^Pod: (?P<namespace>[^.]+)\.(?P<pod>\S+) exited with code (?P<code>-?\d+)$")


class JobError(KubeError):
    """A job operation cannot be done (exists already, missing, refused by the server)."""


def training_client(kube: KubeApi, namespace: str) -> Any:
    """TrainingClient on this cluster's own configuration (never the global default). The SDK
    is imported on use: it loads the whole kubernetes model set."""
    from kubeflow.training import TrainingClient

    return TrainingClient(client_configuration=kube.api.configuration, namespace=namespace)


def to_sdk_job(job: Mapping[str, Any]) -> Any:
    """The SDK's PyTorchJob model of a rendered PyTorchJob; JobError if the SDK's model would
    not send back exactly what was rendered."""
    from kubeflow.training import ApiClient
    from kubeflow.training.utils import utils as sdk_utils

    api = ApiClient()
    # The SDK types elasticPolicy.metrics as K8sIoApiAutoscalingV2MetricSpec, a model it does not
    # ship (kubeflow-training 1.9.4): deserializing an HPA's metrics raises AttributeError. They
    # go through the kubernetes client's own autoscaling/v2 MetricSpec, which the SDK serializes
    # as it does its own models; the round trip below still checks them.
    body = copy.deepcopy(dict(job))
    metrics = ((body.get("spec") or {}).get("elasticPolicy") or {}).pop("metrics", None)
    model = api.deserialize(sdk_utils.FakeResponse(body), SDK_MODEL)
    if metrics is not None and model.spec.elastic_policy is not None:
        model.spec.elastic_policy.metrics = client.ApiClient().deserialize(
            sdk_utils.FakeResponse(metrics), "list[V2MetricSpec]"
        )
    lost = sorted(_differences(job, api.sanitize_for_serialization(model)))
    if lost:
        raise JobError(
            "the kubeflow-training SDK's PyTorchJob model would change the rendered job at "
            + ", ".join(lost[:10])
            + ": refusing to submit a job other than the one checked"
        )
    return model


def _differences(a: Any, b: Any, path: str = "") -> Iterator[str]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in set(a) | set(b):
            yield from _differences(a.get(key), b.get(key), f"{path}.{key}" if path else str(key))
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _differences(x, y, f"{path}[{i}]")
    elif a != b and not _same_quantity(path, a, b):
        yield path or "<root>"


# Where a container's resource quantities are: the SDK's model types them as strings, so a
# quantity rendered as a number (the chart's `nvidia.com/gpu: 1`) comes back as "1", which
# Kubernetes reads as the same quantity.
_QUANTITIES = re.compile(r"\.resources\.(limits|requests)\.[^\[\]]+$")  # the name may hold dots


def _same_quantity(path: str, rendered: Any, sent: Any) -> bool:
    """A resource quantity the SDK sends as the string of the number rendered."""
    number = isinstance(rendered, int | float) and not isinstance(rendered, bool)
    return number and isinstance(sent, str) and sent == str(rendered) and bool(_QUANTITIES.search(path))


def _cause(exc: BaseException) -> ApiException | None:
    """The ApiException the SDK wrapped in its RuntimeError (it raises `from e`)."""
    while exc is not None:
        if isinstance(exc, ApiException):
            return exc
        exc = exc.__cause__  # type: ignore[assignment]
    return None


# ------------------------------------------------------------------ submit / delete
def read_job(kube: KubeApi, name: str, namespace: str) -> dict[str, Any] | None:
    """The PyTorchJob as the server holds it, or None when there is none of that name."""
    try:
        job = kube.custom.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise api_error(exc, f"reading PyTorchJob {namespace}/{name}") from None
    return dict(job)


def job_exists(kube: KubeApi, name: str, namespace: str) -> bool:
    return read_job(kube, name, namespace) is not None


def submit(kube: KubeApi, objects: Sequence[Mapping[str, Any]], namespace: str, *, replace: bool = False) -> list[str]:
    """Create the job's objects; the PyTorchJob last, so that its store exists when its pods
    start, and then made the owner of the others: the garbage collector deletes them with it,
    however it is deleted (a disruption budget left behind blocks drains and node updates). A
    job of the same name is an error unless `replace` (then it is deleted first and its pods are
    waited for). Returns `kind/name` of what was created."""
    jobs = [o for o in objects if o.get("kind") == PYTORCHJOB]
    if len(jobs) != 1:
        raise JobError(f"expected one PyTorchJob among the rendered objects, found {len(jobs)}")
    job = jobs[0]
    name = job["metadata"]["name"]
    model = to_sdk_job(job)  # before anything is created
    require_metrics_api(kube, job)
    if job_exists(kube, name, namespace):
        if not replace:
            raise JobError(
                f"PyTorchJob {namespace}/{name} already exists: `elastic-lab delete --job {name}` first, "
                "pass --replace, or choose another --name"
            )
        delete(kube, name, namespace, wait_s=120)
    created: list[Mapping[str, Any]] = []
    job_created = False
    try:
        for obj in objects:
            if obj is not job:
                _create(kube, obj, namespace)
                created.append(obj)
        _create_job(kube, model, name, namespace)
        job_created = True
        _owned_by_the_job(kube, created, name, namespace)
    except KubeError:
        # No half-submitted job left behind.
        if job_created:
            with contextlib.suppress(RuntimeError):
                training_client(kube, namespace).delete_job(name, namespace=namespace)
        _remove(kube, created, namespace)
        raise
    return [f"{o['kind']}/{o['metadata']['name']}" for o in [*created, job]]


def serves_metrics_api(kube: KubeApi) -> bool:
    """Whether the cluster serves the resource metrics API. The API server's discovery (GET
    /apis) lists an aggregated group such as metrics-server's only while its APIService is
    Available."""
    try:
        groups = client.ApisApi(kube.api).get_api_versions(_request_timeout=15)
    except ApiException as exc:
        raise api_error(exc, "listing the cluster's API groups") from None
    return any(group.name == METRICS_API_GROUP for group in groups.groups or [])


def require_metrics_api(kube: KubeApi, job: Mapping[str, Any]) -> None:
    """Refuse a PyTorchJob that asks for an HPA (`elasticPolicy.metrics`, from `submit
    --autoscale-cpu`) on a cluster without the resource metrics API: the operator would make
    the HPA, and it would never read a metric and never scale."""
    metrics = ((job.get("spec") or {}).get("elasticPolicy") or {}).get("metrics")
    if not metrics or serves_metrics_api(kube):
        return
    target = ((metrics[0].get("resource") or {}).get("target") or {}).get("averageUtilization")
    raise InvalidInput(
        [
            Problem(
                "--autoscale-cpu",
                target,
                f"a cluster that serves the {METRICS_API_GROUP} API (metrics-server), which an HPA reads the "
                f"workers' CPU from: {kube.source} lists no such API group. On an EKS stack `elastic-lab up` "
                "installs the metrics-server add-on; AKS has it built in; on another cluster install "
                "metrics-server, or submit without --autoscale-cpu",
            )
        ]
    )


def _owned_by_the_job(kube: KubeApi, objects: Sequence[Mapping[str, Any]], name: str, namespace: str) -> None:
    """Make PyTorchJob `name` the owner of `objects` (not their controller: nothing reconciles them)."""
    uid = ((read_job(kube, name, namespace) or {}).get("metadata") or {}).get("uid")
    if not uid:
        raise JobError(f"PyTorchJob {namespace}/{name} has no uid after its creation")
    owner = {"apiVersion": "kubeflow.org/v1", "kind": PYTORCHJOB, "name": name, "uid": uid}
    for obj in objects:
        api_class, suffix = _SIDE_KINDS.get(obj["kind"], (None, ""))
        if api_class is None:
            continue
        patch = {"metadata": {"ownerReferences": [owner]}}
        try:
            getattr(api_class(kube.api), f"patch_namespaced_{suffix}")(obj["metadata"]["name"], namespace, patch)
        except ApiException as exc:
            raise api_error(
                exc, f"making PyTorchJob {name} the owner of {obj['kind']} {obj['metadata']['name']}"
            ) from None


def _create(kube: KubeApi, obj: Mapping[str, Any], namespace: str) -> None:
    try:
        utils.create_from_dict(kube.api, dict(obj), namespace=namespace)
    except utils.FailToCreateError as exc:
        first = exc.api_exceptions[0]
        raise api_error(first, f"creating {obj['kind']} {namespace}/{obj['metadata']['name']}") from None


def _create_job(kube: KubeApi, model: Any, name: str, namespace: str) -> None:
    try:
        training_client(kube, namespace).create_job(job=model, namespace=namespace)
    except RuntimeError as exc:
        cause = _cause(exc)
        if cause is not None and cause.status == 404:
            raise JobError(
                "the server has no PyTorchJob resource: the training operator is not installed (deploy the platform)"
            ) from None
        raise (api_error(cause, f"creating PyTorchJob {namespace}/{name}") if cause else JobError(str(exc))) from None


# The kinds a job renders beside its PyTorchJob (a c10d store, a lighthouse), with the client API that
# manages each and the suffix of its `*_namespaced_<suffix>` methods.
_SIDE_KINDS = {
    "Deployment": (client.AppsV1Api, "deployment"),
    "Service": (client.CoreV1Api, "service"),
    "PodDisruptionBudget": (client.PolicyV1Api, "pod_disruption_budget"),
    "NetworkPolicy": (client.NetworkingV1Api, "network_policy"),
}


def _remove(kube: KubeApi, objects: Sequence[Mapping[str, Any]], namespace: str) -> None:
    """Delete objects this call created (best effort: the error that got us here matters more)."""
    for obj in reversed(objects):
        api, suffix = _SIDE_KINDS.get(obj["kind"], (None, ""))
        if api is None:
            continue
        try:
            getattr(api(kube.api), f"delete_namespaced_{suffix}")(obj["metadata"]["name"], namespace)
        except ApiException:
            pass


def delete(kube: KubeApi, name: str, namespace: str, *, wait_s: float = 0) -> list[str]:
    """Delete the PyTorchJob and the objects rendered with it (by our job label); with
    `wait_s`, wait until its pods are gone. Returns `kind/name` of what was deleted."""
    if not job_exists(kube, name, namespace):
        raise JobError(f"no PyTorchJob {namespace}/{name} (`elastic-lab status` lists the namespace's jobs)")
    try:
        training_client(kube, namespace).delete_job(name, namespace=namespace)
    except RuntimeError as exc:
        cause = _cause(exc)
        raise (api_error(cause, f"deleting PyTorchJob {namespace}/{name}") if cause else JobError(str(exc))) from None
    deleted = [f"{PYTORCHJOB}/{name}"]
    selector = f"{JOB_LABEL}={name}"
    try:
        for kind, (api_class, suffix) in _SIDE_KINDS.items():
            api = api_class(kube.api)
            for item in getattr(api, f"list_namespaced_{suffix}")(namespace, label_selector=selector).items:
                getattr(api, f"delete_namespaced_{suffix}")(item.metadata.name, namespace)
                deleted.append(f"{kind}/{item.metadata.name}")
    except ApiException as exc:
        raise api_error(exc, f"deleting the objects of job {namespace}/{name}") from None
    deadline = time.monotonic() + wait_s
    while wait_s and job_pods(kube, name, namespace):
        if time.monotonic() > deadline:
            raise JobError(f"the pods of job {namespace}/{name} were still there {wait_s:g} s after its deletion")
        time.sleep(1)
    return deleted


# ------------------------------------------------------------------ status
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

    def lines(self) -> list[str]:
        out = [
            f"job {self.namespace}/{self.name}: {self.state}; "
            f"workers running {self.running_workers} "
            f"({self.fault_tolerance} {self.min_replicas}..{self.max_replicas}), "
            f"container restarts {self.restarts} (job allows {self.max_restarts})"
        ]
        out += [f"  condition {t}: {r} {m}".rstrip() for t, r, m in self.conditions]
        for p in self.pods:
            out.append(
                f"  pod {p.name} (worker {p.index}): {p.phase}{' ready' if p.ready else ''} "
                f"on {p.node or 'no node yet'}, restarts {p.restarts}"
            )
            if p.ended_with:
                out += [f"    {line}" for line in p.ended_with.splitlines()]
            if p.oom_killed:
                out.append(f"    killed for memory (OOMKilled) at its memory limit {p.memory_limit or 'none set'}")
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


def job_pods(kube: KubeApi, name: str, namespace: str) -> list[Any]:
    try:
        pods = kube.core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={name}").items
    except ApiException as exc:
        raise api_error(exc, f"listing the pods of job {namespace}/{name}") from None
    return sorted(pods, key=lambda p: (_index(p) is None, _index(p) or 0, p.metadata.name))


def _index(pod: Any) -> int | None:
    value = (pod.metadata.labels or {}).get(REPLICA_INDEX_LABEL)
    return int(value) if value is not None and str(value).isdigit() else None


def pod_state(pod: Any) -> PodState:
    statuses = (pod.status.container_statuses if pod.status else None) or []
    containers = (pod.spec.containers if pod.spec else None) or []
    training = next((c for c in containers if c.name == TRAINING_CONTAINER), None)
    limits = (training.resources.limits if training is not None and training.resources else None) or {}
    return PodState(
        name=pod.metadata.name,
        index=_index(pod),
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


def _limits(job: Mapping[str, Any]) -> tuple[str, int | None, int | None, int | None]:
    """(fault tolerance, min and max nodes, restarts allowed per agent) of a PyTorchJob."""
    spec = job.get("spec") or {}
    policy = spec.get("elasticPolicy")
    if policy is not None:
        return (
            FaultTolerance.ELASTIC.value,
            policy.get("minReplicas"),
            policy.get("maxReplicas"),
            policy.get("maxRestarts"),
        )
    # A per-step job (no elasticPolicy): the quorum's minimum is in its workers' environment, its
    # groups are the Worker replicas, and each group's torchrun has its budget on its command line.
    worker = (spec.get("pytorchReplicaSpecs") or {}).get("Worker") or {}
    minimum = restarts = None
    for container in ((worker.get("template") or {}).get("spec") or {}).get("containers") or []:
        for item in container.get("env") or []:
            if item.get("name") == ENV_MIN_REPLICAS and str(item.get("value", "")).isdigit():
                minimum = int(item["value"])
        for arg in container.get("args") or []:
            flag, _, value = str(arg).partition("=")
            if flag == "--max-restarts" and value.isdigit():
                restarts = int(value)
    return FaultTolerance.PER_STEP.value, minimum, worker.get("replicas"), restarts


def _memory_limit(job: Mapping[str, Any]) -> str | None:
    """The memory limit of the job's worker containers, as its spec sets it."""
    worker = ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).get("Worker") or {}
    for container in ((worker.get("template") or {}).get("spec") or {}).get("containers") or []:
        if container.get("name") == TRAINING_CONTAINER:
            return ((container.get("resources") or {}).get("limits") or {}).get("memory")
    return None


def memory_kills(kube: KubeApi, name: str, namespace: str) -> dict[str, int]:
    """{pod: events} of the job's worker pods the training operator saw exit with 137: its
    ExitedWithCode events (pkg/controller.v1/common/pod.go, "Pod: <namespace>.<pod> exited with
    code <code>"), the only trace left of a pod it deleted and recreated. Empty where events cannot
    be read (they expire after an hour by default; the kubeconfig's user may lack the right)."""
    try:
        found = kube.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.kind={PYTORCHJOB},involvedObject.name={name}"
        ).items
    except ApiException:
        return {}
    kills: dict[str, int] = {}
    for event in found:
        involved = event.involved_object
        if event.reason != EXITED_WITH_CODE or involved is None or (involved.kind, involved.name) != (PYTORCHJOB, name):
            continue
        m = _EXITED.match(event.message or "")
        if m and m["namespace"] == namespace and int(m["code"]) == EXIT_KILLED:
            kills[m["pod"]] = kills.get(m["pod"], 0) + (event.count or 1)
    return kills


def status(kube: KubeApi, name: str, namespace: str) -> JobStatus:
    job = read_job(kube, name, namespace)
    if job is None:
        raise JobError(f"no PyTorchJob {namespace}/{name}")
    fault_tolerance, minimum, maximum, restarts = _limits(job)
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
        memory_kills=memory_kills(kube, name, namespace),
        memory_limit=_memory_limit(job),
    )


@dataclass(frozen=True)
class Scaled:
    """A job's Worker replicas before and after `scale`, and the range it may take."""

    name: str
    namespace: str
    before: int | None
    after: int
    minimum: int | None
    maximum: int | None
    fault_tolerance: str

    def line(self) -> str:
        limits = f"{self.minimum}..{self.maximum if self.maximum is not None else 'any'}"
        change = "unchanged" if self.before == self.after else f"{self.before} -> {self.after}"
        return (
            f"{self.namespace}/{self.name}: Worker replicas {change} (range {limits}); the operator adds or removes "
            "workers and the survivors re-form the job at the new size (`elastic-lab status` shows it)"
        )


def scale(kube: KubeApi, name: str, namespace: str, nodes: int) -> Scaled:
    """Set the job's Worker replicas to `nodes` through the PyTorchJob's scale subresource
    (what `kubectl scale` and an HPA use), within its range: an elastic job's
    elasticPolicy minReplicas..maxReplicas, a per-step job's quorum minimum and up. Refused
    (InvalidInput) outside it, before anything changes."""
    from lab.vocab.problems import InvalidInput, Problem

    job = read_job(kube, name, namespace)
    if job is None:
        raise JobError(f"no PyTorchJob {namespace}/{name}")
    fault_tolerance, minimum, maximum, _ = _limits(job)
    before = ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).get("Worker", {}).get("replicas")
    if fault_tolerance == FaultTolerance.PER_STEP.value:
        maximum = None  # a per-step job's groups join its lighthouse at any count
    low = minimum if minimum is not None else 1
    if (
        isinstance(nodes, bool)
        or not isinstance(nodes, int)
        or nodes < low
        or (maximum is not None and nodes > maximum)
    ):
        where = (
            "elasticPolicy minReplicas..maxReplicas"
            if fault_tolerance == FaultTolerance.ELASTIC.value
            else "its quorum minimum and up"
        )
        shown = f"{low}..{maximum}" if maximum is not None else f"{low} or more"
        raise InvalidInput([Problem("--nodes", nodes, f"{shown}: the job's range ({where})")])
    if before != nodes:
        try:
            kube.custom.patch_namespaced_custom_object_scale(
                "kubeflow.org", "v1", namespace, "pytorchjobs", name, {"spec": {"replicas": nodes}}
            )
        except ApiException as exc:
            raise api_error(exc, f"scale PyTorchJob {namespace}/{name}") from None
    return Scaled(name, namespace, before, nodes, minimum, maximum, fault_tolerance)


def checkpoint_every(kube: KubeApi, name: str, namespace: str, default: int = 50) -> int:
    """The running job's checkpoint interval (its workers' LAB_CHECKPOINT_EVERY), else `default`."""
    job = read_job(kube, name, namespace)
    if job is None:
        raise JobError(f"no PyTorchJob {namespace}/{name} to attach to")
    for replica in ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).values():
        for container in ((replica.get("template") or {}).get("spec") or {}).get("containers") or []:
            for item in container.get("env") or []:
                if item.get("name") == ENV_CHECKPOINT_EVERY and str(item.get("value", "")).isdigit():
                    return int(item["value"])
    return default


def list_jobs(kube: KubeApi, namespace: str) -> list[str]:
    try:
        found = kube.custom.list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")
    except ApiException as exc:
        raise api_error(exc, f"listing PyTorchJobs in {namespace}") from None
    return sorted(item["metadata"]["name"] for item in found.get("items", []))


# ------------------------------------------------------------------ logs
@dataclass(frozen=True)
class LogWindow:
    """Which part of a pod's log: its last `tail` lines, the last `since_s` seconds, or the
    previous container's (a worker that restarted: the crash is there)."""

    tail: int | None = None
    since_s: int | None = None
    previous: bool = False

    def query(self) -> dict[str, Any]:
        """The log request's parameters (the kubernetes client's names)."""
        out: dict[str, Any] = {}
        if self.tail is not None:
            out["tail_lines"] = self.tail
        if self.since_s is not None:
            out["since_seconds"] = self.since_s
        if self.previous:
            out["previous"] = True
        return out


def _pod_lines(kube: KubeApi, pod: str, namespace: str, follow: bool, window: LogWindow | None = None) -> Iterator[str]:
    try:
        response = kube.core.read_namespaced_pod_log(
            pod, namespace, follow=follow, _preload_content=False, **(window or LogWindow()).query()
        )
    except ApiException as exc:
        raise api_error(exc, f"reading the log of pod {namespace}/{pod}") from None
    pending = b""
    try:
        for chunk in response.stream(4096):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")
    finally:
        response.release_conn()


def logs_of_pod(kube: KubeApi, pod: str, namespace: str, *, follow: bool = False) -> Iterator[tuple[str, str]]:
    """(pod, line) of one pod's log; with `follow`, until its container ends."""
    for line in _pod_lines(kube, pod, namespace, follow):
        yield pod, line


def logs(
    kube: KubeApi,
    name: str,
    namespace: str,
    *,
    worker: int | None = None,
    follow: bool = False,
    window: LogWindow | None = None,
) -> Iterator[tuple[str, str]]:
    """(pod, line) of the job's workers (or of one, by replica index); with `follow`, the
    lines of all workers as they come, until every stream ends."""
    pods = [p for p in job_pods(kube, name, namespace) if worker is None or _index(p) == worker]
    if not pods:
        which = f"worker {worker} of job" if worker is not None else "job"
        raise JobError(f"{which} {namespace}/{name} has no pods (yet): `elastic-lab status --job {name}`")
    names = [p.metadata.name for p in pods]
    if not follow:
        for pod in names:
            for line in _pod_lines(kube, pod, namespace, follow=False, window=window):
                yield pod, line
        return
    lines: queue.Queue[tuple[str, str | BaseException | None]] = queue.Queue()

    def pump(pod: str) -> None:
        try:
            for line in _pod_lines(kube, pod, namespace, follow=True, window=window):
                lines.put((pod, line))
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, which raises it
            lines.put((pod, exc))
        lines.put((pod, None))

    for pod in names:
        threading.Thread(target=pump, args=(pod,), daemon=True).start()
    open_streams = len(names)
    while open_streams:
        pod, item = lines.get()
        if item is None:
            open_streams -= 1
        elif isinstance(item, BaseException):
            raise item
        else:
            yield pod, item

"""A job's objects created together and deleted together: `submit` and `delete`.

The PyTorchJob goes through the kubeflow-training SDK (`TrainingClient`, the operator's own
client): the rendered object is turned into the SDK's `KubeflowOrgV1PyTorchJob` and back, and
refused if that round trip would drop or change anything (a field the SDK does not know would
otherwise vanish silently). The other objects a job renders (a c10d store's or a per-step
job's lighthouse's Deployment, Service, PodDisruptionBudget and NetworkPolicy) go through the
`kubernetes` client, and are made the job's own so that they go with it.
Refusals come back as `JobError` with the server's reason, not as matched text.
"""

from __future__ import annotations

import contextlib
import copy
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from lab.cluster.job_quota import refuse_a_core_without_room
from lab.cluster.kube import KubeApi, KubeError, api_error
from lab.cluster.pytorchjob import JOB_LABEL, PYTORCHJOB, JobError, job_exists, job_pods, read_job
from lab.vocab.job_parts import PART_BURST, PART_CORE, burst_job_name, part_of
from lab.vocab.problems import InvalidInput, Problem

SDK_MODEL = "KubeflowOrgV1PyTorchJob"
# The resource metrics API: metrics-server serves it, and an HPA on CPU reads nothing else. EKS
# runs it as the metrics-server add-on (components/eks/cluster.py); AKS has it built in.
METRICS_API_GROUP = "metrics.k8s.io"
# Kueue's API group (its Workloads, queues), and the label that puts a job in one of its queues.
KUEUE_API_GROUP = "kueue.x-k8s.io"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


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


def submit(kube: KubeApi, objects: Sequence[Mapping[str, Any]], namespace: str, *, replace: bool = False) -> list[str]:
    """Create the job's objects; its PyTorchJob last (then its borrowed part's, where it has a
    burst), so that its store exists when its pods start, and then made the owner of the others:
    the garbage collector deletes them with it, however it is deleted (a disruption budget left
    behind blocks drains and node updates; burst workers left behind would wait for a run that
    is over). A job of the same name is an error unless `replace` (then it is deleted first and
    its pods are waited for). Returns `kind/name` of what was created."""
    job, burst = _the_jobs(objects)
    parts = [job] if burst is None else [job, burst]  # the order they are created in
    name = job["metadata"]["name"]
    models = [to_sdk_job(j) for j in parts]  # before anything is created
    require_metrics_api(kube, job)
    existing = [n for n in (name, burst_job_name(name)) if job_exists(kube, n, namespace)]
    if existing and not replace:
        raise JobError(
            f"PyTorchJob {namespace}/{name} already exists: `elastic-lab delete --job {name}` first, "
            "pass --replace, or choose another --name"
        )
    # The core must fit the team's GPU quota now; a burst that does not waits for room.
    refuse_a_core_without_room(
        kube, job, namespace, flag="--core" if burst is not None else "--max-nodes", replacing=existing
    )
    if existing:
        delete(kube, name, namespace, wait_s=120)
    created: list[Mapping[str, Any]] = []
    jobs_created: list[str] = []
    try:
        for obj in objects:
            if obj.get("kind") != PYTORCHJOB:
                _create(kube, obj, namespace)
                created.append(obj)
        for model, obj in zip(models, parts, strict=True):
            _create_job(kube, model, obj["metadata"]["name"], namespace)
            jobs_created.append(obj["metadata"]["name"])
        _owned_by_the_job(kube, [*created, *parts[1:]], name, namespace)
    except KubeError:
        # No half-submitted job left behind.
        for created_job in reversed(jobs_created):
            with contextlib.suppress(RuntimeError):
                training_client(kube, namespace).delete_job(created_job, namespace=namespace)
        _remove(kube, created, namespace)
        raise
    return [f"{o['kind']}/{o['metadata']['name']}" for o in [*created, *parts]]


def _the_jobs(objects: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], Mapping[str, Any] | None]:
    """The job's PyTorchJob, and its borrowed part's where it has one."""
    jobs = [o for o in objects if o.get("kind") == PYTORCHJOB]
    parts = {part_of(o) for o in jobs}
    if len(jobs) == 1 and PART_BURST not in parts:
        return jobs[0], None
    if len(jobs) == 2 and parts == {PART_CORE, PART_BURST}:
        core, burst = sorted(jobs, key=lambda o: part_of(o) == PART_BURST)
        if burst["metadata"]["name"] == burst_job_name(core["metadata"]["name"]):
            return core, burst
    names = [f"{(o.get('metadata') or {}).get('name')} ({part_of(o) or 'no part'})" for o in jobs]
    raise JobError(
        f"expected one PyTorchJob among the rendered objects, or a job's core and its {burst_job_name('<name>')} "
        f"part; found {len(jobs)}: {', '.join(names) or 'none'}"
    )


def serves_api_group(kube: KubeApi, name: str) -> bool:
    """Whether the cluster serves API group `name`. The API server's discovery (GET /apis)
    lists an aggregated group such as metrics-server's only while its APIService is Available."""
    try:
        groups = client.ApisApi(kube.api).get_api_versions(_request_timeout=15)
    except ApiException as exc:
        raise api_error(exc, "listing the cluster's API groups") from None
    return any(group.name == name for group in groups.groups or [])


def serves_metrics_api(kube: KubeApi) -> bool:
    """Whether the cluster serves the resource metrics API (an HPA reads the workers' CPU there)."""
    return serves_api_group(kube, METRICS_API_GROUP)


def kueue_warning(kube: KubeApi, namespace: str) -> str | None:
    """What a user must know where the cluster runs Kueue (it serves its API group): a job
    Kueue manages is suspended and requeued when its worker count changes (`scale`, an HPA),
    and a preemption suspends the whole PyTorchJob, burst and core alike. None elsewhere."""
    if not serves_api_group(kube, KUEUE_API_GROUP):
        return None
    return (
        f"warning: this cluster runs Kueue ({KUEUE_API_GROUP}). Keep it from managing this job: a `scale` (or an HPA) "
        "would make Kueue suspend and requeue it, and a Kueue preemption suspends the whole PyTorchJob (every "
        f"worker, the core's too). Leave namespace {namespace} out of its queues: no {KUEUE_QUEUE_LABEL} label "
        "on the job, and manageJobsWithoutQueueName off or a managedJobsNamespaceSelector that does not match it "
        "(docs/schedulers.md)."
    )


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
        patch = {"metadata": {"ownerReferences": [owner]}}
        try:
            if obj["kind"] == PYTORCHJOB:  # the job's borrowed part
                kube.custom.patch_namespaced_custom_object(
                    "kubeflow.org", "v1", namespace, "pytorchjobs", obj["metadata"]["name"], patch
                )
            elif api_class is not None:
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
    """Delete the PyTorchJob, its borrowed part where it has one, and the objects rendered with
    it (by our job label); with `wait_s`, wait until their pods are gone. Returns `kind/name`
    of what was deleted."""
    if not job_exists(kube, name, namespace):
        raise JobError(f"no PyTorchJob {namespace}/{name} (`elastic-lab status` lists the namespace's jobs)")
    names = [name, *([burst_job_name(name)] if job_exists(kube, burst_job_name(name), namespace) else [])]
    for each in names:
        try:
            training_client(kube, namespace).delete_job(each, namespace=namespace)
        except RuntimeError as exc:
            cause = _cause(exc)
            what = f"deleting PyTorchJob {namespace}/{each}"
            raise (api_error(cause, what) if cause else JobError(str(exc))) from None
    deleted = [f"{PYTORCHJOB}/{each}" for each in names]
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
    while wait_s and any(job_pods(kube, each, namespace) for each in names):
        if time.monotonic() > deadline:
            raise JobError(f"the pods of job {namespace}/{name} were still there {wait_s:g} s after its deletion")
        time.sleep(1)
    return deleted

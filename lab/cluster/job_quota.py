"""A job against the GPU quotas of its namespace, before anything is created: a ResourceQuota
on `requests.nvidia.com/gpu` that covers the workers' PriorityClass (a team's share, scoped by
PriorityClass) and has no room for the job's core refuses its pods one by one at admission (the
operator retries forever, the job never starts). `submit` says so at once, with the numbers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.client.rest import ApiException
from kubernetes.utils import parse_quantity

from lab.cluster.kube import KubeApi, api_error
from lab.cluster.pytorchjob import job_pods, training_container, worker_pod_spec, worker_replica
from lab.vocab.platform_facts import GPU, GPU_REQUESTS
from lab.vocab.problems import InvalidInput, Problem


def _worker(job: Mapping[str, Any]) -> tuple[int, str | None, int]:
    """(replicas, PriorityClass, GPUs per worker) of a PyTorchJob's Worker."""
    gpus = ((training_container(job).get("resources") or {}).get("limits") or {}).get(GPU, 0)
    replicas = int(worker_replica(job).get("replicas") or 0)
    return replicas, worker_pod_spec(job).get("priorityClassName"), int(parse_quantity(gpus))


def covers(quota: Any, priority_class: str | None) -> bool:
    """Whether ResourceQuota `quota` counts the pods of `priority_class`: one with no scope
    counts every pod, one scoped by PriorityClass those it names; other scopes are left out."""
    spec = quota.spec
    selector = spec.scope_selector.match_expressions if spec.scope_selector else None
    if not spec.scopes and not selector:
        return True
    if spec.scopes:
        return False
    for term in selector or []:
        names = set(term.values or [])
        matches = {
            "In": priority_class in names,
            "NotIn": priority_class not in names,
            "Exists": priority_class is not None,
            "DoesNotExist": priority_class is None,
        }.get(term.operator, False)
        if term.scope_name != "PriorityClass" or not matches:
            return False
    return True


def _held(kube: KubeApi, jobs: Sequence[str], namespace: str, priority_class: str | None) -> int:
    """GPUs the pods of `jobs` (the job a `--replace` deletes) hold at `priority_class`."""
    held = 0
    for name in jobs:
        for pod in job_pods(kube, name, namespace):
            if pod.status and pod.status.phase in ("Succeeded", "Failed"):
                continue
            if pod.spec.priority_class_name != priority_class:
                continue
            for c in pod.spec.containers or []:
                limits = (c.resources.limits if c.resources else None) or {}
                held += int(parse_quantity(limits.get(GPU, 0)))
    return held


def refuse_a_core_without_room(
    kube: KubeApi, job: Mapping[str, Any], namespace: str, *, flag: str, replacing: Sequence[str] = ()
) -> None:
    """InvalidInput (naming `flag`, the option that sized the core) when a GPU quota of the
    namespace that covers the job's workers has no room for all of them now; the GPUs of the
    job being replaced count as free."""
    replicas, priority_class, per_worker = _worker(job)
    if not per_worker or not replicas:
        return
    try:
        quotas = kube.core.list_namespaced_resource_quota(namespace).items
    except ApiException as exc:
        raise api_error(exc, f"listing the ResourceQuotas of namespace {namespace}") from None
    held: int | None = None
    for quota in quotas:
        hard = (quota.spec.hard or {}).get(GPU_REQUESTS)
        if hard is None or not covers(quota, priority_class):
            continue
        if held is None:
            held = _held(kube, replacing, namespace, priority_class) if replacing else 0
        used = int(parse_quantity(((quota.status.used if quota.status else None) or {}).get(GPU_REQUESTS, 0)))
        free = int(parse_quantity(hard)) - used + held
        if replicas * per_worker > free:
            raise InvalidInput(
                [
                    Problem(
                        flag,
                        replicas,
                        f"at most {max(free, 0) // per_worker} worker(s) of {per_worker} GPU(s) now: ResourceQuota "
                        f"{namespace}/{quota.metadata.name} allows {hard} GPU(s) at priority {priority_class}, "
                        f"{used} in use by other jobs (`kubectl describe resourcequota -n {namespace} "
                        f"{quota.metadata.name}`); its pods would be refused one by one and the job never start",
                    )
                ]
            )

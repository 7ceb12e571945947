"""Cordon a node and evict its pods through the Eviction API (policy/v1), within a notice.

Like `kubectl drain`, but every pod is asked at once (threads): Azure's spot notice is 30 s,
and evictions asked one after the other, each waiting for the one before, would not fit. A pod
whose PodDisruptionBudget refuses (429) is asked again until the deadline; a pod already gone
(404) is done. DaemonSet pods (the DaemonSet controller ignores cordons and would recreate
them), mirror pods of static manifests (the API cannot delete them) and pods already being
deleted are left alone.

Each eviction carries `deleteOptions.gracePeriodSeconds`: the pod's own
terminationGracePeriodSeconds, shortened so that it ends `margin_s` before the VM may go
(`NotBefore`), and at least 1 s; the pod's own when the event gives no time.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lab.runtime.notice.log import Log

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# The API's default terminationGracePeriodSeconds, for a pod object that lacks it.
DEFAULT_POD_GRACE_S = 30
REQUEST_TIMEOUT_S = 5.0
MAX_THREADS = 64


def grace_seconds(pod_grace_s: int | None, not_before: float | None, now: float, margin_s: float) -> int:
    """The grace period of one eviction: min(pod's own, time left until `not_before` less
    `margin_s`), at least 1; the pod's own when there is no `not_before`."""
    own = DEFAULT_POD_GRACE_S if pod_grace_s is None else pod_grace_s
    if not_before is None:
        return max(1, own)
    left = math.floor(not_before - now - margin_s)
    return max(1, min(own, left))


def skip_reason(pod: client.V1Pod) -> str | None:
    """Why `pod` is not evicted, or None when it is."""
    meta = pod.metadata
    if meta.deletion_timestamp is not None:
        return "terminating"
    if MIRROR_ANNOTATION in (meta.annotations or {}):
        return "mirror pod"
    if any(ref.kind == "DaemonSet" and ref.controller for ref in meta.owner_references or []):
        return "daemonset pod"
    if pod.status is not None and pod.status.phase in ("Succeeded", "Failed"):
        return "finished"
    return None


@dataclass(frozen=True)
class EvictionResult:
    namespace: str
    name: str
    outcome: str  # "evicted", "gone", "refused until deadline", "failed", "stopped"
    attempts: int
    grace_s: int | None


@dataclass(eq=False)
class Drainer:
    """Cordons `node` and evicts its pods with `core` (a CoreV1Api)."""

    core: client.CoreV1Api
    node: str
    log: Log
    _: KW_ONLY
    margin_s: float = 5.0
    retry_interval_s: float = 1.0
    clock: Callable[[], float] = time.time
    stop: threading.Event = field(default_factory=threading.Event)

    def drain(self, not_before: float | None, deadline: float) -> list[EvictionResult]:
        """Cordon, then evict every evictable pod at once; return when each is evicted, gone,
        or still refused at `deadline` (Unix time)."""
        self.cordon()
        pods = self.pods(deadline)
        evictable = []
        for pod in pods:
            reason = skip_reason(pod)
            if reason:
                self.log("pod_skipped", node=self.node, pod=_pod_id(pod), reason=reason)
            else:
                evictable.append(pod)
        if not evictable:
            return []
        with ThreadPoolExecutor(max_workers=min(MAX_THREADS, len(evictable)), thread_name_prefix="evict") as pool:
            return list(pool.map(lambda pod: self.evict(pod, not_before, deadline), evictable))

    def cordon(self) -> bool:
        try:
            self.core.patch_node(self.node, {"spec": {"unschedulable": True}}, _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 (ApiException, urllib3's and socket errors alike)
            # Evicting matters more than cordoning: go on (a replacement may land here again).
            self.log("cordon_failed", node=self.node, error=_error(exc))
            return False
        self.log("cordoned", node=self.node)
        return True

    def pods(self, deadline: float) -> list[client.V1Pod]:
        """The node's pods; listing is retried until `deadline` (without it nothing is evicted)."""
        attempts = 0
        while True:
            attempts += 1
            try:
                answer = self.core.list_pod_for_all_namespaces(
                    field_selector=f"spec.nodeName={self.node}", _request_timeout=REQUEST_TIMEOUT_S
                )
                return list(answer.items or [])
            except Exception as exc:  # noqa: BLE001 (ApiException, urllib3's and socket errors alike)
                self.log("list_pods_failed", node=self.node, attempt=attempts, error=_error(exc))
            if not self._wait_before_retry(deadline):
                return []

    def evict(self, pod: client.V1Pod, not_before: float | None, deadline: float) -> EvictionResult:
        ns, name = pod.metadata.namespace, pod.metadata.name
        pod_grace = pod.spec.termination_grace_period_seconds if pod.spec is not None else None
        attempts = 0
        grace = None
        while True:
            attempts += 1
            grace = grace_seconds(pod_grace, not_before, self.clock(), self.margin_s)
            body = client.V1Eviction(
                api_version="policy/v1",
                kind="Eviction",
                metadata=client.V1ObjectMeta(name=name, namespace=ns),
                delete_options=client.V1DeleteOptions(grace_period_seconds=grace),
            )
            try:
                self.core.create_namespaced_pod_eviction(name, ns, body, _request_timeout=REQUEST_TIMEOUT_S)
            except ApiException as exc:
                if exc.status == 404:
                    self.log("pod_gone", pod=f"{ns}/{name}", attempt=attempts)
                    return EvictionResult(ns, name, "gone", attempts, grace)
                retry = exc.status == 429 or (exc.status or 0) >= 500
                self.log(
                    "eviction_refused" if exc.status == 429 else "eviction_failed",
                    pod=f"{ns}/{name}",
                    attempt=attempts,
                    grace_s=grace,
                    status=exc.status,
                    error=_error(exc),
                    retry=retry,
                )
                if not retry:
                    return EvictionResult(ns, name, "failed", attempts, grace)
            except Exception as exc:  # noqa: BLE001 (urllib3's errors: refused, reset, timed out)
                self.log("eviction_failed", pod=f"{ns}/{name}", attempt=attempts, grace_s=grace, error=_error(exc))
            else:
                self.log("eviction_asked", pod=f"{ns}/{name}", attempt=attempts, grace_s=grace)
                return EvictionResult(ns, name, "evicted", attempts, grace)
            if not self._wait_before_retry(deadline):
                outcome = "stopped" if self.stop.is_set() else "refused until deadline"
                self.log("eviction_given_up", pod=f"{ns}/{name}", attempts=attempts, reason=outcome)
                return EvictionResult(ns, name, outcome, attempts, grace)

    def _wait_before_retry(self, deadline: float) -> bool:
        """Wait one retry interval; False when the deadline would pass or the handler stops."""
        if self.clock() + self.retry_interval_s >= deadline:
            return False
        return not self.stop.wait(self.retry_interval_s)


def _pod_id(pod: client.V1Pod) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


def _error(exc: BaseException) -> str:
    """A short description of a failed request: status and reason, the Status message of the
    body when there is one; never the request (its headers carry the token)."""
    if isinstance(exc, ApiException):
        message = ""
        body = exc.body
        if isinstance(body, bytes):
            body = body.decode(errors="replace")
        if isinstance(body, str):
            try:
                message = str(json.loads(body).get("message", ""))
            except (ValueError, AttributeError):
                message = body[:200]
        return f"HTTP {exc.status} {exc.reason}" + (f": {message}" if message else "")
    return f"{type(exc).__name__}: {exc}"[:300]

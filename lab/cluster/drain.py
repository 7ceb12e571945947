"""The Kubernetes eviction backend, for any cluster (the byo stack, or a cloud stack without
cloud credentials): cordon the node, evict its pods through the Eviction API (so
PodDisruptionBudgets and each pod's grace period are honoured, as a cloud's drain on a spot
notice does), then, if asked, delete the Node object, as a vanished VM's node is removed.

Pods that a drain leaves alone: DaemonSet pods (their controller would put them back at
once) and mirror pods (the kubelet owns them). An eviction answered 429 (a disruption
budget allows none now) is retried until `drain_timeout_s`, then reported.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes.client.rest import ApiException

from lab.cluster.eviction import ApiCall, EvictionError, EvictionStarted, Node
from lab.cluster.kube import KubeApi, api_error
from lab.runtime.notice.drain import Drainer

API = "kubernetes"


class KubernetesDrainEvictor:
    """Cordon, evict every pod a drain evicts (the spot-notice handler's `Drainer`: all pods
    asked at once, each with its own grace), optionally delete the Node."""

    name = "kubernetes"

    def __init__(self, kube: KubeApi, *, delete_node: bool = False, drain_timeout_s: float = 120.0) -> None:
        self.kube = kube
        self.delete_node = delete_node
        self.drain_timeout_s = drain_timeout_s
        self.log: list[dict[str, Any]] = []  # the drainer's actions, for the report's detail

    def _log(self, event: str, **fields: Any) -> None:
        self.log.append({"t": time.time(), "event": event, **fields})

    def calls(self, node: Node) -> list[ApiCall]:
        out = [
            ApiCall(API, "read_node", {"name": node.name}, reads_only=True),
            ApiCall(API, "patch_node", {"name": node.name, "body": {"spec": {"unschedulable": True}}}),
            ApiCall(
                API, "list_pod_for_all_namespaces", {"field_selector": f"spec.nodeName={node.name}"}, reads_only=True
            ),
            ApiCall(API, "create_namespaced_pod_eviction", {"name": "<each pod but DaemonSet and mirror pods>"}),
        ]
        if self.delete_node:
            out.append(ApiCall(API, "delete_node", {"name": node.name}))
        return out

    def check(self, node: Node) -> None:
        try:
            self.kube.core.read_node(node.name)
        except ApiException as exc:
            if exc.status == 404:
                raise EvictionError(f"node {node.name} does not exist in {self.kube.source}") from None
            raise api_error(exc, f"reading node {node.name}") from None

    def evict(self, node: Node) -> EvictionStarted:
        started = time.time()
        drainer = Drainer(self.kube.core, node.name, self._log)
        results = drainer.drain(not_before=None, deadline=started + self.drain_timeout_s)
        if not any(e["event"] == "cordoned" for e in self.log):
            failed = next((e for e in self.log if e["event"] == "cordon_failed"), {})
            raise EvictionError(f"cordoning node {node.name} failed: {failed.get('error', 'no answer')}")
        stuck = [r for r in results if r.outcome not in ("evicted", "gone")]
        if stuck:
            names = ", ".join(f"{r.namespace}/{r.name} ({r.outcome})" for r in stuck)
            raise EvictionError(
                f"drain of {node.name}: these pods could not be evicted within {self.drain_timeout_s:g} s: {names} "
                "(a disruption budget kept refusing, or the API failed)"
            )
        if self.delete_node:
            try:
                self.kube.core.delete_node(node.name)
            except ApiException as exc:
                raise api_error(exc, f"deleting node {node.name}") from None
        evicted = sum(1 for r in results if r.outcome == "evicted")
        detail = f"cordoned; evicted {evicted} pod(s)" + ("; node deleted" if self.delete_node else "")
        return EvictionStarted(node=node.name, backend=self.name, at=started, detail=detail)

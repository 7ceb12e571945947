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
from lab.cluster.kube import Cluster, api_error

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
API = "kubernetes"


def _drained(pod: Any) -> bool:
    """Whether a drain evicts this pod (not a DaemonSet's, not a mirror pod, not finished)."""
    owners = pod.metadata.owner_references or []
    if any(o.kind == "DaemonSet" for o in owners):
        return False
    if MIRROR_ANNOTATION in (pod.metadata.annotations or {}):
        return False
    return (pod.status.phase if pod.status else None) not in ("Succeeded", "Failed")


class KubernetesDrainEvictor:
    """Cordon, evict every pod a drain evicts, optionally delete the Node."""

    name = "kubernetes"

    def __init__(self, cluster: Cluster, *, delete_node: bool = False, drain_timeout_s: float = 120.0) -> None:
        self.cluster = cluster
        self.delete_node = delete_node
        self.drain_timeout_s = drain_timeout_s

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
            self.cluster.core.read_node(node.name)
        except ApiException as exc:
            if exc.status == 404:
                raise EvictionError(f"node {node.name} does not exist in {self.cluster.source}") from None
            raise api_error(exc, f"reading node {node.name}") from None

    def evict(self, node: Node) -> EvictionStarted:
        core = self.cluster.core
        started = time.time()
        try:
            core.patch_node(node.name, {"spec": {"unschedulable": True}})
            pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node.name}").items
        except ApiException as exc:
            raise api_error(exc, f"cordoning node {node.name}") from None
        evicted, waiting = [], [p for p in pods if _drained(p)]
        deadline = time.monotonic() + self.drain_timeout_s
        while waiting:
            refused = []
            for pod in waiting:
                body = {
                    "apiVersion": "policy/v1",
                    "kind": "Eviction",
                    "metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace},
                }
                try:
                    core.create_namespaced_pod_eviction(pod.metadata.name, pod.metadata.namespace, body)
                    evicted.append(f"{pod.metadata.namespace}/{pod.metadata.name}")
                except ApiException as exc:
                    if exc.status == 404:  # gone already
                        continue
                    if exc.status != 429:
                        raise api_error(exc, f"evicting pod {pod.metadata.namespace}/{pod.metadata.name}") from None
                    refused.append(pod)
            waiting = refused
            if waiting and time.monotonic() > deadline:
                names = ", ".join(f"{p.metadata.namespace}/{p.metadata.name}" for p in waiting)
                raise EvictionError(
                    f"drain of {node.name}: a disruption budget kept refusing the eviction of {names} "
                    f"for {self.drain_timeout_s:g} s"
                )
            if waiting:
                time.sleep(1)
        if self.delete_node:
            try:
                core.delete_node(node.name)
            except ApiException as exc:
                raise api_error(exc, f"deleting node {node.name}") from None
        detail = f"cordoned; evicted {len(evicted)} pod(s)" + ("; node deleted" if self.delete_node else "")
        return EvictionStarted(node=node.name, backend=self.name, at=started, detail=detail)

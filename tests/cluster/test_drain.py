"""The Kubernetes drain backend against a loopback API server."""

from __future__ import annotations

import threading

import pytest

from lab.cluster.drain import KubernetesDrainEvictor
from lab.cluster.eviction import EvictionError, Node, pool_refusal
from lab.runtime.notice.drain import MIRROR_ANNOTATION
from lab.vocab.pools import CAPACITY_LABEL, POOL_LABEL

from .fake_kube import node, pod

GPU = {POOL_LABEL: "gpu-spot", CAPACITY_LABEL: "spot"}
CPU = {POOL_LABEL: "cpu", CAPACITY_LABEL: "on-demand"}


@pytest.fixture
def gpu_node(api_server):
    api_server.put(node("gpu-1", GPU, "azure:///x"))
    api_server.put(pod("demo-worker-1", "training", {"app": "w"}, "gpu-1"))
    ds = pod("device-plugin-x", "kube-system", {}, "gpu-1")
    ds["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dp", "uid": "u1", "controller": True}
    ]
    api_server.put(ds)
    mirror = pod("kube-proxy-gpu-1", "kube-system", {}, "gpu-1")
    mirror["metadata"]["annotations"] = {MIRROR_ANNOTATION: "abc"}
    api_server.put(mirror)
    api_server.put(pod("done", "training", {}, "gpu-1", phase="Succeeded"))
    api_server.put(pod("elsewhere", "training", {}, "gpu-2"))
    return Node("gpu-1", "azure:///x", GPU)


def test_drain_cordons_evicts_what_a_drain_evicts_and_deletes_the_node(api_server, kube, gpu_node):
    started = KubernetesDrainEvictor(kube, delete_node=True).evict(gpu_node)
    assert api_server.get("Node", "gpu-1") is None
    evictions = [p for p in api_server.calls("POST") if p.endswith("/eviction")]
    assert evictions == ["POST /api/v1/namespaces/training/pods/demo-worker-1/eviction"]
    assert api_server.get("Pod", "device-plugin-x", "kube-system") is not None  # DaemonSet pod left alone
    assert api_server.get("Pod", "elsewhere", "training") is not None
    patches = [(m, p, b) for m, p, _, b in api_server.requests if m == "PATCH"]
    assert patches == [("PATCH", "/api/v1/nodes/gpu-1", {"spec": {"unschedulable": True}})]
    assert started.backend == "kubernetes" and "evicted 1 pod(s); node deleted" in started.detail


def test_without_delete_the_node_stays_cordoned(api_server, kube, gpu_node):
    KubernetesDrainEvictor(kube).evict(gpu_node)
    assert api_server.get("Node", "gpu-1")["spec"]["unschedulable"] is True


def test_a_disruption_budget_is_waited_for_then_reported(api_server, kube, gpu_node):
    api_server.refuse_evictions.add("demo-worker-1")
    with pytest.raises(
        EvictionError, match=r"could not be evicted within 0.5 s: training/demo-worker-1 \(refused until deadline\)"
    ):
        KubernetesDrainEvictor(kube, drain_timeout_s=0.5).evict(gpu_node)
    threading.Timer(0.5, api_server.refuse_evictions.clear).start()
    KubernetesDrainEvictor(kube, drain_timeout_s=10).evict(gpu_node)
    assert api_server.get("Pod", "demo-worker-1", "training") is None


def test_calls_make_no_request(api_server, kube, gpu_node):
    before = len(api_server.requests)
    calls = KubernetesDrainEvictor(kube, delete_node=True).calls(gpu_node)
    assert [c.operation for c in calls] == [
        "read_node",
        "patch_node",
        "list_pod_for_all_namespaces",
        "create_namespaced_pod_eviction",
        "delete_node",
    ]
    assert [c.reads_only for c in calls] == [True, False, True, False, False]
    assert len(api_server.requests) == before


def test_check_of_a_node_that_is_gone(kube):
    with pytest.raises(EvictionError, match="node ghost does not exist"):
        KubernetesDrainEvictor(kube).check(Node("ghost", ""))


@pytest.mark.parametrize(
    "labels,refused",
    [
        pytest.param(GPU, False, id="gpu-spot"),
        pytest.param(CPU, True, id="cpu-pool"),
        pytest.param({POOL_LABEL: "gpu-spot"}, True, id="gpu-pool-label-without-spot-capacity"),
        pytest.param({}, True, id="no-labels"),
    ],
)
def test_pool_refusal(labels, refused):
    reason = pool_refusal(Node("n", "", labels), {POOL_LABEL: "gpu-spot"})
    assert (reason is not None) == refused
    if refused:
        assert "node n is not in the stack's GPU spot pool" in reason

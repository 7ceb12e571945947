"""The cluster drill's reclaim: a job with a burst, whose borrowed GPUs the owners' work takes
back through real preemption, against the loopback API server with priority admission and the
scheduler's preemption (tests/cluster/fake_scheduler.py) and a simulated operator and job.

The simulation does what the training operator and the workers do: a core of two workers at the
workers' class and a burst of one at the borrowed class, one GPU each on nodes of one GPU. When
the scheduler preempts the burst's worker (its pod marked DisruptionTarget and deleted with its
grace), the worker saves on the notice and leaves, its kubelet confirms it gone and the job trains
at its core; once the owners' pod is deleted, the operator recreates the burst's worker on the
freed node and the job grows back. The drill sees it all through the Kubernetes API only.
"""

from __future__ import annotations

import json

import pytest

from lab.cluster.drill import ClusterDrill, ClusterDrillConfig
from lab.cluster.kube import KubeError
from lab.cluster.reclaim import OWNERS_CONTAINER, RECLAIM_OF_LABEL, PreemptionReclaim, ReclaimRefused, owners_pod
from lab.k8s.job import render_job
from lab.k8s.schemas import validate_builtin
from lab.vocab.events import CAUSE_RECLAIM
from lab.vocab.job import JobSpec
from lab.vocab.job_parts import PART_BURST, PART_CORE
from lab.vocab.platform_facts import GPU

from .burst_job import CLASSES, GRACE_S, running, with_preemption
from .fake_kube import node, pod
from .fake_scheduler import PREEMPTED
from .test_drill import GPU as GPU_LABELS
from .test_drill import NS
from .test_drill import _config as eviction_config


@pytest.fixture(scope="module")
def rendered_burst(byo_target):
    """(spec, objects) of a job of two guaranteed nodes and one borrowed."""
    job = render_job(JobSpec(name="demo", min_nodes=2, max_nodes=3, burst_nodes=1), byo_target)
    return job.spec, job.objects


def _config(tmp_path, kube, rendered, **kw) -> ClusterDrillConfig:
    """The cluster drill's usual test settings (tests/cluster/test_drill.py), with a reclaim."""
    kw = {"reclaim_for_s": 0.5, **kw}
    evictor = kw.pop("evictor", None) or PreemptionReclaim(kube, NS, "demo")
    return eviction_config(tmp_path, evictor, rendered, **kw)


def test_the_owners_work_preempts_the_burst_and_the_job_shrinks_to_its_core_and_grows_back(
    api_server, kube, rendered_burst, tmp_path
):
    with running(api_server):
        report = ClusterDrill(_config(tmp_path, kube, rendered_burst), kube).run()
    cluster = api_server
    assert report.passed, report.summary()
    (reclaim,) = report.reclaims
    assert (reclaim.nodes, reclaim.core_nodes, reclaim.full_nodes) == (1, 2, 3)
    assert reclaim.grace_s == GRACE_S and reclaim.taken_nodes == ("demo-burst-worker-0",)
    assert reclaim.lowest_nodes == 2 and not reclaim.below_core and reclaim.at_core_s is not None
    assert reclaim.back_t is not None and reclaim.grown_back_s is not None
    (ev,) = report.evictions
    assert ev.kind == "notice" and ev.cause == CAUSE_RECLAIM and ev.lost_steps == 0, report.summary()
    assert report.final_step == 100 and report.finished
    assert "reclaim at" in report.summary() and "taken back by their owners" in report.summary()
    # The owners' pod ran at the lowest class that preempts the burst's (inference, on this
    # platform), pinned to the burst's node, and is gone: nothing of the drill holds a GPU.
    created = [b for m, path, _, b in cluster.requests if m == "POST" and path.endswith("/pods")]
    (owners,) = created
    assert owners["spec"]["priorityClassName"] == CLASSES.inference.name
    assert owners["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-2"]}]}]
    }
    assert owners["spec"]["containers"][0]["resources"]["limits"] == {GPU: "1"}
    assert not [p for p in cluster.of_kind("Pod") if RECLAIM_OF_LABEL in p["metadata"].get("labels", {})]
    # The core was never preempted: only the burst's worker carried the scheduler's mark.
    recorded = [json.loads(line) for line in (tmp_path / "drill" / "events.jsonl").read_text().splitlines()]
    added = [(e["node"], e.get("part")) for e in recorded if e["event"] == "node_added"]
    assert added == [
        ("demo-worker-0", PART_CORE),
        ("demo-worker-1", PART_CORE),
        ("demo-burst-worker-0", PART_BURST),
        ("demo-burst-worker-0", PART_BURST),
    ]


def test_the_scheduler_marks_only_the_burst_s_worker_and_places_the_owners_once_it_is_gone(api_server, kube):
    """The fake's preemption, which the drill's test rests on: the owners' pod on a node shared
    by a core and a burst worker takes the burst's GPU only."""
    cluster = with_preemption(api_server)
    shared = node("gpu-big", GPU_LABELS, "azure:///vmss/9")
    shared["status"]["allocatable"] = {GPU: "2"}
    cluster.put(shared)
    for name, cls in (("core", CLASSES.preemptible.name), ("burst", CLASSES.borrowed.name)):
        worker = pod(name, NS, {}, "gpu-big")
        worker["spec"].update(priorityClassName=cls, terminationGracePeriodSeconds=GRACE_S)
        worker["spec"]["containers"][0]["resources"] = {"limits": {GPU: "1"}}
        cluster.put(worker)
    reclaim = PreemptionReclaim(kube, NS, "demo")
    (borrowed,) = reclaim.borrowed([kube.core.read_namespaced_pod("burst", NS)])
    assert (borrowed.node, borrowed.gpus, borrowed.grace_s) == ("gpu-big", 1, GRACE_S)
    reclaim.take([borrowed], CLASSES.inference.name)
    owners = kube.core.read_namespaced_pod("demo-reclaim-0", NS)
    assert owners.status.nominated_node_name == "gpu-big" and not owners.spec.node_name
    burst, core = cluster.get("Pod", "burst", NS), cluster.get("Pod", "core", NS)
    assert [c["reason"] for c in burst["status"]["conditions"]] == [PREEMPTED] and "deletionTimestamp" in burst[
        "metadata"
    ]
    assert "deletionTimestamp" not in core["metadata"] and not core["status"].get("conditions")
    with cluster.lock:
        cluster.objects.pop(f"api/v1/{NS}/pods/burst")  # its kubelet confirms it gone
    assert kube.core.read_namespaced_pod("demo-reclaim-0", NS).spec.node_name == "gpu-big"
    reclaim.give_back()
    assert cluster.get("Pod", "demo-reclaim-0", NS) is None and reclaim.made == []


def test_the_owners_pod_is_a_valid_pod_that_holds_the_gpus_and_nothing_else():
    from lab.cluster.reclaim import Borrowed

    toleration = {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot"}
    body = owners_pod("demo", 0, Borrowed("demo-burst-worker-0", "gpu-2", 30.0, (toleration,), 4), "elastic-inference")
    assert validate_builtin(body, "1.33") == []
    spec = body["spec"]
    assert spec["tolerations"] == [toleration] and spec["terminationGracePeriodSeconds"] == 0
    (container,) = spec["containers"]
    assert container["name"] == OWNERS_CONTAINER and container["resources"]["requests"] == {GPU: "4"}
    assert "nodeName" not in spec  # the scheduler places it, and preempts to


def test_a_reclaim_is_refused_before_anything_starts_where_nothing_can_preempt_the_burst(
    api_server, kube, rendered_burst, tmp_path
):
    with running(api_server) as sim:
        # No class above the borrowed one preempts: inference made Never, as the workers' class is.
        with api_server.lock:
            api_server.get("PriorityClass", CLASSES.inference.name)["preemptionPolicy"] = "Never"
        with pytest.raises(ReclaimRefused, match="no PriorityClass of the cluster is above the burst's"):
            ClusterDrill(_config(tmp_path, kube, rendered_burst), kube).run()
        assert sim.step >= 20  # refused once the job trained at full size, as it would be
    assert not [b for m, path, _, b in api_server.requests if m == "POST" and path.endswith("/pods")]
    named = PreemptionReclaim(kube, NS, "demo", CLASSES.borrowed.name)
    with pytest.raises(ReclaimRefused, match="PriorityClass elastic-borrowed cannot take the burst back"):
        named.owners_class()
    with pytest.raises(KubeError, match="no PyTorchJob training/solo-burst"):
        PreemptionReclaim(kube, NS, "solo").owners_class()

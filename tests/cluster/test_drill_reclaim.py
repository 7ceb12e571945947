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
import threading
import time

import pytest

from components.platform.settings import Priorities
from lab.cluster.drill import ClusterDrill, ClusterDrillConfig
from lab.cluster.jobs import JOB_NAME_LABEL, REPLICA_INDEX_LABEL
from lab.cluster.kube import KubeError
from lab.cluster.reclaim import OWNERS_CONTAINER, RECLAIM_OF_LABEL, PreemptionReclaim, ReclaimRefused, owners_pod
from lab.k8s.job import render_job
from lab.k8s.schemas import validate_builtin
from lab.vocab.events import CAUSE_RECLAIM
from lab.vocab.job import JobSpec
from lab.vocab.job_parts import PART_BURST, PART_CORE, PART_LABEL
from lab.vocab.platform_facts import GPU

from .fake_kube import node, pod
from .fake_scheduler import PREEMPTED
from .test_drill import GPU as GPU_LABELS
from .test_drill import NS, SimulatedJob

CLASSES = Priorities()
GRACE_S = 3


@pytest.fixture(scope="module")
def rendered_burst(byo_target):
    """(spec, objects) of a job of two guaranteed nodes and one borrowed."""
    job = render_job(JobSpec(name="demo", min_nodes=2, max_nodes=3, burst_nodes=1), byo_target)
    return job.spec, job.objects


@pytest.fixture
def cluster(api_server):
    """The API server with the platform's PriorityClasses, its scheduler, and three GPU nodes of
    one GPU each."""
    api_server.scheduling = True
    for _, spec, policy in CLASSES.items():
        api_server.put(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": spec.name},
                "value": spec.value,
                "preemptionPolicy": policy,
            }
        )
    for i in range(3):
        gpu_node = node(f"gpu-{i}", GPU_LABELS, f"azure:///vmss/{i}")
        gpu_node["status"]["allocatable"] = {GPU: "1"}
        api_server.put(gpu_node)
    return api_server


class SimulatedBurstJob(SimulatedJob):
    """The operator and the workers of job `demo` with a burst (`demo-burst`)."""

    def _start(self, job: str, index: int, on: str, part: str, priority_class: str) -> str:
        name = f"{job}-worker-{index}"
        labels = {JOB_NAME_LABEL: job, REPLICA_INDEX_LABEL: str(index), PART_LABEL: part}
        self.api_server.logs.pop((NS, name), None)
        self.api_server.closed_logs.discard((NS, name))
        worker = pod(name, NS, labels, on)
        worker["spec"].update(priorityClassName=priority_class, terminationGracePeriodSeconds=GRACE_S)
        worker["spec"]["containers"][0]["resources"] = {"requests": {GPU: "1"}, "limits": {GPU: "1"}}
        self.api_server.put(worker)
        return name

    def _train_on(self, lead: str, world: int) -> None:
        """One more step of the round that runs: no worker restarted, no resume said."""
        self.step += 1
        self._line(lead, "step", step=self.step, world_size=world, loss=1.0 / self.step)
        if self.step % 10 == 0:
            self._line(lead, "checkpoint_saved", step=self.step, reason="interval", seconds=0.01)
        time.sleep(self.dt)

    def _owners_pods(self) -> list[dict]:
        return [p for p in self.api_server.of_kind("Pod") if RECLAIM_OF_LABEL in p["metadata"].get("labels", {})]

    def run(self) -> None:
        server = self.api_server
        while server.get("PyTorchJob", "demo-burst", NS) is None and not self.stop.is_set():
            time.sleep(0.02)
        core = [self._start("demo", i, f"gpu-{i}", PART_CORE, CLASSES.preemptible.name) for i in range(2)]
        burst = self._start("demo-burst", 0, "gpu-2", PART_BURST, CLASSES.borrowed.name)
        time.sleep(0.3)  # the drill sees the pods run before they train (a worker's start takes seconds)
        self._train([*core, burst], 30, 3, 1)
        taken = server.get("Pod", burst, NS)
        while taken and "deletionTimestamp" not in taken["metadata"] and not self.stop.is_set():
            self._train_on(core[0], 3)  # trains on until the scheduler preempts it
            taken = server.get("Pod", burst, NS)
        if self.stop.is_set() or taken is None:
            return
        # Its SIGTERM: the burst's worker saves on the notice and leaves; its kubelet confirms it gone.
        self._line(burst, "checkpoint_saved", step=self.step, reason="notice", seconds=0.01)
        self._line(burst, "exit", reason="notice", step=self.step, notice_to_exit_s=0.05, saved=True)
        server.closed_logs.add((NS, burst))
        with server.lock:
            server.objects.pop(f"api/v1/{NS}/pods/{burst}", None)
        time.sleep(0.1)  # the core's agents see it leave and form a round of two
        self._train(core, self.step + 10, 2, 2)
        while self._owners_pods() and not self.stop.is_set():
            self._train_on(core[0], 2)  # the job trains at its core while the owners hold the GPU
        if self.stop.is_set():
            return
        burst = self._start("demo-burst", 0, "gpu-2", PART_BURST, CLASSES.borrowed.name)  # recreated
        time.sleep(0.3)
        self._train([*core, burst], 100, 3, 3)
        self._finish([*core, burst])


@pytest.fixture
def burst_job(cluster):
    sims = []

    def start() -> SimulatedBurstJob:
        sim = SimulatedBurstJob(cluster)
        sims.append(sim)
        threading.Thread(target=sim.run, daemon=True).start()
        return sim

    yield start
    for sim in sims:
        sim.stop.set()


def _config(tmp_path, kube, rendered, **kw) -> ClusterDrillConfig:
    _, objects = rendered
    defaults = {
        "namespace": NS,
        "job": "demo",
        "evictor": PreemptionReclaim(kube, NS, "demo"),
        "gpu_labels": dict(GPU_LABELS),
        "workdir": tmp_path / "drill",
        "objects": objects,
        "evict_at_step": 20,
        "full_world": 3,
        "target_steps": 100,
        "checkpoint_every": 10,
        "timeout_s": 30,
        "poll_s": 0.05,
        "reclaim_for_s": 0.5,
    }
    return ClusterDrillConfig(**{**defaults, **kw})


def test_the_owners_work_preempts_the_burst_and_the_job_shrinks_to_its_core_and_grows_back(
    cluster, kube, rendered_burst, burst_job, tmp_path
):
    burst_job()
    report = ClusterDrill(_config(tmp_path, kube, rendered_burst), kube).run()
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


def test_the_scheduler_marks_only_the_burst_s_worker_and_places_the_owners_once_it_is_gone(cluster, kube):
    """The fake's preemption, which the drill's test rests on: the owners' pod on a node shared
    by a core and a burst worker takes the burst's GPU only."""
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
    cluster, kube, rendered_burst, tmp_path
):
    # No class above the borrowed one preempts: inference made Never, as the workers' class is.
    with cluster.lock:
        cluster.get("PriorityClass", CLASSES.inference.name)["preemptionPolicy"] = "Never"
    cfg = _config(tmp_path, kube, rendered_burst)
    drill = ClusterDrill(cfg, kube)
    sim = SimulatedBurstJob(cluster)
    threading.Thread(target=sim.run, daemon=True).start()
    try:
        with pytest.raises(ReclaimRefused, match="no PriorityClass of the cluster is above the burst's"):
            drill.run()
    finally:
        sim.stop.set()
    assert not [b for m, path, _, b in cluster.requests if m == "POST" and path.endswith("/pods")]
    named = _config(tmp_path, kube, rendered_burst, evictor=PreemptionReclaim(kube, NS, "demo", CLASSES.borrowed.name))
    with pytest.raises(ReclaimRefused, match="PriorityClass elastic-borrowed cannot take the burst back"):
        named.evictor.owners_class()
    with pytest.raises(KubeError, match="no PyTorchJob training/solo-burst"):
        PreemptionReclaim(kube, NS, "solo").owners_class()

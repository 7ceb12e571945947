"""The cluster drill against a loopback API server with a simulated operator and job.

The simulation does what the training operator and the job's workers do, in time: it starts
worker pods on GPU nodes, writes the workers' event lines into their logs, and reacts to the
drill's eviction (the drain's Eviction API removes the pod) the way an elastic job does: the
survivors resume at world size 2, a replacement node becomes Ready, the operator recreates
the evicted pod there, and the job ends Succeeded. The drill sees all of it only through the
Kubernetes API, as on a real cluster.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from lab.cluster.drain import KubernetesDrainEvictor
from lab.cluster.drill import ClusterDrill, ClusterDrillConfig, DrillRefused
from lab.cluster.eviction import EvictionRefused, EvictionStarted
from lab.cluster.jobs import JOB_NAME_LABEL, REPLICA_INDEX_LABEL
from lab.vocab.capacity import RANK_LABEL
from lab.vocab.pools import CAPACITY_LABEL, POOL_LABEL

from .fake_kube import node, pod

NS = "training"
GPU = {POOL_LABEL: "gpu-spot", CAPACITY_LABEL: "spot"}


class SimulatedJob:
    """The operator and three workers of PyTorchJob `demo`, driven by what the API server holds."""

    def __init__(
        self,
        api_server,
        *,
        recover: bool = True,
        step_dt: float = 0.01,
        per_step: bool = False,
        replacement_labels: dict[str, str] | None = None,
    ):
        self.api_server, self.recover, self.dt, self.per_step = api_server, recover, step_dt, per_step
        # The labels of the node that replaces the evicted one (a fallback rank's, say).
        self.replacement_labels = replacement_labels or GPU
        self.stop = threading.Event()
        self.step = 0

    def _line(self, p: str, event: str, **fields) -> None:
        self.api_server.add_log(NS, p, json.dumps({"t": round(time.time(), 4), "event": event, **fields}))

    def _start_worker(self, index: int, on: str) -> str:
        name = f"demo-worker-{index}"
        labels = {JOB_NAME_LABEL: "demo", REPLICA_INDEX_LABEL: str(index)}
        self.api_server.logs.pop((NS, name), None)
        self.api_server.closed_logs.discard((NS, name))
        self.api_server.put(pod(name, NS, labels, on))
        return name

    def _train(self, pods: list[str], until: int, world: int, rnd: int) -> None:
        for p in pods:
            self._line(p, "resume" if self.step else "fresh", step=self.step, round=rnd)
        while self.step < until and not self.stop.is_set():
            self.step += 1
            if self.per_step:  # every replica group (pod) reports its committed steps, in a quorum per round
                for p in pods:
                    fields = {"replica": p, "participants": len(pods), "participating": True, "quorum": rnd}
                    self._line(p, "step", step=self.step, world_size=world, loss=1.0 / self.step, **fields)
            else:
                self._line(pods[0], "step", step=self.step, world_size=world, loss=1.0 / self.step)
            if self.step % 10 == 0:
                self._line(pods[0], "checkpoint_saved", step=self.step, reason="interval", seconds=0.01)
            time.sleep(self.dt)

    def _finish(self, pods: list[str]) -> None:
        for p in pods:
            self._line(p, "exit", reason="done", step=self.step)
            obj = self.api_server.get("Pod", p, NS)
            obj["status"]["phase"] = "Succeeded"
            obj["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0}}
            self.api_server.closed_logs.add((NS, p))
        job = self.api_server.get("PyTorchJob", "demo", NS)
        job["status"] = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"}]}

    def run(self) -> None:
        while self.api_server.get("PyTorchJob", "demo", NS) is None and not self.stop.is_set():
            time.sleep(0.02)
        for i in range(3):
            self.api_server.put(node(f"gpu-{i}", GPU, f"azure:///vmss/{i}"))
        pods = [self._start_worker(i, f"gpu-{i}") for i in range(3)]
        self._train(pods, 30, 3, 1)
        while self.api_server.get("Pod", "demo-worker-2", NS) is not None and not self.stop.is_set():
            if self.step < 40:  # trains on until the eviction takes the pod (slowly: the drill polls)
                self._train(pods, self.step + 1, 3, 1)
            else:
                time.sleep(0.02)
        if self.stop.is_set():
            return
        self.api_server.closed_logs.add((NS, "demo-worker-2"))
        self.api_server.objects.pop("api/v1//nodes/gpu-2", None)  # the spot VM is gone
        if not self.recover:
            return
        self._train(pods[:2], self.step + 20, 2, 2)
        self.api_server.put(node("gpu-3", self.replacement_labels, "azure:///vmss/3"))
        pods[2] = self._start_worker(2, "gpu-3")
        self._train(pods[:2], self.step + 20, 2, 2)  # the new pod starts and joins the next round
        self._train(pods, 100, 3, 3)
        self._finish(pods)


@pytest.fixture
def simulated(api_server):
    sims = []

    def start(**kwargs):
        sim = SimulatedJob(api_server, **kwargs)
        sims.append(sim)
        threading.Thread(target=sim.run, daemon=True).start()
        return sim

    yield start
    for sim in sims:
        sim.stop.set()


def _config(tmp_path, evictor, rendered, **kw):
    _, objects = rendered
    defaults = {
        "namespace": NS,
        "job": "demo",
        "evictor": evictor,
        "gpu_labels": {POOL_LABEL: "gpu-spot"},
        "workdir": tmp_path / "drill",
        "objects": objects,
        "evict_at_step": 20,
        "full_world": 3,
        "target_steps": 100,
        "checkpoint_every": 10,
        "timeout_s": 30,
        "poll_s": 0.05,
    }
    return ClusterDrillConfig(**{**defaults, **kw})


def test_the_drill_evicts_a_gpu_node_and_measures_recovery(api_server, kube, rendered, simulated, tmp_path):
    simulated()
    cfg = _config(tmp_path, KubernetesDrainEvictor(kube, drain_timeout_s=5), rendered)
    report = ClusterDrill(cfg, kube).run()
    assert report.passed, report.summary()
    (ev,) = report.evictions
    # A drain deletes the pod with no notice reaching this worker (it emits none): hard, counted
    # from the pod's end, the request's lead time apart.
    assert ev.node == "demo-worker-2" and (ev.kind, ev.backend) == ("hard", "kubernetes")
    assert ev.lead_s is not None and ev.lead_s >= 0
    assert ev.first_sign in ("its pod leaving Running", "the survivors' restart")  # the drill polls: either first
    assert (ev.world_before, ev.world_after) == (3, 2) and ev.lost_steps is not None and ev.lost_steps <= 1
    assert ev.recovery_s is not None and ev.node_gone_s is not None and ev.replacement_node_s is not None
    (join,) = report.joins
    assert join.node == "demo-worker-2" and join.world_after == 3
    assert report.final_step == 100 and report.finished
    assert "POST /api/v1/namespaces/training/pods/demo-worker-2/eviction" in api_server.calls("POST")
    recorded = [json.loads(line) for line in (tmp_path / "drill" / "events.jsonl").read_text().splitlines()]
    assert {e["event"] for e in recorded} >= {
        "evict",
        "k8s_pod",
        "k8s_node_ready",
        "k8s_node_gone",
        "node_added",
        "step",
    }


def test_a_replacement_from_a_fallback_rank_is_named_with_the_time_at_reduced_size(
    api_server, kube, rendered, simulated, tmp_path
):
    """No spot capacity at rank 1: the autoscaler brings a node of rank 3, on demand; the report
    says where the replacement came from and what the job trained at reduced size meanwhile."""
    simulated(replacement_labels={POOL_LABEL: "gpu-spot", CAPACITY_LABEL: "on-demand", RANK_LABEL: "3"})
    cfg = _config(tmp_path, KubernetesDrainEvictor(kube, drain_timeout_s=5), rendered)
    report = ClusterDrill(cfg, kube).run()
    assert report.passed, report.summary()
    (ev,) = report.evictions
    assert (ev.replacement_rank, ev.replacement_capacity) == (3, "on-demand")
    (join,) = report.joins
    assert (join.rank, join.capacity) == (3, "on-demand")
    (reduced,) = report.reduced
    assert reduced.world == 2 and reduced.replacement_rank == 3 and reduced.steps > 0
    summary = report.summary()
    assert "a GPU node was Ready" in summary and "after the eviction (rank 3, on-demand)" in summary
    assert "until its replacement (rank 3, on-demand" in summary


def test_a_per_step_job_is_measured_by_the_survivors_stall(api_server, kube, rendered, simulated, tmp_path):
    """Per-step mode on a cluster: every pod is a replica group reporting its steps; the report
    measures the survivors' first step in a quorum without the evicted pod and the new pod's join."""
    simulated(per_step=True)
    cfg = _config(tmp_path, KubernetesDrainEvictor(kube, drain_timeout_s=5), rendered)
    report = ClusterDrill(cfg, kube).run()
    assert report.passed and report.fault_tolerance == "per-step", report.summary()
    (ev,) = report.evictions
    assert ev.node == "demo-worker-2" and (ev.groups_before, ev.groups_after) == (3, 2)
    assert ev.recovery_s is not None and ev.lost_steps == 0
    (join,) = report.joins
    assert join.node == "demo-worker-2" and join.join_s is not None and join.world_after == 3
    assert report.final_step == 100 and report.finished


def test_the_logs_last_lines_are_read_after_the_job_ends_when_their_reader_lags(
    api_server, kube, rendered, simulated, tmp_path
):
    """A busy machine's log reader lags the workers: the job's end is seen at a poll while a
    worker's lines since the eviction are still on their way. They are waited for, not cut off."""
    api_server.log_line_s = 0.02  # about 2.5 s behind by the job's end
    simulated()
    cfg = _config(tmp_path, KubernetesDrainEvictor(kube, drain_timeout_s=5), rendered)
    report = ClusterDrill(cfg, kube).run()
    assert report.passed, report.summary()
    (ev,) = report.evictions
    assert (ev.world_before, ev.world_after) == (3, 2)
    (join,) = report.joins
    assert join.world_after == 3  # the replacement's steps, the log's last lines
    assert report.loss_curve[-1][1] == 100


def test_a_job_that_never_recovers_is_reported_at_the_deadline(kube, rendered, simulated, tmp_path):
    simulated(recover=False)
    cfg = _config(tmp_path, KubernetesDrainEvictor(kube, drain_timeout_s=5), rendered, timeout_s=4)
    report = ClusterDrill(cfg, kube).run()
    assert not report.passed
    assert "the deadline (4 s) passed before the job finished" in report.problems
    (ev,) = report.evictions
    assert ev.recovery_s is None


def test_a_job_that_never_reaches_full_size_is_not_evicted(api_server, kube, rendered, simulated, tmp_path):
    simulated()
    cfg = _config(tmp_path, KubernetesDrainEvictor(kube), rendered, full_world=4, timeout_s=2)
    report = ClusterDrill(cfg, kube).run()
    assert report.problems[0].startswith("the job did not train at full size (4 workers) by step 20 within 2 s")
    assert not [c for c in api_server.calls("POST") if c.endswith("/eviction")]


class RefusingEvictor:
    name = "aks"

    def __init__(self):
        self.evicted = []

    def calls(self, node):
        return []

    def check(self, node):
        raise EvictionRefused(f"scale set of {node.name} belongs to pool cpu, not gpu")

    def evict(self, node):
        self.evicted.append(node.name)
        return EvictionStarted(node=node.name, backend=self.name)


@pytest.mark.parametrize(
    "node_name,labels,message",
    [
        ("cpu-0", {POOL_LABEL: "cpu", CAPACITY_LABEL: "on-demand"}, "node cpu-0 is not in the stack's GPU spot pool"),
        ("gpu-9", GPU, "scale set of gpu-9 belongs to pool cpu"),
    ],
    ids=["cpu-pool-by-labels", "refused-by-the-cloud"],
)
def test_a_node_outside_the_gpu_spot_pool_is_refused_unless_forced(
    api_server, kube, rendered, simulated, tmp_path, node_name, labels, message
):
    simulated()
    api_server.put(node(node_name, labels))
    evictor = RefusingEvictor()
    cfg = _config(tmp_path, evictor, rendered, node=node_name)
    with pytest.raises(DrillRefused, match=message + ".*pass --force"):
        ClusterDrill(cfg, kube).run()
    assert evictor.evicted == []
    forced = _config(tmp_path, evictor, rendered, node=node_name, force=True, objects=None, timeout_s=3)
    ClusterDrill(forced, kube).run()
    assert evictor.evicted == [node_name]

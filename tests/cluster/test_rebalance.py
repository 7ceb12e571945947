"""Moving a job's workers off a fallback GPU rank (`elastic-lab rebalance`) against the loopback
API server, with the cluster's reactions simulated step by step: each wait of the rebalancer
(its injected `sleep`) is one step of the scheduler, the cluster autoscaler and the training
operator, so nothing sleeps and every outcome is decided by what the API server holds.

The job is aks-dev's, rendered by `submit`: its workers carry the real affinity, tolerations,
GPU request, priority class and security context the probe must copy.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from lab.cli import main
from lab.cluster.jobs import JOB_NAME_LABEL, REPLICA_INDEX_LABEL
from lab.cluster.kube import KubeError
from lab.cluster.rebalance import HOLD_COMMAND, PROBE_JOB_LABEL, Move, Rebalancer
from lab.k8s.job import render_job
from lab.stacks.target import stack_target
from lab.vocab.capacity import RANK_LABEL
from lab.vocab.job import JobSpec
from lab.vocab.pools import CAPACITY_LABEL, POOL_LABEL
from tests.placements import TRAINER_IMAGE

from .fake_kube import node

NS = "training"
JOB = "demo"


def _rank(rank: int, capacity: str) -> dict[str, str]:
    return {POOL_LABEL: "gpu-spot", CAPACITY_LABEL: capacity, RANK_LABEL: str(rank)}


@pytest.fixture(scope="module")
def aks_job() -> dict[str, Any]:
    """aks-dev's PyTorchJob for three workers, as `submit` renders it."""
    job = render_job(JobSpec(name=JOB, image=TRAINER_IMAGE), stack_target("aks-dev"))
    return next(o for o in job.objects if o["kind"] == "PyTorchJob")


class Cluster:
    """What the scheduler, the autoscaler and the operator do between two looks of the
    rebalancer: pending pods bound to a free GPU node they may run on, rank 1 scaled up for a
    pod that selects it while `rank1_room`, a job's evicted worker recreated."""

    def __init__(self, api_server: Any, job: dict[str, Any], *, rank1_room: bool) -> None:
        self.api_server, self.job, self.rank1_room = api_server, job, rank1_room
        self.now = 0.0
        self.added = 0
        api_server.put(copy.deepcopy(job))
        for name, labels in (
            ("gpu-1a", _rank(1, "spot")),
            ("gpu-1b", _rank(1, "spot")),
            ("gpu-3", _rank(3, "on-demand")),
        ):
            api_server.put(node(name, labels))
        for index, on in enumerate(("gpu-1a", "gpu-1b", "gpu-3")):
            self.bind(self.worker(index), on)

    # the injected clock and sleep
    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.step()

    def worker(self, index: int) -> dict[str, Any]:
        """Worker `index` as the operator creates it: the job's template, Pending."""
        template = copy.deepcopy(self.job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])
        labels = {**template["metadata"]["labels"], JOB_NAME_LABEL: JOB, REPLICA_INDEX_LABEL: str(index)}
        pod = {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"name": f"{JOB}-worker-{index}", "namespace": NS, "labels": labels},
        }
        return self.api_server.put({**pod, "spec": template["spec"], "status": {"phase": "Pending"}})

    def bind(self, pod: dict[str, Any], on: str) -> None:
        pod["spec"]["nodeName"] = on
        pod["status"] = {
            "phase": "Running",
            "containerStatuses": [
                {"name": "x", "ready": True, "restartCount": 0, "image": "", "imageID": "", "state": {}}
            ],
        }

    def pods(self) -> list[dict[str, Any]]:
        return [p for p in self.api_server.of_kind("Pod") if p["metadata"].get("namespace") == NS]

    def free_nodes(self, selector: dict[str, str]) -> list[str]:
        taken = {p["spec"].get("nodeName") for p in self.pods()}
        return [
            n["metadata"]["name"]
            for n in self.api_server.of_kind("Node")
            if n["metadata"]["name"] not in taken
            and not (n.get("spec") or {}).get("unschedulable")
            and all(n["metadata"]["labels"].get(k) == v for k, v in selector.items())
        ]

    def step(self) -> None:
        present = {p["metadata"]["name"] for p in self.pods()}
        for index in range(3):  # the operator: an evicted worker comes back, Pending
            if f"{JOB}-worker-{index}" not in present:
                self.worker(index)
        for pod in self.pods():
            if pod["spec"].get("nodeName"):
                continue
            selector = pod["spec"].get("nodeSelector") or {}
            free = self.free_nodes(selector)
            if not free and selector.get(RANK_LABEL) == "1" and self.rank1_room:
                self.added += 1
                self.api_server.put(node(f"gpu-1-new{self.added}", _rank(1, "spot")))
                free = self.free_nodes(selector)
            if free:
                self.bind(pod, free[0])


@pytest.fixture
def cluster(api_server, aks_job):
    def make(**kwargs: Any) -> Cluster:
        return Cluster(api_server, aks_job, **kwargs)

    return make


def _rebalancer(kube: Any, sim: Cluster, **kwargs: Any) -> Rebalancer:
    return Rebalancer(kube, JOB, NS, poll_s=5.0, sleep=sim.sleep, clock=sim.clock, **kwargs)


def test_a_worker_on_the_on_demand_rank_moves_to_rank_1_through_its_graceful_path(api_server, kube, cluster, aks_job):
    sim = cluster(rank1_room=True)
    rebalancer = _rebalancer(kube, sim)
    (found,) = rebalancer.on_fallback()
    assert (found.pod, found.node, found.rank, found.capacity) == (f"{JOB}-worker-2", "gpu-3", 3, "on-demand")

    (move,) = rebalancer.run()
    assert move.outcome == Move.MOVED and move.to is not None
    assert (move.to.pod, move.to.node, move.to.rank) == (f"{JOB}-worker-2", "gpu-1-new1", 1)
    assert "moved to gpu-1-new1 (rank 1, spot)" in move.line()
    # The probe asked for what the worker asks, on rank 1 only, without the worker's identity.
    created = [body for method, path, _, body in api_server.requests if method == "POST" and path.endswith("/pods")]
    (probe,) = created
    worker = aks_job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert probe["metadata"]["labels"][PROBE_JOB_LABEL] == JOB and JOB_NAME_LABEL not in probe["metadata"]["labels"]
    assert probe["spec"]["nodeSelector"] == {RANK_LABEL: "1"}
    for key in ("affinity", "tolerations", "priorityClassName", "securityContext"):
        assert probe["spec"][key] == worker[key], key
    (hold,) = probe["spec"]["containers"]
    asked = worker["containers"][0]["resources"]  # quantities, as the API gives them back: strings
    assert hold["resources"] == {kind: {k: str(v) for k, v in asked[kind].items()} for kind in asked}
    assert hold["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert hold["image"] == TRAINER_IMAGE and hold["command"] == HOLD_COMMAND
    assert probe["spec"]["automountServiceAccountToken"] is False and "serviceAccountName" not in probe["spec"]
    # Its place handed over: the probe deleted, then the node cordoned and the worker evicted
    # with its own grace period (SIGTERM: it saves on the notice), nothing else on rank 1 touched.
    calls = [f"{m} {p}" for m, p, _, _ in api_server.requests if m in ("POST", "PATCH", "DELETE")]
    probe_deleted = max(
        i for i, c in enumerate(calls) if c == f"DELETE /api/v1/namespaces/{NS}/pods/{probe['metadata']['name']}"
    )
    assert probe_deleted < calls.index("PATCH /api/v1/nodes/gpu-3")
    assert calls.index("PATCH /api/v1/nodes/gpu-3") < calls.index(
        f"POST /api/v1/namespaces/{NS}/pods/{JOB}-worker-2/eviction"
    )
    (eviction,) = [b for m, p, _, b in api_server.requests if p.endswith("/eviction")]
    assert eviction["deleteOptions"]["gracePeriodSeconds"] == worker["terminationGracePeriodSeconds"]
    assert api_server.get("Node", "gpu-3")["spec"]["unschedulable"] is True
    assert api_server.get("Pod", probe["metadata"]["name"], NS) is None
    assert not [c for c in calls if "/nodes/gpu-1" in c]
    assert rebalancer.on_fallback() == []


def test_without_room_on_rank_1_nothing_moves(api_server, kube, cluster):
    sim = cluster(rank1_room=False)
    (move,) = _rebalancer(kube, sim, probe_timeout_s=60.0).run()
    assert move.outcome == Move.NO_ROOM and move.waited_s == 60.0
    assert "stays; rank 1 found no room for it within 60 s" in move.line()
    assert not [p for m, p, _, _ in api_server.requests if p.endswith("/eviction") or ("/nodes/" in p and m == "PATCH")]
    assert not [p for p in sim.pods() if PROBE_JOB_LABEL in p["metadata"]["labels"]]  # the probe is gone
    assert api_server.get("Pod", f"{JOB}-worker-2", NS)["spec"]["nodeName"] == "gpu-3"


def test_a_free_rank_1_gpu_is_taken_without_a_new_node(api_server, kube, cluster):
    sim = cluster(rank1_room=False)
    api_server.put(node("gpu-1c", _rank(1, "spot")))
    (move,) = _rebalancer(kube, sim).run()
    assert move.outcome == Move.MOVED and move.to is not None and move.to.node == "gpu-1c" and sim.added == 0


def test_a_worker_not_running_again_in_time_is_reported(api_server, kube, cluster):
    sim = cluster(rank1_room=True)
    sim.worker = lambda index: {}  # type: ignore[method-assign]  # the operator never recreates it
    (move,) = _rebalancer(kube, sim, move_timeout_s=30.0).run()
    assert move.outcome == Move.NOT_BACK and "not running again" in move.line()


def test_a_refused_eviction_leaves_the_worker_and_its_node_as_they_were(api_server, kube, cluster):
    """A disruption budget that refuses the worker's eviction: an error naming the worker, and
    its node uncordoned again (it still runs the worker)."""
    sim = cluster(rank1_room=True)
    api_server.refuse_evictions.add(f"{JOB}-worker-2")
    with pytest.raises(KubeError, match=f"moving worker {JOB}-worker-2 off gpu-3: .*refused until deadline"):
        _rebalancer(kube, sim, drain_timeout_s=0.0).run()
    assert api_server.get("Node", "gpu-3")["spec"]["unschedulable"] is False
    assert api_server.get("Pod", f"{JOB}-worker-2", NS)["spec"]["nodeName"] == "gpu-3"
    assert not [p for p in sim.pods() if PROBE_JOB_LABEL in p["metadata"]["labels"]]


def test_a_job_on_rank_1_has_nothing_to_move(api_server, kube, cluster):
    sim = cluster(rank1_room=True)
    api_server.get("Pod", f"{JOB}-worker-2", NS)["spec"]["nodeName"] = "gpu-1c"
    api_server.put(node("gpu-1c", _rank(1, "spot")))
    assert _rebalancer(kube, sim).run() == []
    assert not [p for m, p, _, _ in api_server.requests if m != "GET"]


def test_the_command_lists_then_leaves_the_worker_where_rank_1_has_no_room(api_server, cluster, tmp_path, capsys):
    cluster(rank1_room=False)
    kubeconfig = str(api_server.kubeconfig(tmp_path, namespace=NS))
    base = ["rebalance", JOB, "--stack", "aks-dev", "--kubeconfig", kubeconfig]
    assert main([*base, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"job {NS}/{JOB}: 1 worker(s) on a fallback GPU rank" in out
    assert f"{JOB}-worker-2 on gpu-3 (rank 3, on-demand)" in out
    assert not [p for m, p, _, _ in api_server.requests if m != "GET"]
    # No time to find room: the probe is looked at once, then deleted; the worker stays.
    assert main([*base, "--probe-timeout", "0", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["on_fallback"][0]["node"] == "gpu-3" and doc["moves"][0]["outcome"] == Move.NO_ROOM


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(["rebalance", "--stack", "aks-dev"], ["JOB", "the job's name"], id="no-job"),
        pytest.param(
            ["rebalance", JOB, "--stack", "aks-dev", "--probe-timeout", "-1"],
            ["--probe-timeout=-1.0", "a finite number of seconds >= 0"],
            id="negative-timeout",
        ),
        pytest.param(
            ["rebalance", JOB, "--stack", "aks-dev", "--move-timeout", "nan"], ["--move-timeout=nan"], id="nan-timeout"
        ),
    ],
)
def test_bad_input_is_refused_before_the_cluster_is_asked(api_server, argv, words, tmp_path, capsys):
    assert main([*argv, "--kubeconfig", str(api_server.kubeconfig(tmp_path))]) == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err
    assert not api_server.requests

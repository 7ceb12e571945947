"""Job lifecycle against a loopback API server, through the real kubernetes client and SDK."""

from __future__ import annotations

import copy
import threading
import time

import pytest

from lab.cluster import jobs
from lab.cluster.jobs import JOB_NAME_LABEL, REPLICA_INDEX_LABEL, JobError
from lab.cluster.kube import ClusterError, connect

from .fake_kube import pod

NS = "training"


def _worker(kube, index, node="gpu-0", phase="Running", restarts=0, job="demo"):
    labels = {JOB_NAME_LABEL: job, REPLICA_INDEX_LABEL: str(index), "training.kubeflow.org/replica-type": "worker"}
    return kube.put(pod(f"{job}-worker-{index}", NS, labels, node, phase, restarts))


def test_submit_creates_the_pytorchjob_through_the_sdk(kube, cluster, rendered):
    _, objects = rendered
    created = jobs.submit(cluster, objects, NS)
    assert created == ["PyTorchJob/demo"]
    assert kube.calls("POST") == [f"POST /apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs"]
    stored = kube.get("PyTorchJob", "demo", NS)
    assert stored["spec"]["elasticPolicy"] == objects[0]["spec"]["elasticPolicy"]
    assert stored["spec"]["pytorchReplicaSpecs"] == objects[0]["spec"]["pytorchReplicaSpecs"]


def test_submit_creates_the_c10d_store_before_the_job(kube, cluster, rendered_c10d):
    _, objects = rendered_c10d
    created = jobs.submit(cluster, objects, NS)
    assert created[-1] == "PyTorchJob/demo"
    side = {f"{o['kind']}/{o['metadata']['name']}" for o in objects if o["kind"] != "PyTorchJob"}
    assert "Deployment/demo-rdzv-store" in side and set(created[:-1]) == side
    posts = kube.calls("POST")
    assert posts[-1].endswith("/pytorchjobs") and len(posts) == len(objects)


def test_submit_creates_the_lighthouse_before_a_per_step_job(kube, cluster, rendered_per_step):
    _, objects = rendered_per_step
    created = jobs.submit(cluster, objects, NS)
    assert created[-1] == "PyTorchJob/demo"
    assert sorted(created[:-1]) == [
        "Deployment/demo-lighthouse",
        "NetworkPolicy/demo-lighthouse",
        "PodDisruptionBudget/demo-lighthouse",
        "Service/demo-lighthouse",
    ]
    stored = kube.get("PyTorchJob", "demo", NS)
    assert "elasticPolicy" not in stored["spec"]  # the SDK's model adds none
    job = next(o for o in objects if o["kind"] == "PyTorchJob")
    assert stored["spec"]["pytorchReplicaSpecs"] == job["spec"]["pytorchReplicaSpecs"]
    assert kube.get("Deployment", "demo-lighthouse", NS)["spec"]["template"]["spec"]["priorityClassName"] == (
        "elastic-preserved"
    )


def test_status_of_a_per_step_job_reads_its_groups(kube, cluster, rendered_per_step):
    _, objects = rendered_per_step
    jobs.submit(cluster, objects, NS)
    _worker(kube, 0, "gpu-0")
    st = jobs.status(cluster, "demo", NS)
    assert (st.fault_tolerance, st.min_replicas, st.max_replicas, st.max_restarts) == ("per-step", 2, 3, 100)
    assert "workers running 1 (per-step 2..3)" in "\n".join(st.lines())


def test_a_second_submit_is_refused_unless_replacing(kube, cluster, rendered):
    _, objects = rendered
    jobs.submit(cluster, objects, NS)
    with pytest.raises(JobError, match=r"PyTorchJob training/demo already exists: .*--replace"):
        jobs.submit(cluster, objects, NS)
    before = kube.get("PyTorchJob", "demo", NS)["metadata"]["uid"]
    jobs.submit(cluster, objects, NS, replace=True)
    assert kube.get("PyTorchJob", "demo", NS)["metadata"]["uid"] != before
    assert any(c.startswith("DELETE") for c in kube.calls())


def test_a_job_the_sdk_model_cannot_carry_is_refused_before_anything_is_created(kube, cluster, rendered):
    _, objects = rendered
    job = copy.deepcopy(objects[0])
    job["spec"]["elasticPolicy"]["fancyNewField"] = 1
    with pytest.raises(JobError, match=r"would change the rendered job at spec.elasticPolicy.fancyNewField"):
        jobs.submit(cluster, [job], NS)
    assert kube.calls("POST") == []


def test_a_cluster_without_the_operator_says_so_and_keeps_nothing_half_made(kube, cluster, rendered_c10d, monkeypatch):
    _, objects = rendered_c10d
    import tests.cluster.fake_kube as fake

    monkeypatch.delitem(fake._NAMESPACED, ("apis/kubeflow.org/v1", "pytorchjobs"))
    with pytest.raises(ClusterError, match="training operator is not installed"):
        jobs.submit(cluster, objects, NS)
    assert len(kube.calls("POST")) == len(objects)  # the store's objects, then the job
    assert kube.objects == {}  # the store was removed again


def test_status_reads_conditions_policy_and_pods(kube, cluster, rendered):
    _, objects = rendered
    jobs.submit(cluster, objects, NS)
    job = kube.get("PyTorchJob", "demo", NS)
    job["status"] = {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated", "message": "created"},
            {"type": "Running", "status": "True", "reason": "PyTorchJobRunning", "message": "running"},
            {"type": "Restarting", "status": "False", "reason": "", "message": ""},
        ]
    }
    _worker(kube, 1, "gpu-1", restarts=2)
    _worker(kube, 0, "gpu-0")
    _worker(kube, 2, "", phase="Pending")
    _worker(kube, 0, "gpu-9", job="other")  # another job's pod
    st = jobs.status(cluster, "demo", NS)
    assert st.state == "Running" and [c[0] for c in st.conditions] == ["Created", "Running"]
    assert (st.fault_tolerance, st.min_replicas, st.max_replicas, st.max_restarts) == ("elastic", 2, 3, 100)
    assert [(p.index, p.node, p.phase, p.restarts) for p in st.pods] == [
        (0, "gpu-0", "Running", 0),
        (1, "gpu-1", "Running", 2),
        (2, None, "Pending", 0),
    ]
    assert st.running_workers == 2 and st.restarts == 2
    text = "\n".join(st.lines())
    assert "job training/demo: Running; workers running 2 (elastic 2..3)" in text
    assert "pod demo-worker-2 (worker 2): Pending on no node yet" in text


def test_status_of_a_missing_job(cluster):
    with pytest.raises(JobError, match="no PyTorchJob training/nope"):
        jobs.status(cluster, "nope", NS)


def test_logs_of_one_worker_and_of_all(kube, cluster):
    _worker(kube, 0)
    _worker(kube, 1)
    kube.add_log(NS, "demo-worker-0", "a0", "b0", close=True)
    kube.add_log(NS, "demo-worker-1", "a1", close=True)
    assert list(jobs.logs(cluster, "demo", NS, worker=1)) == [("demo-worker-1", "a1")]
    assert list(jobs.logs(cluster, "demo", NS)) == [
        ("demo-worker-0", "a0"),
        ("demo-worker-0", "b0"),
        ("demo-worker-1", "a1"),
    ]
    with pytest.raises(JobError, match="worker 5 of job training/demo has no pods"):
        list(jobs.logs(cluster, "demo", NS, worker=5))


def test_followed_logs_interleave_workers_as_lines_arrive(kube, cluster):
    _worker(kube, 0)
    _worker(kube, 1)

    def write():
        time.sleep(0.2)
        kube.add_log(NS, "demo-worker-1", "late-1", close=True)
        time.sleep(0.2)
        kube.add_log(NS, "demo-worker-0", "later-0", close=True)

    kube.add_log(NS, "demo-worker-0", "early-0")
    threading.Thread(target=write, daemon=True).start()
    got = list(jobs.logs(cluster, "demo", NS, follow=True))
    assert got == [("demo-worker-0", "early-0"), ("demo-worker-1", "late-1"), ("demo-worker-0", "later-0")]
    follows = [q for m, p, q, _ in kube.requests if p.endswith("/log")]
    assert follows and all(q["follow"][0].lower() == "true" for q in follows)


def test_delete_removes_the_job_and_its_store(kube, cluster, rendered_c10d):
    _, objects = rendered_c10d
    jobs.submit(cluster, objects, NS)
    deleted = jobs.delete(cluster, "demo", NS)
    assert set(deleted) == {f"{o['kind']}/{o['metadata']['name']}" for o in objects}
    assert kube.get("PyTorchJob", "demo", NS) is None and kube.of_kind("Deployment") == []
    with pytest.raises(JobError, match="no PyTorchJob training/demo"):
        jobs.delete(cluster, "demo", NS)


def test_delete_removes_a_per_step_job_and_its_lighthouse(kube, cluster, rendered_per_step):
    _, objects = rendered_per_step
    jobs.submit(cluster, objects, NS)
    deleted = jobs.delete(cluster, "demo", NS)
    assert set(deleted) == {f"{o['kind']}/{o['metadata']['name']}" for o in objects}
    assert kube.objects == {}


def test_list_jobs(kube, cluster, rendered):
    assert jobs.list_jobs(cluster, NS) == []
    jobs.submit(cluster, rendered[1], NS)
    assert jobs.list_jobs(cluster, NS) == ["demo"]


# ------------------------------------------------------------------ connection
def test_context_picks_the_cluster_and_namespace(kube, tmp_path):
    import json

    path = kube.kubeconfig(tmp_path, namespace="training")
    cfg = json.loads(path.read_text())
    cfg["clusters"].append({"name": "dead", "cluster": {"server": "http://127.0.0.1:9"}})
    cfg["contexts"].append({"name": "dead", "context": {"cluster": "dead", "user": "fake"}})
    cfg["current-context"] = "dead"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ClusterError, match=r"no Kubernetes API server reachable with kubeconfig .* context dead"):
        connect(str(path))
    live = connect(str(path), "fake")
    assert live.namespace == "training" and "context fake" in live.source
    with pytest.raises(ClusterError, match=r"--context 'nope': no such context in .* \(it has: dead, fake\)"):
        connect(str(path), "nope")


def test_kubeconfig_env_is_used_when_no_file_is_given(kube, tmp_path, monkeypatch):
    path = kube.kubeconfig(tmp_path)
    other = tmp_path / "empty.yaml"
    other.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    monkeypatch.setenv("KUBECONFIG", f"{other}:{path}")  # a list, merged as kubectl merges it
    assert connect().api.configuration.host == kube.url


def test_a_missing_kubeconfig_names_the_file(tmp_path):
    with pytest.raises(ClusterError, match=r"nothing\.yaml"):
        connect(str(tmp_path / "nothing.yaml"))


def test_refused_credentials_are_explained(kube, cluster, monkeypatch):
    kube.on_request = lambda method, path: None
    import tests.cluster.fake_kube as fake

    def refuse(self, http, method, path, query, body):
        self._send(http, 401, fake._status(401, "Unauthorized", "Unauthorized"))

    monkeypatch.setattr(fake.FakeKube, "_handle", refuse)
    with pytest.raises(ClusterError, match=r"401 Unauthorized \(the kubeconfig's credentials were refused"):
        jobs.status(cluster, "demo", NS)

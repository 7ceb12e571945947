"""Job lifecycle against a loopback API server, through the real kubernetes client and SDK."""

from __future__ import annotations

import copy
import threading
import time

import pytest

from lab.cluster import jobs
from lab.cluster.jobs import JOB_NAME_LABEL, REPLICA_INDEX_LABEL, JobError
from lab.cluster.kube import KubeError, connect
from lab.vocab.problems import InvalidInput

from .fake_kube import pod

NS = "training"


def _worker(api_server, index, node="gpu-0", phase="Running", restarts=0, job="demo"):
    labels = {JOB_NAME_LABEL: job, REPLICA_INDEX_LABEL: str(index), "training.kubeflow.org/replica-type": "worker"}
    return api_server.put(pod(f"{job}-worker-{index}", NS, labels, node, phase, restarts))


def test_submit_creates_the_pytorchjob_through_the_sdk(api_server, kube, rendered):
    _, objects = rendered
    created = jobs.submit(kube, objects, NS)
    assert created == ["PyTorchJob/demo"]
    assert api_server.calls("POST") == [f"POST /apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs"]
    stored = api_server.get("PyTorchJob", "demo", NS)
    assert stored["spec"]["elasticPolicy"] == objects[0]["spec"]["elasticPolicy"]
    assert stored["spec"]["pytorchReplicaSpecs"] == objects[0]["spec"]["pytorchReplicaSpecs"]


@pytest.fixture(scope="module")
def autoscaled(byo_target):
    """The default (elastic) job with `--autoscale-cpu 70`: an HPA in its elasticPolicy."""
    from lab.k8s.job import JobSizing, render_job
    from lab.vocab.job import JobSpec

    objects = render_job(JobSpec(name="demo"), byo_target, JobSizing(autoscale_cpu=70)).objects
    (job,) = [o for o in objects if o["kind"] == "PyTorchJob"]
    assert job["spec"]["elasticPolicy"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 70
    return objects


def test_an_autoscaled_job_is_refused_on_a_cluster_without_the_metrics_api(api_server, kube, autoscaled):
    """Without metrics-server the operator's HPA would never read a metric: refused with what to
    do, before anything is created (discovery lists no metrics.k8s.io group)."""
    with pytest.raises(InvalidInput) as refused:
        jobs.submit(kube, autoscaled, NS)
    message = str(refused.value)
    assert message.startswith("--autoscale-cpu=70 is invalid: expected a cluster that serves the metrics.k8s.io API")
    assert "`elastic-lab up` installs the metrics-server add-on; AKS has it built in" in message
    assert refused.value.exit_code == 2
    assert "GET /apis" in api_server.calls("GET") and api_server.calls("POST") == []


def test_an_autoscaled_job_is_created_where_metrics_server_serves_its_api(api_server, kube, autoscaled):
    """An EKS stack with its metrics-server add-on, or AKS (built in): the group is listed."""
    api_server.api_groups.append("metrics.k8s.io/v1beta1")
    assert jobs.serves_metrics_api(kube)
    assert jobs.submit(kube, autoscaled, NS) == ["PyTorchJob/demo"]
    # Through the SDK, whose own model for an HPA's metrics is missing: sent exactly as rendered.
    (rendered_job,) = [o for o in autoscaled if o["kind"] == "PyTorchJob"]
    stored = api_server.get("PyTorchJob", "demo", NS)["spec"]["elasticPolicy"]["metrics"]
    assert stored == rendered_job["spec"]["elasticPolicy"]["metrics"]


def test_a_job_without_an_hpa_does_not_ask_for_the_metrics_api(api_server, kube, rendered):
    jobs.submit(kube, rendered[1], NS)
    assert "GET /apis" not in api_server.calls("GET")


def test_submit_creates_the_c10d_store_before_the_job(api_server, kube, rendered_c10d):
    _, objects = rendered_c10d
    created = jobs.submit(kube, objects, NS)
    assert created[-1] == "PyTorchJob/demo"
    side = {f"{o['kind']}/{o['metadata']['name']}" for o in objects if o["kind"] != "PyTorchJob"}
    assert "Deployment/demo-rdzv-store" in side and set(created[:-1]) == side
    posts = api_server.calls("POST")
    assert posts[-1].endswith("/pytorchjobs") and len(posts) == len(objects)
    # ... and owned by it: deleted with it however it is deleted (its PDB would block drains).
    uid = api_server.get("PyTorchJob", "demo", NS)["metadata"]["uid"]
    for o in objects:
        if o["kind"] != "PyTorchJob":
            (owner,) = api_server.get(o["kind"], o["metadata"]["name"], NS)["metadata"]["ownerReferences"]
            assert owner == {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "demo", "uid": uid}


def test_submit_creates_the_lighthouse_before_a_per_step_job(api_server, kube, rendered_per_step):
    _, objects = rendered_per_step
    created = jobs.submit(kube, objects, NS)
    assert created[-1] == "PyTorchJob/demo"
    assert sorted(created[:-1]) == [
        "Deployment/demo-lighthouse",
        "NetworkPolicy/demo-lighthouse",
        "PodDisruptionBudget/demo-lighthouse",
        "Service/demo-lighthouse",
    ]
    stored = api_server.get("PyTorchJob", "demo", NS)
    assert "elasticPolicy" not in stored["spec"]  # the SDK's model adds none
    job = next(o for o in objects if o["kind"] == "PyTorchJob")
    assert stored["spec"]["pytorchReplicaSpecs"] == job["spec"]["pytorchReplicaSpecs"]
    assert api_server.get("Deployment", "demo-lighthouse", NS)["spec"]["template"]["spec"]["priorityClassName"] == (
        "elastic-preserved"
    )


def test_status_of_a_per_step_job_reads_its_groups(api_server, kube, rendered_per_step):
    _, objects = rendered_per_step
    jobs.submit(kube, objects, NS)
    _worker(api_server, 0, "gpu-0")
    st = jobs.status(kube, "demo", NS)
    assert (st.fault_tolerance, st.min_replicas, st.max_replicas, st.max_restarts) == ("per-step", 2, 3, 100)
    assert "workers running 1 (per-step 2..3)" in "\n".join(st.lines())


def test_a_second_submit_is_refused_unless_replacing(api_server, kube, rendered):
    _, objects = rendered
    jobs.submit(kube, objects, NS)
    with pytest.raises(JobError, match=r"PyTorchJob training/demo already exists: .*--replace"):
        jobs.submit(kube, objects, NS)
    before = api_server.get("PyTorchJob", "demo", NS)["metadata"]["uid"]
    jobs.submit(kube, objects, NS, replace=True)
    assert api_server.get("PyTorchJob", "demo", NS)["metadata"]["uid"] != before
    assert any(c.startswith("DELETE") for c in api_server.calls())


def test_a_job_the_sdk_model_cannot_carry_is_refused_before_anything_is_created(api_server, kube, rendered):
    _, objects = rendered
    job = copy.deepcopy(objects[0])
    job["spec"]["elasticPolicy"]["fancyNewField"] = 1
    with pytest.raises(JobError, match=r"would change the rendered job at spec.elasticPolicy.fancyNewField"):
        jobs.submit(kube, [job], NS)
    assert api_server.calls("POST") == []


def test_a_cluster_without_the_operator_says_so_and_keeps_nothing_half_made(
    api_server, kube, rendered_c10d, monkeypatch
):
    _, objects = rendered_c10d
    import tests.cluster.fake_kube as fake

    monkeypatch.delitem(fake._NAMESPACED, ("apis/kubeflow.org/v1", "pytorchjobs"))
    with pytest.raises(KubeError, match="training operator is not installed"):
        jobs.submit(kube, objects, NS)
    assert len(api_server.calls("POST")) == len(objects)  # the store's objects, then the job
    assert api_server.objects == {}  # the store was removed again


def test_status_reads_conditions_policy_and_pods(api_server, kube, rendered):
    _, objects = rendered
    jobs.submit(kube, objects, NS)
    job = api_server.get("PyTorchJob", "demo", NS)
    job["status"] = {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated", "message": "created"},
            {"type": "Running", "status": "True", "reason": "PyTorchJobRunning", "message": "running"},
            {"type": "Restarting", "status": "False", "reason": "", "message": ""},
        ]
    }
    _worker(api_server, 1, "gpu-1", restarts=2)
    _worker(api_server, 0, "gpu-0")
    _worker(api_server, 2, "", phase="Pending")
    _worker(api_server, 0, "gpu-9", job="other")  # another job's pod
    st = jobs.status(kube, "demo", NS)
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


def test_status_of_a_missing_job(kube):
    with pytest.raises(JobError, match="no PyTorchJob training/nope"):
        jobs.status(kube, "nope", NS)


def test_logs_of_one_worker_and_of_all(api_server, kube):
    _worker(api_server, 0)
    _worker(api_server, 1)
    api_server.add_log(NS, "demo-worker-0", "a0", "b0", close=True)
    api_server.add_log(NS, "demo-worker-1", "a1", close=True)
    assert list(jobs.logs(kube, "demo", NS, worker=1)) == [("demo-worker-1", "a1")]
    assert list(jobs.logs(kube, "demo", NS)) == [
        ("demo-worker-0", "a0"),
        ("demo-worker-0", "b0"),
        ("demo-worker-1", "a1"),
    ]
    with pytest.raises(JobError, match="worker 5 of job training/demo has no pods"):
        list(jobs.logs(kube, "demo", NS, worker=5))


def test_followed_logs_interleave_workers_as_lines_arrive(api_server, kube):
    _worker(api_server, 0)
    _worker(api_server, 1)

    def write():
        time.sleep(0.2)
        api_server.add_log(NS, "demo-worker-1", "late-1", close=True)
        time.sleep(0.2)
        api_server.add_log(NS, "demo-worker-0", "later-0", close=True)

    api_server.add_log(NS, "demo-worker-0", "early-0")
    threading.Thread(target=write, daemon=True).start()
    got = list(jobs.logs(kube, "demo", NS, follow=True))
    assert got == [("demo-worker-0", "early-0"), ("demo-worker-1", "late-1"), ("demo-worker-0", "later-0")]
    follows = [q for m, p, q, _ in api_server.requests if p.endswith("/log")]
    assert follows and all(q["follow"][0].lower() == "true" for q in follows)


def test_delete_removes_the_job_and_its_store(api_server, kube, rendered_c10d):
    _, objects = rendered_c10d
    jobs.submit(kube, objects, NS)
    deleted = jobs.delete(kube, "demo", NS)
    assert set(deleted) == {f"{o['kind']}/{o['metadata']['name']}" for o in objects}
    assert api_server.get("PyTorchJob", "demo", NS) is None and api_server.of_kind("Deployment") == []
    with pytest.raises(JobError, match="no PyTorchJob training/demo"):
        jobs.delete(kube, "demo", NS)


def test_delete_removes_a_per_step_job_and_its_lighthouse(api_server, kube, rendered_per_step):
    _, objects = rendered_per_step
    jobs.submit(kube, objects, NS)
    deleted = jobs.delete(kube, "demo", NS)
    assert set(deleted) == {f"{o['kind']}/{o['metadata']['name']}" for o in objects}
    assert api_server.objects == {}


def test_list_jobs(api_server, kube, rendered):
    assert jobs.list_jobs(kube, NS) == []
    jobs.submit(kube, rendered[1], NS)
    assert jobs.list_jobs(kube, NS) == ["demo"]


# ------------------------------------------------------------------ connection
def test_context_picks_the_cluster_and_namespace(api_server, tmp_path):
    import json

    path = api_server.kubeconfig(tmp_path, namespace="training")
    cfg = json.loads(path.read_text())
    cfg["clusters"].append({"name": "dead", "cluster": {"server": "http://127.0.0.1:9"}})
    cfg["contexts"].append({"name": "dead", "context": {"cluster": "dead", "user": "fake"}})
    cfg["current-context"] = "dead"
    path.write_text(json.dumps(cfg))
    with pytest.raises(KubeError, match=r"no Kubernetes API server reachable with kubeconfig .* context dead"):
        connect(str(path))
    live = connect(str(path), "fake")
    assert live.namespace == "training" and "context fake" in live.source
    with pytest.raises(KubeError, match=r"--context 'nope': no such context in .* \(it has: dead, fake\)"):
        connect(str(path), "nope")


def test_kubeconfig_env_is_used_when_no_file_is_given(api_server, tmp_path, monkeypatch):
    path = api_server.kubeconfig(tmp_path)
    other = tmp_path / "empty.yaml"
    other.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    monkeypatch.setenv("KUBECONFIG", f"{other}:{path}")  # a list, merged as kubectl merges it
    assert connect().api.configuration.host == api_server.url


def _kubeconfig_for(server: str, directory) -> str:
    """A kubeconfig whose only cluster is at `server`."""
    import json

    path = directory / "kubeconfig-unreachable.yaml"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


def _free_loopback_port() -> int:
    """A port nothing listens on: bound, read and released again."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_api_server_that_is_not_there_is_said_in_plain_words(tmp_path):
    """A closed loopback port: "connection refused at ADDRESS", from urllib3's structure (its
    MaxRetryError's reason and the socket error beneath), never urllib3's own text."""
    port = _free_loopback_port()
    with pytest.raises(KubeError) as refused:
        connect(_kubeconfig_for(f"https://127.0.0.1:{port}", tmp_path))
    said = str(refused.value)
    assert said.endswith(f"(https://127.0.0.1:{port}): connection refused at 127.0.0.1:{port} (nothing listens there)")
    assert "MaxRetryError" not in said and "NewConnectionError" not in said and "object at" not in said


def test_tls_against_a_server_that_speaks_plain_http_is_named(api_server, tmp_path):
    """The fake API server speaks HTTP; a kubeconfig that says https meets it with a TLS handshake."""
    port = api_server.url.rpartition(":")[2]
    with pytest.raises(KubeError) as refused:
        connect(_kubeconfig_for(f"https://127.0.0.1:{port}", tmp_path))
    assert f": the TLS handshake with 127.0.0.1:{port} failed (wrong version number)" in str(refused.value)


def test_a_name_that_does_not_resolve_is_named(tmp_path, monkeypatch):
    """No DNS here: the resolver's own error (socket.gaierror), raised where urllib3 resolves."""
    import socket

    def no_such_name(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    with pytest.raises(KubeError) as refused:
        connect(_kubeconfig_for("https://api.cluster.example:6443", tmp_path))
    assert str(refused.value).endswith(
        "the name 'api.cluster.example' does not resolve (DNS: Name or service not known)"
    )


def test_a_missing_kubeconfig_names_the_file(tmp_path):
    with pytest.raises(KubeError, match=r"nothing\.yaml"):
        connect(str(tmp_path / "nothing.yaml"))


def test_refused_credentials_are_explained(api_server, kube, monkeypatch):
    api_server.on_request = lambda method, path: None
    import tests.cluster.fake_kube as fake

    def refuse(self, http, method, path, query, body):
        self._send(http, 401, fake._status(401, "Unauthorized", "Unauthorized"))

    monkeypatch.setattr(fake.FakeKube, "_handle", refuse)
    with pytest.raises(KubeError, match=r"401 Unauthorized \(the kubeconfig's credentials were refused"):
        jobs.status(kube, "demo", NS)


def test_a_job_whose_objects_cannot_be_owned_is_taken_back_whole(api_server, kube, rendered_c10d, monkeypatch):
    _, objects = rendered_c10d

    def refused(kube, objects, name, namespace):
        raise jobs.JobError("making PyTorchJob demo the owner of Deployment demo-rdzv-store: forbidden")

    monkeypatch.setattr(jobs, "_owned_by_the_job", refused)
    with pytest.raises(jobs.JobError, match="forbidden"):
        jobs.submit(kube, objects, NS)
    assert api_server.get("PyTorchJob", "demo", NS) is None
    assert all(api_server.get(o["kind"], o["metadata"]["name"], NS) is None for o in objects)


def test_status_shows_how_a_worker_failed_from_its_termination_message(api_server, kube, rendered):
    """A pod whose agent gave up on a crash loop: its exit code and the termination message's last
    lines (the agent's last words, kept by FallbackToLogsOnError) are in status."""
    _, objects = rendered
    jobs.submit(kube, objects, NS)
    failed = _worker(api_server, 0, "gpu-0", phase="Failed")
    last_words = "\n".join(
        [f"noise {i}" for i in range(10)]
        + [
            "workers crash loop: rank 0 failed 3 times in a row with FileNotFoundError: [Errno 2] "
            "No such file or directory: '/data/train.bin'; giving up",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        ]
    )
    failed["status"]["containerStatuses"][0]["state"] = {
        "terminated": {"exitCode": 1, "reason": "Error", "message": last_words}
    }
    _worker(api_server, 1, "gpu-1")
    st = jobs.status(kube, "demo", NS)
    assert st.pods[1].ended_with is None
    text = "\n".join(st.lines())
    assert "    ended: exit code 1 (Error)" in text
    assert "'/data/train.bin'; giving up" in text and "noise 3" not in text


def _operator_saw(api_server, pod: str, code: int, count: int, job: str = "demo") -> None:
    """An ExitedWithCode event, as the training operator v1.9.4 records one on the PyTorchJob."""
    api_server.put(
        {
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": {"name": f"{job}.{pod}.{code}", "namespace": NS},
            "involvedObject": {"kind": "PyTorchJob", "name": job, "namespace": NS, "apiVersion": "kubeflow.org/v1"},
            "reason": "ExitedWithCode",
            "message": f"Pod: {NS}.{pod} exited with code {code}",
            "count": count,
            "type": "Normal",
        }
    )


def test_status_names_workers_killed_for_memory_and_their_limit(api_server, kube, rendered):
    """A worker pod ends OOMKilled (exit 137) at its container's memory limit, the memory request
    submit made its limit; the operator deletes and recreates it at once, so its ExitedWithCode
    events are what is left of the earlier kills."""
    _, objects = rendered
    jobs.submit(kube, objects, NS)
    killed = _worker(api_server, 1, "gpu-1", phase="Failed")
    killed["spec"]["containers"][0]["resources"] = {"limits": {"memory": "8Gi"}, "requests": {"memory": "8Gi"}}
    killed["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    _worker(api_server, 0, "gpu-0")
    _operator_saw(api_server, "demo-worker-1", 137, count=2)
    _operator_saw(api_server, "demo-worker-0", 143, count=1)  # a spot notice: no memory kill
    _operator_saw(api_server, "other-worker-0", 137, count=5, job="other")
    st = jobs.status(kube, "demo", NS)
    assert st.memory_kills == {"demo-worker-1": 2} and st.memory_limit == "8Gi"
    assert (st.pods[1].oom_killed, st.pods[1].memory_limit) == (True, "8Gi") and not st.pods[0].oom_killed
    text = "\n".join(st.lines())
    assert "    ended: exit code 137 (OOMKilled)\n    killed for memory (OOMKilled) at its memory limit 8Gi" in text
    assert "workers killed for memory (exit 137: OOMKilled, most likely), as the operator saw: demo-worker-1 (2" in text
    assert (
        "memory limit per worker: 8Gi; the operator recreates such a pod without limit, and its agent ends the job "
        "after 3 kills in a row on one node" in text
    )


def test_a_gpu_job_is_submitted_with_its_gpu_count_as_the_sdk_sends_it(api_server, kube, rendered):
    """The chart writes `nvidia.com/gpu: 1`; the SDK's model holds quantities as strings and
    sends "1", the same quantity to Kubernetes: not a change of the job that was checked."""
    _, objects = rendered
    job = copy.deepcopy(objects[0])
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": 2, "memory": "8Gi"}}
    assert jobs.submit(kube, [job], NS) == ["PyTorchJob/demo"]
    stored = api_server.get("PyTorchJob", "demo", NS)["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert stored["template"]["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "1"},
        "requests": {"cpu": "2", "memory": "8Gi"},
    }


def test_only_resource_quantities_may_come_back_as_strings():
    quantity = "spec.containers[0].resources.limits.nvidia.com/gpu"
    assert list(jobs._differences({"q": 1}, {"q": "1"})) == ["q"]  # elsewhere a string is another value
    assert jobs._same_quantity(quantity, 1, "1") and jobs._same_quantity(quantity.replace("limits", "requests"), 2, "2")
    assert not jobs._same_quantity(quantity, 1, "2") and not jobs._same_quantity(quantity, True, "True")
    assert not jobs._same_quantity("spec.elasticPolicy.maxRestarts", 1, "1")


def test_scale_sets_the_worker_replicas_through_the_scale_subresource(api_server, kube, rendered):
    """Within elasticPolicy minReplicas..maxReplicas (2..3 here), as `kubectl scale` would."""
    _, objects = rendered
    jobs.submit(kube, objects, NS)
    job = api_server.get("PyTorchJob", "demo", NS)
    start = job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    target = 2 if start != 2 else 3
    scaled = jobs.scale(kube, "demo", NS, target)
    assert (scaled.before, scaled.after, scaled.minimum, scaled.maximum) == (start, target, 2, 3)
    assert api_server.calls("PATCH") == [f"PATCH /apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/demo/scale"]
    assert api_server.get("PyTorchJob", "demo", NS)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == target
    assert f"Worker replicas {start} -> {target} (range 2..3)" in scaled.line()
    # The same size again changes nothing and sends nothing.
    jobs.scale(kube, "demo", NS, target)
    assert len(api_server.calls("PATCH")) == 1


@pytest.mark.parametrize("nodes", [1, 4, 0])
def test_scale_outside_the_jobs_range_is_refused_before_anything_changes(api_server, kube, rendered, nodes):
    from lab.vocab.problems import InvalidInput

    _, objects = rendered
    jobs.submit(kube, objects, NS)
    with pytest.raises(InvalidInput, match=r"--nodes=\d is invalid: expected 2\.\.3: the job's range \(elasticPolicy"):
        jobs.scale(kube, "demo", NS, nodes)
    assert api_server.calls("PATCH") == []


def test_scale_of_a_per_step_job_keeps_its_quorum_minimum(api_server, kube, rendered_per_step):
    _, objects = rendered_per_step
    jobs.submit(kube, objects, NS)
    minimum = jobs.status(kube, "demo", NS).min_replicas
    scaled = jobs.scale(kube, "demo", NS, minimum + 3)
    assert scaled.fault_tolerance == "per-step" and scaled.maximum is None and scaled.after == minimum + 3
    from lab.vocab.problems import InvalidInput

    with pytest.raises(InvalidInput, match="or more: the job's range"):
        jobs.scale(kube, "demo", NS, minimum - 1)


def test_scale_of_a_missing_job(kube):
    with pytest.raises(JobError, match="no PyTorchJob training/nope"):
        jobs.scale(kube, "nope", NS, 2)

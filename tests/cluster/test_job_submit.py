"""Submit and delete against a loopback API server, through the real kubernetes client and the
kubeflow-training SDK."""

from __future__ import annotations

import copy

import pytest

from lab.cluster import job_submit
from lab.cluster.kube import KubeError
from lab.cluster.pytorchjob import JobError
from lab.vocab.problems import InvalidInput

NS = "training"


def test_submit_creates_the_pytorchjob_through_the_sdk(api_server, kube, rendered):
    _, objects = rendered
    created = job_submit.submit(kube, objects, NS)
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
        job_submit.submit(kube, autoscaled, NS)
    message = str(refused.value)
    assert message.startswith("--autoscale-cpu=70 is invalid: expected a cluster that serves the metrics.k8s.io API")
    assert "`elastic-lab up` installs the metrics-server add-on; AKS has it built in" in message
    assert refused.value.exit_code == 2
    assert "GET /apis" in api_server.calls("GET") and api_server.calls("POST") == []


def test_an_autoscaled_job_is_created_where_metrics_server_serves_its_api(api_server, kube, autoscaled):
    """An EKS stack with its metrics-server add-on, or AKS (built in): the group is listed."""
    api_server.api_groups.append("metrics.k8s.io/v1beta1")
    assert job_submit.serves_metrics_api(kube)
    assert job_submit.submit(kube, autoscaled, NS) == ["PyTorchJob/demo"]
    # Through the SDK, whose own model for an HPA's metrics is missing: sent exactly as rendered.
    (rendered_job,) = [o for o in autoscaled if o["kind"] == "PyTorchJob"]
    stored = api_server.get("PyTorchJob", "demo", NS)["spec"]["elasticPolicy"]["metrics"]
    assert stored == rendered_job["spec"]["elasticPolicy"]["metrics"]


def test_a_job_without_an_hpa_does_not_ask_for_the_metrics_api(api_server, kube, rendered):
    job_submit.submit(kube, rendered[1], NS)
    assert "GET /apis" not in api_server.calls("GET")


def test_submit_creates_the_c10d_store_before_the_job(api_server, kube, rendered_c10d):
    _, objects = rendered_c10d
    created = job_submit.submit(kube, objects, NS)
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
    created = job_submit.submit(kube, objects, NS)
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


def test_a_second_submit_is_refused_unless_replacing(api_server, kube, rendered):
    _, objects = rendered
    job_submit.submit(kube, objects, NS)
    with pytest.raises(JobError, match=r"PyTorchJob training/demo already exists: .*--replace"):
        job_submit.submit(kube, objects, NS)
    before = api_server.get("PyTorchJob", "demo", NS)["metadata"]["uid"]
    job_submit.submit(kube, objects, NS, replace=True)
    assert api_server.get("PyTorchJob", "demo", NS)["metadata"]["uid"] != before
    assert any(c.startswith("DELETE") for c in api_server.calls())


def test_a_job_the_sdk_model_cannot_carry_is_refused_before_anything_is_created(api_server, kube, rendered):
    _, objects = rendered
    job = copy.deepcopy(objects[0])
    job["spec"]["elasticPolicy"]["fancyNewField"] = 1
    with pytest.raises(JobError, match=r"would change the rendered job at spec.elasticPolicy.fancyNewField"):
        job_submit.submit(kube, [job], NS)
    assert api_server.calls("POST") == []


def test_a_cluster_without_the_operator_says_so_and_keeps_nothing_half_made(
    api_server, kube, rendered_c10d, monkeypatch
):
    _, objects = rendered_c10d
    import tests.cluster.fake_kube as fake

    monkeypatch.delitem(fake._NAMESPACED, ("apis/kubeflow.org/v1", "pytorchjobs"))
    with pytest.raises(KubeError, match="training operator is not installed"):
        job_submit.submit(kube, objects, NS)
    assert len(api_server.calls("POST")) == len(objects)  # the store's objects, then the job
    assert api_server.objects == {}  # the store was removed again


def test_delete_removes_the_job_and_its_store(api_server, kube, rendered_c10d):
    _, objects = rendered_c10d
    job_submit.submit(kube, objects, NS)
    deleted = job_submit.delete(kube, "demo", NS)
    assert set(deleted) == {f"{o['kind']}/{o['metadata']['name']}" for o in objects}
    assert api_server.get("PyTorchJob", "demo", NS) is None and api_server.of_kind("Deployment") == []
    with pytest.raises(JobError, match="no PyTorchJob training/demo"):
        job_submit.delete(kube, "demo", NS)


def test_delete_removes_a_per_step_job_and_its_lighthouse(api_server, kube, rendered_per_step):
    _, objects = rendered_per_step
    job_submit.submit(kube, objects, NS)
    deleted = job_submit.delete(kube, "demo", NS)
    assert set(deleted) == {f"{o['kind']}/{o['metadata']['name']}" for o in objects}
    assert api_server.objects == {}


def test_a_job_whose_objects_cannot_be_owned_is_taken_back_whole(api_server, kube, rendered_c10d, monkeypatch):
    _, objects = rendered_c10d

    def refused(kube, objects, name, namespace):
        raise JobError("making PyTorchJob demo the owner of Deployment demo-rdzv-store: forbidden")

    monkeypatch.setattr(job_submit, "_owned_by_the_job", refused)
    with pytest.raises(JobError, match="forbidden"):
        job_submit.submit(kube, objects, NS)
    assert api_server.get("PyTorchJob", "demo", NS) is None
    assert all(api_server.get(o["kind"], o["metadata"]["name"], NS) is None for o in objects)


def test_a_gpu_job_is_submitted_with_its_gpu_count_as_the_sdk_sends_it(api_server, kube, rendered):
    """The chart writes `nvidia.com/gpu: 1`; the SDK's model holds quantities as strings and
    sends "1", the same quantity to Kubernetes: not a change of the job that was checked."""
    _, objects = rendered
    job = copy.deepcopy(objects[0])
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": 2, "memory": "8Gi"}}
    assert job_submit.submit(kube, [job], NS) == ["PyTorchJob/demo"]
    stored = api_server.get("PyTorchJob", "demo", NS)["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert stored["template"]["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "1"},
        "requests": {"cpu": "2", "memory": "8Gi"},
    }


def test_only_resource_quantities_may_come_back_as_strings():
    quantity = "spec.containers[0].resources.limits.nvidia.com/gpu"
    assert list(job_submit._differences({"q": 1}, {"q": "1"})) == ["q"]  # elsewhere a string is another value
    assert job_submit._same_quantity(quantity, 1, "1") and job_submit._same_quantity(
        quantity.replace("limits", "requests"), 2, "2"
    )
    assert not job_submit._same_quantity(quantity, 1, "2") and not job_submit._same_quantity(quantity, True, "True")
    assert not job_submit._same_quantity("spec.elasticPolicy.maxRestarts", 1, "1")


@pytest.fixture(scope="module", params=["elastic", "per-step"])
def rendered_split(request, byo_target):
    """A job of 1 to 3 nodes whose last 2 are borrowed: its core and its `-burst` part."""
    from lab.k8s.job import render_job
    from lab.vocab.job import FaultTolerance, JobSpec

    spec = JobSpec(name="demo", min_nodes=1, max_nodes=3, burst_nodes=2, fault_tolerance=FaultTolerance(request.param))
    return render_job(spec, byo_target).objects


def test_a_job_with_a_burst_is_created_as_its_core_and_its_borrowed_part_which_the_core_owns(
    api_server, kube, rendered_split
):
    created = job_submit.submit(kube, rendered_split, NS)
    assert created[-2:] == ["PyTorchJob/demo", "PyTorchJob/demo-burst"]
    core, burst = (api_server.get("PyTorchJob", n, NS) for n in ("demo", "demo-burst"))
    assert core["spec"].get("elasticPolicy") == burst["spec"].get("elasticPolicy")  # one run, one rendezvous
    (owner,) = burst["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("PyTorchJob", "demo", core["metadata"]["uid"])
    workers = [j["spec"]["pytorchReplicaSpecs"]["Worker"] for j in (core, burst)]
    assert [w["replicas"] for w in workers] == [1, 2]
    assert [w["template"]["spec"]["priorityClassName"] for w in workers] == ["elastic-preemptible", "elastic-borrowed"]
    with pytest.raises(JobError, match="already exists"):
        job_submit.submit(kube, rendered_split, NS)
    deleted = job_submit.delete(kube, "demo", NS)
    assert {"PyTorchJob/demo", "PyTorchJob/demo-burst"} <= set(deleted)
    assert api_server.of_kind("PyTorchJob") == []


def test_a_borrowed_part_left_from_an_earlier_job_counts_as_the_job_existing(api_server, kube, rendered_split):
    """A `-burst` PyTorchJob alone (its core deleted by hand) still holds the run's name."""
    job_submit.submit(kube, rendered_split, NS)
    api_server.objects.pop(next(k for k in api_server.objects if k.endswith("/pytorchjobs/demo")))
    with pytest.raises(JobError, match="PyTorchJob training/demo already exists"):
        job_submit.submit(kube, rendered_split, NS)


def test_a_split_job_whose_borrowed_part_is_refused_leaves_nothing(api_server, kube, rendered_split, monkeypatch):
    """The core was created, its borrowed part refused: the core and its servers are deleted."""
    create_job = job_submit._create_job

    def refuse_the_burst(kube, model, name, namespace):
        if name.endswith("-burst"):
            raise JobError(f"creating PyTorchJob {namespace}/{name}: forbidden (exceeded quota)")
        create_job(kube, model, name, namespace)

    monkeypatch.setattr(job_submit, "_create_job", refuse_the_burst)
    with pytest.raises(JobError, match="exceeded quota"):
        job_submit.submit(kube, rendered_split, NS)
    assert api_server.get("PyTorchJob", "demo", NS) is None
    assert all(api_server.get(o["kind"], o["metadata"]["name"], NS) is None for o in rendered_split)


def test_pytorchjobs_that_are_not_a_core_and_its_burst_are_refused(rendered_split):
    import copy as copying

    other = copying.deepcopy([o for o in rendered_split if o["kind"] == "PyTorchJob"][-1])
    other["metadata"]["name"] = "other-burst"
    with pytest.raises(JobError, match="or a job's core and its <name>-burst part; found 2: demo \\(core\\), other"):
        job_submit.submit(None, [o for o in rendered_split if o["metadata"]["name"] != "demo-burst"] + [other], NS)


def _with_a_gpu_each(objects):
    """`objects` with each worker asking for one GPU (the byo stack's platform has none)."""
    out = copy.deepcopy(list(objects))
    for job in (o for o in out if o["kind"] == "PyTorchJob"):
        container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        container.setdefault("resources", {}).setdefault("limits", {})["nvidia.com/gpu"] = 1
    return out


def _quota(api_server, name: str, hard: str, used: str, priority_class: str | None = "elastic-preemptible") -> None:
    spec: dict = {"hard": {"requests.nvidia.com/gpu": hard}}
    if priority_class is not None:
        spec["scopeSelector"] = {
            "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": [priority_class]}]
        }
    api_server.put(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
            "status": {"hard": {"requests.nvidia.com/gpu": hard}, "used": {"requests.nvidia.com/gpu": used}},
        }
    )


def test_a_core_the_teams_quota_has_no_room_for_is_refused_with_the_numbers(api_server, kube, rendered_split):
    """The team's share, 4 GPUs at the workers' class, 4 in use by its other jobs: the core (1
    worker of 1 GPU) would be refused pod by pod; submit says so and creates nothing. A quota
    of another class, or the borrowed one, does not hold the core back."""
    rendered_split = _with_a_gpu_each(rendered_split)
    _quota(api_server, "elastic-preemptible-gpus", "4", "4")
    _quota(api_server, "elastic-borrowed-gpus", "0", "0", "elastic-borrowed")
    with pytest.raises(InvalidInput) as refused:
        job_submit.submit(kube, rendered_split, NS)
    assert str(refused.value).startswith(
        "--core=1 is invalid: expected at most 0 worker(s) of 1 GPU(s) now: ResourceQuota "
        "training/elastic-preemptible-gpus allows 4 GPU(s) at priority elastic-preemptible, 4 in use by other jobs"
    )
    assert api_server.of_kind("PyTorchJob") == [] and api_server.calls("POST") == []
    _quota(api_server, "elastic-preemptible-gpus", "4", "3")
    assert "PyTorchJob/demo" in job_submit.submit(kube, rendered_split, NS)


def test_an_unscoped_quota_counts_and_a_replaced_jobs_own_gpus_are_free_again(api_server, kube, rendered):
    """A quota with no scope counts every pod. The job being replaced holds 3 of the 3 GPUs:
    they are free once it goes, so its replacement fits where another job does not."""
    from lab.cluster.job_quota import refuse_a_core_without_room

    from .fake_kube import job_worker

    objects = _with_a_gpu_each(rendered[1])
    job_submit.submit(kube, objects, NS)
    for i in range(3):
        pod = job_worker(api_server, i, f"gpu-{i}")
        pod["spec"]["priorityClassName"] = "elastic-preemptible"
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    _quota(api_server, "namespace-gpus", "3", "3", priority_class=None)
    with pytest.raises(InvalidInput, match=r"--max-nodes=3 is invalid: expected at most 0 worker"):
        job_submit.submit(kube, [dict(o, metadata=dict(o["metadata"], name="other")) for o in objects], NS)
    (job,) = [o for o in objects if o["kind"] == "PyTorchJob"]
    refuse_a_core_without_room(kube, job, NS, flag="--max-nodes", replacing=["demo"])  # fits: no raise
    api_server.get("Pod", "demo-worker-2", NS)["status"]["phase"] = "Failed"  # ended: holds nothing
    with pytest.raises(InvalidInput, match=r"at most 2 worker\(s\) of 1 GPU\(s\) now"):
        refuse_a_core_without_room(kube, job, NS, flag="--max-nodes", replacing=["demo"])

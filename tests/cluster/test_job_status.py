"""A job's status against a loopback API server: its conditions, range, pods, and the workers
killed for memory."""

from __future__ import annotations

import pytest

from lab.cluster.job_status import status
from lab.cluster.job_submit import submit
from lab.cluster.pytorchjob import JobError

from .fake_kube import job_worker

NS = "training"


def test_status_of_a_per_step_job_reads_its_groups(api_server, kube, rendered_per_step):
    _, objects = rendered_per_step
    submit(kube, objects, NS)
    job_worker(api_server, 0, "gpu-0")
    st = status(kube, "demo", NS)
    assert (st.fault_tolerance, st.min_replicas, st.max_replicas, st.max_restarts) == ("per-step", 2, 3, 100)
    assert "workers running 1 (per-step 2..3)" in "\n".join(st.lines())


def test_status_reads_conditions_policy_and_pods(api_server, kube, rendered):
    _, objects = rendered
    submit(kube, objects, NS)
    job = api_server.get("PyTorchJob", "demo", NS)
    job["status"] = {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated", "message": "created"},
            {"type": "Running", "status": "True", "reason": "PyTorchJobRunning", "message": "running"},
            {"type": "Restarting", "status": "False", "reason": "", "message": ""},
        ]
    }
    job_worker(api_server, 1, "gpu-1", restarts=2)
    job_worker(api_server, 0, "gpu-0")
    job_worker(api_server, 2, "", phase="Pending")
    job_worker(api_server, 0, "gpu-9", job="other")  # another job's pod
    st = status(kube, "demo", NS)
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


def test_status_shows_a_jobs_borrowed_part_with_its_own_pods_and_priority(api_server, kube, byo_target):
    from lab.k8s.job import render_job
    from lab.vocab.job import JobSpec

    submit(kube, render_job(JobSpec(name="demo", min_nodes=1, max_nodes=3, burst_nodes=2), byo_target).objects, NS)
    job_worker(api_server, 0, "gpu-0")
    job_worker(api_server, 0, "gpu-1", job="demo-burst")
    job_worker(api_server, 1, "", phase="Pending", job="demo-burst")  # preempted, waiting for capacity
    st = status(kube, "demo", NS)
    assert [p.name for p in st.pods] == ["demo-worker-0"] and st.priority_class == "elastic-preemptible"
    assert st.burst is not None and st.burst.name == "demo-burst" and st.burst.priority_class == "elastic-borrowed"
    assert [(p.name, p.phase) for p in st.burst.pods] == [
        ("demo-burst-worker-0", "Running"),
        ("demo-burst-worker-1", "Pending"),
    ]
    text = "\n".join(st.lines())
    assert (
        "borrowed part demo-burst (priority elastic-borrowed, preempted first): Pending; workers running 1 of its 2"
        in text
    )
    assert "    pod demo-burst-worker-1 (worker 1): Pending on no node yet" in text
    assert st.as_dict()["burst"]["pods"][0]["name"] == "demo-burst-worker-0"
    # A job without a burst has none.
    assert status(kube, "demo-burst", NS).burst is None


def test_status_of_a_missing_job(kube):
    with pytest.raises(JobError, match="no PyTorchJob training/nope"):
        status(kube, "nope", NS)


def test_status_shows_how_a_worker_failed_from_its_termination_message(api_server, kube, rendered):
    """A pod whose agent gave up on a crash loop: its exit code and the termination message's last
    lines (the agent's last words, kept by FallbackToLogsOnError) are in status."""
    _, objects = rendered
    submit(kube, objects, NS)
    failed = job_worker(api_server, 0, "gpu-0", phase="Failed")
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
    job_worker(api_server, 1, "gpu-1")
    st = status(kube, "demo", NS)
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


def test_status_counts_preemptions_apart_from_failures(api_server, kube, rendered):
    """Evictions end worker pods with exit codes the operator recreates them for without counting
    (143 after a notice's SIGTERM, 137 killed, 0xbeef for a node gone without an exit code); a
    script's error (exit 1) is a failure: status says how many of each it saw."""
    _, objects = rendered
    submit(kube, objects, NS)
    job_worker(api_server, 0, "gpu-0")
    _operator_saw(api_server, "demo-worker-0", 143, count=3)
    _operator_saw(api_server, "demo-worker-1", 0xBEEF, count=1)
    _operator_saw(api_server, "demo-worker-1", 137, count=1)
    _operator_saw(api_server, "demo-worker-2", 1, count=1)
    _operator_saw(api_server, "other-worker-0", 143, count=7, job="other")
    st = status(kube, "demo", NS)
    assert (st.preempted_exits, st.failed_exits) == (5, 1)
    assert (
        "worker exits the operator saw: 5 preempted or killed (exit >= 128: pods recreated, nothing counted), "
        "1 failed (the script's error)" in "\n".join(st.lines())
    )


def test_status_names_workers_killed_for_memory_and_their_limit(api_server, kube, rendered):
    """A worker pod ends OOMKilled (exit 137) at its container's memory limit, the memory request
    submit made its limit; the operator deletes and recreates it at once, so its ExitedWithCode
    events are what is left of the earlier kills."""
    _, objects = rendered
    submit(kube, objects, NS)
    killed = job_worker(api_server, 1, "gpu-1", phase="Failed")
    killed["spec"]["containers"][0]["resources"] = {"limits": {"memory": "8Gi"}, "requests": {"memory": "8Gi"}}
    killed["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    job_worker(api_server, 0, "gpu-0")
    _operator_saw(api_server, "demo-worker-1", 137, count=2)
    _operator_saw(api_server, "demo-worker-0", 143, count=1)  # a spot notice: no memory kill
    _operator_saw(api_server, "other-worker-0", 137, count=5, job="other")
    st = status(kube, "demo", NS)
    assert st.memory_kills == {"demo-worker-1": 2} and st.memory_limit == "8Gi"
    assert (st.pods[1].oom_killed, st.pods[1].memory_limit) == (True, "8Gi") and not st.pods[0].oom_killed
    text = "\n".join(st.lines())
    assert "    ended: exit code 137 (OOMKilled)\n    killed for memory (OOMKilled) at its memory limit 8Gi" in text
    assert "workers killed for memory (exit 137: OOMKilled, most likely), as the operator saw: demo-worker-1 (2" in text
    assert (
        "memory limit per worker: 8Gi; the operator recreates such a pod without limit, and its agent ends the job "
        "after 3 kills in a row on one node" in text
    )

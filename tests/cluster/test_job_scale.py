"""Scaling a job against a loopback API server, within the range its spec allows."""

from __future__ import annotations

import pytest

from lab.cluster.job_scale import scale
from lab.cluster.job_status import status
from lab.cluster.job_submit import submit
from lab.cluster.pytorchjob import JobError
from lab.vocab.problems import InvalidInput

NS = "training"


def test_scale_sets_the_worker_replicas_through_the_scale_subresource(api_server, kube, rendered):
    """Within elasticPolicy minReplicas..maxReplicas (2..3 here), as `kubectl scale` would."""
    _, objects = rendered
    submit(kube, objects, NS)
    job = api_server.get("PyTorchJob", "demo", NS)
    start = job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    target = 2 if start != 2 else 3
    scaled = scale(kube, "demo", NS, target)
    assert (scaled.before, scaled.after, scaled.minimum, scaled.maximum) == (start, target, 2, 3)
    assert api_server.calls("PATCH") == [f"PATCH /apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/demo/scale"]
    assert api_server.get("PyTorchJob", "demo", NS)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == target
    assert f"Worker replicas {start} -> {target} (range 2..3)" in scaled.line()
    # The same size again changes nothing and sends nothing.
    scale(kube, "demo", NS, target)
    assert len(api_server.calls("PATCH")) == 1


@pytest.mark.parametrize("nodes", [1, 4, 0])
def test_scale_outside_the_jobs_range_is_refused_before_anything_changes(api_server, kube, rendered, nodes):
    _, objects = rendered
    submit(kube, objects, NS)
    with pytest.raises(InvalidInput, match=r"--nodes=\d is invalid: expected 2\.\.3: the job's range \(elasticPolicy"):
        scale(kube, "demo", NS, nodes)
    assert api_server.calls("PATCH") == []


def test_scale_of_a_per_step_job_keeps_its_quorum_minimum(api_server, kube, rendered_per_step):
    _, objects = rendered_per_step
    submit(kube, objects, NS)
    minimum = status(kube, "demo", NS).min_replicas
    scaled = scale(kube, "demo", NS, minimum + 3)
    assert scaled.fault_tolerance == "per-step" and scaled.maximum is None and scaled.after == minimum + 3
    with pytest.raises(InvalidInput, match="or more: the job's range"):
        scale(kube, "demo", NS, minimum - 1)


def test_scale_of_a_missing_job(kube):
    with pytest.raises(JobError, match="no PyTorchJob training/nope"):
        scale(kube, "nope", NS, 2)


def test_each_part_of_a_job_with_a_burst_scales_within_the_room_the_other_leaves(api_server, kube, byo_target):
    """Core 2 of 1..4 with 2 borrowed: the core may go 1..2 while the burst holds 2, the burst
    0..2 (down to none: the job shrinks to its core) while the core holds 2."""
    from lab.k8s.job import render_job
    from lab.vocab.job import JobSpec

    submit(kube, render_job(JobSpec(name="demo", min_nodes=1, max_nodes=4, burst_nodes=2), byo_target).objects, NS)
    with pytest.raises(
        InvalidInput, match=r"--nodes=3 is invalid: expected 1\.\.2: .*less the 2 worker\(s\) of its other"
    ):
        scale(kube, "demo", NS, 3)
    scaled = scale(kube, "demo-burst", NS, 0)
    assert (scaled.before, scaled.after, scaled.minimum, scaled.maximum) == (2, 0, 0, 2)
    assert scale(kube, "demo", NS, 4).after == 4  # the borrowed part holds none now
    with pytest.raises(InvalidInput, match=r"--nodes=1 is invalid: expected 0\.\.0"):
        scale(kube, "demo-burst", NS, 1)

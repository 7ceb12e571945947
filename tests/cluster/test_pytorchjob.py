"""A PyTorchJob as the server holds it, against a loopback API server."""

from __future__ import annotations

from lab.cluster.job_submit import submit
from lab.cluster.pytorchjob import list_jobs

NS = "training"


def test_list_jobs(api_server, kube, rendered):
    assert list_jobs(kube, NS) == []
    submit(kube, rendered[1], NS)
    assert list_jobs(kube, NS) == ["demo"]

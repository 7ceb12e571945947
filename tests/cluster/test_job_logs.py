"""A job's logs against a loopback API server: one worker's, all of them, and followed."""

from __future__ import annotations

import threading
import time

import pytest

from lab.cluster.job_logs import logs
from lab.cluster.pytorchjob import JobError

from .fake_kube import job_worker

NS = "training"


def test_logs_of_one_worker_and_of_all(api_server, kube):
    job_worker(api_server, 0)
    job_worker(api_server, 1)
    api_server.add_log(NS, "demo-worker-0", "a0", "b0", close=True)
    api_server.add_log(NS, "demo-worker-1", "a1", close=True)
    assert list(logs(kube, "demo", NS, worker=1)) == [("demo-worker-1", "a1")]
    assert list(logs(kube, "demo", NS)) == [
        ("demo-worker-0", "a0"),
        ("demo-worker-0", "b0"),
        ("demo-worker-1", "a1"),
    ]
    with pytest.raises(JobError, match="worker 5 of job training/demo has no pods"):
        list(logs(kube, "demo", NS, worker=5))


def test_a_jobs_logs_include_its_borrowed_parts_workers(api_server, kube):
    job_worker(api_server, 0)
    job_worker(api_server, 0, "gpu-1", job="demo-burst")
    api_server.add_log(NS, "demo-worker-0", "core", close=True)
    api_server.add_log(NS, "demo-burst-worker-0", "burst", close=True)
    assert list(logs(kube, "demo", NS)) == [("demo-worker-0", "core"), ("demo-burst-worker-0", "burst")]
    assert list(logs(kube, "demo", NS, worker=0)) == [("demo-worker-0", "core")]  # an index is the core's
    assert list(logs(kube, "demo-burst", NS)) == [("demo-burst-worker-0", "burst")]


def test_followed_logs_interleave_workers_as_lines_arrive(api_server, kube):
    job_worker(api_server, 0)
    job_worker(api_server, 1)

    def write():
        time.sleep(0.2)
        api_server.add_log(NS, "demo-worker-1", "late-1", close=True)
        time.sleep(0.2)
        api_server.add_log(NS, "demo-worker-0", "later-0", close=True)

    api_server.add_log(NS, "demo-worker-0", "early-0")
    threading.Thread(target=write, daemon=True).start()
    got = list(logs(kube, "demo", NS, follow=True))
    assert got == [("demo-worker-0", "early-0"), ("demo-worker-1", "late-1"), ("demo-worker-0", "later-0")]
    follows = [q for m, p, q, _ in api_server.requests if p.endswith("/log")]
    assert follows and all(q["follow"][0].lower() == "true" for q in follows)

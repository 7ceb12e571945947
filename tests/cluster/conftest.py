"""Fixtures for the cluster operations: a loopback API server, and jobs rendered for the byo stack."""

from __future__ import annotations

import pytest

from lab.cluster.kube import connect
from lab.k8s.job import render_job
from lab.stacks.target import stack_target
from lab.vocab.job import FaultTolerance, JobSpec, RdzvBackend

from .fake_kube import FakeKube


@pytest.fixture(scope="session")
def byo_target():
    return stack_target("byo")


@pytest.fixture(scope="session")
def rendered(byo_target):
    """(spec, objects) of the default job on the byo stack (etcd rendezvous: one object)."""
    job = render_job(JobSpec(name="demo"), byo_target)
    return job.spec, job.objects


@pytest.fixture(scope="session")
def rendered_c10d(byo_target):
    """The same job with a c10d store: a Deployment and a Service beside the PyTorchJob."""
    job = render_job(JobSpec(name="demo", rdzv_backend=RdzvBackend.C10D), byo_target)
    return job.spec, job.objects


@pytest.fixture(scope="session")
def rendered_per_step(byo_target):
    """The same job in per-step mode: its lighthouse's Deployment, budget, Service and
    NetworkPolicy beside the PyTorchJob."""
    job = render_job(JobSpec(name="demo", fault_tolerance=FaultTolerance.PER_STEP), byo_target)
    return job.spec, job.objects


@pytest.fixture
def api_server():
    with FakeKube() as server:
        yield server


@pytest.fixture
def kube(api_server, tmp_path):
    return connect(str(api_server.kubeconfig(tmp_path, namespace="training")))

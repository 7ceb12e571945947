"""Fixtures of the platform tests: rendered charts, JobSpecs, the CRD schema."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lab.jobspec import JobSpec
from lab.k8s.job_values import ETCD_CHART, PlatformFacts
from lab.k8s.render import render_chart
from platform_helpers import render_job
from lab.k8s.validate import CrdSchemaMissing, crd_path


@pytest.fixture(scope="session")
def crd():
    try:
        return crd_path()
    except CrdSchemaMissing as exc:
        pytest.skip(f"PyTorchJob CRD schema absent, CRD validation not tested: {exc}")


@pytest.fixture(scope="session")
def facts() -> PlatformFacts:
    return PlatformFacts()


@pytest.fixture(scope="session")
def _baseline(facts: PlatformFacts) -> list[dict[str, Any]]:
    """The platform's etcd, the operator's Deployment as its transform places it, a
    PriorityClass set, and two jobs (etcd-v2 and c10d)."""
    from components.platform.component import operator_placement, operator_transform
    from components.platform.settings import PlatformSettings
    from components.platform.values import etcd_values
    from lab.k8s.checks import operator_deployment

    settings = PlatformSettings(cloud="aks")
    objects = render_chart(ETCD_CHART, etcd_values(settings, facts.pools), release="etcd-rendezvous", namespace=facts.namespace)
    objects.append(operator_deployment(operator_placement([operator_transform(settings, facts.pools)])))
    for role, pc, policy in settings.priorities.items():
        objects.append({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": pc.name},
            "value": pc.value, "preemptionPolicy": policy, "globalDefault": False,
        })
    objects += render_job(JobSpec(name="job-etcd"), facts)[1]
    objects += render_job(JobSpec(name="job-c10d", rdzv_backend="c10d"), facts)[1]
    return objects


@pytest.fixture
def baseline(_baseline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return copy.deepcopy(_baseline)

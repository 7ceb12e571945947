"""Fixtures of the platform tests: rendered charts, JobSpecs, the CRD schema."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lab.jobspec import JobSpec
from lab.k8s.job_values import ETCD_CHART, JOB_CHART, PlatformFacts, values_for
from lab.k8s.render import render_chart
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


def render_job(spec: JobSpec, facts: PlatformFacts, **override: Any) -> tuple[JobSpec, list[dict[str, Any]]]:
    cluster_spec, values = values_for(spec, facts)
    values.update(override)
    return cluster_spec, render_chart(JOB_CHART, values, release=spec.name, namespace=facts.namespace)


def the(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


@pytest.fixture(scope="session")
def _baseline(facts: PlatformFacts) -> list[dict[str, Any]]:
    """The platform's etcd, a PriorityClass set, and two jobs (etcd-v2 and c10d)."""
    from components.platform.settings import PlatformSettings
    from components.platform.values import etcd_values

    settings = PlatformSettings(cloud="aks")
    objects = render_chart(ETCD_CHART, etcd_values(settings, facts.pools), release="etcd-rendezvous", namespace=facts.namespace)
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

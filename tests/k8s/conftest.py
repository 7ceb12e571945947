"""Fixtures of the Kubernetes tests: the AKS platform's facts, and what it renders."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lab.k8s.helm import render_chart
from lab.vocab.job import JobSpec
from lab.vocab.layout import ETCD_CHART, NOTICE_CHART
from lab.vocab.platform_facts import PlatformFacts
from tests.k8s.helpers import render_job
from tests.placements import AKS_PLACEMENT, TRAINER_IMAGE, aks_facts


@pytest.fixture(scope="session")
def facts() -> PlatformFacts:
    return aks_facts()


@pytest.fixture(scope="session")
def _baseline(facts: PlatformFacts) -> list[dict[str, Any]]:
    """The platform's etcd, its spot-notice handler, the operator's Deployment as its transform places it, a
    PriorityClass set, and four jobs (etcd-v2, c10d, a per-step job with its lighthouse, and a job
    with a burst: its core and its borrowed part)."""
    from components.platform.component import operator_placement, operator_transform
    from components.platform.settings import PlatformSettings
    from components.platform.values import etcd_values, notice_handler_values
    from lab.plan.platform_checks import operator_deployment

    settings = PlatformSettings(notice_handler_image=TRAINER_IMAGE)
    objects = render_chart(
        ETCD_CHART, etcd_values(settings, AKS_PLACEMENT), release="etcd-rendezvous", namespace=facts.namespace
    )
    objects += render_chart(
        NOTICE_CHART,
        notice_handler_values(settings, AKS_PLACEMENT),
        release="spot-notice-handler",
        namespace=facts.namespace,
    )
    objects.append(operator_deployment(operator_placement([operator_transform(settings, AKS_PLACEMENT)])))
    for _, pc, policy in settings.priorities.items():
        objects.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": pc.name},
                "value": pc.value,
                "preemptionPolicy": policy,
                "globalDefault": False,
            }
        )
    objects += render_job(JobSpec(name="job-etcd"), facts)[1]
    objects += render_job(JobSpec(name="job-c10d", rdzv_backend="c10d"), facts)[1]
    objects += render_job(JobSpec(name="job-perstep", fault_tolerance="per-step"), facts)[1]
    objects += render_job(JobSpec(name="job-burst", min_nodes=1, max_nodes=3, burst_nodes=2), facts)[1]
    return objects


@pytest.fixture
def baseline(_baseline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return copy.deepcopy(_baseline)

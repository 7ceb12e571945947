"""Helpers of the Kubernetes tests: render a job, find one object."""

from __future__ import annotations

from typing import Any

from lab.k8s.helm import render_chart
from lab.k8s.job_values import values_for
from lab.vocab.job import JobSpec
from lab.vocab.layout import JOB_CHART
from lab.vocab.platform_facts import PlatformFacts


def render_job(spec: JobSpec, facts: PlatformFacts, **override: Any) -> tuple[JobSpec, list[dict[str, Any]]]:
    cluster_spec, values = values_for(spec, facts)
    values.update(override)
    return cluster_spec, render_chart(JOB_CHART, values, release=spec.name, namespace=facts.namespace)


def the(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]

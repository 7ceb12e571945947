"""The two parts of a job with a burst on a cluster (JobSpec.burst_nodes): two PyTorchJobs of
one run, the core named as the job and its borrowed part named by `burst_job_name`; the chart
labels each (the PyTorchJob and its pods) with its part."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PART_LABEL = "elastic-spot-lab/part"
PART_CORE = "core"
PART_BURST = "burst"


def burst_job_name(job: str) -> str:
    """The PyTorchJob of job `job`'s borrowed part (charts/elastic-pytorchjob: ej.burstName)."""
    return f"{job}-burst"


def core_job_name(burst_job: str) -> str | None:
    """The job whose borrowed part is PyTorchJob `burst_job`; None when the name is no part's."""
    suffix = burst_job_name("")
    return burst_job[: -len(suffix)] if burst_job.endswith(suffix) and len(burst_job) > len(suffix) else None


def part_of(obj: Mapping[str, Any]) -> str | None:
    """The part (PART_CORE, PART_BURST) a rendered PyTorchJob or pod says it is, by its label."""
    part = ((obj.get("metadata") or {}).get("labels") or {}).get(PART_LABEL)
    return part if isinstance(part, str) else None

"""`lab.cluster.jobs`, the one place to import a job's operations from: every name it offers is
the object its own module defines, and the names callers and notebooks use are there."""

from __future__ import annotations

import pytest

from lab.cluster import job_logs, job_scale, job_status, job_submit, jobs, pytorchjob

MODULES = (job_submit, job_status, job_scale, job_logs, pytorchjob)


@pytest.mark.parametrize("name", jobs.__all__)
def test_each_name_is_a_job_modules_own(name):
    value = getattr(jobs, name)
    assert any(vars(module).get(name) is value for module in MODULES)
    assert getattr(value, "__module__", None) != jobs.__name__  # nothing defined twice


def test_the_operations_callers_use_are_there():
    # The commands, the cluster drill, rebalancing and the notebooks call these through `jobs`.
    used = {"submit", "status", "scale", "logs", "logs_of_pod", "delete", "list_jobs", "job_pods", "pod_state"}
    used |= {"checkpoint_every", "serves_metrics_api", "job_exists", "LogWindow", "JobError", "PYTORCHJOB"}
    used |= {"JOB_NAME_LABEL", "REPLICA_INDEX_LABEL"}
    assert used <= set(jobs.__all__) and all(hasattr(jobs, name) for name in jobs.__all__)

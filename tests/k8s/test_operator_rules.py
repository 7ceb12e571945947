"""The training operator's rule for ended worker pods (lab.k8s.operator_rules, read in
kubeflow/training-operator v1.9.0: pkg/controller.v1/common/pod.go:313-373,
pkg/util/train/train_util.go:24-26, pkg/controller.v1/common/job.go:176-214), and the job the chart
renders checked against it: every way an eviction or a wait for GPU nodes ends a worker pod has it
recreated, with no budget that evictions use up, for both fault-tolerance modes."""

from __future__ import annotations

import signal

import pytest

from lab.k8s.operator_rules import FAIL_JOB, KEEP, NO_EXIT_CODE, RECREATE, failure_budget_problems, worker_outcome
from lab.runtime.agent_exits import EXIT_RENDEZVOUS_TIMEOUT, EXIT_RENDEZVOUS_UNREACHABLE
from lab.vocab.job import FaultTolerance, JobSpec, RdzvBackend

from .helpers import render_job, the

# How a worker pod ends on an eviction, or on a wait for capacity, and what the operator does.
ENDINGS = {
    # The Eviction API (a drain, AKS/EKS on a notice) and scheduler preemption delete the pod;
    # the pod GC deletes the pods of a Node object that is gone (pod.go:316-324).
    "deleted-by-drain-preemption-or-pod-gc": (None, None, RECREATE),
    # Our launcher's answer to a notice: 128 + SIGTERM (lab.runtime.agent_exits).
    "notice-sigterm": ("Failed", 128 + signal.SIGTERM, RECREATE),
    # The kubelet's kill at the grace period's end, or a hard eviction of node pressure (Evicted).
    "sigkill-or-kubelet-eviction": ("Failed", 128 + signal.SIGKILL, RECREATE),
    # A node lost before its container reported an end: 0xbeef (pod.go:340).
    "failed-without-an-exit-code": ("Failed", None, RECREATE),
    # Fewer than min_nodes came back within join_timeout: the agent exits to wait again.
    "join-timeout": ("Failed", EXIT_RENDEZVOUS_TIMEOUT, RECREATE),
    "rendezvous-server-unreachable": ("Failed", EXIT_RENDEZVOUS_UNREACHABLE, RECREATE),
    # A script's own error (a crash loop given up on) fails the job: it is no preemption.
    "crash": ("Failed", 1, FAIL_JOB),
    "pending-for-gpu-nodes": ("Pending", None, KEEP),
}


@pytest.mark.parametrize("ending", ENDINGS, ids=list(ENDINGS))
def test_the_operator_recreates_every_pod_an_eviction_or_a_wait_ends(ending):
    phase, code, outcome = ENDINGS[ending]
    assert worker_outcome("ExitCode", phase, code) == outcome


@pytest.mark.parametrize(
    ("policy", "code", "outcome"),
    [
        ("ExitCode", 127, FAIL_JOB),  # train_util.go:25: >= 128 only
        ("ExitCode", 128, RECREATE),
        ("ExitCode", NO_EXIT_CODE, RECREATE),
        ("OnFailure", 1, RECREATE),  # pod.go:353-354: any code
        ("Never", 143, KEEP),
    ],
)
def test_the_rule_is_the_operators(policy, code, outcome):
    assert worker_outcome(policy, "Failed", code) == outcome


SPECS = {
    "elastic-etcd": JobSpec(name="job"),
    "elastic-c10d": JobSpec(name="job", rdzv_backend=RdzvBackend.C10D),
    "per-step": JobSpec(name="job", fault_tolerance=FaultTolerance.PER_STEP),
}


@pytest.mark.parametrize("mode", SPECS, ids=list(SPECS))
def test_the_rendered_job_has_no_budget_that_evictions_use_up(facts, mode):
    job = the(render_job(SPECS[mode], facts)[1], "PyTorchJob")
    assert failure_budget_problems(job) == []


def test_a_budget_that_evictions_would_use_up_is_named(facts):
    job = the(render_job(JobSpec(name="job"), facts)[1], "PyTorchJob")
    job["spec"]["runPolicy"] = {**job["spec"]["runPolicy"], "backoffLimit": 3, "activeDeadlineSeconds": 3600}
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"
    problems = failure_budget_problems(job)
    assert [p.split("=")[0] for p in problems] == [
        "runPolicy.backoffLimit",
        "runPolicy.activeDeadlineSeconds",
        "Worker restartPolicy",
    ]


def test_the_rendezvous_outlives_a_wipeout_and_a_join_timeout_only_restarts_the_pod(facts):
    """The join timeout ends an agent, not the job (its exit is retryable, above); the etcd state
    outlives any wait the job allows (torch's 2 hours would not)."""
    job = the(render_job(JobSpec(name="job"), facts)[1], "PyTorchJob")
    conf = {c["key"]: c["value"] for c in job["spec"]["elasticPolicy"]["rdzvConf"]}
    assert int(conf["state_ttl"]) >= 30 * 86400 > 7200
    assert int(conf["state_ttl"]) > float(conf["join_timeout"])

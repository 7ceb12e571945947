"""What the Kubeflow training operator (v1.9, PyTorchJob) does with a worker pod that ended, and
when it gives up on the job, as a small model of its code, so that the job the chart renders can
be checked to survive evictions of any number and a wait of any length for GPU nodes.

Read in kubeflow/training-operator at v1.9.0 (the same code in v1.9.4):
- pkg/controller.v1/common/pod.go:313-324: a replica index with no pod gets a new pod (a pod
  deleted by a drain, a scheduler preemption or the pod GC of a vanished node is recreated under
  the same name, whatever its end).
- pod.go:339-348: the exit code is the default container's terminated state's, else 0xbeef (a
  pod marked Failed while its container never reported an end: a node lost).
- pod.go:350-373: a Failed pod under restartPolicy ExitCode is deleted (and so recreated) when
  the code is retryable, and fails the PyTorchJob when it is not.
- pkg/util/train/train_util.go:24-26: IsRetryableExitCode is `exitCode >= 128`.
- pkg/core/pod.go:81-88: ExitCode becomes the pod's own restartPolicy Never: its containers never
  restart in place, so container restart counts stay 0.
- pkg/controller.v1/common/job.go:176-214 and pkg/core/job.go:95-133: only with
  runPolicy.backoffLimit set does the operator count failures: the requeues of a job whose
  active pods are fewer than its replicas (every eviction is one), and the container restarts of
  running pods; past it the job fails. With no backoffLimit nothing counts. activeDeadlineSeconds
  (job.go:211) fails a job that ran longer than it, waits included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from lab.vocab.job import RETRYABLE_EXIT_CODE

# pod.go:340: the exit code the operator assumes when the container reported no end.
NO_EXIT_CODE = 0xBEEF
RECREATE: Literal["recreate"] = "recreate"
FAIL_JOB: Literal["fail the job"] = "fail the job"
KEEP: Literal["keep"] = "keep"


def retryable(exit_code: int) -> bool:
    """train_util.go IsRetryableExitCode."""
    return exit_code >= RETRYABLE_EXIT_CODE


def worker_outcome(
    restart_policy: str, phase: str | None, exit_code: int | None
) -> Literal["recreate", "fail the job", "keep"]:
    """What the operator does with a worker pod: `phase` None for a pod that no longer exists,
    `exit_code` None for a container that reported no end."""
    if phase is None:
        return RECREATE  # pod.go:316-324: the index has no pod
    if phase != "Failed":
        return KEEP
    code = NO_EXIT_CODE if exit_code is None else exit_code
    if restart_policy in ("OnFailure", "Always") or (restart_policy == "ExitCode" and retryable(code)):
        return RECREATE
    if restart_policy == "ExitCode":
        return FAIL_JOB
    return KEEP  # Never: counted failed by the job's status (pytorchjob_controller.go:428-443)


def failure_budget_problems(job: Mapping[str, Any]) -> list[str]:
    """What in a rendered PyTorchJob would let evictions, or a long wait for GPU nodes, end it:
    a backoffLimit (every eviction counts towards it), an activeDeadlineSeconds, or a Worker
    restart policy that fails the job on the exits of an eviction."""
    spec = job.get("spec") or {}
    run_policy = spec.get("runPolicy") or {}
    found = []
    if run_policy.get("backoffLimit") is not None:
        found.append(
            f"runPolicy.backoffLimit={run_policy['backoffLimit']}: the operator counts every requeue of a job "
            "short of its replicas, so evictions use it up"
        )
    if run_policy.get("activeDeadlineSeconds") is not None:
        found.append(
            f"runPolicy.activeDeadlineSeconds={run_policy['activeDeadlineSeconds']}: a wait for GPU nodes counts"
        )
    worker = (spec.get("pytorchReplicaSpecs") or {}).get("Worker") or {}
    policy = worker.get("restartPolicy", "Never")
    if policy != "ExitCode":
        found.append(
            f"Worker restartPolicy={policy}: ExitCode recreates the pods of evictions (exit >= 128) and fails "
            "the job on a script's error"
        )
    return found

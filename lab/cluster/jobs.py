"""A job's whole life on a cluster, in one place to import from: submit and delete
(job_submit.py), status (job_status.py), scale (job_scale.py), logs (job_logs.py), and the
PyTorchJob as the server holds it (pytorchjob.py). The names here are those modules' own.
"""

from __future__ import annotations

from lab.cluster.job_logs import LogWindow, logs, logs_of_pod
from lab.cluster.job_scale import Scaled, scale
from lab.cluster.job_status import (
    ENDING_LINES,
    EXIT_KILLED,
    EXITED_WITH_CODE,
    OOM_KILLED,
    JobStatus,
    PodState,
    memory_kills,
    pod_state,
    status,
)
from lab.cluster.job_submit import (
    KUEUE_API_GROUP,
    METRICS_API_GROUP,
    SDK_MODEL,
    delete,
    kueue_warning,
    require_metrics_api,
    serves_metrics_api,
    submit,
    to_sdk_job,
    training_client,
)
from lab.cluster.pytorchjob import (
    JOB_LABEL,
    JOB_NAME_LABEL,
    PYTORCHJOB,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    TRAINING_CONTAINER,
    JobError,
    checkpoint_every,
    job_exists,
    job_pods,
    list_jobs,
    read_job,
)

__all__ = [
    "ENDING_LINES",
    "EXITED_WITH_CODE",
    "EXIT_KILLED",
    "JOB_LABEL",
    "JOB_NAME_LABEL",
    "KUEUE_API_GROUP",
    "METRICS_API_GROUP",
    "OOM_KILLED",
    "PYTORCHJOB",
    "REPLICA_INDEX_LABEL",
    "REPLICA_TYPE_LABEL",
    "SDK_MODEL",
    "TRAINING_CONTAINER",
    "JobError",
    "JobStatus",
    "LogWindow",
    "PodState",
    "Scaled",
    "checkpoint_every",
    "delete",
    "job_exists",
    "job_pods",
    "kueue_warning",
    "list_jobs",
    "logs",
    "logs_of_pod",
    "memory_kills",
    "pod_state",
    "read_job",
    "require_metrics_api",
    "scale",
    "serves_metrics_api",
    "status",
    "submit",
    "to_sdk_job",
    "training_client",
]

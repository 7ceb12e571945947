"""JobSpec -> values of charts/elastic-pytorchjob.

The JobSpec (lab/spec/job.py) is the one definition of the job's launch parameters. This
module adds what only the cluster knows (the platform's facts: the etcd Service, the
checkpoint claim, priorities, pools) and writes the chart's values. The chart turns them
back into `elasticPolicy`, `spec.nprocPerNode` and the container environment; tests render
the chart and compare with `JobSpec.elastic_policy()`, `pet_env()` and `worker_env()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.charts import chart_default, exactly
from lab.spec.job import POD_FIELD_ENV, JobSpec, RdzvBackend
from lab.spec.layout import JOB_CHART
from lab.spec.platform_facts import C10D_STORE_PORT, PlatformFacts


def for_cluster(spec: JobSpec, facts: PlatformFacts) -> JobSpec:
    """The spec as it runs on the platform: rendezvous at the etcd Service (etcd-v2) or
    at the job's own c10d store Service, never at a worker; checkpoint writes as the
    checkpoint storage needs them."""
    if spec.rdzv_backend is RdzvBackend.ETCD_V2:
        endpoint = f"{facts.etcd_host}:{facts.etcd_port}"
    else:
        endpoint = f"{facts.store_host(spec.name)}:{C10D_STORE_PORT}"
    return spec.replace(rdzv_endpoint=endpoint, checkpoint_writes=facts.checkpoint_writes)


def chart_values(spec: JobSpec, facts: PlatformFacts, *, image_pull_policy: str = "IfNotPresent") -> dict[str, Any]:
    """Values for charts/elastic-pytorchjob. `spec` should come from `for_cluster`."""
    return {
        "name": spec.name,
        "image": spec.image,
        "imagePullPolicy": image_pull_policy,
        "launcher": spec.launcher(),
        "entrypoint": spec.entrypoint(),
        "minNodes": spec.min_nodes,
        "maxNodes": spec.max_nodes,
        "replicas": None,
        "nprocPerNode": spec.nproc_per_node,
        "maxRestarts": spec.max_restarts,
        "monitorIntervalS": spec.monitor_interval_s,
        "checkpoint": {"dir": spec.checkpoint_dir, "claimName": facts.checkpoint_claim},
        # The container's environment, defined once (JobSpec.worker_env); the chart renders
        # it as given. `exactly`: no default variable survives that the spec does not set.
        "jobEnv": exactly(spec.worker_env(), chart_default(JOB_CHART, "jobEnv")),
        "podFieldEnv": exactly(POD_FIELD_ENV, chart_default(JOB_CHART, "podFieldEnv")),
        "rdzv": {
            "backend": spec.rdzv_backend.value,
            "host": spec.rdzv_host,
            "port": spec.rdzv_port,
            "id": spec.rdzv_id,
            "etcdService": facts.etcd_service,
            "conf": [{"key": k, "value": v} for k, v in spec.rdzv_conf().items()],
        },
        "clusterDomain": facts.cluster_domain,
        "gpusPerNode": facts.gpus_per_node,
        "workerPool": {
            "nodeLabels": exactly(facts.pools.gpu_labels, chart_default(JOB_CHART, "workerPool", "nodeLabels")),
            "taints": [t.as_dict() for t in facts.pools.gpu_taints],
        },
        "notReadyTolerationSeconds": facts.not_ready_toleration_s,
        "priorityClassName": facts.worker_priority_class,
        "serviceAccountName": facts.service_account,
        "terminationGracePeriodSeconds": facts.termination_grace_s,
        "rdzvClientLabels": exactly(facts.rdzv_client_labels, chart_default(JOB_CHART, "rdzvClientLabels")),
        "c10dStore": {
            "port": C10D_STORE_PORT,
            "nodeSelector": exactly(facts.pools.cpu_labels, chart_default(JOB_CHART, "c10dStore", "nodeSelector")),
            "tolerations": facts.pools.cpu_tolerations(),
            "priorityClassName": facts.preserved_priority_class,
        },
    }


def values_for(spec: JobSpec, facts: PlatformFacts) -> tuple[JobSpec, dict[str, Any]]:
    """The cluster spec and its chart values, in one step."""
    cluster_spec = for_cluster(spec, facts)
    return cluster_spec, chart_values(cluster_spec, facts)


# ------------------------------------------------------------------ reading a job back
def operator_pet_env(job: Mapping[str, Any]) -> dict[str, str]:
    """The PET_* environment the training operator (v1.9.4) gives each worker of a
    rendered PyTorchJob, plus the PET_* the job sets itself: what torchrun reads."""
    spec = job["spec"]
    policy = spec["elasticPolicy"]
    env = {
        "PET_NNODES": f"{policy['minReplicas']}:{policy['maxReplicas']}",
        "PET_NPROC_PER_NODE": str(spec["nprocPerNode"]),
        "PET_RDZV_BACKEND": policy["rdzvBackend"],
        "PET_RDZV_ENDPOINT": f"{policy['rdzvHost']}:{policy['rdzvPort']}",
        "PET_RDZV_ID": policy["rdzvId"],
        "PET_RDZV_CONF": ",".join(f"{c['key']}={c['value']}" for c in policy.get("rdzvConf") or []),
        "PET_MAX_RESTARTS": str(policy["maxRestarts"]),
    }
    for item in worker_container(job).get("env", []):
        if item["name"].startswith("PET_"):
            env[item["name"]] = item["value"]
    return env


def worker_container(job: Mapping[str, Any]) -> dict[str, Any]:
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "pytorch")


def container_env(container: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}

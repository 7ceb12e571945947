"""JobSpec -> values of charts/elastic-pytorchjob.

The JobSpec (lab/vocab/job.py) is the one definition of the job's launch parameters. This
module adds what only the cluster knows (the platform's facts: the etcd Service, the
checkpoint claim, priorities, pools) and writes the chart's values. The chart turns them
back into `elasticPolicy`, `spec.nprocPerNode` and the container environment; tests render
the chart and compare with `JobSpec.elastic_policy()`, `pet_env()` and `worker_env()`. A
per-step job (JobSpec.fault_tolerance) has no elasticPolicy: its workers' torchrun flags are
`JobSpec.group_torchrun_args()`, and the chart adds the job's TorchFT lighthouse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.charts import chart_default, exactly
from lab.vocab import checkpoint_location
from lab.vocab.checkpoint_location import CheckpointAccess
from lab.vocab.job import POD_FIELD_ENV, JobSpec, RdzvBackend, pod_security_context
from lab.vocab.layout import JOB_CHART
from lab.vocab.per_step import (
    CHECKPOINT_PORT,
    ENV_ADVERTISE,
    ENV_CHECKPOINT_PORT,
    ENV_MANAGER_PORT,
    ENV_REPLICA_GROUP,
    LIGHTHOUSE_PORT,
    MANAGER_PORT,
)
from lab.vocab.platform_facts import C10D_STORE_PORT, PlatformFacts
from lab.vocab.problems import InvalidInput, Problem

# A per-step worker pod is one replica group: named after the pod (TorchFT adds a fresh uuid,
# so a recreated pod of the same name is a new group), reached by its peers at the pod's IP.
PER_STEP_POD_FIELD_ENV = {ENV_REPLICA_GROUP: "metadata.name", ENV_ADVERTISE: "status.podIP"}
# The group's servers at fixed ports, declared on the container: (port name, port, variable).
GROUP_PORTS = (("ft-manager", MANAGER_PORT, ENV_MANAGER_PORT), ("ft-weights", CHECKPOINT_PORT, ENV_CHECKPOINT_PORT))
# The lighthouse listens on every address of its pod (IPv4 and IPv6), at the Service's port.
LIGHTHOUSE_BIND_HOST = "[::]"


def for_cluster(spec: JobSpec, facts: PlatformFacts, access: CheckpointAccess = CheckpointAccess.MOUNT) -> JobSpec:
    """The spec as it runs on the platform: rendezvous at the etcd Service (etcd-v2) or
    at the job's own c10d store Service, never at a worker, and in per-step mode the quorum
    at the job's own lighthouse Service; checkpoints on the platform's volume, written as it
    needs them (`mount`), or under the storage's URL in a folder named after the job, written
    by the pods' own clients (`client`)."""
    if spec.rdzv_backend is RdzvBackend.ETCD_V2:
        endpoint = f"{facts.etcd_host}:{facts.etcd_port}"
    else:
        endpoint = f"{facts.store_host(spec.name)}:{C10D_STORE_PORT}"
    access = CheckpointAccess(access)
    checkpoints: dict[str, Any] = {"checkpoint_writes": facts.checkpoint_writes}
    if access is CheckpointAccess.CLIENT:
        if not facts.checkpoint_url:
            raise InvalidInput(
                [
                    Problem(
                        "--checkpoint-access",
                        access.value,
                        "mount: this platform's checkpoint storage has no object-store URL (a claim on a StorageClass)",
                    )
                ]
            )
        checkpoints = {"checkpoint_dir": checkpoint_location.join(facts.checkpoint_url, spec.name)}
    return spec.replace(
        rdzv_endpoint=endpoint,
        lighthouse_endpoint=f"{facts.lighthouse_host(spec.name)}:{LIGHTHOUSE_PORT}",
        **checkpoints,
    )


def pod_field_env(spec: JobSpec) -> dict[str, str]:
    """Variables the worker container reads from its own pod (name -> fieldPath)."""
    return {**POD_FIELD_ENV, **(PER_STEP_POD_FIELD_ENV if spec.per_step_mode else {})}


def lighthouse_port(spec: JobSpec) -> int:
    return int(spec.lighthouse_endpoint.rpartition(":")[2])


def chart_values(spec: JobSpec, facts: PlatformFacts, *, image_pull_policy: str = "IfNotPresent") -> dict[str, Any]:
    """Values for charts/elastic-pytorchjob. `spec` should come from `for_cluster`."""
    return {
        **_job_values(spec, facts, image_pull_policy),
        "rdzv": {
            "backend": spec.rdzv_backend.value,
            "host": spec.rdzv_host,
            "port": spec.rdzv_port,
            "id": spec.rdzv_id,
            "etcdService": facts.etcd_service,
            "etcdNamespace": facts.etcd_namespace,
            "conf": [{"key": k, "value": v} for k, v in spec.rdzv_conf().items()],
        },
        **_worker_pod_values(facts),
        # The borrowed part: a second PyTorchJob of the same run below the workers' priority.
        "burst": {"nodes": spec.burst_nodes, "priorityClassName": facts.burst_priority_class},
        "c10dStore": {"port": C10D_STORE_PORT, **_on_cpu_pool(facts, "c10dStore")},
        "lighthouse": {
            "port": lighthouse_port(spec),
            "args": spec.per_step.lighthouse_args(
                spec.min_nodes, bind=f"{LIGHTHOUSE_BIND_HOST}:{lighthouse_port(spec)}"
            ),
            **_on_cpu_pool(facts, "lighthouse"),
        },
    }


def _job_values(spec: JobSpec, facts: PlatformFacts, image_pull_policy: str) -> dict[str, Any]:
    """What the job runs: image, launcher, torchrun's settings, checkpoints, environment."""
    return {
        "name": spec.name,
        "image": spec.image,
        "imagePullPolicy": image_pull_policy,
        "launcher": spec.launcher(),
        "entrypoint": spec.entrypoint(),
        "faultTolerance": spec.fault_tolerance.value,
        # Elastic workers get torchrun's settings as PET_* from the operator; per-step ones run
        # torchrun alone, with explicit flags.
        "torchrunArgs": spec.group_torchrun_args() if spec.per_step_mode else [],
        "minNodes": spec.min_nodes,
        "maxNodes": spec.max_nodes,
        "replicas": None,
        "nprocPerNode": spec.nproc_per_node,
        "maxRestarts": spec.max_restarts,
        "monitorIntervalS": spec.monitor_interval_s,
        # An object-store URL is written by the pods' clients: no volume to mount.
        "checkpoint": {
            "dir": spec.checkpoint_dir,
            "claimName": "" if checkpoint_location.is_object_store(spec.checkpoint_dir) else facts.checkpoint_claim,
        },
        # The container's environment, defined once (JobSpec.worker_env); the chart renders
        # it as given. `exactly`: no default variable survives that the spec does not set.
        "jobEnv": exactly(spec.worker_env(), chart_default(JOB_CHART, "jobEnv")),
        "podFieldEnv": exactly(pod_field_env(spec), chart_default(JOB_CHART, "podFieldEnv")),
        "groupPorts": [{"name": name, "port": port, "env": env} for name, port, env in GROUP_PORTS],
    }


def _worker_pod_values(facts: PlatformFacts) -> dict[str, Any]:
    """Where and how the workers' pods run on the platform: the GPU spot pool, their priority,
    identity, labels, security context and grace period."""
    return {
        "clusterDomain": facts.cluster_domain,
        "gpusPerNode": facts.gpus_per_node,
        "workerPool": {
            "nodeLabels": exactly(facts.pools.gpu_labels, chart_default(JOB_CHART, "workerPool", "nodeLabels")),
            "taints": [t.as_dict() for t in facts.pools.gpu_taints],
        },
        "notReadyTolerationSeconds": facts.not_ready_toleration_s,
        "priorityClassName": facts.worker_priority_class,
        "serviceAccountName": facts.service_account,
        "podLabels": dict(facts.pod_labels),
        "podSecurityContext": exactly(pod_security_context(), chart_default(JOB_CHART, "podSecurityContext")),
        "env": dict(facts.pod_env),
        "terminationGracePeriodSeconds": facts.termination_grace_s,
        "rdzvClientLabels": exactly(facts.rdzv_client_labels, chart_default(JOB_CHART, "rdzvClientLabels")),
    }


def _on_cpu_pool(facts: PlatformFacts, server: str) -> dict[str, Any]:
    """A job's own rendezvous server (`server`: its key in the chart's values) on the on-demand
    CPU pool, at the preserved priority."""
    return {
        "nodeSelector": exactly(facts.pools.cpu_labels, chart_default(JOB_CHART, server, "nodeSelector")),
        "tolerations": facts.pools.cpu_tolerations(),
        "priorityClassName": facts.preserved_priority_class,
    }


def values_for(
    spec: JobSpec, facts: PlatformFacts, access: CheckpointAccess = CheckpointAccess.MOUNT
) -> tuple[JobSpec, dict[str, Any]]:
    """The cluster spec and its chart values, in one step."""
    cluster_spec = for_cluster(spec, facts, access)
    return cluster_spec, chart_values(cluster_spec, facts)


# ------------------------------------------------------------------ reading a job back
def operator_pet_env(job: Mapping[str, Any]) -> dict[str, str]:
    """The PET_* environment the training operator (v1.9.4) gives each worker of a
    rendered PyTorchJob, plus the PET_* the job sets itself: what torchrun reads (unless its
    command line says otherwise). Without an elasticPolicy (and without a Master) the
    operator sets only the node count, the Worker replicas, and the processes per node."""
    spec = job["spec"]
    policy = spec.get("elasticPolicy")
    if policy is None:
        env = {
            "PET_NNODES": str(spec["pytorchReplicaSpecs"]["Worker"]["replicas"]),
            "PET_NPROC_PER_NODE": str(spec["nprocPerNode"]),
        }
    else:
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


def container_field_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's variables read from its pod's fields: name -> fieldPath."""
    return {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in container.get("env", [])
        if "fieldRef" in (e.get("valueFrom") or {})
    }

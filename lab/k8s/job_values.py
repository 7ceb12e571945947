"""JobSpec -> values of charts/elastic-pytorchjob.

The JobSpec (lab/jobspec.py) is the one definition of the job's launch parameters. This
module adds what only the cluster knows (the platform's facts: the etcd Service, the
checkpoint claim, priorities, pools) and writes the chart's values. The chart turns them
back into `elasticPolicy`, `spec.nprocPerNode` and the container environment; tests render
the chart and compare with `JobSpec.elastic_policy()`, `pet_env()` and `worker_env()`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from lab.jobspec import CheckpointWrites, JobSpec, RdzvBackend
from lab.k8s.scheduling import PoolPlacement, taint_dict, taint_text

REPO_ROOT = Path(__file__).resolve().parents[2]
CHARTS_DIR = REPO_ROOT / "charts"
JOB_CHART = CHARTS_DIR / "elastic-pytorchjob"
ETCD_CHART = CHARTS_DIR / "etcd-rendezvous"

ETCD_CLIENT_PORT = 2379
C10D_STORE_PORT = 29400

# Azure gives 30 s notice of a spot eviction (AWS 120 s, GCP 30 s). The kubelet sends
# SIGTERM, the training script writes its emergency checkpoint, and SIGKILL follows after
# the grace period: 25 s keeps the kill (and so the end of the save) inside Azure's notice.
TERMINATION_GRACE_S = 25
EVICTION_NOTICE_S = {"aks": 30, "eks": 120, "byo": 30}
# A vanished node goes NotReady after ~40 s; evict its pods 30 s later, not 300 s.
NOT_READY_TOLERATION_S = 30


@dataclass(frozen=True)
class PlatformFacts:
    """What a job needs to know about the platform it runs on (components/platform)."""

    namespace: str = "training"
    service_account: str = "trainer"
    etcd_service: str = "etcd-rendezvous"
    etcd_port: int = ETCD_CLIENT_PORT
    cluster_domain: str = "cluster.local"
    checkpoint_claim: str = "elastic-checkpoints"
    checkpoint_writes: CheckpointWrites = CheckpointWrites.RENAME
    worker_priority_class: str = "elastic-preemptible"
    preserved_priority_class: str = "elastic-preserved"
    pools: PoolPlacement = field(default_factory=PoolPlacement)
    gpus_per_node: int = 1
    rdzv_client_labels: Mapping[str, str] = field(default_factory=lambda: {"elastic-spot-lab/rdzv-client": "true"})
    termination_grace_s: int = TERMINATION_GRACE_S
    not_ready_toleration_s: int = NOT_READY_TOLERATION_S

    @property
    def etcd_host(self) -> str:
        return service_host(self.etcd_service, self.namespace, self.cluster_domain)

    def store_host(self, job_name: str) -> str:
        return service_host(store_name(job_name), self.namespace, self.cluster_domain)


def service_host(service: str, namespace: str, cluster_domain: str) -> str:
    return f"{service}.{namespace}.svc.{cluster_domain}"


def store_name(job_name: str) -> str:
    """Service of a job's own c10d TCPStore (charts/elastic-pytorchjob/templates/c10d-store.yaml)."""
    return f"{job_name}-rdzv-store"


def for_cluster(spec: JobSpec, facts: PlatformFacts) -> JobSpec:
    """The spec as it runs on the platform: rendezvous at the etcd Service (etcd-v2) or
    at the job's own c10d store Service, never at a worker; checkpoint writes as the
    checkpoint storage needs them."""
    if spec.rdzv_backend is RdzvBackend.ETCD_V2:
        endpoint = f"{facts.etcd_host}:{facts.etcd_port}"
    else:
        endpoint = f"{facts.store_host(spec.name)}:{C10D_STORE_PORT}"
    return spec.replace(rdzv_endpoint=endpoint, checkpoint_writes=facts.checkpoint_writes)


@functools.lru_cache(maxsize=None)
def chart_defaults(chart_dir: str) -> dict[str, Any]:
    return yaml.safe_load((Path(chart_dir) / "values.yaml").read_text()) or {}


def exactly(desired: Mapping[str, Any], default: Mapping[str, Any] | None) -> dict[str, Any]:
    """A map value that replaces the chart's default map instead of merging into it: Helm
    merges maps key by key, and deletes a key given as null."""
    out: dict[str, Any] = {k: None for k in (default or {}) if k not in desired}
    out.update(desired)
    return out


def _default(chart: Path, *path: str) -> Mapping[str, Any] | None:
    node: Any = chart_defaults(str(chart))
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


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
        "jobEnv": exactly(spec.worker_env(), _default(JOB_CHART, "jobEnv")),
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
            "nodeLabels": exactly(facts.pools.gpu_labels, _default(JOB_CHART, "workerPool", "nodeLabels")),
            "taints": [taint_dict(t) for t in facts.pools.gpu_taints],
        },
        "notReadyTolerationSeconds": facts.not_ready_toleration_s,
        "priorityClassName": facts.worker_priority_class,
        "serviceAccountName": facts.service_account,
        "terminationGracePeriodSeconds": facts.termination_grace_s,
        "rdzvClientLabels": exactly(facts.rdzv_client_labels, _default(JOB_CHART, "rdzvClientLabels")),
        "c10dStore": {
            "port": C10D_STORE_PORT,
            "nodeSelector": exactly(facts.pools.cpu_labels, _default(JOB_CHART, "c10dStore", "nodeSelector")),
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


# ------------------------------------------------------------------ facts as data
def facts_to_dict(facts: PlatformFacts) -> dict[str, Any]:
    """Plain data (the platform component registers it as its `jobFacts` output)."""
    p = facts.pools
    return {
        "namespace": facts.namespace,
        "serviceAccount": facts.service_account,
        "etcdService": facts.etcd_service,
        "etcdPort": facts.etcd_port,
        "clusterDomain": facts.cluster_domain,
        "checkpointClaim": facts.checkpoint_claim,
        "checkpointWrites": facts.checkpoint_writes.value,
        "workerPriorityClass": facts.worker_priority_class,
        "preservedPriorityClass": facts.preserved_priority_class,
        "gpusPerNode": facts.gpus_per_node,
        "rdzvClientLabels": dict(facts.rdzv_client_labels),
        "terminationGraceSeconds": facts.termination_grace_s,
        "notReadyTolerationSeconds": facts.not_ready_toleration_s,
        "pools": {
            # Taints as `key=value:Effect` text.
            "cpu": {"labels": dict(p.cpu_labels), "taints": [taint_text(t) for t in p.cpu_taints]},
            "gpuSpot": {
                "labels": dict(p.gpu_labels),
                "taints": [taint_text(t) for t in p.gpu_taints],
                "spotLabels": dict(p.spot_labels),
            },
        },
    }


def facts_from_dict(data: Mapping[str, Any]) -> PlatformFacts:
    return PlatformFacts(
        namespace=data["namespace"],
        service_account=data["serviceAccount"],
        etcd_service=data["etcdService"],
        etcd_port=int(data["etcdPort"]),
        cluster_domain=data["clusterDomain"],
        checkpoint_claim=data["checkpointClaim"],
        checkpoint_writes=CheckpointWrites(data["checkpointWrites"]),
        worker_priority_class=data["workerPriorityClass"],
        preserved_priority_class=data["preservedPriorityClass"],
        pools=PoolPlacement.from_mapping(data["pools"]),
        gpus_per_node=int(data["gpusPerNode"]),
        rdzv_client_labels=dict(data["rdzvClientLabels"]),
        termination_grace_s=int(data.get("terminationGraceSeconds", TERMINATION_GRACE_S)),
        not_ready_toleration_s=int(data.get("notReadyTolerationSeconds", NOT_READY_TOLERATION_S)),
    )

"""What a job needs to know about the platform it runs on.

The training platform (components/platform) registers these facts as its `jobFacts` output;
`elastic-lab submit`, the job chart values and the offline checks read them back. The
dictionary form is the wire form of that output: its keys do not change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lab.vocab.job import CheckpointWrites
from lab.vocab.pools import PoolPlacement

ETCD_CLIENT_PORT = 2379
C10D_STORE_PORT = 29400

# The shortest spot eviction notice of the clouds we serve (Azure and GCP: 30 s; AWS: 120 s).
# The kubelet sends SIGTERM, the training script writes its emergency checkpoint, and SIGKILL
# follows after the grace period: 25 s keeps the kill (and so the end of the save) inside it.
DEFAULT_EVICTION_NOTICE_S = 30
TERMINATION_GRACE_S = 25
# A vanished node goes NotReady after ~40 s; evict its pods 30 s later, not 300 s.
NOT_READY_TOLERATION_S = 30


def service_host(service: str, namespace: str, cluster_domain: str) -> str:
    return f"{service}.{namespace}.svc.{cluster_domain}"


# The label of a team's namespace: the team's name.
TEAM_LABEL = "elastic-spot-lab/team"


def team_folder(team: str) -> str:
    """Where a team's checkpoints live in the platform's storage: its volume mounts this folder
    of the container or bucket, and its jobs' own clients write under it."""
    return f"teams/{team}"


def store_name(job_name: str) -> str:
    """Service of a job's own c10d TCPStore (charts/elastic-pytorchjob/templates/c10d-store.yaml)."""
    return f"{job_name}-rdzv-store"


def lighthouse_name(job_name: str) -> str:
    """Service of a per-step job's own TorchFT lighthouse (charts/elastic-pytorchjob/templates/lighthouse.yaml)."""
    return f"{job_name}-lighthouse"


@dataclass(frozen=True)
class TeamFacts:
    """One team on a shared platform: its namespace (its jobs, their service account and
    checkpoint claim, of the platform's names) and its GPU quotas there (None: none)."""

    namespace: str
    gpu_quota: int | None = None
    borrowed_gpu_quota: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "gpuQuota": self.gpu_quota, "borrowedGpuQuota": self.borrowed_gpu_quota}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TeamFacts:
        return cls(
            namespace=str(data["namespace"]),
            gpu_quota=_count_or_none(data.get("gpuQuota")),
            borrowed_gpu_quota=_count_or_none(data.get("borrowedGpuQuota")),
        )


@dataclass(frozen=True)
class PlatformFacts:
    """Names, placement and timings of one training platform, as its jobs see them.

    checkpoint_claim: the checkpoint volume's claim (jobs with checkpoint access `mount`).
    checkpoint_url: the same storage as an object-store URL (s3://bucket, az://account/container)
      that the pods' own clients write with their identity (checkpoint access `client`); empty
      where the platform has none (a claim on a StorageClass).
    pod_labels / pod_env: labels and variables every job pod carries to act as the platform's
      identity (AKS: `azure.workload.identity/use`; EKS: the bucket's region).
    teams: the teams sharing the platform, by name; `for_team` gives the facts their jobs see.
    team: the team these facts are for ("": the platform's own namespace); etcd_namespace: where
      the rendezvous server runs, when not in `namespace` (a team's jobs reach the platform's).
    """

    namespace: str = "training"
    service_account: str = "trainer"
    etcd_service: str = "etcd-rendezvous"
    etcd_port: int = ETCD_CLIENT_PORT
    cluster_domain: str = "cluster.local"
    checkpoint_claim: str = "elastic-checkpoints"
    checkpoint_writes: CheckpointWrites = CheckpointWrites.RENAME
    checkpoint_url: str = ""
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_env: Mapping[str, str] = field(default_factory=dict)
    worker_priority_class: str = "elastic-preemptible"
    # The workers of a job's burst (JobSpec.burst_nodes), below the workers'; "" on a stack
    # deployed before the platform declared it.
    burst_priority_class: str = "elastic-borrowed"
    # The team's GPU quotas in the namespace (workers' class, borrowed class); None: none.
    gpu_quota: int | None = None
    borrowed_gpu_quota: int | None = None
    preserved_priority_class: str = "elastic-preserved"
    pools: PoolPlacement = field(default_factory=PoolPlacement)
    gpus_per_node: int = 1
    rdzv_client_labels: Mapping[str, str] = field(default_factory=lambda: {"elastic-spot-lab/rdzv-client": "true"})
    termination_grace_s: int = TERMINATION_GRACE_S
    not_ready_toleration_s: int = NOT_READY_TOLERATION_S
    eviction_notice_s: int = DEFAULT_EVICTION_NOTICE_S
    teams: Mapping[str, TeamFacts] = field(default_factory=dict)
    team: str = ""
    etcd_namespace: str = ""

    @property
    def rendezvous_namespace(self) -> str:
        """The namespace of the platform's etcd."""
        return self.etcd_namespace or self.namespace

    @property
    def etcd_host(self) -> str:
        return service_host(self.etcd_service, self.rendezvous_namespace, self.cluster_domain)

    def for_team(self, team: str) -> PlatformFacts:
        """What the jobs of `team` see: its namespace and quotas, checkpoints in its folder of the
        platform's storage, the platform's etcd. KeyError: no such team."""
        own = self.teams[team]
        url = self.checkpoint_url
        return replace(
            self,
            namespace=own.namespace,
            gpu_quota=own.gpu_quota,
            borrowed_gpu_quota=own.borrowed_gpu_quota,
            checkpoint_url=f"{url.rstrip('/')}/{team_folder(team)}" if url else "",
            team=team,
            etcd_namespace=self.rendezvous_namespace,
        )

    def team_of_namespace(self, namespace: str) -> str | None:
        """The team whose namespace `namespace` is, if any."""
        return next((name for name, t in self.teams.items() if t.namespace == namespace), None)

    def store_host(self, job_name: str) -> str:
        return service_host(store_name(job_name), self.namespace, self.cluster_domain)

    def lighthouse_host(self, job_name: str) -> str:
        return service_host(lighthouse_name(job_name), self.namespace, self.cluster_domain)

    def as_dict(self) -> dict[str, Any]:
        """Plain data: the platform's `jobFacts` output."""
        return {
            "namespace": self.namespace,
            "serviceAccount": self.service_account,
            "etcdService": self.etcd_service,
            "etcdPort": self.etcd_port,
            "clusterDomain": self.cluster_domain,
            "checkpointClaim": self.checkpoint_claim,
            "checkpointWrites": self.checkpoint_writes.value,
            "checkpointUrl": self.checkpoint_url,
            "podLabels": dict(self.pod_labels),
            "podEnv": dict(self.pod_env),
            "workerPriorityClass": self.worker_priority_class,
            "burstPriorityClass": self.burst_priority_class,
            "gpuQuota": self.gpu_quota,
            "borrowedGpuQuota": self.borrowed_gpu_quota,
            "preservedPriorityClass": self.preserved_priority_class,
            "gpusPerNode": self.gpus_per_node,
            "rdzvClientLabels": dict(self.rdzv_client_labels),
            "terminationGraceSeconds": self.termination_grace_s,
            "notReadyTolerationSeconds": self.not_ready_toleration_s,
            "evictionNoticeSeconds": self.eviction_notice_s,
            "pools": self.pools.as_mapping(),
            "teams": {name: t.as_dict() for name, t in self.teams.items()},
            "team": self.team,
            "etcdNamespace": self.etcd_namespace,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlatformFacts:
        return cls(
            namespace=data["namespace"],
            service_account=data["serviceAccount"],
            etcd_service=data["etcdService"],
            etcd_port=int(data["etcdPort"]),
            cluster_domain=data["clusterDomain"],
            checkpoint_claim=data["checkpointClaim"],
            checkpoint_writes=CheckpointWrites(data["checkpointWrites"]),
            # Stacks deployed before these keys existed have none.
            checkpoint_url=data.get("checkpointUrl", ""),
            pod_labels=dict(data.get("podLabels") or {}),
            pod_env=dict(data.get("podEnv") or {}),
            worker_priority_class=data["workerPriorityClass"],
            burst_priority_class=data.get("burstPriorityClass", ""),
            gpu_quota=_count_or_none(data.get("gpuQuota")),
            borrowed_gpu_quota=_count_or_none(data.get("borrowedGpuQuota")),
            preserved_priority_class=data["preservedPriorityClass"],
            pools=PoolPlacement.from_mapping(data["pools"]),
            gpus_per_node=int(data["gpusPerNode"]),
            rdzv_client_labels=dict(data["rdzvClientLabels"]),
            termination_grace_s=int(data.get("terminationGraceSeconds", TERMINATION_GRACE_S)),
            not_ready_toleration_s=int(data.get("notReadyTolerationSeconds", NOT_READY_TOLERATION_S)),
            eviction_notice_s=int(data.get("evictionNoticeSeconds", DEFAULT_EVICTION_NOTICE_S)),
            teams={str(name): TeamFacts.from_dict(t) for name, t in (data.get("teams") or {}).items()},
            team=str(data.get("team") or ""),
            etcd_namespace=str(data.get("etcdNamespace") or ""),
        )


# A pod's GPUs (the device plugin's extended resource), and their quota key (a ResourceQuota caps
# extended resources by request only).
GPU = "nvidia.com/gpu"
GPU_REQUESTS = f"requests.{GPU}"


def _count_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


# What the platform's `noticeHandler` output says of the spot-notice handler.
NOTICE_HANDLER_INSTALLED = "installed"
NOTICE_HANDLER_WAITS = "waits for the trainer image (elastic-spot-lab:trainerImage)"
NOTICE_HANDLER_NOT_INSTALLED = "not installed"

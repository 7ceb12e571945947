"""The job's launch parameters, defined once.

One `JobSpec` feeds every target: the torchrun command line of the local target, the
`elasticPolicy` and `PET_*` environment of the PyTorchJob chart, and the training script's
`LAB_*` environment. Every bad value is reported at once (lab.vocab.problems).
"""

from __future__ import annotations

import dataclasses
import keyword
import math
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

from lab.vocab import checkpoint_location
from lab.vocab.batch_policy import (
    ENV_BATCH_POLICY,
    ENV_FULL_WORLD_SIZE,
    ENV_GLOBAL_BATCH,
    BatchPolicy,
)
from lab.vocab.checkpoint_interval import BAND_NAMES
from lab.vocab.models import DEMO_MODULE
from lab.vocab.names import DNS_1035_LABEL, IMAGE_REFERENCE
from lab.vocab.per_step import ENV_FAULT_TOLERANCE, LIGHTHOUSE_PORT, PerStepSettings
from lab.vocab.problems import InvalidInput, Problem, Problems
from lab.vocab.rendezvous_timeouts import RendezvousTimeouts


class RdzvBackend(StrEnum):
    """Rendezvous backends we support. Both keep the rendezvous off the (evictable) workers."""

    ETCD_V2 = "etcd-v2"  # etcd server with --enable-v2 (etcd 3.5.x), python-etcd client
    C10D = "c10d"  # a TCPStore run as its own process / Service, never on a worker


class FaultTolerance(StrEnum):
    """How the job survives losing a node."""

    # torchrun's elastic agents: every membership change restarts every worker from the
    # newest state (the last completed step), through the rendezvous server.
    ELASTIC = "elastic"
    # TorchFT: each node is a replica group; a quorum per step through the lighthouse, the
    # survivors go on training, a new group heals from a live peer.
    PER_STEP = "per-step"


class CheckpointWrites(StrEnum):
    """How checkpoint files are committed to storage."""

    RENAME = "rename"  # POSIX storage: temp file, fsync, rename
    WRITE_ONCE = "write-once"  # object-store mounts (S3 Mountpoint): no rename, no overwrite


# Environment contract between a launcher and the training script (any script may read it).
ENV_CHECKPOINT_DIR = "LAB_CHECKPOINT_DIR"
ENV_CHECKPOINT_EVERY = "LAB_CHECKPOINT_EVERY"  # 0: derived while the job runs (elastic mode)
# The monthly eviction-rate band the derived checkpoint interval starts from (lab.vocab.checkpoint_interval).
ENV_EVICTION_BAND = "LAB_EVICTION_BAND"
# The job's mean seconds between evictions when known (a replayed trace's, a pool's own record):
# the derived interval starts from it instead of the band's.
ENV_EVICTION_MTBF = "LAB_EVICTION_MTBF_S"
ENV_CHECKPOINT_WRITES = "LAB_CHECKPOINT_WRITES"
ENV_PG_TIMEOUT = "LAB_PG_TIMEOUT_S"
# How long a spot notice gives before the node goes (the cloud's: Azure 30 s, AWS 120 s).
ENV_NOTICE_S = "LAB_NOTICE_S"
ENV_EVENTS_FILE = "LAB_EVENTS_FILE"
# A file that the notifier of a spot notice writes before its SIGTERM, holding when the node
# goes (Unix time, the cloud's own: AWS's instance-action time, Azure's NotBefore): a worker that
# finds it trains on until shortly before, then saves and leaves (lab.runtime.spot_notice).
ENV_NOTICE_DEADLINE_FILE = "LAB_NOTICE_DEADLINE_FILE"
# The agent's module: torchrun with our rendezvous handler, exit codes and crash-loop rule.
LAUNCH_MODULE = "lab.runtime.launch"
# torchrun's --logs-specs for worker logs kept per rendezvous round (lab.runtime.round_logs, the
# `torchrun.logs_specs` entry point of pyproject.toml): <log-dir>/<run>/round_<n>/attempt_<k>/<rank>/.
ROUND_LOGS_SPECS = "lab-rounds"
# "1": each worker records how the script it runs starts, loads and saves checkpoints, and ends
# (lab.runtime.script_watch); the local target sets it, for the drill.
ENV_WATCH_SCRIPT = "LAB_WATCH_SCRIPT"
ROUND_DIR_PREFIX = "round_"
# The training operator (v1.9, restartPolicy ExitCode) recreates a worker pod that exited with a
# code of at least this (pkg/util/train/train_util.go IsRetryableExitCode), and fails the job on a
# lower one (lab.k8s.operator_rules).
RETRYABLE_EXIT_CODE = 128
# A worker's exit code when its collective failed because a peer went: its agent then looks
# for the lost node at once (EX_TEMPFAIL: the job goes on without it).
EXIT_PEER_LOST = 75
# A worker pod whose containers were killed whole this many times in a row on one node, each
# without a word from its agent (OOMKilled at the container's memory limit, as a rule), makes its
# next agent exit 1: the training operator would recreate the pod for ever (lab.runtime.launch).
CONTAINER_KILLS = 3
# Where lab.runtime.launch writes torch's structured agent events (JSON lines), when set.
ENV_AGENT_EVENTS = "LAB_AGENT_EVENTS"
# Which node emitted an event: the local target's node name, a cluster's worker pod; and on
# a cluster the machine it runs on. A cluster sets them from the pod's own fields.
ENV_NODE = "LAB_NODE"
ENV_K8S_NODE = "LAB_K8S_NODE"
# A cluster's worker pod only: where its own deletion time is read (lab.runtime.pod_deadline).
ENV_POD_NAMESPACE = "LAB_POD_NAMESPACE"
# The agent's memory files that keep its workers' checkpoint shards across their restarts, two
# per local rank (lab.runtime.node_memory); `off` keeps none.
ENV_NODE_MEMORY = "LAB_NODE_MEMORY"
POD_FIELD_ENV = {ENV_NODE: "metadata.name", ENV_K8S_NODE: "spec.nodeName", ENV_POD_NAMESPACE: "metadata.namespace"}

# The agent's environment (its workers inherit it):
# - TORCH_DISABLE_SHARE_RDZV_TCP_STORE: torch 2.13 agents that re-use the rendezvous TCP store
#   deadlock on scale-out and fail re-rendezvous with stale peer addresses (with it set, 56 of
#   56 drill runs passed).
# - TORCH_ELASTIC_WORKER_IDENTICAL: every agent runs the same number of workers in one role, so
#   each computes its workers' ranks from its own group rank. Without it the agents exchange
#   them through the rendezvous store after every round, and when that round's rank 0 is evicted
#   before it writes them the others wait for the store's timeout (300 s).
# - TORCH_NCCL_ASYNC_ERROR_HANDLING: torchrun sets 1 (TearDown) unless it is set: NCCL's
#   watchdog then kills a worker whose collective failed or timed out, and the script never
#   sees the error. 2 (CleanUpOnly) aborts the communicators and raises the error in the
#   worker instead, so the script's "save on peer loss" runs and it exits on its own terms.
#   gloo (CPU) ignores it.
# - CUBLAS_WORKSPACE_CONFIG: cuBLAS on CUDA >= 10.2 gives the same bits run after run only with
#   a fixed workspace (":4096:8", NVIDIA's cuBLAS docs, "Results reproducibility"); without it
#   torch's deterministic mode, which the demo script turns on, warns that cuBLAS is not
#   deterministic. Read when CUDA starts; CPUs ignore it.
AGENT_ENV = {
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    "TORCH_ELASTIC_WORKER_IDENTICAL": "1",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "2",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
}

# The trainer image's user and group (the Dockerfile's `useradd --uid` and `USER`). Worker pods
# run as it and take it as their fsGroup: a checkpoint mount on object storage opens to a user
# other than root only through the pod's fsGroup (Mountpoint for S3 then mounts with --gid and
# --allow-other; without it only root may open the mount) or blobfuse's allow_other.
TRAINER_UID = 10001


def pod_security_context() -> dict[str, object]:
    """The worker pods' securityContext: the trainer image's user, its group as fsGroup."""
    return {
        "runAsNonRoot": True,
        "runAsUser": TRAINER_UID,
        "runAsGroup": TRAINER_UID,
        "fsGroup": TRAINER_UID,
        # A volume whose root already has the group is not walked file by file at every start.
        "fsGroupChangePolicy": "OnRootMismatch",
    }


# The largest number an `int32` field of the PyTorchJob CRD holds (elasticPolicy's replica counts
# and maxRestarts, a replica spec's replicas: schemas/kubeflow.org_pytorchjobs.v1.9.4.yaml).
INT32_MAX = 2**31 - 1

T = TypeVar("T", bound="DataclassInstance")

_RDZV_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


def _is_endpoint(value: Any) -> bool:
    """Whether `value` is host:port with a port in 1..65535."""
    host, _, port = (value if isinstance(value, str) else "").rpartition(":")
    return bool(host) and bool(_HOST.match(host)) and port.isdigit() and 0 < int(port) < 65536


def _new_rdzv_id(name: str) -> str:
    return f"{name}-{secrets.token_hex(4)}"


# The fields given as text (config files, flags) and the enum each must name a member of.
_CHOICES: tuple[tuple[str, type[StrEnum]], ...] = (
    ("rdzv_backend", RdzvBackend),
    ("checkpoint_writes", CheckpointWrites),
    ("fault_tolerance", FaultTolerance),
    ("batch_policy", BatchPolicy),
)


@dataclass(frozen=True)
class JobSpec:
    """Launch parameters of one elastic training job.

    Attributes (defaults in brackets):
      name: job name, a DNS-1035 label (it names pods and Services) ["elastic-demo"].
      image: container image for cluster targets.
      module / script: what each worker runs: a Python module [lab.runtime.train] or a script path.
      script_args: arguments passed to the training script [()].
      min_nodes / max_nodes: elastic range of nodes (PyTorchJob replicas) [2 / 3].
      burst_nodes: of max_nodes, the nodes borrowed from capacity other teams own (on a cluster
        a second PyTorchJob of the same run, at a priority their work preempts first); the rest,
        the core (`core_nodes`), at the team's own priority, is at least min_nodes [0].
      nproc_per_node: worker processes per node [1].
      rdzv_backend: `etcd-v2` or `c10d` [etcd-v2].
      rdzv_endpoint: host:port of the rendezvous server, never a worker [127.0.0.1:2379].
      rdzv_id: unique id of this job's rendezvous [name + random suffix]; torchrun's default
        is the literal "none", so jobs sharing one etcd would collide.
      max_restarts: worker-group restarts per agent before the job fails [100]. Every
        eviction costs the surviving agents one (their workers exit when a peer vanishes),
        and a node joining can cost one to an agent whose workers fail before it sees the
        newcomer, so this is the job's eviction budget.
      checkpoint_dir / checkpoint_every_steps / checkpoint_writes: checkpoint storage.
        checkpoint_every_steps 0 (elastic mode): the interval is derived while the job runs,
        Daly's from what its saves cost and how often it loses a node: the rate of
        `eviction_band` [10-15%] until the job has seen two evictions, then the rate it saw.
      eviction_mtbf_s: the job's mean seconds between evictions (of any of its nodes), when
        known: a replayed trace window's, a pool's own record. The derived interval starts from
        it instead of `eviction_band`'s rate [unset].
      pg_timeout_s: process-group timeout: how fast a vanished peer is noticed [15].
      rdzv_timeouts: see RendezvousTimeouts.
      monitor_interval_s: how often agents poll their workers [0.1].
      fault_tolerance: `elastic` (torchrun's rendezvous) or `per-step` (TorchFT) [elastic].
        In per-step mode the rendezvous settings do not apply: each node runs torchrun on
        its own, and `lighthouse_endpoint` (host:port) forms the quorum of every step.
      per_step: the per-step mode's timings (lab.vocab.per_step.PerStepSettings).
      batch_policy: `fixed-global` (the job's global batch and learning rate whatever the world
        size: the ranks accumulate micro-batches when nodes are missing) or `per-worker` (one
        micro-batch per worker: the global batch and learning rate follow the world size)
        [fixed-global]; lab.vocab.batch_policy.
      global_batch: fixed-global's samples per step [a worker's batch x max_nodes x nproc_per_node].
    """

    name: str = "elastic-demo"
    image: str = "ghcr.io/elastic-spot-lab/trainer:0.1.0"
    module: str | None = DEMO_MODULE
    script: str | None = None
    script_args: tuple[str, ...] = ()
    min_nodes: int = 2
    max_nodes: int = 3
    burst_nodes: int = 0
    nproc_per_node: int = 1
    rdzv_backend: RdzvBackend = RdzvBackend.ETCD_V2
    rdzv_endpoint: str = "127.0.0.1:2379"
    rdzv_id: str = ""
    max_restarts: int = 100
    checkpoint_dir: str = "/checkpoints"
    checkpoint_every_steps: int = 50
    eviction_band: str = "10-15%"
    eviction_mtbf_s: float | None = None
    checkpoint_writes: CheckpointWrites = CheckpointWrites.RENAME
    pg_timeout_s: float = 15.0
    rdzv_timeouts: RendezvousTimeouts = field(default_factory=RendezvousTimeouts)
    monitor_interval_s: float = 0.1
    fault_tolerance: FaultTolerance = FaultTolerance.ELASTIC
    batch_policy: BatchPolicy = BatchPolicy.FIXED_GLOBAL
    global_batch: int | None = None
    lighthouse_endpoint: str = f"127.0.0.1:{LIGHTHOUSE_PORT}"
    per_step: PerStepSettings = field(default_factory=PerStepSettings)

    def __post_init__(self) -> None:
        # Accept plain strings and mappings from config files and flags, then report every
        # bad value at once.
        found = Problems()
        for name, kind in _CHOICES:
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, kind(value))
            except ValueError:
                found.add(name, value, "one of " + ", ".join(member.value for member in kind))
        if isinstance(self.per_step, Mapping):
            kwargs, unknown = _known_fields(PerStepSettings, self.per_step, "per_step.")
            found.extend(unknown)
            object.__setattr__(self, "per_step", PerStepSettings(**kwargs))
        if isinstance(self.rdzv_timeouts, Mapping):
            # Unknown settings are reported here, the values of the known ones by problems().
            kwargs, unknown = _known_fields(RendezvousTimeouts, self.rdzv_timeouts, "rdzv_timeouts.")
            found.extend(unknown)
            object.__setattr__(self, "rdzv_timeouts", RendezvousTimeouts(**kwargs))
        object.__setattr__(self, "script_args", tuple(str(a) for a in self.script_args))
        if not self.rdzv_id and isinstance(self.name, str):
            object.__setattr__(self, "rdzv_id", _new_rdzv_id(self.name))
        found.extend(self.problems())
        found.raise_if_any()

    # ----------------------------------------------------------------- validation
    def problems(self) -> list[Problem]:
        """Every invalid launch parameter but the enums (checked as they are converted)."""
        out = Problems()
        self._what_runs(out)
        self._sizes(out)
        self._rendezvous(out)
        if not self.checkpoint_dir:
            out.add("checkpoint_dir", self.checkpoint_dir, "a directory path or an object-store URL")
        elif expected := checkpoint_location.problem(str(self.checkpoint_dir)):
            out.add("checkpoint_dir", self.checkpoint_dir, expected)
        if isinstance(self.rdzv_timeouts, RendezvousTimeouts):
            out.extend(self.rdzv_timeouts.problems())
        if isinstance(self.per_step, PerStepSettings):
            out.extend(self.per_step.problems())
        if not _is_endpoint(self.lighthouse_endpoint):
            out.add(
                "lighthouse_endpoint",
                self.lighthouse_endpoint,
                f"host:port with a port in 1..65535, e.g. torchft-lighthouse:{LIGHTHOUSE_PORT}",
            )
        return out.items

    def _what_runs(self, out: Problems) -> None:
        """The job's name, its image, and the module or script each worker runs."""
        if not isinstance(self.name, str) or len(self.name) > 40 or not DNS_1035_LABEL.match(self.name):
            out.add(
                "name",
                self.name,
                "a DNS-1035 label: a lower-case letter, then lower-case letters, digits "
                "and '-', at most 40 characters (it names pods and Services)",
            )
        if not isinstance(self.image, str) or not IMAGE_REFERENCE.match(self.image):
            out.add(
                "image",
                self.image,
                "a container image reference: [registry/]path[:tag][@sha256:digest], the path in lower case "
                "(e.g. myregistry.azurecr.io/elastic-spot-lab/trainer:0.1.0)",
            )
        if (self.module is None) == (self.script is None):
            out.add("module/script", (self.module, self.script), "exactly one of module or script")
        elif self.module is not None and (expected := module_problem(self.module)):
            out.add("module", self.module, expected)
        elif self.script is not None and (expected := script_problem(self.script)):
            out.add("script", self.script, expected)

    def _sizes(self, out: Problems) -> None:
        """The node and process counts, the checkpoint interval, the eviction band, the restarts."""
        counts_ok = True
        for key in ("min_nodes", "max_nodes", "nproc_per_node"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                out.add(key, value, "a whole number >= 1")
                counts_ok = counts_ok and key not in ("min_nodes", "max_nodes")
        every = self.checkpoint_every_steps
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            out.add("checkpoint_every_steps", every, "a whole number >= 1, or 0: derived while the job runs")
        elif every == 0 and self.fault_tolerance is FaultTolerance.PER_STEP:
            out.add(
                "checkpoint_every_steps",
                every,
                "a whole number >= 1 in per-step mode (the interval is derived in elastic mode only)",
            )
        if self.eviction_band not in BAND_NAMES:
            out.add("eviction_band", self.eviction_band, "one of " + ", ".join(BAND_NAMES))
        mtbf = self.eviction_mtbf_s
        if mtbf is not None and (
            isinstance(mtbf, bool) or not isinstance(mtbf, int | float) or not math.isfinite(mtbf) or mtbf <= 0
        ):
            out.add(
                "eviction_mtbf_s",
                mtbf,
                "a finite number of seconds > 0 between the job's evictions, or unset: its band's rate",
            )
        if counts_ok and self.max_nodes < self.min_nodes:
            out.add("min_nodes", self.min_nodes, f"<= max_nodes ({self.max_nodes})")
        burst = self.burst_nodes
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 0:
            out.add("burst_nodes", burst, "a whole number >= 0 of max_nodes borrowed")
        elif counts_ok and self.max_nodes - burst < self.min_nodes:
            out.add(
                "burst_nodes",
                burst,
                f"at most max_nodes - min_nodes ({self.max_nodes - self.min_nodes}): the core the job keeps when "
                f"every borrowed node is taken back must be at least min_nodes ({self.min_nodes})",
            )
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            out.add("max_restarts", self.max_restarts, "a whole number >= 0")
        self._batch(out)

    def _batch(self, out: Problems) -> None:
        """The global batch: samples per step, set for a fixed-global policy only."""
        batch = self.global_batch
        if batch is None:
            return
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= INT32_MAX:
            out.add("global_batch", batch, "samples per step >= 1, or unset: a worker's batch x the full world size")
        elif self.batch_policy is BatchPolicy.PER_WORKER:
            out.add("global_batch", batch, "unset with batch_policy per-worker (its batch follows the world size)")

    def _rendezvous(self, out: Problems) -> None:
        """The rendezvous endpoint and id, the process group's timeout, the agent's monitor interval."""
        if not _is_endpoint(self.rdzv_endpoint):
            out.add("rdzv_endpoint", self.rdzv_endpoint, "host:port with a port in 1..65535, e.g. etcd-rendezvous:2379")
        if not isinstance(self.rdzv_id, str) or not _RDZV_ID.match(self.rdzv_id) or self.rdzv_id == "none":
            out.add("rdzv_id", self.rdzv_id, "1-63 characters of [A-Za-z0-9_.-], unique per job (not 'none')")
        if not _number_in(self.pg_timeout_s, 1, 600):
            out.add("pg_timeout_s", self.pg_timeout_s, "seconds in 1..600 (tens of seconds: gloo's default is 30 min)")
        if not _number_in(self.monitor_interval_s, 0, 5) or self.monitor_interval_s == 0:
            out.add("monitor_interval_s", self.monitor_interval_s, "seconds in (0, 5]")

    def validate(self) -> None:
        if problems := self.problems():
            raise InvalidInput(problems)

    # ------------------------------------------------------------------ helpers
    @property
    def nnodes(self) -> str:
        return f"{self.min_nodes}:{self.max_nodes}"

    @property
    def core_nodes(self) -> int:
        """The nodes at the team's own priority: all but the borrowed ones."""
        return self.max_nodes - self.burst_nodes

    @property
    def rdzv_host(self) -> str:
        return self.rdzv_endpoint.rpartition(":")[0]

    @property
    def rdzv_port(self) -> int:
        return int(self.rdzv_endpoint.rpartition(":")[2])

    def rdzv_conf(self) -> dict[str, str]:
        conf = self.rdzv_timeouts.conf()
        if self.rdzv_backend is RdzvBackend.C10D:
            # The store runs as its own process; no agent may try to host it.
            conf["is_host"] = "false"
        return conf

    def replace(self, **changes: Any) -> JobSpec:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> JobSpec:
        """Build from a config mapping (stack config, chart values); unknown keys are errors."""
        return _from_mapping(cls, values, "")

    # ------------------------------------------------------------------ outputs
    @property
    def per_step_mode(self) -> bool:
        return self.fault_tolerance is FaultTolerance.PER_STEP

    def train_env(self) -> dict[str, str]:
        """Environment the training script reads (our contract, see ENV_* above)."""
        env = {
            ENV_CHECKPOINT_DIR: self.checkpoint_dir,
            ENV_CHECKPOINT_EVERY: str(self.checkpoint_every_steps),
            ENV_EVICTION_BAND: str(self.eviction_band),
            ENV_CHECKPOINT_WRITES: self.checkpoint_writes.value,
            ENV_PG_TIMEOUT: f"{self.pg_timeout_s:g}",
            ENV_FAULT_TOLERANCE: self.fault_tolerance.value,
            ENV_BATCH_POLICY: self.batch_policy.value,
            ENV_FULL_WORLD_SIZE: str(self.max_nodes * self.nproc_per_node),
        }
        if self.global_batch is not None:
            env[ENV_GLOBAL_BATCH] = str(self.global_batch)
        if self.eviction_mtbf_s is not None:
            env[ENV_EVICTION_MTBF] = f"{self.eviction_mtbf_s:g}"
        if self.per_step_mode:
            env.update(
                self.per_step.train_env(min_replicas=self.min_nodes, lighthouse=f"http://{self.lighthouse_endpoint}")
            )
        return env

    def worker_env(self) -> dict[str, str]:
        """Everything a node's container / agent process needs in its environment."""
        return {**AGENT_ENV, **self.train_env()}

    def launcher(self, python: str = "python") -> list[str]:
        """The agent command on every target: torchrun through lab.runtime.launch, which reads the
        fractional-second rendezvous settings (and is plain torchrun without them)."""
        return [python, "-m", LAUNCH_MODULE]

    def entrypoint(self) -> list[str]:
        """What torchrun runs in each worker, with the script's arguments."""
        target = ["-m", self.module] if self.module else [self.script]
        return [*target, *self.script_args]

    def torchrun_args(self, *, local_addr: str | None = None) -> list[str]:
        """Explicit torchrun flags (local target). Cluster targets get the same via PET_*.
        In per-step mode each node's torchrun starts its own replica group, on its own."""
        if self.per_step_mode:
            return self.group_torchrun_args(local_addr=local_addr)
        args = [
            f"--nnodes={self.nnodes}",
            f"--nproc-per-node={self.nproc_per_node}",
            f"--rdzv-backend={self.rdzv_backend.value}",
            f"--rdzv-endpoint={self.rdzv_endpoint}",
            f"--rdzv-id={self.rdzv_id}",
            "--rdzv-conf=" + ",".join(f"{k}={v}" for k, v in self.rdzv_conf().items()),
            f"--max-restarts={self.max_restarts}",
            f"--monitor-interval={self.monitor_interval_s:g}",
        ]
        if local_addr:
            args.append(f"--local-addr={local_addr}")
        return args

    def group_torchrun_args(self, *, local_addr: str | None = None) -> list[str]:
        """torchrun flags of one replica group (per-step mode): the node alone, its own
        rendezvous store; torchrun still restarts the group's workers when one fails."""
        args = [
            "--standalone",
            "--nnodes=1",
            f"--nproc-per-node={self.nproc_per_node}",
            f"--max-restarts={self.max_restarts}",
            f"--monitor-interval={self.monitor_interval_s:g}",
        ]
        if local_addr:
            args.append(f"--local-addr={local_addr}")
        return args

    def pet_env(self) -> dict[str, str]:
        """torchrun's PET_* environment: what the training operator derives from
        elasticPolicy, plus the settings elasticPolicy has no field for."""
        return {
            "PET_NNODES": self.nnodes,
            "PET_NPROC_PER_NODE": str(self.nproc_per_node),
            "PET_RDZV_BACKEND": self.rdzv_backend.value,
            "PET_RDZV_ENDPOINT": self.rdzv_endpoint,
            "PET_RDZV_ID": self.rdzv_id,
            "PET_RDZV_CONF": ",".join(f"{k}={v}" for k, v in self.rdzv_conf().items()),
            "PET_MAX_RESTARTS": str(self.max_restarts),
            "PET_MONITOR_INTERVAL": f"{self.monitor_interval_s:g}",
        }

    def elastic_policy(self) -> dict[str, Any]:
        """`spec.elasticPolicy` of a kubeflow.org/v1 PyTorchJob (training operator v1.9.4).

        nproc_per_node goes to `spec.nprocPerNode` (elasticPolicy.nProcPerNode is deprecated,
        and setting both is rejected).
        """
        return {
            "minReplicas": self.min_nodes,
            "maxReplicas": self.max_nodes,
            "maxRestarts": self.max_restarts,
            "rdzvBackend": self.rdzv_backend.value,
            "rdzvHost": self.rdzv_host,
            "rdzvPort": self.rdzv_port,
            "rdzvId": self.rdzv_id,
            "rdzvConf": [{"key": k, "value": v} for k, v in self.rdzv_conf().items()],
        }


def module_problem(module: object) -> str | None:
    """What a module for `python -m` must be, when `module` is not one (None when it is)."""
    parts = module.split(".") if isinstance(module, str) else [""]
    if not all(part.isidentifier() and not keyword.iskeyword(part) for part in parts):
        return "a Python module name: identifiers joined by dots, e.g. lab.runtime.train (a file runs as the script)"
    if parts[-1] == "py":  # a file's name, though its parts are identifiers: `python -m x.py` finds no x.py
        return f"a module name, not a file: {'.'.join(parts[:-1])} (or run the file as the script: {module})"
    return None


def script_problem(script: object) -> str | None:
    """What a training script must be, when `script` is not one (None when it is): torchrun runs
    it with python, so a shell script or a binary would fail on every worker."""
    name = script.rpartition("/")[2] if isinstance(script, str) else ""
    if not isinstance(script, str) or script != script.strip() or not name.endswith(".py") or len(name) <= 3:
        return "a Python file's path ending in .py (torchrun runs the script with python)"
    return None


def _number_in(value: Any, low: float, high: float) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and low <= value <= high


def _known_fields(cls: type[T], values: Mapping[str, Any], prefix: str) -> tuple[dict[str, Any], list[Problem]]:
    """The values that name fields of `cls`, and a problem for each that does not."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = [
        Problem(prefix + key, values[key], "a known field: " + ", ".join(sorted(known)))
        for key in sorted(set(values) - known)
    ]
    return {k: v for k, v in values.items() if k in known}, unknown


def _from_mapping(cls: type[T], values: Mapping[str, Any], prefix: str) -> T:
    if not isinstance(values, Mapping):
        raise InvalidInput([Problem(prefix.rstrip(".") or cls.__name__, values, "a mapping")])
    kwargs, unknown = _known_fields(cls, values, prefix)
    try:
        built = cls(**kwargs)
    except InvalidInput as exc:
        raise InvalidInput([*unknown, *exc.problems]) from None
    if unknown:
        raise InvalidInput(unknown)
    return built

"""The platform's settings, read from the stack config and validated.

Stack config (stacks/Pulumi.<stack>.yaml), all keys optional:

    elastic-spot-lab:platform:
      namespace: training                 # jobs, their service account, etcd, the checkpoint claim
      serviceAccount: trainer
      clusterDomain: cluster.local
      gpusPerNode: 1                      # 0: CPU-only cluster (no device plugin, no GPU limits)
      devicePlugin: auto                  # auto | true | false (auto: unless the node image ships one)
      operatorVersion: v1.9.4             # Kubeflow training operator v1 (elastic PyTorchJob)
      etcd: {image: quay.io/coreos/etcd, tag: v3.5.20}
      priorityClasses:                    # preserved >= inference > preemptible
        preserved:   {name: elastic-preserved,   value: 1000000}   # etcd, operator, c10d stores; preempts nobody
        inference:   {name: elastic-inference,   value: 100000}    # preempts lower: the workers only
        preemptible: {name: elastic-preemptible, value: 1000}      # workers; preempts nobody
      checkpoint:
        claimName: elastic-checkpoints
        size: 100Gi
        storageClass: standard            # byo only
        accessMode: ReadWriteMany         # byo only
        workloadIdentityToken: false      # aks: optional; must agree with the cluster's checkpointAuth
                                          #   (true: workload-identity-token, false: workload-identity-key)
        region: us-east-1                 # eks: the bucket's region, when not the cluster's
      pools:                              # byo only: aks/eks take them from the cluster
        cpu: {labels: {elastic-spot-lab/pool: cpu}}
        gpuSpot: {labels: {...}, taints: ["key=value:NoSchedule", ...], spotLabels: {...}}

Every error names the key, the value and what is expected.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from components.names import DNS_LABEL
from components.versions import DEFAULT_KUBERNETES_VERSION
from lab.jobspec import CheckpointWrites
from lab.k8s.job_values import PlatformFacts
from lab.k8s.scheduling import PoolPlacement, SchedulingError

CLOUDS = ("aks", "eks", "byo")
OPERATOR_VERSION = "v1.9.4"
DEVICE_PLUGIN_VERSION = "0.20.0"
DEVICE_PLUGIN_REPO = "https://nvidia.github.io/k8s-device-plugin"
DEVICE_PLUGIN_CHART = "nvidia-device-plugin"
ETCD_IMAGE = "quay.io/coreos/etcd"
ETCD_TAG = "v3.5.20"  # TorchX's choice; 3.6 removed the v2 API

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
_OPERATOR_REF = re.compile(r"^v1\.9\.\d+$")
_ETCD_TAG = re.compile(r"^v3\.5\.\d+$")
_IMAGE_REPO = re.compile(r"^[a-z0-9][a-z0-9._/:-]*$")
ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod", "ReadOnlyMany")


class PlatformConfigError(ValueError):
    """A platform setting is invalid. `key` (e.g. `platform.etcd.tag`), `value` (as given)
    and `expected` are kept as fields, so the stack's ConfigError reports them as they are;
    the message reads `key=value is invalid: expected ...`."""

    def __init__(self, key: str, value: Any, expected: str) -> None:
        self.key, self.value, self.expected = key, value, expected
        super().__init__(f"{key}={value!r} is invalid: expected {expected}")


def _fail(key: str, value: Any, expected: str) -> PlatformConfigError:
    return PlatformConfigError(f"platform.{key}", value, expected)


@dataclass(frozen=True)
class PriorityClassSpec:
    name: str
    value: int


@dataclass(frozen=True)
class Priorities:
    """preserved (etcd, the training operator, c10d stores) is the highest of ours and
    preempts nobody (Never); inference comes next and preempts lower priorities, i.e. only
    the preemptible workers; preemptible is the lowest and preempts nobody.

    A pod preempts only pods of *lower* priority, so with preserved >= inference nothing that
    hosts a rendezvous or the operator can be preempted by inference (a preempted etcd or
    operator would stop every job's rendezvous), and training never evicts inference."""

    preserved: PriorityClassSpec = PriorityClassSpec("elastic-preserved", 1_000_000)
    inference: PriorityClassSpec = PriorityClassSpec("elastic-inference", 100_000)
    preemptible: PriorityClassSpec = PriorityClassSpec("elastic-preemptible", 1_000)

    ROLES = ("preserved", "inference", "preemptible")
    PREEMPTION = {"preserved": "Never", "inference": "PreemptLowerPriority", "preemptible": "Never"}

    def items(self) -> list[tuple[str, PriorityClassSpec, str]]:
        return [(role, getattr(self, role), self.PREEMPTION[role]) for role in self.ROLES]


@dataclass(frozen=True)
class CheckpointSettings:
    claim_name: str = "elastic-checkpoints"
    size: str = "100Gi"
    storage_class: str = ""  # byo
    access_mode: str = "ReadWriteMany"  # byo
    # aks: mount with the workload identity token (true) or the account key fetched with it
    # (false). None: as the cluster's checkpointAuth says; set, it must agree with it.
    workload_identity_token: bool | None = None
    region: str = ""  # eks


@dataclass(frozen=True)
class PlatformSettings:
    cloud: str = "byo"
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    namespace: str = "training"
    service_account: str = "trainer"
    cluster_domain: str = "cluster.local"
    gpus_per_node: int = 1
    device_plugin: str = "auto"  # auto | true | false
    operator_version: str = OPERATOR_VERSION
    etcd_image: str = ETCD_IMAGE
    etcd_tag: str = ETCD_TAG
    priorities: Priorities = field(default_factory=Priorities)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    pools: PoolPlacement | None = None  # byo: from config; aks/eks: from the cluster

    etcd_service: str = "etcd-rendezvous"
    rdzv_client_labels: Mapping[str, str] = field(default_factory=lambda: {"elastic-spot-lab/rdzv-client": "true"})

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------ validation
    def validate(self) -> None:
        if self.cloud not in CLOUDS:
            raise _fail("cloud", self.cloud, "one of " + ", ".join(CLOUDS))
        if not re.match(r"^v?\d+\.\d+(\.\d+)?$", str(self.kubernetes_version)):
            raise _fail("kubernetesVersion", self.kubernetes_version, "MAJOR.MINOR such as 1.33")
        for key, value in (("namespace", self.namespace), ("serviceAccount", self.service_account)):
            if not isinstance(value, str) or not DNS_LABEL.match(value):
                raise _fail(key, value, "a DNS-1123 label (lower-case letters, digits, '-')")
        if self.namespace.startswith("kube-") or self.namespace == "default":
            raise _fail("namespace", self.namespace, "a namespace of our own, not default or kube-*")
        if not isinstance(self.cluster_domain, str) or not _DNS_SUBDOMAIN.match(self.cluster_domain):
            raise _fail("clusterDomain", self.cluster_domain, "a DNS domain such as cluster.local")
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) or not 0 <= self.gpus_per_node <= 16:
            raise _fail("gpusPerNode", self.gpus_per_node, "a whole number in 0..16")
        if self.device_plugin not in ("auto", "true", "false"):
            raise _fail("devicePlugin", self.device_plugin, "auto, true or false")
        if not _OPERATOR_REF.match(str(self.operator_version)):
            raise _fail(
                "operatorVersion", self.operator_version,
                "a v1.9.x release tag such as v1.9.4 (v1 is the operator with elastic PyTorchJob; master is Trainer v2, no elastic)",
            )
        if not _IMAGE_REPO.match(str(self.etcd_image)):
            raise _fail("etcd.image", self.etcd_image, "an image repository such as quay.io/coreos/etcd")
        if not _ETCD_TAG.match(str(self.etcd_tag)):
            raise _fail("etcd.tag", self.etcd_tag, "a v3.5.x tag such as v3.5.20 (etcd 3.6 removed the v2 API torch needs)")
        self._validate_priorities()
        self._validate_checkpoint()
        if self.cloud == "byo" and self.pools is None:
            raise _fail("pools", None, "the CPU and GPU spot pools' labels and taints on a byo cluster")

    def _validate_priorities(self) -> None:
        names = set()
        for role, pc, _ in self.priorities.items():
            if not isinstance(pc.name, str) or not _DNS_SUBDOMAIN.match(pc.name) or pc.name.startswith("system-"):
                raise _fail(f"priorityClasses.{role}.name", pc.name, "a DNS subdomain not starting with system-")
            if isinstance(pc.value, bool) or not isinstance(pc.value, int) or not -(2**31) <= pc.value <= 1_000_000_000:
                raise _fail(f"priorityClasses.{role}.value", pc.value, "a whole number <= 1000000000 (higher is reserved for system classes)")
            if pc.name in names:
                raise _fail(f"priorityClasses.{role}.name", pc.name, "a name no other class uses")
            names.add(pc.name)
        p = self.priorities
        if not p.preserved.value >= p.inference.value > p.preemptible.value:
            raise _fail(
                "priorityClasses", {r: pc.value for r, pc, _ in p.items()},
                "values with preserved >= inference > preemptible (inference, which preempts, must never "
                "outrank etcd or the operator; it may preempt only the workers)",
            )

    def _validate_checkpoint(self) -> None:
        c = self.checkpoint
        if not _DNS_SUBDOMAIN.match(str(c.claim_name)):
            raise _fail("checkpoint.claimName", c.claim_name, "a DNS subdomain")
        if not _QUANTITY.match(str(c.size)):
            raise _fail("checkpoint.size", c.size, "a storage quantity such as 100Gi")
        if c.access_mode not in ACCESS_MODES:
            raise _fail("checkpoint.accessMode", c.access_mode, "one of " + ", ".join(ACCESS_MODES))
        if self.cloud == "byo" and not (isinstance(c.storage_class, str) and _DNS_SUBDOMAIN.match(c.storage_class)):
            raise _fail("checkpoint.storageClass", c.storage_class, "the StorageClass of the checkpoint volume on a byo cluster (e.g. standard)")
        if c.workload_identity_token is not None and not isinstance(c.workload_identity_token, bool):
            raise _fail("checkpoint.workloadIdentityToken", c.workload_identity_token, "true or false")

    # ------------------------------------------------------------ derived
    def device_plugin_enabled(self, node_image_ships_plugin: bool = False) -> bool:
        if self.device_plugin == "auto":
            return self.gpus_per_node > 0 and not node_image_ships_plugin
        return self.device_plugin == "true"

    @property
    def operator_directory(self) -> str:
        """The standalone overlay of the training operator v1, at a pinned tag."""
        return f"https://github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref={self.operator_version}"

    @property
    def checkpoint_writes(self) -> CheckpointWrites:
        # S3 Mountpoint cannot rename or overwrite: each checkpoint a new file plus a pointer.
        return CheckpointWrites.WRITE_ONCE if self.cloud == "eks" else CheckpointWrites.RENAME

    def facts(self, pools: PoolPlacement | None = None) -> PlatformFacts:
        placement = pools or self.pools
        if placement is None:
            raise _fail("pools", None, "pool labels and taints (from the cluster, or platform.pools on byo)")
        return PlatformFacts(
            namespace=self.namespace,
            service_account=self.service_account,
            etcd_service=self.etcd_service,
            cluster_domain=self.cluster_domain,
            checkpoint_claim=self.checkpoint.claim_name,
            checkpoint_writes=self.checkpoint_writes,
            worker_priority_class=self.priorities.preemptible.name,
            preserved_priority_class=self.priorities.preserved.name,
            pools=placement,
            gpus_per_node=self.gpus_per_node,
            rdzv_client_labels=dict(self.rdzv_client_labels),
        )

    # ------------------------------------------------------------ parsing
    @classmethod
    def from_config(
        cls,
        platform: Mapping[str, Any] | str | None,
        *,
        cloud: str,
        kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
    ) -> "PlatformSettings":
        """From the stack's `platform` config object (a mapping, or its JSON text)."""
        raw: Any = platform if platform is not None else {}
        if isinstance(raw, str):
            try:
                raw = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError as exc:
                raise PlatformConfigError("platform", raw, f"a JSON/YAML object ({exc})") from None
        if not isinstance(raw, Mapping):
            raise PlatformConfigError("platform", raw, "a mapping of platform settings")
        known = {
            "namespace", "serviceAccount", "clusterDomain", "gpusPerNode", "devicePlugin", "operatorVersion",
            "etcd", "priorityClasses", "checkpoint", "pools", "kubernetesVersion",
        }
        _no_unknown("", raw, known)
        kw: dict[str, Any] = {"cloud": cloud, "kubernetes_version": str(raw.get("kubernetesVersion", kubernetes_version))}
        simple = {"namespace": "namespace", "serviceAccount": "service_account", "clusterDomain": "cluster_domain",
                  "gpusPerNode": "gpus_per_node", "operatorVersion": "operator_version"}
        for key, attr in simple.items():
            if key in raw:
                kw[attr] = raw[key]
        if "devicePlugin" in raw:
            value = raw["devicePlugin"]
            kw["device_plugin"] = {True: "true", False: "false"}.get(value, value) if isinstance(value, bool) else str(value).lower()
        if "etcd" in raw:
            etcd = _mapping("etcd", raw["etcd"], {"image", "tag"})
            kw["etcd_image"] = etcd.get("image", ETCD_IMAGE)
            kw["etcd_tag"] = str(etcd.get("tag", ETCD_TAG))
        if "priorityClasses" in raw:
            pcs = _mapping("priorityClasses", raw["priorityClasses"], set(Priorities.ROLES))
            defaults = Priorities()
            roles = {}
            for role in Priorities.ROLES:
                d = getattr(defaults, role)
                given = _mapping(f"priorityClasses.{role}", pcs.get(role, {}), {"name", "value"})
                roles[role] = PriorityClassSpec(given.get("name", d.name), given.get("value", d.value))
            kw["priorities"] = Priorities(**roles)
        if "checkpoint" in raw:
            ck = _mapping("checkpoint", raw["checkpoint"], {"claimName", "size", "storageClass", "accessMode", "workloadIdentityToken", "region"})
            names = {"claimName": "claim_name", "size": "size", "storageClass": "storage_class", "accessMode": "access_mode",
                     "workloadIdentityToken": "workload_identity_token", "region": "region"}
            kw["checkpoint"] = CheckpointSettings(**{names[k]: v for k, v in ck.items()})
        if "pools" in raw:
            try:
                kw["pools"] = PoolPlacement.from_mapping(raw["pools"])
            except SchedulingError as exc:
                raise PlatformConfigError(f"platform.{exc.key}", exc.value, exc.expected) from None
        return cls(**kw)


def _mapping(key: str, value: Any, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(key, value, "a mapping with " + ", ".join(sorted(allowed)))
    _no_unknown(key + ".", value, allowed)
    return value


def _no_unknown(prefix: str, value: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise _fail(prefix + unknown[0], value[unknown[0]], "a known key: " + ", ".join(sorted(allowed)))



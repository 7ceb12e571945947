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
      spotNoticeHandler:                  # turns Azure's Scheduled Events notice into pod evictions
        enabled: auto                     # auto | true | false (auto: where the cluster needs it, AKS)
        image: <registry>/elastic-spot-lab/trainer:<tag>@sha256:<digest>   # [elastic-spot-lab:trainerImage];
                                          #   none yet: not installed. Pinned: a tag (not latest), a
                                          #   digest (which alone pins too), or both
      priorityClasses:                    # preserved >= inference > preemptible > borrowed
        preserved:   {name: elastic-preserved,   value: 1000000}   # etcd, operator, c10d stores; preempts nobody
        inference:   {name: elastic-inference,   value: 100000}    # preempts lower: the workers only
        preemptible: {name: elastic-preemptible, value: 1000}      # workers; preempts nobody
        borrowed:    {name: elastic-borrowed,    value: 100}       # a job's burst workers; preempted first
      checkpoint:
        claimName: elastic-checkpoints
        size: 100Gi
        workloadIdentityToken: false      # optional; must agree with how the cluster mounts checkpoints
                                          #   (AKS: true for checkpointAuth workload-identity-token)
        region: us-east-1                 # S3 checkpoints: the bucket's region, when not the cluster's
        storageClass: standard            # byo: the cluster's checkpoint StorageClass (components/byo)
        accessMode: ReadWriteMany         # byo: its access mode
      quota:                              # the team's GPUs in the namespace (ResourceQuotas by PriorityClass)
        gpus: 8                           # its share: GPUs its workers (preemptible) may request in all
        borrowedGpus: 16                  # what its burst workers (borrowed) may hold besides; unset: no cap
      teams:                              # teams sharing the platform, each in its own namespace
        vision: {namespace: team-vision, gpus: 8, borrowedGpus: 16}   # components/platform/teams.py
      pools: {...}                        # byo: the cluster's pools (components/byo); others take
                                          #   them from their cluster component

Every error names the key, the value and what is expected, all of them at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from components.cluster_info import TrainingIdentity
from components.platform.mapping_keys import unknown_keys
from components.platform.quota import GpuQuota
from components.platform.teams import TeamSettings, read_teams, team_problems
from lab.vocab.job import CheckpointWrites
from lab.vocab.names import DNS_LABEL, DNS_SUBDOMAIN, ImageReference
from lab.vocab.platform_facts import PlatformFacts
from lab.vocab.pools import PoolPlacement
from lab.vocab.problems import InvalidInput, Problem, Problems
from lab.vocab.versions import (
    DEFAULT_KUBERNETES_VERSION,
    DEVICE_PLUGIN_CHART,
    DEVICE_PLUGIN_REPO,
    DEVICE_PLUGIN_VERSION,
    ETCD_IMAGE,
    ETCD_TAG,
    OPERATOR_VERSION,
    PROJECT_IMAGE,
)

__all__ = ["DEVICE_PLUGIN_CHART", "DEVICE_PLUGIN_REPO", "DEVICE_PLUGIN_VERSION", "GpuQuota", "PlatformSettings"]

_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
_OPERATOR_REF = re.compile(r"^v1\.9\.\d+$")
_ETCD_TAG = re.compile(r"^v3\.5\.\d+$")
_IMAGE_REPO = re.compile(r"^[a-z0-9][a-z0-9._/:-]*$")
_K8S_VERSION = re.compile(r"^v?\d+\.\d+(\.\d+)?$")
# Keys of `platform` that describe a bring-your-own cluster: components/byo reads them.
CLUSTER_KEYS = {"pools"}
CLUSTER_CHECKPOINT_KEYS = {"storageClass", "accessMode"}
# How an AKS cluster's `checkpointAuth` mounts checkpoints, by `workloadIdentityToken`.
CHECKPOINT_AUTH = {False: "workload-identity-key", True: "workload-identity-token"}
TOKEN_KEY = "platform.checkpoint.workloadIdentityToken"
# The `platform` keys `from_config` reads, and the PlatformSettings fields they set.
_PLAIN_KEYS = {
    "namespace": "namespace",
    "serviceAccount": "service_account",
    "clusterDomain": "cluster_domain",
    "gpusPerNode": "gpus_per_node",
    "operatorVersion": "operator_version",
}
_PLATFORM_KEYS = {
    *_PLAIN_KEYS,
    "devicePlugin",
    "etcd",
    "spotNoticeHandler",
    "priorityClasses",
    "checkpoint",
    "kubernetesVersion",
    "quota",
    "teams",
    *CLUSTER_KEYS,
}
_CHECKPOINT_FIELDS = {
    "claimName": "claim_name",
    "size": "size",
    "workloadIdentityToken": "workload_identity_token",
    "region": "region",
}
_CHECKPOINT_KEYS = {*_CHECKPOINT_FIELDS, *CLUSTER_CHECKPOINT_KEYS}


@dataclass(frozen=True)
class PriorityClassSpec:
    name: str
    value: int


@dataclass(frozen=True)
class Priorities:
    """preserved (etcd, the training operator, c10d stores) is the highest of ours and
    preempts nobody (Never); inference comes next and preempts lower priorities, i.e. only
    the workers; preemptible (the workers) preempts nobody; borrowed (the workers of a job's
    burst, on capacity other teams own) is the lowest and preempts nobody, so that any work
    that preempts takes borrowed workers first.

    A pod preempts only pods of *lower* priority, so with preserved >= inference nothing that
    hosts a rendezvous or the operator can be preempted by inference (a preempted etcd or
    operator would stop every job's rendezvous), and training never evicts inference."""

    preserved: PriorityClassSpec = PriorityClassSpec("elastic-preserved", 1_000_000)
    inference: PriorityClassSpec = PriorityClassSpec("elastic-inference", 100_000)
    preemptible: PriorityClassSpec = PriorityClassSpec("elastic-preemptible", 1_000)
    borrowed: PriorityClassSpec = PriorityClassSpec("elastic-borrowed", 100)

    ROLES: ClassVar[tuple[str, ...]] = ("preserved", "inference", "preemptible", "borrowed")
    PREEMPTION: ClassVar[dict[str, str]] = {
        "preserved": "Never",
        "inference": "PreemptLowerPriority",
        "preemptible": "Never",
        "borrowed": "Never",
    }

    def items(self) -> list[tuple[str, PriorityClassSpec, str]]:
        return [(role, getattr(self, role), self.PREEMPTION[role]) for role in self.ROLES]


@dataclass(frozen=True)
class CheckpointSettings:
    claim_name: str = "elastic-checkpoints"
    size: str = "100Gi"
    # Mount with the workload identity token (true) or the account key fetched with it
    # (false). None: as the cluster mounts; set, it must agree with the cluster.
    workload_identity_token: bool | None = None
    region: str = ""  # S3 checkpoints: the bucket's region, when not the cluster's


@dataclass(frozen=True)
class PlatformSettings:
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    namespace: str = "training"
    service_account: str = "trainer"
    cluster_domain: str = "cluster.local"
    gpus_per_node: int = 1
    device_plugin: str = "auto"  # auto | true | false
    operator_version: str = OPERATOR_VERSION
    etcd_image: str = ETCD_IMAGE
    etcd_tag: str = ETCD_TAG
    notice_handler: str = "auto"  # auto | true | false
    # The project's image (Dockerfile) as pushed to a registry the nodes pull from; None until one
    # is pushed (the stack's trainerImage): the handler is then not installed, never installed
    # with an image nothing publishes.
    notice_handler_image: str | None = None
    priorities: Priorities = field(default_factory=Priorities)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    quota: GpuQuota = field(default_factory=GpuQuota)
    teams: tuple[TeamSettings, ...] = ()

    etcd_service: str = "etcd-rendezvous"
    rdzv_client_labels: Mapping[str, str] = field(default_factory=lambda: {"elastic-spot-lab/rdzv-client": "true"})

    def __post_init__(self) -> None:
        if problems := self.problems():
            raise InvalidInput(problems)

    def quota_items(self, quota: GpuQuota | None = None) -> list[tuple[str, str, int, str]]:
        """(role, ResourceQuota name, GPUs, PriorityClass) of each quota `quota` sets [the
        platform namespace's]."""
        quota = quota or self.quota
        out = []
        for role, gpus, pc in (
            ("preemptible", quota.gpus, self.priorities.preemptible),
            ("borrowed", quota.borrowed_gpus, self.priorities.borrowed),
        ):
            if gpus is not None:
                out.append((role, f"{pc.name}-gpus", gpus, pc.name))
        return out

    # ------------------------------------------------------------ validation
    def problems(self) -> list[Problem]:
        """Every invalid setting, keys as the stack file writes them (`platform.etcd.tag`)."""
        out = Problems()

        def bad(key: str, value: Any, expected: str) -> None:
            out.add(f"platform.{key}", value, expected)

        if not _K8S_VERSION.match(str(self.kubernetes_version)):
            bad("kubernetesVersion", self.kubernetes_version, "MAJOR.MINOR such as 1.33")
        for key, value in (("namespace", self.namespace), ("serviceAccount", self.service_account)):
            if not isinstance(value, str) or not DNS_LABEL.match(value):
                bad(key, value, "a DNS-1123 label (lower-case letters, digits, '-')")
        if isinstance(self.namespace, str) and (self.namespace.startswith("kube-") or self.namespace == "default"):
            bad("namespace", self.namespace, "a namespace of our own, not default or kube-*")
        if not isinstance(self.cluster_domain, str) or not DNS_SUBDOMAIN.match(self.cluster_domain):
            bad("clusterDomain", self.cluster_domain, "a DNS domain such as cluster.local")
        gpus = self.gpus_per_node
        if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= 16:
            bad("gpusPerNode", gpus, "a whole number in 0..16")
        if self.device_plugin not in ("auto", "true", "false"):
            bad("devicePlugin", self.device_plugin, "auto, true or false")
        if not _OPERATOR_REF.match(str(self.operator_version)):
            bad(
                "operatorVersion",
                self.operator_version,
                "a v1.9.x release tag such as v1.9.4 (v1 is the operator with elastic PyTorchJob; master is "
                "Trainer v2, no elastic)",
            )
        if not _IMAGE_REPO.match(str(self.etcd_image)):
            bad("etcd.image", self.etcd_image, "an image repository such as quay.io/coreos/etcd")
        if not _ETCD_TAG.match(str(self.etcd_tag)):
            bad("etcd.tag", self.etcd_tag, "a v3.5.x tag such as v3.5.20 (etcd 3.6 removed the v2 API torch needs)")
        out.extend(self._notice_handler_problems())
        out.extend(self._priority_problems())
        gpus_per_node = self.gpus_per_node if isinstance(self.gpus_per_node, int) else 1
        out.extend(self.quota.problems(gpus_per_node))
        out.extend(team_problems(self.teams, self.namespace, gpus_per_node))
        out.extend(self._checkpoint_problems())
        return out.items

    def _notice_handler_problems(self) -> list[Problem]:
        out = Problems()
        if self.notice_handler not in ("auto", "true", "false"):
            out.add("platform.spotNoticeHandler.enabled", self.notice_handler, "auto, true or false")
        image = ImageReference.parse(self.notice_handler_image)
        if self.notice_handler_image is None:
            if self.notice_handler == "true":
                out.add(
                    "platform.spotNoticeHandler.image",
                    None,
                    "the trainer image pushed to the stack's registry (elastic-spot-lab:trainerImage, or this key) "
                    "when the handler is enabled",
                )
        elif image is None or not image.pinned:
            out.add(
                "platform.spotNoticeHandler.image",
                self.notice_handler_image,
                "a pinned image that has this project installed (Dockerfile): repository:tag (not latest), "
                "repository@sha256:<digest>, or both as `elastic-lab image` records it",
            )
        elif image.repository == PROJECT_IMAGE:
            out.add(
                "platform.spotNoticeHandler.image",
                self.notice_handler_image,
                f"the trainer image in a registry the nodes pull from: {PROJECT_IMAGE} is the image's name in the "
                "Dockerfile, which nothing publishes (its pods would never start)",
            )
        return out.items

    def _priority_problems(self) -> list[Problem]:
        out = Problems()
        names: set[str] = set()
        values_ok = True
        for role, pc, _ in self.priorities.items():
            if not isinstance(pc.name, str) or not DNS_SUBDOMAIN.match(pc.name) or pc.name.startswith("system-"):
                out.add(f"platform.priorityClasses.{role}.name", pc.name, "a DNS subdomain not starting with system-")
            elif pc.name in names:
                out.add(f"platform.priorityClasses.{role}.name", pc.name, "a name no other class uses")
            else:
                names.add(pc.name)
            if isinstance(pc.value, bool) or not isinstance(pc.value, int) or not -(2**31) <= pc.value <= 1_000_000_000:
                out.add(
                    f"platform.priorityClasses.{role}.value",
                    pc.value,
                    "a whole number <= 1000000000 (higher is reserved for system classes)",
                )
                values_ok = False
        p = self.priorities
        if values_ok and not p.preserved.value >= p.inference.value > p.preemptible.value > p.borrowed.value:
            out.add(
                "platform.priorityClasses",
                {r: pc.value for r, pc, _ in p.items()},
                "values with preserved >= inference > preemptible > borrowed (inference, which preempts, must "
                "never outrank etcd or the operator; it may preempt only the workers, borrowed ones first)",
            )
        return out.items

    def _checkpoint_problems(self) -> list[Problem]:
        out = Problems()
        c = self.checkpoint
        if not DNS_SUBDOMAIN.match(str(c.claim_name)):
            out.add("platform.checkpoint.claimName", c.claim_name, "a DNS subdomain")
        if not _QUANTITY.match(str(c.size)):
            out.add("platform.checkpoint.size", c.size, "a storage quantity such as 100Gi")
        if c.workload_identity_token is not None and not isinstance(c.workload_identity_token, bool):
            out.add(TOKEN_KEY, c.workload_identity_token, "true or false")
        return out.items

    # ------------------------------------------------------------ derived
    def device_plugin_enabled(self, node_image_ships_plugin: bool = False) -> bool:
        if self.device_plugin == "auto":
            return self.gpus_per_node > 0 and not node_image_ships_plugin
        return self.device_plugin == "true"

    def notice_handler_enabled(self, notice_from_scheduled_events: bool) -> bool:
        """Whether the handler is installed: where the cluster needs it (auto) or asked, and only
        with an image (`notice_handler_waits` tells the one case it is left out for)."""
        if self.notice_handler_image is None:
            return False
        if self.notice_handler == "auto":
            return notice_from_scheduled_events
        return self.notice_handler == "true"

    def notice_handler_waits(self, notice_from_scheduled_events: bool) -> bool:
        """The cluster needs the handler, but no trainer image is pushed yet."""
        return self.notice_handler == "auto" and notice_from_scheduled_events and self.notice_handler_image is None

    @property
    def notice_handler_reference(self) -> ImageReference:
        """The spot-notice handler's image in its parts (repository, tag, digest); ValueError
        when there is none or it is no image reference (`problems()` says so first)."""
        image = ImageReference.parse(self.notice_handler_image)
        if image is None:
            raise ValueError(f"spotNoticeHandler.image={self.notice_handler_image!r} is no image reference")
        return image

    @property
    def operator_directory(self) -> str:
        """The standalone overlay of the training operator v1, at a pinned tag."""
        return f"https://github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref={self.operator_version}"

    def facts(self, placement: PoolPlacement, *, writes: CheckpointWrites, eviction_notice_s: int) -> PlatformFacts:
        """What jobs on this platform need to know, on a cluster with these pools, this
        checkpoint storage and this eviction notice."""
        return PlatformFacts(
            namespace=self.namespace,
            service_account=self.service_account,
            etcd_service=self.etcd_service,
            cluster_domain=self.cluster_domain,
            checkpoint_claim=self.checkpoint.claim_name,
            checkpoint_writes=writes,
            worker_priority_class=self.priorities.preemptible.name,
            burst_priority_class=self.priorities.borrowed.name,
            gpu_quota=self.quota.gpus,
            borrowed_gpu_quota=self.quota.borrowed_gpus,
            preserved_priority_class=self.priorities.preserved.name,
            pools=placement,
            gpus_per_node=self.gpus_per_node,
            rdzv_client_labels=dict(self.rdzv_client_labels),
            eviction_notice_s=eviction_notice_s,
            teams={team.name: team.facts() for team in self.teams},
        )

    def cluster_problems(self, identity: TrainingIdentity | None, mount_with_token: bool | None) -> list[Problem]:
        """Where these settings disagree with the cluster: the service account its checkpoint
        storage trusts, and how it mounts checkpoints."""
        out = Problems()
        if identity is not None:
            for key, got, want in (
                ("namespace", self.namespace, identity.namespace),
                ("serviceAccount", self.service_account, identity.service_account),
            ):
                if got != want:
                    out.add(
                        f"platform.{key}",
                        got,
                        f"{want!r}, the one the cluster's workload identity trusts "
                        "(set it on the cluster: trainingNamespace / trainingServiceAccount)",
                    )
        if identity is not None and identity.trust_limit is not None and len(self.teams) > identity.trust_limit:
            out.add(
                "platform.teams",
                sorted(team.name for team in self.teams),
                f"at most {identity.trust_limit} teams: the cluster's checkpoint identity trusts at most "
                f"{identity.trust_limit + 1} service accounts (the platform's and one per team)",
            )
        given = self.checkpoint.workload_identity_token
        if mount_with_token is not None and isinstance(given, bool) and given != mount_with_token:
            mode, other = CHECKPOINT_AUTH[mount_with_token], CHECKPOINT_AUTH[given]
            how = (
                "with the workload identity token"
                if mount_with_token
                else "with the account key it fetches with the identity"
            )
            out.add(
                TOKEN_KEY,
                given,
                f"{str(mount_with_token).lower()}: the cluster's elastic-spot-lab:checkpointAuth={mode!r} "
                f"mounts checkpoints {how}; make the two agree "
                f"(elastic-spot-lab:checkpointAuth: {other} for {str(given).lower()}), "
                f"or leave {TOKEN_KEY} unset to follow the cluster",
            )
        return out.items

    # ------------------------------------------------------------ parsing
    @classmethod
    def from_config(
        cls,
        platform: Mapping[str, Any] | str | None,
        *,
        kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
        identity: TrainingIdentity | None = None,
        mount_with_token: bool | None = None,
        trainer_image: str | None = None,
    ) -> PlatformSettings:
        """From the stack's `platform` config object (a mapping, or its JSON text), for a
        cluster whose storage trusts `identity` and mounts checkpoints with a token or not
        (`mount_with_token`; None when the storage has no such choice). Unset namespace,
        service account and token mode follow the cluster; set, they must agree with it."""
        raw = parse_mapping(platform)
        found = Problems()
        found.extend(unknown_keys("platform.", raw, _PLATFORM_KEYS))
        kw: dict[str, Any] = {
            "kubernetes_version": str(raw.get("kubernetesVersion", kubernetes_version)),
            **_plain_settings(raw, identity),
            **_etcd_settings(found, raw),
            **_notice_handler_settings(found, raw, trainer_image),
            **_priority_settings(found, raw),
            **_quota_settings(found, raw),
            **read_teams(found, raw),
            "checkpoint": _checkpoint_settings(found, raw, mount_with_token),
        }
        try:
            settings = cls(**kw)
        except InvalidInput as exc:
            raise InvalidInput([*found, *exc.problems]) from None
        found.extend(settings.cluster_problems(identity, mount_with_token))
        found.raise_if_any()
        return settings


# Each step of `from_config` reads its part of the `platform` object into PlatformSettings'
# arguments and adds to `found` what it cannot read; the settings check the values themselves.
def _plain_settings(raw: Mapping[str, Any], identity: TrainingIdentity | None) -> dict[str, Any]:
    """The settings of one value each; unset namespace and service account follow the
    identity the cluster's checkpoint storage trusts."""
    kw = {attr: raw[key] for key, attr in _PLAIN_KEYS.items() if key in raw}
    if identity is not None:
        kw.setdefault("namespace", identity.namespace)
        kw.setdefault("service_account", identity.service_account)
    if "devicePlugin" in raw:
        kw["device_plugin"] = _switch(raw["devicePlugin"])
    return kw


def _etcd_settings(found: Problems, raw: Mapping[str, Any]) -> dict[str, Any]:
    """`etcd`: the rendezvous server's image and tag."""
    if (etcd := _section(found, "etcd", raw, {"image", "tag"})) is None:
        return {}
    return {"etcd_image": etcd.get("image", ETCD_IMAGE), "etcd_tag": str(etcd.get("tag", ETCD_TAG))}


def _notice_handler_settings(found: Problems, raw: Mapping[str, Any], trainer_image: str | None) -> dict[str, Any]:
    """`spotNoticeHandler`: whether to install it, and its image (the stack's trainer image unless set)."""
    kw: dict[str, Any] = {"notice_handler_image": trainer_image}
    if (handler := _section(found, "spotNoticeHandler", raw, {"enabled", "image"})) is not None:
        if "enabled" in handler:
            kw["notice_handler"] = _switch(handler["enabled"])
        if "image" in handler:
            kw["notice_handler_image"] = handler["image"]
    return kw


def _priority_settings(found: Problems, raw: Mapping[str, Any]) -> dict[str, Any]:
    """`priorityClasses`: each role's name and value, the defaults where unset."""
    if (pcs := _section(found, "priorityClasses", raw, set(Priorities.ROLES))) is None:
        return {}
    defaults = Priorities()
    roles = {}
    for role in Priorities.ROLES:
        default = getattr(defaults, role)
        given = _section(found, f"priorityClasses.{role}", pcs, {"name", "value"}) or {}
        roles[role] = PriorityClassSpec(given.get("name", default.name), given.get("value", default.value))
    return {"priorities": Priorities(**roles)}


def _quota_settings(found: Problems, raw: Mapping[str, Any]) -> dict[str, Any]:
    """`quota`: the team's GPUs at the workers' class and at the borrowed one."""
    if (quota := _section(found, "quota", raw, {"gpus", "borrowedGpus"})) is None:
        return {}
    return {"quota": GpuQuota(quota.get("gpus"), quota.get("borrowedGpus"))}


def _checkpoint_settings(found: Problems, raw: Mapping[str, Any], mount_with_token: bool | None) -> CheckpointSettings:
    """`checkpoint`, less the keys that describe a bring-your-own cluster's storage; an unset
    token mode follows how the cluster mounts checkpoints."""
    checkpoint = CheckpointSettings()
    if (ck := _section(found, "checkpoint", raw, _CHECKPOINT_KEYS)) is not None:
        checkpoint = CheckpointSettings(**{_CHECKPOINT_FIELDS[k]: v for k, v in ck.items() if k in _CHECKPOINT_FIELDS})
    if checkpoint.workload_identity_token is None and mount_with_token is not None:
        checkpoint = replace(checkpoint, workload_identity_token=mount_with_token)
    return checkpoint


def _switch(value: Any) -> str:
    """auto | true | false, from a YAML boolean or text."""
    return {True: "true", False: "false"}[value] if isinstance(value, bool) else str(value).lower()


def parse_mapping(platform: Mapping[str, Any] | str | None) -> Mapping[str, Any]:
    """The `platform` config object: a mapping, or its JSON text (Pulumi hands structured
    config to programs as JSON)."""
    raw: Any = platform if platform is not None else {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise InvalidInput([Problem("platform", raw, f"a JSON/YAML object ({exc})")]) from None
    if not isinstance(raw, Mapping):
        raise InvalidInput([Problem("platform", raw, "a mapping of platform settings")])
    return raw


def _section(found: Problems, key: str, parent: Mapping[str, Any], allowed: set[str]) -> Mapping[str, Any] | None:
    """`parent[key]` when it is a mapping (its unknown keys reported), else None (reported
    when present)."""
    name = key.rsplit(".", 1)[-1]
    if name not in parent:
        return None
    value = parent[name]
    if not isinstance(value, Mapping):
        found.add(f"platform.{key}", value, "a mapping with " + ", ".join(sorted(allowed)))
        return None
    found.extend(unknown_keys(f"platform.{key}.", value, allowed))
    return value

"""`ByoCluster`: an existing cluster (kind, minikube, on-premises) as a cluster component.

It declares nothing in the cluster: it makes a Kubernetes provider from the kubeconfig path
(handed to the provider, never read here, and kept secret in state and outputs like the
kubeconfig it points to) and hands the platform what the stack says of the cluster's pools
and checkpoint StorageClass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.cluster_info import ClusterInfo, StorageClassCheckpoint
from lab.vocab.names import BYO_CLUSTER_TYPE, DNS_SUBDOMAIN
from lab.vocab.platform_facts import DEFAULT_EVICTION_NOTICE_S
from lab.vocab.pools import PoolPlacement
from lab.vocab.problems import InvalidInput, Problem, Problems

ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod", "ReadOnlyMany")


@dataclass(frozen=True)
class ByoClusterArgs:
    """kubeconfig_path: the cluster's kubeconfig, relative to the project directory.
    placement: the labels and taints the cluster's CPU and GPU spot pools carry.
    storage_class / access_mode: the StorageClass of the checkpoint claim, and its mode.
    eviction_notice_s: how much notice the cluster's spot nodes get (unknown here: the
      shortest of the clouds, Azure's 30 s)."""

    kubeconfig_path: str
    placement: PoolPlacement
    storage_class: str
    access_mode: str = "ReadWriteMany"
    eviction_notice_s: int = DEFAULT_EVICTION_NOTICE_S

    def problems(self) -> list[Problem]:
        out = Problems()
        if not isinstance(self.kubeconfig_path, str) or not self.kubeconfig_path:
            out.add("kubeconfig", self.kubeconfig_path or None, "the path of the cluster's kubeconfig (cloud byo)")
        out.extend(_storage_problems(self.storage_class, self.access_mode))
        return out.items

    @classmethod
    def from_config(cls, kubeconfig: Any, platform: Mapping[str, Any]) -> ByoClusterArgs:
        """From the stack config: `elastic-spot-lab:kubeconfig`, and the byo keys of
        `elastic-spot-lab:platform` (`pools`, `checkpoint.storageClass`, `checkpoint.accessMode`).
        Every problem at once, keys as the stack file writes them."""
        found = Problems()
        if "pools" not in platform:
            found.add("platform.pools", None, "the CPU and GPU spot pools' labels and taints on a byo cluster")
        placement = _placement(platform, found)
        checkpoint = _checkpoint_section(platform)
        args = cls(
            kubeconfig_path=kubeconfig if kubeconfig is not None else "",
            placement=placement or PoolPlacement(),
            storage_class=checkpoint.get("storageClass", ""),
            access_mode=checkpoint.get("accessMode", "ReadWriteMany"),
        )
        found.extend(args.problems())
        found.raise_if_any()
        return args


def described_cluster_problems(platform: Mapping[str, Any]) -> list[Problem]:
    """Problems of the keys of `elastic-spot-lab:platform` that describe a bring-your-own
    cluster (`pools`, `checkpoint.storageClass`, `checkpoint.accessMode`), where they are given
    on a stack of another cloud: they have no effect there, but a bad value is still an error."""
    found = Problems()
    _placement(platform, found)
    checkpoint = _checkpoint_section(platform)
    found.extend(_storage_problems(checkpoint.get("storageClass"), checkpoint.get("accessMode")))
    return found.items


def _placement(platform: Mapping[str, Any], found: Problems) -> PoolPlacement | None:
    """`platform.pools` as a placement, its problems added to `found` (None when absent or bad)."""
    if "pools" not in platform:
        return None
    try:
        return PoolPlacement.from_mapping(platform["pools"])
    except InvalidInput as exc:
        found.absorb(exc, "platform.")
        return None


def _checkpoint_section(platform: Mapping[str, Any]) -> Mapping[str, Any]:
    checkpoint = platform.get("checkpoint")
    return checkpoint if isinstance(checkpoint, Mapping) else {}


def _storage_problems(storage_class: Any, access_mode: Any) -> list[Problem]:
    """Problems of the checkpoint StorageClass and access mode (None: not given)."""
    out = Problems()
    if storage_class is not None and (not isinstance(storage_class, str) or not DNS_SUBDOMAIN.match(storage_class)):
        out.add(
            "platform.checkpoint.storageClass",
            storage_class,
            "the StorageClass of the checkpoint volume on a byo cluster (e.g. standard)",
        )
    if access_mode is not None and access_mode not in ACCESS_MODES:
        out.add("platform.checkpoint.accessMode", access_mode, "one of " + ", ".join(ACCESS_MODES))
    return out.items


class ByoCluster(pulumi.ComponentResource):
    """An existing cluster reached through a kubeconfig file."""

    info: ClusterInfo

    def __init__(self, name: str, args: ByoClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        if problems := args.problems():
            raise InvalidInput(problems, "byo cluster arguments")
        super().__init__(BYO_CLUSTER_TYPE, name, None, opts)
        self.kubeconfig_path = pulumi.Output.secret(args.kubeconfig_path)
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig_path, opts=pulumi.ResourceOptions(parent=self)
        )
        self.info = ClusterInfo(
            provider=self.provider,
            kubeconfig=self.kubeconfig_path,
            placement=args.placement,
            checkpoint=StorageClassCheckpoint(args.storage_class, args.access_mode),
            eviction_notice_s=args.eviction_notice_s,
        )
        self.register_outputs(self.outputs())

    def outputs(self) -> dict[str, pulumi.Input[Any]]:
        return {"kubeconfigPath": self.kubeconfig_path}

"""The platform's place in the Pulumi program (components/program.py lists this module in
its EXTENSIONS, so it is imported before the stack config is read).

Importing it registers the `byo` cluster builder and the platform step with
components.program, and the platform's stack-config keys with components.config:

    elastic-spot-lab:platform     map  platform settings (components/platform/settings.py)
    elastic-spot-lab:kubeconfig   str  byo: path of an existing cluster's kubeconfig

`build_byo_cluster(cfg)` stands in for a cluster component on `cloud: byo` (it only makes a
Kubernetes provider from the kubeconfig path), and `add_platform(stack, cfg)` declares the
TrainingPlatform after the cluster, on any cloud.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import config as config_mod
from components.platform.component import StorageClassCheckpoint, TrainingPlatform
from components.platform.settings import PlatformConfigError, PlatformSettings

config_mod.register_keys(
    config_mod.Key("platform", "map", "training platform settings: namespace, priorityClasses, etcd, checkpoint, pools, ...", "platform"),
    config_mod.Key("kubeconfig", "str", "byo: path of the kubeconfig of an existing cluster (relative to the project)", "byo"),
)

BYO_TYPE = "elastic-spot-lab:byo:Cluster"


class ByoCluster(pulumi.ComponentResource):
    """An existing cluster reached through a kubeconfig file (kind, minikube, on-premises).
    Declares nothing in the cluster; the path is handed to the provider, never read here.
    The path is kept secret (in state and outputs) like the kubeconfig it points to."""

    def __init__(self, name: str, kubeconfig_path: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(BYO_TYPE, name, None, opts)
        self.kubeconfig_path = pulumi.Output.secret(kubeconfig_path)
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig_path, opts=pulumi.ResourceOptions(parent=self)
        )
        self.register_outputs({"kubeconfigPath": self.kubeconfig_path})

    def outputs(self) -> dict[str, Any]:
        return {"kubeconfigPath": self.kubeconfig_path}


def kubernetes_version(cfg: Any) -> str:
    return str(cfg.get("kubernetesVersion", "1.33"))


def _problem(exc: Exception, key: str = "platform") -> config_mod.ConfigError:
    from components.aks.args import Problem

    text = str(exc)
    value: Any = None
    expected = text
    if " is invalid: expected " in text:
        head, expected = text.split(" is invalid: expected ", 1)
        key_part, _, value_part = head.partition("=")
        key = key_part.strip()
        value = value_part
    return config_mod.ConfigError([Problem(config_mod.qualified(key), value, expected)])


def build_byo_cluster(cfg: Any) -> ByoCluster:
    path = cfg.get("kubeconfig")
    if not path:
        raise _problem(ValueError("kubeconfig=None is invalid: expected the path of the cluster's kubeconfig (cloud byo)"), "kubeconfig")
    return ByoCluster("byo", str(path))


def byo_settings(cfg: Any) -> PlatformSettings:
    try:
        return PlatformSettings.from_config(cfg.get("platform", {}), cloud="byo", kubernetes_version=kubernetes_version(cfg))
    except (PlatformConfigError, ValueError) as exc:
        raise _problem(exc) from None


def add_platform(stack: Any, cfg: Any) -> TrainingPlatform:
    """Declare the training platform on `stack.cluster` and add its outputs to the stack."""
    cluster = stack.cluster
    try:
        if cfg.cloud == "byo":
            settings = byo_settings(cfg)
            platform = TrainingPlatform(
                "platform", settings, provider=cluster.provider, checkpoint=StorageClassCheckpoint(),
                opts=pulumi.ResourceOptions(depends_on=[cluster]),
            )
        else:
            from components.platform.from_cluster import (
                checkpoint_from_cluster,
                placement_from_cluster,
                settings_for_cluster,
            )

            info = cluster.info
            settings = settings_for_cluster(cfg.get("platform", {}), info, kubernetes_version=kubernetes_version(cfg))
            platform = TrainingPlatform(
                "platform", settings, provider=info.provider, checkpoint=checkpoint_from_cluster(info),
                pools=placement_from_cluster(info),
                node_image_ships_device_plugin=bool(info.extra.get("node_image_ships_device_plugin", False)),
                opts=pulumi.ResourceOptions(depends_on=[cluster]),
            )
    except (PlatformConfigError, ValueError) as exc:
        if isinstance(exc, config_mod.ConfigError):
            raise
        raise _problem(exc) from None
    stack.components["platform"] = platform
    stack.outputs.update(
        {
            "platformNamespace": platform.namespace,
            "etcdHost": platform.etcd_host,
            "checkpointClaim": platform.checkpoint_claim,
        }
    )
    return platform


def _plug_in() -> None:
    from components import program

    program.CLUSTER_BUILDERS.setdefault("byo", build_byo_cluster)
    if add_platform not in program.AFTER_CLUSTER:
        program.AFTER_CLUSTER.append(add_platform)


_plug_in()

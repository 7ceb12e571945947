"""The platform's place in the Pulumi program (components/program.py lists this module in
its EXTENSIONS, so it is imported before the stack config is read).

Importing it registers the `byo` cluster builder and the platform step with
components.program, and the platform's stack-config keys with components.config:

    elastic-spot-lab:platform     map  platform settings (components/platform/settings.py)
    elastic-spot-lab:kubeconfig   str  byo: path of an existing cluster's kubeconfig

It also registers `validate_platform(cfg)` with components.config.register_validator: the
platform's settings (and, on AKS, their agreement with the cluster's arguments: namespace,
service account, checkpointAuth) are checked inside `config.load()`, before any resource
is declared, and reported with every other config problem (key, value, expected).

`build_byo_cluster(cfg)` stands in for a cluster component on `cloud: byo` (it only makes a
Kubernetes provider from the kubeconfig path), and `add_platform(stack, cfg)` declares the
TrainingPlatform after the cluster, on any cloud.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Iterable

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
    """The stack's Kubernetes version (components.versions.DEFAULT_KUBERNETES_VERSION when unset)."""
    return str(cfg.kubernetes_version)


def _problem(exc: Exception, key: str = "platform") -> config_mod.ConfigError:
    """The stack's ConfigError for a platform error: key, value and expected as the error
    carries them (PlatformConfigError, SchedulingError); any other error under `key`."""
    if all(hasattr(exc, a) for a in ("key", "value", "expected")):
        problem = config_mod.Problem(config_mod.qualified(exc.key), exc.value, exc.expected)  # type: ignore[attr-defined]
    else:
        problem = config_mod.Problem(config_mod.qualified(key), None, str(exc))
    return config_mod.ConfigError([problem])


def _kubeconfig_problem(cfg: Any) -> config_mod.Problem | None:
    path = cfg.get("kubeconfig")
    if path:
        return None
    return config_mod.Problem(config_mod.qualified("kubeconfig"), path, "the path of the cluster's kubeconfig (cloud byo)")


def build_byo_cluster(cfg: Any) -> ByoCluster:
    problem = _kubeconfig_problem(cfg)
    if problem is not None:
        raise config_mod.ConfigError([problem])
    return ByoCluster("byo", str(cfg.get("kubeconfig")))


def _aks_storage(cfg: Any) -> Any | None:
    """What the AKS cluster will hand the platform about identity and mounting (as
    ClusterInfo.storage does), from its validated arguments; None when those are invalid
    (config.load() reports them itself)."""
    from components.platform.from_cluster import CHECKPOINT_AUTH

    try:
        args = cfg.aks_args()
    except config_mod.ConfigError:
        return None
    mount_with_token = {mode: token for token, mode in CHECKPOINT_AUTH.items()}.get(args.checkpoint_auth)
    return SimpleNamespace(namespace=args.training_namespace, service_account=args.training_service_account,
                           mount_with_token=mount_with_token)


def validate_platform(cfg: Any) -> Iterable[config_mod.Problem]:
    """The platform's config problems, before anything is declared (a config validator)."""
    problems: list[config_mod.Problem] = []
    try:
        if cfg.cloud == "byo":
            problem = _kubeconfig_problem(cfg)
            if problem is not None:
                problems.append(problem)
            byo_settings(cfg)
        elif cfg.cloud == "aks":
            from components.platform.from_cluster import settings_for_cluster

            storage = _aks_storage(cfg)
            raw = cfg.get("platform", {})
            if storage is None:
                PlatformSettings.from_config(raw, cloud="aks", kubernetes_version=kubernetes_version(cfg))
            else:  # the same rules add_platform applies to the cluster's facts
                settings_for_cluster(raw, SimpleNamespace(cloud="aks", storage=storage), kubernetes_version=kubernetes_version(cfg))
    except config_mod.ConfigError as exc:
        problems.extend(exc.problems)
    except (PlatformConfigError, ValueError) as exc:
        problems.extend(_problem(exc).problems)
    return problems


def byo_settings(cfg: Any) -> PlatformSettings:
    try:
        return PlatformSettings.from_config(cfg.get("platform", {}), cloud="byo", kubernetes_version=kubernetes_version(cfg))
    except config_mod.ConfigError:
        raise
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
    config_mod.register_validator(validate_platform)


_plug_in()

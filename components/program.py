"""The Pulumi program's body: stack config -> cluster component -> platform -> exports.

`__main__.py` calls `main()`; `elastic-lab plan` runs the same under mocks.

Extending it (the training platform, another cloud):
- list your module in `EXTENSIONS`: it is imported before the config is read, so the
  config keys it registers (components.config.register_keys) are known;
- from that module, add a cluster builder for a cloud (`CLUSTER_BUILDERS["byo"] = fn`,
  `fn(cfg) -> component` exposing `.outputs()` and, for the platform, `.info`), and/or a
  step after the cluster (`AFTER_CLUSTER.append(fn)`, `fn(stack, cfg)`; it adds its
  components to `stack.components` and its exports to `stack.outputs`);
- validate your settings in a config validator (`components.config.register_validator(fn)`,
  `fn(cfg)` returns Problems or raises ConfigError), not in your step: validators run
  inside `config.load()`, before the first resource, so a bad value declares nothing.
  A step should only declare what validated config describes.

Order in `main()`: import EXTENSIONS; `config.load()` (keys, types, the AKS arguments,
`cloud` has a cluster builder, every registered validator: all problems at once as
ConfigError); then declare: the cluster, then each AFTER_CLUSTER step; then export.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

import pulumi

from components import config as config_mod


class UnsupportedCloud(config_mod.ConfigError):
    """`cloud` names a cloud without a cluster component (a config error: exit 2 in plan)."""


@dataclass
class Stack:
    """What `compose()` declared, for exports and for tests."""

    config: config_mod.StackConfig
    cluster: Any = None  # AksCluster (or another cloud's cluster component)
    components: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)


def _build_aks(cfg: config_mod.StackConfig) -> Any:
    from components.aks import AksCluster

    return AksCluster("aks", cfg.aks_args())


# Modules imported before config is read (they register keys, builders and steps).
EXTENSIONS: list[str] = ["components.platform.stack"]
# cloud -> builder of its cluster component.
CLUSTER_BUILDERS: dict[str, Callable[[config_mod.StackConfig], Any]] = {"aks": _build_aks}
# Steps run in order after the cluster, e.g. the training platform:
#   info = stack.cluster.info            # components.cluster_info.ClusterInfo
#   info.provider                        # Kubernetes provider of the new cluster
#   info.pool_labels / info.pool_taints  # keyed by components.labels.POOL_*
#   info.node_resource_group             # AKS node resource group (eviction drill)
#   info.storage                         # account, container, resource_group, client_id, ...
AFTER_CLUSTER: list[Callable[[Stack, config_mod.StackConfig], Any]] = []


def load_extensions() -> None:
    for name in EXTENSIONS:
        importlib.import_module(name)


def _cloud_problem(cloud: str) -> config_mod.Problem | None:
    if cloud in CLUSTER_BUILDERS:
        return None
    have = ", ".join(sorted(CLUSTER_BUILDERS))
    if cloud == "eks":
        why = "; 'eks' is reserved but has no cluster component yet (the EKS stack is a future issue)"
    elif cloud in config_mod.CLOUDS:
        why = f"; {cloud!r} has no cluster builder loaded (is its module in EXTENSIONS?)"
    else:
        why = " (the clouds with a cluster component)"
    return config_mod.Problem(config_mod.qualified("cloud"), cloud, f"one of {have}{why}")


@config_mod.register_validator
def validate_cloud(cfg: config_mod.StackConfig) -> list[config_mod.Problem]:
    """Config validator: `cloud` must have a cluster builder (after EXTENSIONS are loaded)."""
    problem = _cloud_problem(cfg.cloud)
    return [problem] if problem else []


def build_cluster(cfg: config_mod.StackConfig) -> Any:
    problem = _cloud_problem(cfg.cloud)
    if problem is not None:  # config.load() reports it first; this guards direct callers
        raise UnsupportedCloud([problem], cfg.stack)
    return CLUSTER_BUILDERS[cfg.cloud](cfg)


def compose(cfg: config_mod.StackConfig) -> Stack:
    """Declare every component of the stack, in order. Returns what was declared."""
    stack = Stack(config=cfg)
    stack.cluster = build_cluster(cfg)
    stack.components["cluster"] = stack.cluster
    stack.outputs.update(stack.cluster.outputs())
    for step in AFTER_CLUSTER:  # --- the training platform (issue 4) plugs in here
        step(stack, cfg)
    return stack


def main() -> Stack:
    """Entry point of the Pulumi program: validate all config first (keys, values, cloud,
    every registered validator), then declare."""
    load_extensions()
    cfg = config_mod.load()
    stack = compose(cfg)
    for name, value in stack.outputs.items():
        pulumi.export(name, value)
    return stack

"""Typed, validated stack config of the `elastic-spot-lab` Pulumi project.

Everything the program reads from `stacks/Pulumi.<stack>.yaml` goes through `load()`, and
every problem is reported before any resource is declared, in one `InvalidInput` whose
lines each name the key, the bad value and what is expected:

    elastic-spot-lab:gpuVmSize='Standard_D4s_v5' is invalid: expected an NVIDIA GPU VM size ...

Keys live in the `elastic-spot-lab:` namespace, and every key is listed here: a key nobody
reads is an error (a typo such as `gpuMaxNode` would otherwise be silently ignored).

  cloud               which cluster the stack builds: aks, or byo (an existing cluster)
  kubernetesVersion   the cluster's Kubernetes version [DEFAULT_KUBERNETES_VERSION]
  platform            the training platform's settings (components/platform/settings.py)
  kubeconfig          byo: the existing cluster's kubeconfig path
  <AKS keys>          the AksClusterArgs fields' keys (components/aks/args.py)
  <EKS keys>          the EksClusterArgs fields' keys (components/eks/args.py)

A key of another cloud's cluster (`location` on an EKS stack) is an error naming the cloud
it belongs to.

`load()` gives a `StackConfig` holding the arguments of the stack's cluster and the
platform's settings, checked against each other (the namespace and service account the
cluster's storage trusts, the way it mounts checkpoints).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pulumi

from components.aks.args import AksClusterArgs
from components.aks.identity import TEAM_TRUST_LIMIT
from components.byo.cluster import ByoClusterArgs, described_cluster_problems
from components.cluster_info import TrainingIdentity
from components.eks.args import EksClusterArgs
from components.platform.settings import PlatformSettings, parse_mapping
from lab.vocab.names import CLOUDS, PROJECT, ImageReference
from lab.vocab.problems import InvalidInput, Problem, Problems
from lab.vocab.versions import DEFAULT_KUBERNETES_VERSION, PROJECT_IMAGE

# Clouds with a cluster component; the others of CLOUDS are known names without one.
BUILT_CLOUDS = ("aks", "eks", "byo")


@dataclass(frozen=True)
class Key:
    """A config key of our namespace: its name (without the `elastic-spot-lab:` prefix), the
    kind of value, a line of documentation and the part of the stack it configures."""

    name: str
    kind: str
    doc: str
    section: str


COMMON_KEYS: dict[str, Key] = {
    k.name: k
    for k in (
        Key("cloud", "str", "which cluster this stack builds: " + ", ".join(CLOUDS), "common"),
        Key(
            "platform",
            "map",
            "training platform settings: namespace, priorityClasses, etcd, checkpoint, pools, ...",
            "platform",
        ),
        Key("kubernetesVersion", "str", "the cluster's Kubernetes version 1.<minor>", "common"),
        Key(
            "trainerImage",
            "str",
            "the training image pushed to the stack's registry (imageRegistry output), pinned, as `elastic-lab "
            "image` sets it: <registry>/elastic-spot-lab/trainer:<tag>@sha256:<digest>; the spot-notice handler's "
            "image and the jobs' default",
            "common",
        ),
    )
}
# The keys of each cloud's cluster, besides the common ones.
CLOUD_KEYS: dict[str, dict[str, Key]] = {
    "aks": {
        f.metadata["key"]: Key(f.metadata["key"], f.metadata["kind"], f.metadata["doc"], "aks")
        for f in AksClusterArgs.config_fields()
    },
    "eks": {
        f.metadata["key"]: Key(f.metadata["key"], f.metadata["kind"], f.metadata["doc"], "eks")
        for f in EksClusterArgs.config_fields()
    },
    "byo": {
        "kubeconfig": Key(
            "kubeconfig", "str", "byo: path of the kubeconfig of an existing cluster (relative to the project)", "byo"
        )
    },
}
# Every key some stack may set (the documentation's list).
KEYS: dict[str, Key] = {
    **{k: v for cloud in CLOUD_KEYS.values() for k, v in cloud.items()},
    **COMMON_KEYS,
}


def keys_of(cloud: Any) -> dict[str, Key]:
    """The keys a stack of `cloud` may set (all known keys when the cloud is unknown)."""
    return {**CLOUD_KEYS[cloud], **COMMON_KEYS} if cloud in CLOUD_KEYS else KEYS


def qualified(key: str) -> str:
    return key if ":" in key else f"{PROJECT}:{key}"


# --------------------------------------------------------------------------- parsing

_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def parse_value(key: str, kind: str, raw: Any) -> Any:
    """One raw config value (Pulumi hands config over as strings) as `kind`; InvalidInput
    naming the key otherwise."""

    def fail(expected: str) -> InvalidInput:
        return InvalidInput([Problem(qualified(key), raw, expected)])

    if kind == "str":
        if isinstance(raw, (dict, list)):
            raise fail("a string")
        return str(raw)
    if kind == "int":
        text = str(raw).strip()
        if isinstance(raw, bool) or not re.fullmatch(r"[+-]?\d+", text):
            raise fail("a whole number")
        return int(text)
    if kind == "float":
        try:
            if isinstance(raw, bool):
                raise ValueError
            number = float(str(raw).strip())
        except ValueError:
            raise fail("a number") from None
        if not math.isfinite(number):  # no cloud API takes one (and Pulumi cannot serialise it)
            raise fail("a finite number")
        return number
    if kind == "bool":
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise fail("true or false")
    if kind in ("map", "list"):
        value = raw
        if isinstance(raw, str):
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                shape = "mapping" if kind == "map" else "list"
                raise fail(f"a {shape} (YAML in the stack file, JSON on the command line)") from None
        if kind == "map" and not isinstance(value, dict):
            raise fail("a mapping")
        if kind == "list" and not isinstance(value, list):
            raise fail("a list")
        return value
    raise ValueError(f"unknown kind {kind!r}")


def pulumi_config_values() -> dict[str, Any]:
    """All config the Pulumi runtime holds (engine-provided or set in-process), by full key."""
    from pulumi.runtime import config as runtime_config

    values = dict(runtime_config.get_config_env())
    values.update(runtime_config.CONFIG.get())
    return values


def default_name(stack: str) -> str:
    """`esl-<stack>`, cut down to letters, digits and '-' (a valid cluster / group name)."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", stack.lower()).strip("-") or "stack"
    return f"esl-{cleaned}"[:40].rstrip("-")


# --------------------------------------------------------------------------- the stack


@dataclass(frozen=True)
class StackConfig:
    """The validated config of one stack: the arguments of its cluster (their type is the
    stack's cloud) and the platform's settings."""

    stack: str
    cloud: str
    kubernetes_version: str
    cluster: AksClusterArgs | EksClusterArgs | ByoClusterArgs
    platform: PlatformSettings


def aks_args(values: Mapping[str, Any], stack: str) -> AksClusterArgs:
    """`AksClusterArgs` from our namespace's values (short keys): stack-derived defaults, then
    the stack's values; every problem at once, named by config key, not field name."""
    base = default_name(stack)
    args: AksClusterArgs = _cluster_args(
        AksClusterArgs,
        AksClusterArgs.config_fields(),
        values,
        required={"location": "an Azure region name such as eastus (required for cloud aks)"},
        defaults={"location": "eastus", "cluster_name": base, "resource_group_name": f"{base}-rg"},
    )
    return args


def eks_args(values: Mapping[str, Any], stack: str) -> EksClusterArgs:
    """`EksClusterArgs` from our namespace's values, like `aks_args`."""
    args: EksClusterArgs = _cluster_args(
        EksClusterArgs,
        EksClusterArgs.config_fields(),
        values,
        required={"region": "an AWS region code such as us-east-1 (required for cloud eks)"},
        defaults={"region": "us-east-1", "cluster_name": default_name(stack)},
    )
    return args


def _cluster_args(
    cls: Any, fields: list[Any], values: Mapping[str, Any], *, required: dict[str, str], defaults: dict[str, Any]
) -> Any:
    """A cluster's args from config values: each value parsed by its field's kind, required
    fields reported when missing (then set to a placeholder so the others still get
    checked), stack-derived defaults, and the args' own problems named by config key."""
    found = Problems()
    kwargs: dict[str, Any] = {}
    unparsed: set[str] = set()
    by_field = {f.name: f for f in fields}
    for name, f in by_field.items():
        key = f.metadata["key"]
        if key in values:
            try:
                kwargs[name] = parse_value(key, f.metadata["kind"], values[key])
            except InvalidInput as exc:
                found.extend(exc.problems)
                unparsed.add(name)
    for name, expected in required.items():
        if name not in kwargs and name not in unparsed:
            found.add(qualified(by_field[name].metadata["key"]), None, expected)
    for name, value in defaults.items():
        kwargs.setdefault(name, value)
    args = cls(**kwargs)
    # Values that did not parse were left at their defaults; each is reported once.
    found.extend(_as_config_key(p, by_field) for p in args.problems() if p.key not in unparsed)
    found.raise_if_any()
    return args


def _as_config_key(problem: Problem, by_field: dict[str, Any]) -> Problem:
    """An args problem in the words of the stack file: field names become config keys."""
    expected = problem.expected
    for name, f in by_field.items():
        expected = re.sub(rf"\b{name}\b", f.metadata["key"], expected)
    # `tags['x']` names one entry of a field: keep the entry after the config key.
    field_name, bracket, entry = problem.key.partition("[")
    return Problem(qualified(by_field[field_name].metadata["key"]) + bracket + entry, problem.value, expected)


def _unknown_keys(ours: Mapping[str, Any], cloud: Any) -> list[Problem]:
    allowed = keys_of(cloud)
    out = []
    for key in sorted(set(ours) - set(allowed)):
        owners = [c for c, keys in CLOUD_KEYS.items() if key in keys]
        if owners:
            out.append(
                Problem(
                    qualified(key),
                    ours[key],
                    f"a key of cloud {cloud} ({key!r} belongs to cloud {' and '.join(owners)}); "
                    f"known: {', '.join(sorted(allowed))}",
                )
            )
            continue
        close = difflib.get_close_matches(key, list(allowed), n=1)
        hint = f"did you mean {qualified(close[0])!r}? " if close else ""
        out.append(Problem(qualified(key), ours[key], f"a known key ({hint}known: {', '.join(sorted(allowed))})"))
    return out


def _cloud_problem(cloud: Any) -> Problem | None:
    if cloud in BUILT_CLOUDS:
        return None
    if cloud is None:
        return Problem(qualified("cloud"), None, "one of " + ", ".join(CLOUDS) + " (which cluster this stack builds)")
    if cloud in CLOUDS:
        built = ", ".join(BUILT_CLOUDS)
        return Problem(
            qualified("cloud"), cloud, f"one of {built}; {cloud!r} is reserved but has no cluster component yet"
        )
    return Problem(qualified("cloud"), cloud, "one of " + ", ".join(CLOUDS))


def _platform_problems(
    problems: list[Problem], raw_platform: Mapping[str, Any], found: Problems, prefix: str
) -> list[Problem]:
    """The platform's problems under the stack's keys. The Kubernetes version it was handed
    (the stack's own `kubernetesVersion`, where `platform` sets none) is that key's, said once:
    the cluster's check may have said it already."""
    out = []
    for problem in problems:
        if problem.key == "platform.kubernetesVersion" and "kubernetesVersion" not in raw_platform:
            problem = Problem("kubernetesVersion", problem.value, problem.expected)
            if any(p.key == f"{prefix}kubernetesVersion" for p in found):
                continue
        out.append(problem.under(prefix))
    return out


def load(values: Mapping[str, Any] | None = None, *, stack: str | None = None) -> StackConfig:
    """Read and check our namespace of config: every problem at once, before anything else.

    values: full keys (`elastic-spot-lab:cloud`) to raw values; default: the Pulumi runtime's.
    stack: stack name; default: `pulumi.get_stack()`.
    """
    if values is None:
        values = pulumi_config_values()
    if stack is None:
        stack = pulumi.get_stack()
    prefix = PROJECT + ":"
    ours = {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}
    found = Problems()
    cloud = ours.get("cloud")
    found.extend(_unknown_keys(ours, cloud))
    if (problem := _cloud_problem(cloud)) is not None:
        found.extend([problem])

    def parsed(key: str, default: Any) -> Any:
        if key not in ours:
            return default
        try:
            return parse_value(key, KEYS[key].kind, ours[key])
        except InvalidInput as exc:
            found.extend(exc.problems)
            return default

    version = str(parsed("kubernetesVersion", DEFAULT_KUBERNETES_VERSION))
    trainer_image = _trainer_image(parsed("trainerImage", None), found, prefix)
    raw_platform = _raw_platform(parsed("platform", {}), found, prefix)
    cluster, identity, mount_with_token = _cloud_cluster(cloud, ours, stack, raw_platform, parsed, found)
    platform: PlatformSettings | None = None
    try:  # on a cloud without a cluster component too: every problem in one run
        platform = PlatformSettings.from_config(
            raw_platform,
            kubernetes_version=version,
            identity=identity,
            mount_with_token=mount_with_token,
            trainer_image=trainer_image,
        )
    except InvalidInput as exc:
        found.extend(_platform_problems(exc.problems, raw_platform, found, prefix))
    if found or cluster is None or platform is None:  # a built cloud without problems has both
        raise InvalidInput(found.items, f"stack config in stack {stack!r}")
    return StackConfig(stack=stack, cloud=str(cloud), kubernetes_version=version, cluster=cluster, platform=platform)


def _trainer_image(trainer_image: Any, found: Problems, prefix: str) -> Any:
    """The trainerImage a platform may run: pinned, and not the Dockerfile's own name (None,
    and a problem, otherwise). The same rule as the spot-notice handler's image
    (components/platform/settings.py), which this is unless that is set: what one accepts, the
    other does."""
    pinned = ImageReference.parse(trainer_image)
    if trainer_image is not None and (pinned is None or not pinned.pinned):
        found.add(
            f"{prefix}trainerImage",
            trainer_image,
            "a pinned container image reference (lower-case path): <registry>/<path>:<tag>@sha256:<digest> as "
            "`elastic-lab image` records it, or by its tag (not latest) or its digest alone",
        )
        return None
    if pinned is not None and pinned.repository == PROJECT_IMAGE:
        found.add(
            f"{prefix}trainerImage",
            trainer_image,
            f"the trainer image in the stack's registry (imageRegistry output): {PROJECT_IMAGE} is the image's name "
            "in the Dockerfile, which nothing publishes",
        )
        return None
    return trainer_image


def _raw_platform(value: Any, found: Problems, prefix: str) -> Mapping[str, Any]:
    """The `platform` mapping as given (empty, and its problems, where it is no mapping)."""
    try:
        return parse_mapping(value)
    except InvalidInput as exc:
        found.extend(p.under(prefix) for p in exc.problems)
        return {}


def _cloud_cluster(
    cloud: Any,
    ours: Mapping[str, Any],
    stack: str,
    raw_platform: Mapping[str, Any],
    parsed: Callable[[str, Any], Any],
    found: Problems,
) -> tuple[AksClusterArgs | EksClusterArgs | ByoClusterArgs | None, TrainingIdentity | None, bool | None]:
    """The cloud's cluster args, and on AKS the training identity and how checkpoints are
    mounted (None where the cloud has none or its args have problems)."""
    prefix = PROJECT + ":"
    cluster: AksClusterArgs | EksClusterArgs | ByoClusterArgs | None = None
    identity: TrainingIdentity | None = None
    mount_with_token: bool | None = None
    match cloud:
        case "aks":
            try:
                cluster = aks_args(ours, stack)
                identity = TrainingIdentity(
                    cluster.training_namespace, cluster.training_service_account, trust_limit=TEAM_TRUST_LIMIT
                )
                mount_with_token = cluster.mounts_checkpoints_with_token
            except InvalidInput as exc:
                found.extend(exc.problems)
            found.extend(p.under(prefix) for p in described_cluster_problems(raw_platform))
        case "eks":
            try:
                cluster = eks_args(ours, stack)
            except InvalidInput as exc:
                found.extend(exc.problems)
            found.extend(p.under(prefix) for p in described_cluster_problems(raw_platform))
        case "byo":
            try:
                cluster = ByoClusterArgs.from_config(parsed("kubeconfig", None), raw_platform)
            except InvalidInput as exc:
                found.extend(p.under(prefix) for p in exc.problems)
    return cluster, identity, mount_with_token

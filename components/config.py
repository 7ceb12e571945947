"""Typed, validated stack config for the `elastic-spot-lab` Pulumi project.

Everything the program reads from `stacks/Pulumi.<stack>.yaml` goes through here, and every
problem is reported before any resource is declared, as `ConfigError` whose lines each name
the key, the bad value and what is expected:

    elastic-spot-lab:gpuVmSize='Standard_D4s_v5' is invalid: expected an NVIDIA GPU VM size ...

Keys live in the `elastic-spot-lab:` namespace. `elastic-spot-lab:cloud` picks the cluster:
`aks`, or `byo` (builder registered by the platform); `eks` is reserved and rejected by the
program until an EKS cluster component exists. Keys nobody registered are errors (a typo
such as `gpuMaxNode` would otherwise be silently ignored). Another component that reads its own
keys registers them at import time:

    from components import config
    config.register_keys(config.Key("platformEtcdReplicas", "int", "etcd replicas"), ...)

and reads them with `StackConfig.get(...)`.

A component whose settings need more than a type check (the training platform's
`elastic-spot-lab:platform` map, say) registers a validator, also at import time:

    def validate_platform(cfg: config.StackConfig) -> Iterable[config.Problem] | None:
        ...  # return (or yield) Problems, or raise config.ConfigError; never declare resources

    config.register_validator(validate_platform)

`load()` runs every registered validator (in registration order) on the parsed config,
after the key and cloud checks and before returning; their problems are reported in the
same ConfigError as every other bad value. Since the program calls `load()` before it
declares anything (components/program.py), a validator's error leaves nothing declared.
Validators run only when `cloud` is one of CLOUDS. Any other exception a validator raises
is a bug and propagates as is.

`DEFAULT_KUBERNETES_VERSION` (components/versions.py) is the Kubernetes version of a stack
that sets none; `StackConfig.kubernetes_version` gives the stack's version or that one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from components.aks.args import AksClusterArgs, Problem, config_fields
from components.versions import DEFAULT_KUBERNETES_VERSION

__all__ = [
    "CLOUDS", "DEFAULT_KUBERNETES_VERSION", "PROJECT", "ConfigError", "Key", "Problem", "StackConfig",
    "known_keys", "load", "qualified", "register_keys", "register_validator", "unregister_validator", "validators",
]

PROJECT = "elastic-spot-lab"
CLOUDS = ("aks", "eks", "byo")
KINDS = ("str", "int", "float", "bool", "map", "list")


@dataclass(frozen=True)
class Key:
    """A config key of our namespace: its name (without the `elastic-spot-lab:` prefix),
    the kind of value, and a line of documentation."""

    name: str
    kind: str = "str"
    doc: str = ""
    section: str = "common"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"config key kind {self.kind!r} is invalid: expected one of {', '.join(KINDS)}")


class ConfigError(ValueError):
    """Stack config is invalid. `problems` lists (key, value, expected), keys fully qualified."""

    def __init__(self, problems: list[Problem], stack: str | None = None):
        self.problems = list(problems)
        self.stack = stack
        where = f" in stack {stack!r}" if stack else ""
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid stack config{where} ({len(self.problems)} problem(s)):\n{lines}")


def qualified(key: str) -> str:
    return key if ":" in key else f"{PROJECT}:{key}"


_KEYS: dict[str, Key] = {}


def register_keys(*keys: Key) -> None:
    """Declare config keys read by a component; re-registering the same key is a no-op."""
    for k in keys:
        old = _KEYS.get(k.name)
        if old is not None and old != k:
            raise ValueError(f"config key {k.name!r} registered twice with different definitions: {old} vs {k}")
        _KEYS[k.name] = k


def known_keys() -> dict[str, Key]:
    return dict(_KEYS)


# --------------------------------------------------------------------------- validators

Validator = Callable[["StackConfig"], "Iterable[Problem] | None"]
_VALIDATORS: list[Validator] = []


def register_validator(fn: Validator) -> Validator:
    """Run `fn(cfg)` in every `load()`, before any resource is declared (see the module doc).

    `fn` returns or yields `Problem`s (field = the key, short or full; value; expected), or
    raises ConfigError. Registering the same function again is a no-op. Usable as a
    decorator; returns `fn`."""
    if not callable(fn):
        raise TypeError(f"config validator {fn!r} is not callable")
    if fn not in _VALIDATORS:
        _VALIDATORS.append(fn)
    return fn


def unregister_validator(fn: Validator) -> None:
    """Remove a validator registered with `register_validator` (no-op if absent)."""
    if fn in _VALIDATORS:
        _VALIDATORS.remove(fn)


def validators() -> list[Validator]:
    return list(_VALIDATORS)


def _run_validators(cfg: "StackConfig") -> list[Problem]:
    problems: list[Problem] = []
    for fn in list(_VALIDATORS):
        try:
            found = fn(cfg)
            found = list(found) if found is not None else []
        except ConfigError as exc:
            found = list(exc.problems)
        for p in found:
            if not isinstance(p, Problem):
                raise TypeError(f"config validator {fn!r} returned {p!r}: expected components.config.Problem items")
            problems.append(Problem(qualified(p.field), p.value, p.expected))
    return problems


register_keys(Key("cloud", "str", "which cluster this stack builds: " + ", ".join(CLOUDS)))
register_keys(*(Key(f.metadata["key"], f.metadata["kind"], f.metadata["doc"], "aks") for f in config_fields()))


# --------------------------------------------------------------------------- parsing

_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def parse_value(key: str, kind: str, raw: Any) -> Any:
    """Parse one raw config value (Pulumi hands config over as strings) into `kind`.
    Raises ConfigError naming the key."""
    qkey = qualified(key)

    def fail(expected: str) -> ConfigError:
        return ConfigError([Problem(qkey, raw, expected)])

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
            return float(str(raw).strip())
        except ValueError:
            raise fail("a number") from None
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
                raise fail(f"a {'mapping' if kind == 'map' else 'list'} (YAML in the stack file, JSON on the command line)") from None
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


@dataclass(frozen=True)
class StackConfig:
    """The validated config of one stack. `values` holds our namespace's raw values by short key."""

    stack: str
    cloud: str
    values: Mapping[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        """A registered key's parsed value, or `default` when unset."""
        if key not in _KEYS:
            raise KeyError(f"config key {qualified(key)!r} is not registered (see components.config.register_keys)")
        if key not in self.values:
            return default
        return parse_value(key, _KEYS[key].kind, self.values[key])

    @property
    def kubernetes_version(self) -> str:
        """The stack's `kubernetesVersion`, or DEFAULT_KUBERNETES_VERSION when unset."""
        return str(self.get("kubernetesVersion", DEFAULT_KUBERNETES_VERSION))

    def aks_args(self) -> AksClusterArgs:
        """`AksClusterArgs` from this config: stack-derived defaults, then the stack's values;
        all problems reported at once as ConfigError (keys, not field names)."""
        problems: list[Problem] = []
        kwargs: dict[str, Any] = {}
        unparsed: set[str] = set()
        by_field = {f.name: f for f in config_fields()}
        for name, f in by_field.items():
            key = f.metadata["key"]
            if key in self.values:
                try:
                    kwargs[name] = parse_value(key, f.metadata["kind"], self.values[key])
                except ConfigError as exc:
                    problems.extend(exc.problems)
                    unparsed.add(name)
        if "location" not in kwargs and "location" not in unparsed:
            problems.append(Problem(qualified("location"), None, "an Azure region name such as eastus (required for cloud aks)"))
        base = default_name(self.stack)
        kwargs.setdefault("location", "eastus")  # placeholder so the other values still get checked
        kwargs.setdefault("cluster_name", base)
        kwargs.setdefault("resource_group_name", f"{base}-rg")
        args = AksClusterArgs(**kwargs)
        # Values that did not parse were left at their defaults; report them once.
        problems.extend(_to_key(p, by_field) for p in args.problems() if p.field not in unparsed)
        if problems:
            raise ConfigError(problems, self.stack)
        return args


def _to_key(problem: Problem, by_field: dict[str, Any]) -> Problem:
    """An args problem in the words of the stack file: field names become config keys."""
    expected = problem.expected
    for name, f in by_field.items():
        expected = re.sub(rf"\b{name}\b", f.metadata["key"], expected)
    return Problem(qualified(by_field[problem.field].metadata["key"]), problem.value, expected)


def default_name(stack: str) -> str:
    """`esl-<stack>`, cut down to letters, digits and '-' (a valid cluster / group name)."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", stack.lower()).strip("-") or "stack"
    return f"esl-{cleaned}"[:40].rstrip("-")


def load(values: Mapping[str, Any] | None = None, *, stack: str | None = None) -> StackConfig:
    """Read and check our namespace of config.

    values: full keys (`elastic-spot-lab:cloud`) to raw values; default: the Pulumi runtime's.
    stack: stack name; default: `pulumi.get_stack()`.
    """
    if values is None:
        values = pulumi_config_values()
    if stack is None:
        import pulumi

        stack = pulumi.get_stack()
    prefix = PROJECT + ":"
    ours = {k[len(prefix):]: v for k, v in values.items() if k.startswith(prefix)}
    problems: list[Problem] = []
    for key in sorted(set(ours) - set(_KEYS)):
        import difflib

        close = difflib.get_close_matches(key, list(_KEYS), n=1)
        hint = f"did you mean {qualified(close[0])!r}? " if close else ""
        problems.append(
            Problem(qualified(key), ours[key], f"a known key ({hint}known: {', '.join(sorted(_KEYS))}; "
                    "components register new keys with components.config.register_keys)")
        )
    cloud = ours.get("cloud")
    if cloud is None:
        problems.append(Problem(qualified("cloud"), None, "one of " + ", ".join(CLOUDS) + " (which cluster this stack builds)"))
    elif cloud not in CLOUDS:
        problems.append(Problem(qualified("cloud"), cloud, "one of " + ", ".join(CLOUDS)))
    cfg = StackConfig(stack=stack, cloud=str(cloud), values=ours)
    if cfg.cloud == "aks":
        try:
            cfg.aks_args()  # validate now: every error before any resource
        except ConfigError as exc:
            problems.extend(exc.problems)
    if cfg.cloud in CLOUDS:
        problems.extend(_run_validators(cfg))  # extensions' own settings, before any resource
    if problems:
        unique = list({str(p): p for p in problems}.values())  # a validator may repeat one
        raise ConfigError(unique, stack)
    return cfg

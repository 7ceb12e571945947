"""ARM conformance: recorded azure-native inputs, mapped to the ARM request body, checked
against Azure's own API models (the `azure-mgmt-containerservice` / `azure-mgmt-storage`
Python SDKs, generated from the Azure REST API specs).

How a resource is checked (generic over the model, nothing hand-listed per property):
1. `TARGETS` maps a Pulumi type token to the SDK model of its PUT body and the inputs that
   are URL path parameters (resource group, names), which are not part of the body.
2. Pulumi flattens ARM's `properties` envelope (x-ms-client-flatten): an input that is
   not a writable field of the body model but is one of its `properties` model is put back
   under `properties`. azure-native also takes `identity.userAssignedIdentities` as a list
   of ids where ARM wants a map id -> {}; that is converted back.
3. Every property of the resulting body is walked against the model's fields (their REST
   names, type hints, visibility): unknown property names (with a "did you mean"), values
   of the wrong JSON type, enum values that are not among the model's known values,
   read-only properties in a request, and missing required properties.

API versions: Pulumi sends the API version its SDK was generated for (recorded per finding
in `api_versions()`); the installed azure-mgmt SDKs carry one, usually newer, API version.
Stable ARM API versions add properties and enum values rather than remove them, so a
property Azure rejects for being unknown in the newer API is also unknown in the older one.
"""

from __future__ import annotations

import difflib
import enum
import functools
import inspect
import re
import sys
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from importlib.metadata import version
from types import ModuleType
from typing import Any

from azure.mgmt.containerservice import _configuration as containerservice_configuration
from azure.mgmt.containerservice import models as containerservice_models
from azure.mgmt.containerservice import operations as containerservice_operations
from azure.mgmt.storage import _configuration as storage_configuration
from azure.mgmt.storage import models as storage_models
from azure.mgmt.storage import operations as storage_operations
from pulumi_azure_native import containerservice as pulumi_containerservice
from pulumi_azure_native import storage as pulumi_storage

from lab.plan.findings import Finding

CHECK = "arm-conformance"
CHECKED_PREFIXES = ("azure-native:containerservice", "azure-native:storage")


@dataclass(frozen=True)
class AzureSdk:
    """An azure-mgmt SDK package: its distribution name and the modules the check reads."""

    distribution: str
    models: ModuleType
    operations: ModuleType
    configuration: ModuleType


SDKS = {
    "containerservice": AzureSdk(
        "azure-mgmt-containerservice",
        containerservice_models,
        containerservice_operations,
        containerservice_configuration,
    ),
    "storage": AzureSdk("azure-mgmt-storage", storage_models, storage_operations, storage_configuration),
}


@dataclass(frozen=True)
class ArmTarget:
    """Where a Pulumi resource's inputs go in ARM: SDK package, body model, path parameters."""

    sdk: str  # a key of SDKS
    model: str  # model class name of the PUT body
    path_params: tuple[str, ...]  # Pulumi inputs that are URL path parameters (wire names)
    operation: tuple[str, str]  # (operations class, method) of the PUT, for cross-checks
    pulumi_resource: type  # the azure-native resource class


TARGETS: dict[str, ArmTarget] = {
    "azure-native:containerservice:ManagedCluster": ArmTarget(
        "containerservice",
        "ManagedCluster",
        ("resourceGroupName", "resourceName"),
        ("ManagedClustersOperations", "begin_create_or_update"),
        pulumi_containerservice.ManagedCluster,
    ),
    "azure-native:containerservice:AgentPool": ArmTarget(
        "containerservice",
        "AgentPool",
        ("resourceGroupName", "resourceName", "agentPoolName"),
        ("AgentPoolsOperations", "begin_create_or_update"),
        pulumi_containerservice.AgentPool,
    ),
    "azure-native:storage:StorageAccount": ArmTarget(
        "storage",
        "StorageAccountCreateParameters",
        ("resourceGroupName", "accountName"),
        ("StorageAccountsOperations", "begin_create"),
        pulumi_storage.StorageAccount,
    ),
    "azure-native:storage:BlobContainer": ArmTarget(
        "storage",
        "BlobContainer",
        ("resourceGroupName", "accountName", "containerName"),
        ("BlobContainersOperations", "create"),
        pulumi_storage.BlobContainer,
    ),
}


# --------------------------------------------------------------------------- SDK model access


def sdk_models(sdk: str) -> ModuleType:
    return SDKS[sdk].models


def sdk_operation(target: ArmTarget) -> Any:
    return getattr(getattr(SDKS[target.sdk].operations, target.operation[0]), target.operation[1])


@functools.cache
def sdk_api_version(sdk: str) -> str:
    """The API version an azure-mgmt SDK package targets (its client's default)."""
    m = re.search(r'kwargs\.pop\("api_version", "([^"]+)"\)', inspect.getsource(SDKS[sdk].configuration))
    return m.group(1) if m else "unknown"


@functools.cache
def sdk_package_version(sdk: str) -> str:
    return version(SDKS[sdk].distribution)


@functools.cache
def pulumi_api_version(type_token: str) -> str:
    """The API version pulumi-azure-native sends for a resource type ("Uses Azure REST API version X")."""
    try:
        doc = inspect.getsource(TARGETS[type_token].pulumi_resource)
    except (KeyError, OSError, TypeError):
        return "unknown"
    m = re.search(r"Uses Azure REST API version ([0-9a-z-]+)", doc)
    return m.group(1) if m else "unknown"


def api_versions() -> dict[str, dict[str, str]]:
    """For each mapped type: the API version Pulumi sends and the one the models describe."""
    return {
        token: {
            "pulumi": pulumi_api_version(token),
            "models": f"{sdk_api_version(t.sdk)} ({SDKS[t.sdk].distribution} {sdk_package_version(t.sdk)})",
            "model": t.model,
        }
        for token, t in TARGETS.items()
    }


@dataclass(frozen=True)
class FieldSpec:
    rest: str
    hint: Any  # type hint with Optional removed
    required: bool
    writable: bool
    attr: str = ""  # the SDK's Python name (snake_case of the spec's x-ms-client-name)


def snake(name: str) -> str:
    """camelCase -> snake_case the way both SDK generators do it (enableHttpsTrafficOnly ->
    enable_https_traffic_only, enableRBAC -> enable_rbac)."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


def _lookup(fields: dict[str, FieldSpec], key: str) -> FieldSpec | None:
    """A field by REST name, else by client name: Pulumi names a property after its
    x-ms-client-name where the spec has one (enableHttpsTrafficOnly is ARM's
    supportsHttpsTrafficOnly), and the provider sends the REST name."""
    if key in fields:
        return fields[key]
    wanted = snake(key)
    return next(
        (
            f
            for f in fields.values()
            # a client-name alias, not the REST name in the wrong case (blobCsiDriver is no blobCSIDriver)
            if f.attr == wanted and f.rest != "properties" and f.rest.lower() != key.lower()
        ),
        None,
    )


def _is_model(hint: Any) -> bool:
    return (isinstance(hint, type) and hasattr(hint, "_attr_to_rest_field")) or (
        isinstance(hint, type) and any(c.__name__ == "Model" and "model_base" in c.__module__ for c in hint.__mro__)
    )


@functools.cache
def fields_of(cls: type) -> dict[str, FieldSpec]:
    """REST name -> FieldSpec for an azure-mgmt model class (typespec `rest_field`s)."""
    module = sys.modules[cls.__module__]
    models_pkg = sys.modules[cls.__module__.rsplit(".", 1)[0]]
    hints = typing.get_type_hints(cls, globalns=vars(module), localns={"_models": models_pkg})
    out: dict[str, FieldSpec] = {}
    for klass in reversed(cls.__mro__):
        for attr, rf in vars(klass).items():
            if attr.startswith("_") or not hasattr(rf, "_rest_name_input") or not hasattr(rf, "_visibility"):
                continue
            rest = rf._rest_name_input or attr
            hint = hints.get(attr, Any)
            optional = False
            if typing.get_origin(hint) is typing.Union and type(None) in typing.get_args(hint):
                optional = True
                rest_args = tuple(a for a in typing.get_args(hint) if a is not type(None))
                hint = rest_args[0] if len(rest_args) == 1 else typing.Union[rest_args]  # type: ignore[valid-type]  # noqa: UP007 - built from a tuple
            vis = rf._visibility
            writable = vis is None or "create" in vis or "update" in vis
            out[rest] = FieldSpec(rest, hint, required=not optional and writable, writable=writable, attr=attr)
    return out


def _discriminated(cls: type, value: dict) -> type:
    mapping = getattr(cls, "__mapping__", None)
    if not mapping:
        return cls
    for spec_attr, rf in vars(cls).items():
        if getattr(rf, "_is_discriminator", False):
            key = rf._rest_name_input or spec_attr
            if key in value and value[key] in mapping:
                return mapping[value[key]]
    return cls


# --------------------------------------------------------------------------- validation


@dataclass
class Issue:
    path: str
    value: Any
    expected: str
    severity: str = "error"


class _Walker:
    def __init__(self, sdk: str):
        self.sdk = sdk
        self.issues: list[Issue] = []

    def bad(self, path: str, value: Any, expected: str, severity: str = "error") -> None:
        self.issues.append(Issue(path, value, expected, severity))

    # Returns the value in ARM shape (flattened properties re-nested).
    def value(self, value: Any, hint: Any, path: str) -> Any:
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if hint is Any or hint is object:
            return value
        if origin is typing.Union:
            enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
            if enums and all(a is str or a in enums for a in args):
                return self.enum(value, enums[0], path)
            if str in args and not isinstance(value, (dict, list)):
                return self.value(value, str, path)
            for candidate in args:  # a union of shapes: the first that fits
                probe = _Walker(self.sdk)
                shaped = probe.value(value, candidate, path)
                if not probe.issues:
                    return shaped
            return self.value(value, args[0], path)
        if origin is typing.Literal:
            if value not in args:
                self.bad(path, value, "one of " + ", ".join(repr(a) for a in args))
            return value
        if origin in (list, list, tuple, frozenset, set) or (
            origin is not None and origin.__name__ in ("Sequence", "MutableSequence")
        ):
            if not isinstance(value, list):
                self.bad(path, value, f"an array ({_hint_name(hint)})")
                return value
            item = args[0] if args else Any
            return [self.value(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
        if origin in (dict, dict) or (origin is not None and origin.__name__ in ("Mapping", "MutableMapping")):
            if not isinstance(value, dict):
                self.bad(path, value, f"an object ({_hint_name(hint)})")
                return value
            item = args[1] if len(args) == 2 else Any
            return {k: self.value(v, item, f"{path}.{k}") for k, v in value.items()}
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return self.enum(value, hint, path)
        if _is_model(hint):
            return self.model(value, hint, path)
        if hint is bool:
            if not isinstance(value, bool):
                self.bad(path, value, "a boolean")
        elif hint is int:
            if isinstance(value, bool) or not isinstance(value, int):
                self.bad(path, value, "an integer")
        elif hint is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.bad(path, value, "a number")
        elif hint is str:
            if not isinstance(value, str):
                self.bad(path, value, "a string")
        elif hint in (datetime, date, time, timedelta, bytes, bytearray) and not isinstance(value, str):
            self.bad(path, value, f"a string ({hint.__name__} in ISO / base64 form)")
        return value

    def enum(self, value: Any, enum_cls: type[enum.Enum], path: str) -> Any:
        known = [str(m.value) for m in enum_cls]
        if not isinstance(value, str):
            self.bad(path, value, f"a string, one of {', '.join(known)} ({enum_cls.__name__})")
        elif value not in known:
            same = [k for k in known if k.lower() == value.lower()]
            if same:
                self.bad(path, value, f"{same[0]!r} ({enum_cls.__name__}; differs in case only)", "warning")
            else:
                self.bad(path, value, f"one of {', '.join(known)} ({enum_cls.__name__})")
        return value

    def model(self, value: Any, cls: type, path: str) -> Any:
        if not isinstance(value, dict):
            self.bad(path, value, f"an object ({cls.__name__})")
            return value
        cls = _discriminated(cls, value)
        fields = fields_of(cls)
        envelope = fields.get("properties")
        props_cls = envelope.hint if envelope is not None and _is_model(envelope.hint) else None
        props_fields = fields_of(props_cls) if props_cls is not None else {}
        body: dict[str, Any] = {}
        flattened: dict[str, Any] = {}
        where = f"{path}." if path else ""
        for key, v in value.items():
            if key == "userAssignedIdentities" and isinstance(v, list):
                v = {str(i): {} for i in v}  # azure-native's list form of ARM's map
            spec = _lookup(fields, key)
            inner = _lookup(props_fields, key)
            if spec is not None and (spec.writable or inner is None):
                if not spec.writable:
                    self.bad(
                        f"{where}{spec.rest}", v, f"no value: read-only in {cls.__name__} (Azure sets it)", "warning"
                    )
                    continue
                body[spec.rest] = self.value(v, spec.hint, f"{where}{spec.rest}")
            elif inner is not None:
                flattened[key] = v
            else:
                names = list(fields) + list(props_fields)
                close = difflib.get_close_matches(key, names, n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                self.bad(f"{where}{key}", v, f"a property of {cls.__name__}{hint} (unknown property)")
        if flattened:
            merged = {**(body.get("properties") or {}), **flattened}
            body["properties"] = self.model(merged, props_cls, f"{where}properties")  # type: ignore[arg-type]
        for rest, spec in fields.items():
            if spec.required and rest not in body:
                self.bad(f"{where}{rest}", None, f"a value: {rest} is required in {cls.__name__}")
        return body


def _hint_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def arm_body(type_token: str, inputs: dict[str, Any]) -> tuple[dict[str, Any], list[Issue]]:
    """(ARM request body, issues) for a mapped resource's recorded inputs."""
    target = TARGETS[type_token]
    cls = getattr(sdk_models(target.sdk), target.model)
    body_inputs = {k: v for k, v in inputs.items() if k not in target.path_params}
    walker = _Walker(target.sdk)
    body = walker.model(body_inputs, cls, "")
    for p in target.path_params:
        if p not in inputs:
            walker.bad(p, None, "a value: URL path parameter of the PUT")
    return body, walker.issues


def check_resource(resource: Any) -> list[Finding]:
    if resource.type not in TARGETS:
        return [
            Finding.error(
                CHECK,
                resource,
                "<type>",
                resource.type,
                "a type mapped to an azure-mgmt model in lab/plan/arm.py TARGETS (unchecked resources are not allowed)",
            )
        ]
    target = TARGETS[resource.type]
    _, issues = arm_body(resource.type, resource.inputs)
    api = f"API {sdk_api_version(target.sdk)} model {target.model}"
    return [Finding(CHECK, i.severity, resource.label, i.path, i.value, f"{i.expected} [{api}]") for i in issues]


def checked_resources(plan: Any) -> list[Any]:
    return [r for r in plan.resources if r.custom and r.type.startswith(CHECKED_PREFIXES)]


def applies(plan: Any) -> bool:
    return bool(checked_resources(plan))


def arm_conformance(plan: Any) -> Iterable[Finding]:
    """azure-native containerservice/storage inputs against the azure-mgmt ARM models"""
    for resource in checked_resources(plan):
        yield from check_resource(resource)

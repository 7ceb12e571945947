"""ARM conformance: recorded azure-native inputs, mapped to the ARM request body, checked
against Azure's own API models (the `azure-mgmt-containerservice` / `azure-mgmt-storage`
Python SDKs, generated from the Azure REST API specs), and the tags of every azure-native
resource against ARM's tag rules.

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
4. Every `tags` mapping of the body (or, for a type with no model, of the inputs) is held to
   `lab.vocab.azure_tags`: a resource's own tags, and inline ones such as a ManagedCluster's
   `agentPoolProfiles[*].tags`. ARM refuses bad tags on any resource, so this covers every
   `azure-native:*` resource (resource groups and identities too); storage accounts allow
   128-character tag names, other resources 512.

API versions: the models must be those of the API version Pulumi sends. ARM API versions
add properties and enum values: a property of a newer model may not exist at the version
Pulumi sends, and Azure rejects it there; one renamed or dropped later would be called unknown
although Azure accepts it. pulumi-azure-native names its version in each resource's docstring
("Uses Azure REST API version X"); the SDK releases pinned in pyproject's `infra` extra carry
exactly those versions (for pulumi-azure-native 3.29: azure-mgmt-containerservice 40.1.0 is
API 2025-09-01, the version of ManagedCluster, AgentPool and MaintenanceConfiguration;
azure-mgmt-storage 23.0.1 is API 2024-01-01, that of StorageAccount and BlobContainer; each
release since carries one newer version only). `api_versions()` reports both per type, and a
resource whose models are at another version than Pulumi's gets a warning naming both: none
of its properties or enum values is then vouched for at the version Azure receives.

The SDKs come in two generations, and both are read: msrest models (`_attribute_map` with
REST keys such as `properties.count`, and `_validation`; azure-mgmt-containerservice up to
40.x, azure-mgmt-storage up to 24.x), whose flattened `properties.*` keys are rebuilt into an
`Envelope`, and typespec models (`rest_field` descriptors with visibility; the releases after).
Reading them is lab/plan/arm_models.py; this module maps the types, checks the API versions and
walks the bodies.
"""

from __future__ import annotations

import difflib
import enum
import functools
import inspect
import re
import typing
from collections.abc import Iterable, Iterator, Mapping
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

from lab.plan.arm_models import Envelope, discriminated, fields_of, is_model, lookup_field, model_name
from lab.plan.findings import Finding, custom_resources
from lab.vocab.azure_tags import tag_problems

CHECK = "arm-conformance"
# Types whose inputs are checked against a model: each must be in TARGETS.
CHECKED_PREFIXES = ("azure-native:containerservice", "azure-native:storage")
# Types whose tags are checked: every azure-native resource (ARM's tag rules are the same for all).
TAGGED_PREFIX = "azure-native:"
# The one type whose tag names ARM limits to 128 characters instead of 512.
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"


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
    "azure-native:containerservice:MaintenanceConfiguration": ArmTarget(
        "containerservice",
        "MaintenanceConfiguration",
        ("resourceGroupName", "resourceName", "configName"),
        ("MaintenanceConfigurationsOperations", "create_or_update"),
        pulumi_containerservice.MaintenanceConfiguration,
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
    """For each mapped type: the API version Pulumi sends (`pulumi`), the one the models
    describe (`models_api`, and `models` with the SDK release) and the body model."""
    return {
        token: {
            "pulumi": pulumi_api_version(token),
            "models_api": sdk_api_version(t.sdk),
            "models": f"{sdk_api_version(t.sdk)} ({SDKS[t.sdk].distribution} {sdk_package_version(t.sdk)})",
            "model": t.model,
        }
        for token, t in TARGETS.items()
    }


def version_mismatch(type_token: str) -> str | None:
    """What a finding must say when the models are not at the API version Pulumi sends
    (None when they are)."""
    target = TARGETS[type_token]
    sent, models_api = pulumi_api_version(type_token), sdk_api_version(target.sdk)
    if sent == models_api:
        return None
    sdk = SDKS[target.sdk]
    return (
        f"models at API {sent}, the version Pulumi sends: {sdk.distribution} {sdk_package_version(target.sdk)} "
        f"carries {models_api}, so no property or enum value of this resource is vouched for at {sent}; "
        f"pin the {sdk.distribution} release that carries {sent} in pyproject's infra extra"
    )


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
        if is_model(hint):
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

    def model(self, value: Any, cls: Any, path: str) -> Any:
        """`cls` is a model class or an `Envelope`."""
        if not isinstance(value, dict):
            self.bad(path, value, f"an object ({model_name(cls)})")
            return value
        cls = discriminated(cls, value)
        fields = fields_of(cls)
        envelope = fields.get("properties")
        props_cls = envelope.hint if envelope is not None and is_model(envelope.hint) else None
        props_fields = fields_of(props_cls) if props_cls is not None else {}
        body: dict[str, Any] = {}
        flattened: dict[str, Any] = {}
        where = f"{path}." if path else ""
        for key, v in value.items():
            if key == "userAssignedIdentities" and isinstance(v, list):
                v = {str(i): {} for i in v}  # azure-native's list form of ARM's map
            spec = lookup_field(fields, key)
            inner = lookup_field(props_fields, key)
            if spec is not None and (spec.writable or inner is None):
                if not spec.writable:
                    self.bad(
                        f"{where}{spec.rest}",
                        v,
                        f"no value: read-only in {model_name(cls)} (Azure sets it)",
                        "warning",
                    )
                    continue
                body[spec.rest] = self.value(v, spec.hint, f"{where}{spec.rest}")
            elif inner is not None:
                flattened[key] = v
            else:
                names = list(fields) + list(props_fields)
                close = difflib.get_close_matches(key, names, n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                self.bad(f"{where}{key}", v, f"a property of {model_name(cls)}{hint} (unknown property)")
        if flattened:
            merged = {**(body.get("properties") or {}), **flattened}
            body["properties"] = self.model(merged, props_cls, f"{where}properties")
        for rest, spec in fields.items():
            if spec.required and rest not in body:
                if isinstance(spec.hint, Envelope):  # name the required properties inside it
                    self.model({}, spec.hint, f"{where}{rest}")
                else:
                    self.bad(f"{where}{rest}", None, f"a value: {rest} is required in {model_name(cls)}")
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
    """Every finding of one recorded azure-native resource: its body against the model at
    Pulumi's API version (mapped types), and its tags (every type)."""
    if resource.type not in TARGETS:
        unmapped = (
            [
                Finding.error(
                    CHECK,
                    resource,
                    "<type>",
                    resource.type,
                    "a type mapped to an azure-mgmt model in lab/plan/arm.py TARGETS "
                    "(unchecked resources are not allowed)",
                )
            ]
            if resource.type.startswith(CHECKED_PREFIXES)
            else []
        )
        return unmapped + tag_findings(resource, resource.inputs)
    target = TARGETS[resource.type]
    body, issues = arm_body(resource.type, resource.inputs)
    api = f"API {sdk_api_version(target.sdk)} model {target.model}"
    findings = []
    if mismatch := version_mismatch(resource.type):
        api += f"; Pulumi sends {pulumi_api_version(resource.type)}"
        findings.append(Finding.warning(CHECK, resource, "<api-version>", pulumi_api_version(resource.type), mismatch))
    findings += [Finding(CHECK, i.severity, resource.label, i.path, i.value, f"{i.expected} [{api}]") for i in issues]
    return findings + tag_findings(resource, body)


def tag_findings(resource: Any, shape: Mapping[str, Any]) -> list[Finding]:
    """A finding per tag ARM would refuse, in every `tags` mapping of `shape` (the ARM body of
    a mapped type, else the recorded inputs), by `lab.vocab.azure_tags`' rules. Only the
    account's own `tags` of a storage account get the 128-character name limit; tags inline in
    a body belong to other resources (a ManagedCluster's `agentPoolProfiles[*].tags` are its
    node pools')."""
    return [
        Finding.error(CHECK, resource, problem.key, problem.value, f"{problem.expected} (ARM's tag rules)")
        for path, tags in _tag_maps(shape, "")
        for problem in tag_problems(tags, path, storage_account=resource.type == STORAGE_ACCOUNT and path == "tags")
    ]


def _tag_maps(value: Any, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, mapping) of every `tags` key whose value is a mapping, at any depth."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "tags" and isinstance(item, Mapping):
                yield where, item
            else:
                yield from _tag_maps(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _tag_maps(item, f"{path}[{i}]")


def checked_resources(plan: Any) -> list[Any]:
    """The resources whose inputs are checked against a model (all of them mapped in TARGETS)."""
    return custom_resources(plan, CHECKED_PREFIXES)


def tagged_resources(plan: Any) -> list[Any]:
    """The resources whose tags are checked: every azure-native one."""
    return custom_resources(plan, TAGGED_PREFIX)


def applies(plan: Any) -> bool:
    return bool(tagged_resources(plan))


def arm_conformance(plan: Any) -> Iterable[Finding]:
    """azure-native inputs against the azure-mgmt ARM models at Pulumi's API version; every tag against ARM's rules"""
    for resource in tagged_resources(plan):
        yield from check_resource(resource)

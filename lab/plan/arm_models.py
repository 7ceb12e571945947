"""The azure-mgmt SDK models as arm-conformance reads them: each model's fields (REST name, type
hint, required, writable) from both SDK generations (msrest `_attribute_map`/`_validation`,
whose flattened `properties.*` keys become an `Envelope`; typespec `rest_field` descriptors),
and the subtype a discriminator selects. lab/plan/arm.py says how a resource is checked."""

from __future__ import annotations

import functools
import re
import sys
import typing
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from types import GenericAlias, ModuleType
from typing import Any


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


def lookup_field(fields: dict[str, FieldSpec], key: str) -> FieldSpec | None:
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


@dataclass(frozen=True)
class Envelope:
    """An object ARM nests that an msrest SDK flattens into its owner model: the owner's
    `_attribute_map` keys under `prefix` (`properties.count` is `count` of the envelope
    `properties`), walked like a model of its own."""

    owner: type
    prefix: tuple[str, ...]


def model_name(model: Any) -> str:
    if isinstance(model, Envelope):
        return ".".join((model.owner.__name__, *model.prefix))
    return str(model.__name__)


def _is_msrest(hint: Any) -> bool:
    return isinstance(hint, type) and isinstance(getattr(hint, "_attribute_map", None), dict)


def is_model(hint: Any) -> bool:
    return (
        isinstance(hint, Envelope)
        or _is_msrest(hint)
        or (isinstance(hint, type) and hasattr(hint, "_attr_to_rest_field"))
        or (
            isinstance(hint, type) and any(c.__name__ == "Model" and "model_base" in c.__module__ for c in hint.__mro__)
        )
    )


def _models_package(cls: type) -> ModuleType:
    return sys.modules[cls.__module__.rsplit(".", 1)[0]]


def _without_none(hint: Any) -> tuple[Any, bool]:
    """(hint without None, whether None was allowed)."""
    if typing.get_origin(hint) is typing.Union and type(None) in typing.get_args(hint):
        rest_args = tuple(a for a in typing.get_args(hint) if a is not type(None))
        return (rest_args[0] if len(rest_args) == 1 else typing.Union[rest_args]), True  # noqa: UP007 - built from a tuple
    return hint, False


@functools.cache
def fields_of(model: Any) -> dict[str, FieldSpec]:
    """REST name -> FieldSpec for an azure-mgmt model class or an `Envelope` of one."""
    if isinstance(model, Envelope):
        return _msrest_fields(model.owner, model.prefix)
    if _is_msrest(model):
        return _msrest_fields(model, ())
    return _typespec_fields(model)


def _typespec_fields(cls: type) -> dict[str, FieldSpec]:
    """Typespec models: `rest_field` descriptors carry the REST name and the visibility
    (read-only fields have none of create/update); the class annotations the type."""
    module = sys.modules[cls.__module__]
    hints = typing.get_type_hints(cls, globalns=vars(module), localns={"_models": _models_package(cls)})
    out: dict[str, FieldSpec] = {}
    for klass in reversed(cls.__mro__):
        for attr, rf in vars(klass).items():
            if attr.startswith("_") or not hasattr(rf, "_rest_name_input") or not hasattr(rf, "_visibility"):
                continue
            rest = rf._rest_name_input or attr
            hint, optional = _without_none(hints.get(attr, Any))
            vis = rf._visibility
            writable = vis is None or "create" in vis or "update" in vis
            out[rest] = FieldSpec(rest, hint, required=not optional and writable, writable=writable, attr=attr)
    return out


_KEY_PARTS = re.compile(r"(?<!\\)\.")  # a dot not escaped by a backslash
_MSREST_TYPES: dict[str, Any] = {
    "str": str,
    "int": int,
    "long": int,
    "float": float,
    "bool": bool,
    "object": Any,
    "iso-8601": datetime,
    "rfc-1123": datetime,
    "unix-time": datetime,
    "date": date,
    "time": time,
    "duration": timedelta,
    "bytearray": bytes,
    "base64": bytes,
}


def _msrest_type(name: str, models: ModuleType) -> Any:
    """The type hint of an msrest `_attribute_map` type string ("[str]", "{Model}", "iso-8601")."""
    if name.startswith("[") and name.endswith("]"):
        return GenericAlias(list, (_msrest_type(name[1:-1], models),))
    if name.startswith("{") and name.endswith("}"):
        return GenericAlias(dict, (str, _msrest_type(name[1:-1], models)))
    return _MSREST_TYPES[name] if name in _MSREST_TYPES else getattr(models, name, Any)


def _msrest_fields(owner: type, prefix: tuple[str, ...]) -> dict[str, FieldSpec]:
    """msrest models: `_attribute_map` gives each attribute's REST key (dotted where the SDK
    flattened an envelope) and type string, `_validation` what is read-only or required.
    The `__init__` annotations carry the enums (`Union[str, ScaleSetPriority]`) that the
    type strings reduce to "str", so they are preferred where an attribute has one."""
    models = _models_package(owner)
    module = sys.modules[owner.__module__]
    init_hints = typing.get_type_hints(typing.cast(Any, owner).__init__, globalns={**vars(module), "_models": models})
    validation: dict[str, dict[str, Any]] = getattr(owner, "_validation", {}) or {}
    out: dict[str, FieldSpec] = {}
    for attr, entry in owner._attribute_map.items():  # type: ignore[attr-defined]
        parts = tuple(p.replace("\\.", ".") for p in _KEY_PARTS.split(entry["key"]))
        if parts[: len(prefix)] != prefix or len(parts) == len(prefix):
            continue
        rest = parts[len(prefix)]
        if len(parts) > len(prefix) + 1:
            if rest not in out:
                inner = fields_of(Envelope(owner, (*prefix, rest)))
                required = any(f.required for f in inner.values())
                writable = any(f.writable for f in inner.values())
                out[rest] = FieldSpec(rest, Envelope(owner, (*prefix, rest)), required, writable, attr=snake(rest))
            continue
        rules = validation.get(attr, {})
        if attr in init_hints:
            hint, _ = _without_none(init_hints[attr])
        else:
            hint = _msrest_type(entry["type"], models)
        writable = not rules.get("readonly", False)
        # A constant is filled in by the client, not by the caller.
        required = bool(rules.get("required")) and writable and not rules.get("constant", False)
        out[rest] = FieldSpec(rest, hint, required=required, writable=writable, attr=attr)
    return out


def discriminated(cls: Any, value: dict[str, Any]) -> Any:
    """The subtype a discriminator value selects (typespec `__mapping__`, msrest `_subtype_map`)."""
    if isinstance(cls, Envelope):
        return cls
    subtypes = vars(cls).get("_subtype_map") if _is_msrest(cls) else None
    if subtypes:
        for attr, names in subtypes.items():
            key = cls._attribute_map[attr]["key"]
            if key in value and value[key] in names:
                return getattr(_models_package(cls), names[value[key]], cls)
        return cls
    mapping = getattr(cls, "__mapping__", None)
    if not mapping:
        return cls
    for spec_attr, rf in vars(cls).items():
        if getattr(rf, "_is_discriminator", False):
            key = rf._rest_name_input or spec_attr
            if key in value and value[key] in mapping:
                return mapping[value[key]]
    return cls

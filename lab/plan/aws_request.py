"""The request side of aws-api-conformance: where a pulumi_aws resource's inputs go in the AWS
API (`AwsTarget`), the botocore service models, and `RequestWalker`, which walks a request
against its operation's input shape (unknown members, JSON types, enums, required members,
lengths, ranges and patterns). lab/plan/aws_api.py says how a resource is checked.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from dataclasses import dataclass, field
from typing import Any

import botocore.session
from botocore.model import Shape, StructureShape

from lab.plan.findings import ERROR

# The value Pulumi gives an input that comes from an output not known at plan time.
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
# Top-level inputs of every pulumi_aws resource that are not request members: the provider's
# region, and the tags (checked by AWS's tag rules, whatever form the API takes them in).
PROVIDER_INPUTS = ("region", "tags", "tagsAll")


@dataclass(frozen=True)
class Issue:
    """One problem in a resource's inputs; `source` names the rule it breaks."""

    path: str
    value: Any
    expected: str
    source: str
    severity: str = ERROR


@dataclass(frozen=True)
class Moved:
    """A Pulumi input that a reshape put where the request wants it; findings inside it
    name `path`, the input's own path, instead of the request's."""

    value: Any
    path: str


Reshape = Callable[[dict[str, Any]], dict[str, Any]]
Rule = Callable[[dict[str, Any]], Iterable[Issue]]


@dataclass(frozen=True)
class AwsTarget:
    """Where a Pulumi resource's inputs go in the AWS API, and what the model cannot say."""

    service: str  # botocore service name
    operation: str  # the operation whose input shape is the request
    # Pulumi input name -> member name: a bare name at any depth, a dotted path (no indices) there only
    renames: Mapping[str, str] = field(default_factory=dict)
    pulumi_only: tuple[str, ...] = ()  # input paths (no indices) with no member: not walked
    generated: tuple[str, ...] = ()  # required top-level members the provider fills in (auto-naming)
    provider_required: tuple[str, ...] = ()  # input paths pulumi_aws requires that the model leaves optional
    documents: Mapping[str, str] = field(default_factory=dict)  # IAM policy inputs -> "trust" | "identity"
    json_inputs: tuple[str, ...] = ()  # inputs that should hold a JSON document
    more_operations: tuple[str, ...] = ()  # operations taking the top-level inputs the main one lacks
    pulumi_values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # input path -> extra enum values
    reshape: Reshape | None = None  # Pulumi's structure -> the request's, where they differ
    rules: tuple[Rule, ...] = ()  # what the service validates beyond its model
    note: str = ""  # what is not checked, and why


# --------------------------------------------------------------------------- small helpers


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def plain_path(path: str) -> str:
    """The path without list indices: `taints[0].effect` -> `taints.effect`."""
    return re.sub(r"\[\d+\]", "", path)


def is_unknown(value: Any) -> bool:
    return isinstance(value, str) and value == UNKNOWN


def is_int(value: Any) -> bool:
    """An integer as the engine carries it (protobuf numbers may arrive as whole floats)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def indexed(items: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(path, item) of each element of a list input (nothing for any other value)."""
    if isinstance(items, list):
        for i, item in enumerate(items):
            yield f"{path}[{i}]", item


# --------------------------------------------------------------------------- botocore model access


@functools.cache
def botocore_session() -> Any:
    return botocore.session.get_session()


@functools.cache
def service_model(service: str) -> Any:
    return botocore_session().get_service_model(service)


def input_shape(service: str, operation: str) -> StructureShape:
    shape = service_model(service).operation_model(operation).input_shape
    assert isinstance(shape, StructureShape), f"{service} {operation} takes no structure"
    return shape


@functools.cache
def _pattern(pattern: str) -> re.Pattern[str] | None:
    """A model pattern compiled by Python's `re`; None where it does not compile (`\\p{L}`)."""
    try:
        return re.compile(pattern)
    except re.error:
        return None


def _bounds(size: float, shape: Shape, unit: str) -> str | None:
    """What a length/count/number must be where it breaks the shape's `min`/`max`."""
    low, high = shape.metadata.get("min"), shape.metadata.get("max")
    if low is not None and size < low:
        return f"at least {low}{unit} ({size:g} given)"
    if high is not None and size > high:
        return f"at most {high}{unit} ({size:g} given)"
    return None


# --------------------------------------------------------------------------- walking a request


class RequestWalker:
    """Walks a request (Pulumi's inputs, reshaped where needed) against a target's input shape."""

    def __init__(self, target: AwsTarget):
        self.target = target
        self.main = input_shape(target.service, target.operation)
        self.more = [input_shape(target.service, op) for op in target.more_operations]
        self.skip = set(PROVIDER_INPUTS) | set(target.pulumi_only)
        self.issues: list[Issue] = []

    def bad(self, path: str, value: Any, expected: str, shape: Shape) -> None:
        self.issues.append(Issue(path, value, expected, f"botocore {self.target.service} {shape.name}"))

    def renames_at(self, parent: str) -> dict[str, str]:
        """Pulumi input name -> member name of the renames that apply to the inputs of the
        object at `parent` (a path without indices): a bare name applies at any depth, a
        dotted one (`actions.target`) under its own parent only, and before a bare one."""
        out: dict[str, str] = {}
        for source, member in sorted(self.target.renames.items(), key=lambda kv: "." in kv[0]):
            scope, _, name = source.rpartition(".")
            if scope in ("", parent):
                out[name] = member
        return out

    @staticmethod
    def pulumi_name(member: str, renames: dict[str, str]) -> str:
        """The input name Pulumi gives a member: a rename's, else the member's in camelCase."""
        return next((k for k, v in renames.items() if v == member), member[:1].lower() + member[1:])

    @staticmethod
    def member(key: str, shapes: list[StructureShape], renames: dict[str, str]) -> tuple[str, StructureShape] | None:
        """(member name, owning shape) an input name stands for: its rename, else itself or
        itself capitalized (members of PascalCase services) unless Pulumi names that member
        otherwise, in the first shape that has one."""
        renamed = renames.get(key)
        for shape in shapes:
            if renamed is not None and renamed in shape.members:
                return renamed, shape
            for name in (key, key[:1].upper() + key[1:]):
                if name in shape.members and name not in renames.values():
                    return name, shape
        return None

    def value(self, value: Any, shape: Shape, path: str) -> None:
        if isinstance(value, Moved):
            value, path = value.value, value.path
        if value is None or is_unknown(value):
            return
        kind = shape.type_name
        if kind == "structure":
            self.structure(value, shape, path)
        elif kind == "list":
            self.list(value, shape, path)
        elif kind == "map":
            self.map(value, shape, path)
        elif kind == "string":
            self.string(value, shape, path)
        elif kind in ("integer", "long"):
            self.number(value, shape, path, integer=True)
        elif kind in ("float", "double"):
            self.number(value, shape, path, integer=False)
        elif kind == "boolean" and not isinstance(value, bool):
            self.bad(path, value, "a boolean", shape)
        elif kind in ("timestamp", "blob") and not isinstance(value, (str, int, float)):
            self.bad(path, value, f"a string ({kind})", shape)

    def structure(self, value: Any, shape: StructureShape, path: str) -> None:
        top = shape is self.main
        if not isinstance(value, dict):
            if set(shape.members) == {"Value"}:  # EC2's AttributeBooleanValue/AttributeValue wrap a scalar
                self.value(value, shape.members["Value"], path)
            else:
                self.bad(path, value, f"an object ({shape.name})", shape)
            return
        shapes = [shape, *self.more] if top else [shape]
        renames = self.renames_at(plain_path(path))
        present: set[str] = set()
        for key, item in value.items():
            where = join_path(path, key)
            if item is None or (isinstance(item, Moved) and item.value is None):
                continue  # an input left out
            if plain_path(where) in self.skip:
                continue
            found = self.member(key, shapes, renames)
            if found is None:
                self.unknown(key, item, shapes, renames, where)
                continue
            name, owner = found
            if owner is shape:
                present.add(name)
            self.value(item, owner.members[name], where)
        self.required(shape, present, path, renames)

    def unknown(self, key: str, value: Any, shapes: list[StructureShape], renames: dict[str, str], path: str) -> None:
        names = [self.pulumi_name(m, renames) for s in shapes for m in s.members]
        if shapes[0] is self.main:  # the provider's own inputs are names too
            names += [*PROVIDER_INPUTS, *(p for p in self.target.pulumi_only if "." not in p)]
        close = difflib.get_close_matches(key, list(dict.fromkeys(names)), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        self.bad(path, value, f"a member of {shapes[0].name}{hint} (unknown property)", shapes[0])

    def required(self, shape: StructureShape, present: set[str], path: str, renames: dict[str, str]) -> None:
        """A finding per required member no input gave; idempotency tokens are the client's, and
        auto-named members (of the request itself) the provider's."""
        for name in shape.required_members:
            if name in present or shape.members[name].metadata.get("idempotencyToken"):
                continue
            if shape is self.main and name in self.target.generated:
                continue
            where = join_path(path, self.pulumi_name(name, renames))
            self.bad(where, None, f"a value: {name} is required in {shape.name}", shape)

    def list(self, value: Any, shape: Any, path: str) -> None:
        if not self.sized(value, shape, path, list, "list", " items"):
            return
        for where, item in indexed(value, path):
            self.value(item, shape.member, where)

    def map(self, value: Any, shape: Any, path: str) -> None:
        if not self.sized(value, shape, path, dict, "map", " entries"):
            return
        for key, item in value.items():
            where = join_path(path, str(key))
            self.string(key, shape.key, where, what="key")
            self.value(item, shape.value, where)

    def sized(self, value: Any, shape: Any, path: str, kind: type[Sized], kind_name: str, unit: str) -> bool:
        """Whether `value` is a `kind` (its members are checked then); a finding where it is not,
        or where it holds more or fewer `unit` than the shape's bounds allow."""
        if not isinstance(value, kind):
            self.bad(path, value, f"a {kind_name} ({shape.name})", shape)
            return False
        if value and (problem := _bounds(len(value), shape, unit)):
            self.bad(path, value, problem, shape)
        return True

    def string(self, value: Any, shape: Shape, path: str, what: str = "value") -> None:
        """Type, enum, length and pattern of a string (a map's key when `what` is "key")."""
        prefix = "" if what == "value" else f"{what}: "
        if not isinstance(value, str):
            self.bad(path, value, f"{prefix}a string", shape)
            return
        allowed = list(getattr(shape, "enum", None) or [])
        if allowed:
            if value not in allowed and value not in self.target.pulumi_values.get(plain_path(path), ()):
                self.bad(path, value, f"{prefix}one of {', '.join(allowed)}", shape)
            return
        if problem := _bounds(len(value), shape, " characters"):
            self.bad(path, value, prefix + problem, shape)
            return
        pattern = shape.metadata.get("pattern")
        compiled = _pattern(pattern) if pattern else None
        if compiled is not None and not compiled.fullmatch(value):
            self.bad(path, value, f"{prefix}a string matching {pattern}", shape)

    def number(self, value: Any, shape: Shape, path: str, integer: bool) -> None:
        if integer and not is_int(value):
            quoted = " (Pulumi sends numbers as numbers, not strings)" if isinstance(value, str) else ""
            self.bad(path, value, f"an integer{quoted}", shape)
        elif not integer and (isinstance(value, bool) or not isinstance(value, (int, float))):
            self.bad(path, value, "a number", shape)
        elif problem := _bounds(value, shape, ""):
            self.bad(path, value, problem, shape)

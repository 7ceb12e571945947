"""AWS API conformance: recorded pulumi_aws inputs, mapped to the request of the AWS API
operation the provider makes, checked offline against the service models shipped in
`botocore`, plus the rules AWS applies that a model cannot say (IAM policy grammar, S3
bucket names, CIDR sizes, FIS references) and AWS's tag rules on every `tags` map.

How a resource is checked (generic over the model, nothing hand-listed per property):
1. `TARGETS` maps a Pulumi type token to a botocore service and the operation whose input
   shape is the request (`AwsTarget`), the Pulumi input names that differ from the model's
   member names (`renames`: a bare name at any depth, a dotted path under its own parent;
   members of PascalCase services such as iam, s3, ec2 and autoscaling are also found by
   capitalizing the input name), the inputs that are the provider's own (`pulumi_only`),
   the required members the provider fills in itself (`generated`: auto-names), the inputs
   pulumi_aws requires where the model does not (`provider_required`), and where Pulumi's
   structure differs from the request's, a `reshape` that moves the inputs where the request
   wants them (FIS takes maps keyed by name where Pulumi takes lists, S3 nests flags in a
   configuration object); findings still name the Pulumi input path (`_Moved`). EC2 inputs
   that another call sets (ModifyVpcAttribute's DNS flags) are looked up in
   `more_operations`.
2. The request is walked against the operation's input shape: unknown member names (with a
   "did you mean"), values of the wrong JSON type (numbers given as strings are errors:
   Pulumi sends numbers as numbers), enum values not in the shape's enum, missing required
   members, string lengths and number ranges outside the shape's `min`/`max`, and strings
   that do not match its `pattern` (where the pattern compiles in Python's `re`; AWS matches
   the whole value). Findings name the Pulumi input path, and end with the botocore shape
   they were held to: `[botocore eks TaintEffect]`.
3. Values that cannot be judged offline, the unknown outputs of other resources, are fine.
4. Every resource's `tags` map is held to AWS's tag rules (the portable ones: EC2 alone
   allows more characters); every IAM policy document input to the IAM policy grammar
   (errors name the path inside the document: `assumeRolePolicy.Statement[0].Effect`).
5. Each target's `rules` add what its service validates that the model cannot say: bucket
   names, CIDR prefix sizes, node group sizes, FIS references and action parameters
   (`_FIS_ACTIONS`).

An `aws:*` custom resource whose type has no entry in `TARGETS` is an error, unless its type
is in `UNCHECKED` with a reason.
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import botocore.session
from botocore.model import Shape, StructureShape

from lab.plan.findings import ERROR, WARNING, Finding
from lab.program.recording import Plan, RecordedResource
from lab.vocab.aws_tags import tag_problems

__all__ = ["CHECK", "TARGETS", "UNCHECKED", "applies", "aws_conformance", "check_resource"]

CHECK = "aws-api-conformance"
_PREFIX = "aws:"
# The value Pulumi gives an input that comes from an output not known at plan time.
_UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
# Top-level inputs of every pulumi_aws resource that are not request members: the provider's
# region, and the tags (checked by AWS's tag rules, whatever form the API takes them in).
_PROVIDER_INPUTS = ("region", "tags", "tagsAll")

# aws:* types that are not checked against a model, each with the reason why.
UNCHECKED: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class _Issue:
    """One problem in a resource's inputs; `source` names the rule it breaks."""

    path: str
    value: Any
    expected: str
    source: str
    severity: str = ERROR


@dataclass(frozen=True)
class _Moved:
    """A Pulumi input that a reshape put where the request wants it; findings inside it
    name `path`, the input's own path, instead of the request's."""

    value: Any
    path: str


_Reshape = Callable[[dict[str, Any]], dict[str, Any]]
_Rule = Callable[[dict[str, Any]], Iterable[_Issue]]


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
    reshape: _Reshape | None = None  # Pulumi's structure -> the request's, where they differ
    rules: tuple[_Rule, ...] = ()  # what the service validates beyond its model
    note: str = ""  # what is not checked, and why


# --------------------------------------------------------------------------- small helpers


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _plain(path: str) -> str:
    """The path without list indices: `taints[0].effect` -> `taints.effect`."""
    return re.sub(r"\[\d+\]", "", path)


def _unknown(value: Any) -> bool:
    return isinstance(value, str) and value == _UNKNOWN


def _is_int(value: Any) -> bool:
    """An integer as the engine carries it (protobuf numbers may arrive as whole floats)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _indexed(items: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(path, item) of each element of a list input (nothing for any other value)."""
    if isinstance(items, list):
        for i, item in enumerate(items):
            yield f"{path}[{i}]", item


# --------------------------------------------------------------------------- botocore model access


@functools.cache
def _session() -> Any:
    return botocore.session.get_session()


@functools.cache
def _service_model(service: str) -> Any:
    return _session().get_service_model(service)


def _input_shape(service: str, operation: str) -> StructureShape:
    shape = _service_model(service).operation_model(operation).input_shape
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


class _Walker:
    """Walks a request (Pulumi's inputs, reshaped where needed) against a target's input shape."""

    def __init__(self, target: AwsTarget):
        self.target = target
        self.main = _input_shape(target.service, target.operation)
        self.more = [_input_shape(target.service, op) for op in target.more_operations]
        self.skip = set(_PROVIDER_INPUTS) | set(target.pulumi_only)
        self.issues: list[_Issue] = []

    def bad(self, path: str, value: Any, expected: str, shape: Shape) -> None:
        self.issues.append(_Issue(path, value, expected, f"botocore {self.target.service} {shape.name}"))

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
        if isinstance(value, _Moved):
            value, path = value.value, value.path
        if value is None or _unknown(value):
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
        renames = self.renames_at(_plain(path))
        present: set[str] = set()
        for key, item in value.items():
            where = _join(path, key)
            if item is None or (isinstance(item, _Moved) and item.value is None):
                continue  # an input left out
            if _plain(where) in self.skip:
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
            names += [*_PROVIDER_INPUTS, *(p for p in self.target.pulumi_only if "." not in p)]
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
            where = _join(path, self.pulumi_name(name, renames))
            self.bad(where, None, f"a value: {name} is required in {shape.name}", shape)

    def list(self, value: Any, shape: Any, path: str) -> None:
        if not isinstance(value, list):
            self.bad(path, value, f"a list ({shape.name})", shape)
            return
        if value and (problem := _bounds(len(value), shape, " items")):
            self.bad(path, value, problem, shape)
        for where, item in _indexed(value, path):
            self.value(item, shape.member, where)

    def map(self, value: Any, shape: Any, path: str) -> None:
        if not isinstance(value, dict):
            self.bad(path, value, f"a map ({shape.name})", shape)
            return
        if value and (problem := _bounds(len(value), shape, " entries")):
            self.bad(path, value, problem, shape)
        for key, item in value.items():
            where = _join(path, str(key))
            self.string(key, shape.key, where, what="key")
            self.value(item, shape.value, where)

    def string(self, value: Any, shape: Shape, path: str, what: str = "value") -> None:
        """Type, enum, length and pattern of a string (a map's key when `what` is "key")."""
        prefix = "" if what == "value" else f"{what}: "
        if not isinstance(value, str):
            self.bad(path, value, f"{prefix}a string", shape)
            return
        allowed = list(getattr(shape, "enum", None) or [])
        if allowed:
            if value not in allowed and value not in self.target.pulumi_values.get(_plain(path), ()):
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
        if integer and not _is_int(value):
            quoted = " (Pulumi sends numbers as numbers, not strings)" if isinstance(value, str) else ""
            self.bad(path, value, f"an integer{quoted}", shape)
        elif not integer and (isinstance(value, bool) or not isinstance(value, (int, float))):
            self.bad(path, value, "a number", shape)
        elif problem := _bounds(value, shape, ""):
            self.bad(path, value, problem, shape)


# --------------------------------------------------------------------------- AWS rules beyond the models


def _tag_issues(tags: Any, path: str = "tags") -> Iterator[_Issue]:
    """AWS's tag rules (lab.vocab.aws_tags, shared with the stack's config check); tags whose
    value is another resource's output are judged by their names only."""
    if tags is None or _unknown(tags):
        return
    if isinstance(tags, Mapping):
        tags = {key: ("" if _unknown(value) else value) for key, value in tags.items()}
    for problem in tag_problems(tags, path):
        yield _Issue(problem.key, problem.value, problem.expected, "AWS tag rules")


_POLICY_SOURCE = "IAM JSON policy grammar"
_POLICY_VERSIONS = ("2012-10-17", "2008-10-17")
_POLICY_KEYS = ("Version", "Id", "Statement")
_STATEMENT_KEYS = (
    "Sid",
    "Effect",
    "Principal",
    "NotPrincipal",
    "Action",
    "NotAction",
    "Resource",
    "NotResource",
    "Condition",
)
_PRINCIPAL_KEYS = ("AWS", "Service", "Federated", "CanonicalUser")
_ACTION = re.compile(r"\*|[A-Za-z0-9-]+:[A-Za-z0-9*?]+")


def _policy_issue(path: str, value: Any, expected: str, severity: str = ERROR) -> _Issue:
    return _Issue(path, value, expected, _POLICY_SOURCE, severity)


def _policy_issues(value: Any, path: str, trust: bool) -> Iterator[_Issue]:
    """An IAM policy document (a JSON string, or an object) against IAM's grammar; a trust
    (assume-role) policy names a Principal and no Resource, an identity policy the reverse."""
    if _unknown(value):
        return
    doc = value
    if isinstance(value, str):
        try:
            doc = json.loads(value)
        except ValueError as e:
            yield _policy_issue(path, value, f"a JSON policy document ({e})")
            return
    if not isinstance(doc, dict):
        yield _policy_issue(path, doc, "a JSON object with Version and Statement")
        return
    yield from _unknown_keys(doc, _POLICY_KEYS, path)
    version = doc.get("Version")
    if version is None:
        yield _policy_issue(
            _join(path, "Version"),
            None,
            "Version 2012-10-17 (without it IAM reads the document as 2008-10-17, without policy variables)",
            WARNING,
        )
    elif version not in _POLICY_VERSIONS:
        yield _policy_issue(_join(path, "Version"), version, f"one of {', '.join(_POLICY_VERSIONS)}")
    statements = doc.get("Statement")
    if isinstance(statements, dict):
        yield from _statement_issues(statements, _join(path, "Statement"), trust)
    elif isinstance(statements, list) and statements:
        sids = [s.get("Sid") for s in statements if isinstance(s, dict) and s.get("Sid")]
        for sid in sorted({s for s in sids if sids.count(s) > 1}, key=str):
            yield _policy_issue(_join(path, "Statement"), sid, "Sid values unique within the document")
        for where, statement in _indexed(statements, _join(path, "Statement")):
            yield from _statement_issues(statement, where, trust)
    else:
        yield _policy_issue(_join(path, "Statement"), statements, "a non-empty Statement (an object or a list)")


def _unknown_keys(value: dict[str, Any], known: tuple[str, ...], path: str) -> Iterator[_Issue]:
    for key in value:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            yield _policy_issue(_join(path, key), value[key], f"one of {', '.join(known)}{hint} (unknown element)")


def _statement_issues(statement: Any, path: str, trust: bool) -> Iterator[_Issue]:
    """One statement: its elements, Effect, Sid, Action, Resource and Principal."""
    if not isinstance(statement, dict):
        yield _policy_issue(path, statement, "a statement object")
        return
    yield from _unknown_keys(statement, _STATEMENT_KEYS, path)
    effect = statement.get("Effect")
    if effect not in ("Allow", "Deny"):
        yield _policy_issue(_join(path, "Effect"), effect, "Allow or Deny (case-sensitive)")
    sid = statement.get("Sid")
    if sid is not None and not (isinstance(sid, str) and re.fullmatch(r"[A-Za-z0-9]*", sid)):
        yield _policy_issue(_join(path, "Sid"), sid, "a Sid of ASCII letters and digits only")
    yield from _one_of(statement, ("Action", "NotAction"), path, required=True)
    for key in ("Action", "NotAction"):
        yield from _strings(
            statement.get(key), _join(path, key), _ACTION, "an action service:Action (wildcards * ?) or *"
        )
    yield from _principal_issues(statement, path, trust)
    if trust:
        for key in ("Resource", "NotResource"):
            if key in statement:
                yield _policy_issue(_join(path, key), statement[key], f"no {key} in a trust policy (IAM refuses it)")
        return
    yield from _one_of(statement, ("Resource", "NotResource"), path, required=True)
    for key in ("Resource", "NotResource"):
        yield from _strings(statement.get(key), _join(path, key), re.compile(r"\*|arn:.+"), "an ARN (arn:...) or *")


def _one_of(statement: dict[str, Any], keys: tuple[str, str], path: str, required: bool) -> Iterator[_Issue]:
    """Exactly one of two elements (Action/NotAction, Resource/NotResource)."""
    given = [k for k in keys if k in statement]
    if len(given) == 2:
        yield _policy_issue(_join(path, keys[1]), statement[keys[1]], f"{keys[0]} or {keys[1]}, not both")
    elif not given and required:
        yield _policy_issue(_join(path, keys[0]), None, f"a value: {keys[0]} or {keys[1]} is required")


def _strings(value: Any, path: str, shape: re.Pattern[str], expected: str) -> Iterator[_Issue]:
    """A string or a non-empty list of strings, each matching `shape`."""
    if value is None or _unknown(value):
        return
    items = list(_indexed(value, path)) if isinstance(value, list) else [(path, value)]
    if not items:
        yield _policy_issue(path, value, f"{expected} (a string or a non-empty list)")
    for where, item in items:
        if not _unknown(item) and not (isinstance(item, str) and shape.fullmatch(item)):
            yield _policy_issue(where, item, expected)


def _principal_issues(statement: dict[str, Any], path: str, trust: bool) -> Iterator[_Issue]:
    """A trust policy says who may assume the role; an identity policy must not name anyone."""
    given = [k for k in ("Principal", "NotPrincipal") if k in statement]
    if not trust:
        for key in given:
            yield _policy_issue(_join(path, key), statement[key], f"no {key} in an identity policy (IAM refuses it)")
        return
    if not given:
        yield _policy_issue(_join(path, "Principal"), None, "a Principal: who may assume the role (trust policy)")
    for key in given:
        principal = statement[key]
        if principal == "*" or _unknown(principal):
            continue
        if not isinstance(principal, dict) or not principal:
            yield _policy_issue(_join(path, key), principal, f"* or an object with {', '.join(_PRINCIPAL_KEYS)}")
            continue
        for kind, ids in principal.items():
            where = _join(_join(path, key), kind)
            if kind not in _PRINCIPAL_KEYS:
                yield _policy_issue(where, ids, f"a principal type: one of {', '.join(_PRINCIPAL_KEYS)}")
            else:
                yield from _strings(ids, where, re.compile(r"\S+"), "a principal id (a string or a list of strings)")


def _document_issues(target: AwsTarget, inputs: dict[str, Any]) -> Iterator[_Issue]:
    """The IAM policy documents and JSON inputs of a resource."""
    for name, kind in target.documents.items():
        if inputs.get(name) is not None:
            yield from _policy_issues(inputs[name], name, trust=kind == "trust")
    for name in target.json_inputs:
        value = inputs.get(name)
        if isinstance(value, str) and not _unknown(value):
            try:
                json.loads(value)
            except ValueError as e:
                yield _Issue(name, value, f"a JSON document ({e})", "pulumi_aws schema: a JSON string", WARNING)


def _provider_required(paths: tuple[str, ...], inputs: dict[str, Any]) -> Iterator[_Issue]:
    """Inputs pulumi_aws requires where the model leaves the member optional (`scalingConfig.maxSize`)."""
    for dotted in paths:
        yield from _require(inputs, dotted.split("."), "")


def _require(value: Any, parts: list[str], path: str) -> Iterator[_Issue]:
    """Descend `parts` through objects and every list element; a missing last part is a finding
    (a missing parent is another entry's, or not required at all)."""
    if isinstance(value, list):
        for where, item in _indexed(value, path):
            yield from _require(item, parts, where)
        return
    if not isinstance(value, dict):
        return
    head, rest = parts[0], parts[1:]
    where = _join(path, head)
    if value.get(head) is None:
        if not rest:
            yield _Issue(
                where, None, f"a value: {head} is required", "pulumi_aws schema; the API model leaves it optional"
            )
        return
    if rest:
        yield from _require(value[head], rest, where)


# --------------------------------------------------------------------------- per-service rules and reshapes

_EKS_RULE = "EKS validation beyond botocore eks CreateNodegroupRequest"


def _nodegroup_sizes(inputs: dict[str, Any]) -> Iterator[_Issue]:
    """EKS refuses a scaling config unless minSize <= desiredSize <= maxSize."""
    scaling = inputs.get("scalingConfig")
    if not isinstance(scaling, dict):
        return
    low, want, high = (
        scaling.get(k) if _is_int(scaling.get(k)) else None for k in ("minSize", "desiredSize", "maxSize")
    )
    if low is not None and high is not None and low > high:
        yield _Issue("scalingConfig.maxSize", high, f"at least minSize ({low:g})", _EKS_RULE)
    if want is not None and low is not None and want < low:
        yield _Issue("scalingConfig.desiredSize", want, f"at least minSize ({low:g})", _EKS_RULE)
    if want is not None and high is not None and want > high:
        yield _Issue("scalingConfig.desiredSize", want, f"at most maxSize ({high:g})", _EKS_RULE)


def _access_scope(inputs: dict[str, Any]) -> Iterator[_Issue]:
    """A namespace-scoped access policy names its namespaces (botocore's AccessScope docs)."""
    scope = inputs.get("accessScope")
    if isinstance(scope, dict) and scope.get("type") == "namespace" and not scope.get("namespaces"):
        yield _Issue(
            "accessScope.namespaces",
            scope.get("namespaces"),
            "at least one namespace when accessScope.type is namespace",
            "EKS validation beyond botocore eks AccessScope",
        )


def _eks_cluster_request(inputs: dict[str, Any]) -> dict[str, Any]:
    """Pulumi's `enabledClusterLogTypes` is EKS's `logging.clusterLogging[0].types` (enabled),
    and its single `encryptionConfig` object the request's list of one."""
    request = dict(inputs)
    if "enabledClusterLogTypes" in request:
        types = _Moved(request.pop("enabledClusterLogTypes"), "enabledClusterLogTypes")
        request["logging"] = _Moved({"clusterLogging": [_Moved({"types": types, "enabled": True}, "")]}, "")
    if isinstance(request.get("encryptionConfig"), dict):
        request["encryptionConfig"] = [_Moved(request["encryptionConfig"], "encryptionConfig")]
    return request


@dataclass(frozen=True)
class _FisAction:
    """What FIS validates about one action beyond the model: its target key, the target's
    resource type, and duration parameters' ranges (seconds)."""

    target_key: str
    resource_type: str
    durations: Mapping[str, tuple[int, int]]
    doc: str


# FIS actions the lab uses, per the AWS FIS actions reference.
_FIS_ACTIONS: dict[str, _FisAction] = {
    "aws:ec2:send-spot-instance-interruptions": _FisAction(
        "SpotInstances",
        "aws:ec2:spot-instance",
        {"durationBeforeInterruption": (120, 900)},
        "durationBeforeInterruption: the time to wait before interrupting the instance, range 2-15 minutes",
    ),
}
_FIS_RULE = "FIS validation beyond botocore fis CreateExperimentTemplateRequest"
_SELECTION_MODE = re.compile(r"ALL|COUNT\(([1-9][0-9]*)\)|PERCENT\(([1-9][0-9]*)\)")
_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")
_STOP_SOURCES = ("none", "aws:cloudwatch:alarm")


def _iso_seconds(text: str) -> float | None:
    """Seconds of an ISO-8601 duration (PnDTnHnMnS); None if it is not one."""
    m = _DURATION.fullmatch(text)
    if not m or text in ("P", "PT") or text.endswith("T"):
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def _named(items: Any, path: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (path, item) of a Pulumi list of named objects (FIS actions, targets)."""
    return {
        item["name"]: (where, item)
        for where, item in _indexed(items, path)
        if isinstance(item, dict) and isinstance(item.get("name"), str)
    }


def _fis_rules(inputs: dict[str, Any]) -> Iterator[_Issue]:
    """Names unique, actions' targets defined, targets' selection, actions' parameters, stop conditions."""
    for key in ("actions", "targets"):
        names = [item.get("name") for _, item in _indexed(inputs.get(key), key) if isinstance(item, dict)]
        for name in sorted({n for n in names if isinstance(n, str) and names.count(n) > 1}):
            yield _Issue(key, name, f"unique {key} names (FIS keys them by name)", _FIS_RULE)
    targets = _named(inputs.get("targets"), "targets")
    for where, target in targets.values():
        yield from _fis_target(target, where)
    for where, action in _named(inputs.get("actions"), "actions").values():
        yield from _fis_action(action, where, targets)
    for where, stop in _indexed(inputs.get("stopConditions"), "stopConditions"):
        if isinstance(stop, dict):
            yield from _fis_stop(stop, where)


def _fis_target(target: dict[str, Any], where: str) -> Iterator[_Issue]:
    if target.get("resourceTags") and target.get("resourceArns"):
        yield _Issue(
            _join(where, "resourceArns"), target["resourceArns"], "resourceArns or resourceTags, not both", _FIS_RULE
        )
    mode = target.get("selectionMode")
    if isinstance(mode, str) and not _unknown(mode):
        m = _SELECTION_MODE.fullmatch(mode)
        if not m or (m.group(2) and int(m.group(2)) > 100):
            yield _Issue(
                _join(where, "selectionMode"), mode, "ALL, COUNT(n) or PERCENT(n) with n >= 1 (n <= 100)", _FIS_RULE
            )


def _fis_action(action: dict[str, Any], where: str, targets: dict[str, tuple[str, dict[str, Any]]]) -> Iterator[_Issue]:
    """An action's target names a defined target (of the type its action wants); its duration
    parameters are in range."""
    action_id = action.get("actionId")
    spec = _FIS_ACTIONS.get(action_id) if isinstance(action_id, str) else None
    target = action.get("target")
    if isinstance(target, dict):
        name = target.get("value")
        if isinstance(name, str) and not _unknown(name) and name not in targets:
            defined = ", ".join(sorted(targets)) or "none"
            yield _Issue(
                _join(where, "target.value"), name, f"the name of a target in targets (defined: {defined})", _FIS_RULE
            )
        if spec and target.get("key") != spec.target_key:
            yield _Issue(_join(where, "target.key"), target.get("key"), f"{spec.target_key} for {action_id}", _FIS_RULE)
        kind = targets[name][1].get("resourceType") if name in targets else None
        if spec and isinstance(kind, str) and not _unknown(kind) and kind != spec.resource_type:
            yield _Issue(
                _join(where, "target.value"), name, f"a target of {spec.resource_type} (it is {kind})", _FIS_RULE
            )
    elif spec:
        yield _Issue(_join(where, "target"), target, f"a target {spec.target_key} for {action_id}", _FIS_RULE)
    if spec:
        yield from _fis_durations(action, where, spec)


def _fis_durations(action: dict[str, Any], where: str, spec: _FisAction) -> Iterator[_Issue]:
    for at, parameter in _indexed(action.get("parameters"), _join(where, "parameters")):
        if not isinstance(parameter, dict) or parameter.get("key") not in spec.durations:
            continue
        value, (low, high) = parameter.get("value"), spec.durations[parameter["key"]]
        if _unknown(value):
            continue
        seconds = _iso_seconds(value) if isinstance(value, str) else None
        if seconds is None or not low <= seconds <= high:
            span = f"PT{low // 60}M to PT{high // 60}M"
            yield _Issue(_join(at, "value"), value, f"an ISO-8601 duration {span} ({spec.doc})", _FIS_RULE)


def _fis_stop(stop: dict[str, Any], where: str) -> Iterator[_Issue]:
    source = stop.get("source")
    if isinstance(source, str) and not _unknown(source) and source not in _STOP_SOURCES:
        yield _Issue(_join(where, "source"), source, f"one of {', '.join(_STOP_SOURCES)}", _FIS_RULE)
    if source == "aws:cloudwatch:alarm" and not stop.get("value"):
        yield _Issue(_join(where, "value"), stop.get("value"), "the alarm's ARN", _FIS_RULE)


def _key_values(items: Any, path: str) -> Any:
    """A Pulumi list of {key, value} as the map the API takes (anything else as given)."""
    if not isinstance(items, list):
        return items
    return _Moved(
        {
            item["key"]: _Moved(item.get("value"), f"{where}.value")
            for where, item in _indexed(items, path)
            if isinstance(item, dict) and isinstance(item.get("key"), str)
        },
        path,
    )


def _fis_action_request(action: dict[str, Any], where: str) -> dict[str, Any]:
    request = {k: v for k, v in action.items() if k != "name"}
    request["parameters"] = _key_values(action.get("parameters"), _join(where, "parameters"))
    target = action.get("target")
    if isinstance(target, dict) and isinstance(target.get("key"), str):
        path = _join(where, "target")
        request["target"] = _Moved({target["key"]: _Moved(target.get("value"), f"{path}.value")}, path)
    return request


def _fis_target_request(target: dict[str, Any], where: str) -> dict[str, Any]:
    request = {k: v for k, v in target.items() if k != "name"}
    request["resourceTags"] = _key_values(target.get("resourceTags"), _join(where, "resourceTags"))
    return request


def _fis_request(inputs: dict[str, Any]) -> dict[str, Any]:
    """Pulumi's lists of named actions and targets as the maps keyed by name FIS takes."""
    request = dict(inputs)
    for key, convert in (("actions", _fis_action_request), ("targets", _fis_target_request)):
        if isinstance(inputs.get(key), list):
            request[key] = _Moved(
                {name: _Moved(convert(item, where), where) for name, (where, item) in _named(inputs[key], key).items()},
                key,
            )
    return request


def _nest(member: str, keep: tuple[str, ...]) -> _Reshape:
    """A reshape putting every input but `keep` into the request member `member` (S3's
    configuration objects), where findings still name the inputs' own paths."""

    def reshape(inputs: dict[str, Any]) -> dict[str, Any]:
        request = {k: v for k, v in inputs.items() if k in keep}
        request[member] = _Moved({k: v for k, v in inputs.items() if k not in keep}, "")
        return request

    return reshape


def _ecr_repository_request(inputs: dict[str, Any]) -> dict[str, Any]:
    """Pulumi's `encryptionConfigurations` (a list of at most one) is the request's single
    `encryptionConfiguration`."""
    request = dict(inputs)
    configs = request.pop("encryptionConfigurations", None)
    if isinstance(configs, list) and len(configs) == 1:
        request["encryptionConfiguration"] = _Moved(configs[0], "encryptionConfigurations[0]")
    elif configs is not None:
        request["encryptionConfigurations"] = configs  # not one: reported as the unknown member it is
    return request


def _s3_encryption_request(inputs: dict[str, Any]) -> dict[str, Any]:
    """`rules` go in ServerSideEncryptionConfiguration.Rules; each rule's
    `blockedEncryptionTypes` list in BlockedEncryptionTypes.EncryptionType."""
    request = _nest("ServerSideEncryptionConfiguration", ("bucket", "expectedBucketOwner", "region"))(inputs)
    rules = inputs.get("rules")
    if isinstance(rules, list):
        rules = [_Moved(_s3_rule(rule, where), where) for where, rule in _indexed(rules, "rules")]
    request["ServerSideEncryptionConfiguration"].value["rules"] = _Moved(rules, "rules")
    return request


def _s3_rule(rule: Any, where: str) -> Any:
    if not isinstance(rule, dict) or rule.get("blockedEncryptionTypes") is None:
        return rule
    path = _join(where, "blockedEncryptionTypes")
    return {
        **rule,
        "blockedEncryptionTypes": _Moved({"EncryptionType": _Moved(rule["blockedEncryptionTypes"], path)}, path),
    }


def _s3_lifecycle_request(inputs: dict[str, Any]) -> dict[str, Any]:
    """`rules` go in LifecycleConfiguration.Rules; a rule filter's `and.tags` map is the
    request's list of Tag objects."""
    request = _nest("LifecycleConfiguration", ("bucket", "expectedBucketOwner", "transitionDefaultMinimumObjectSize"))(
        inputs
    )
    rules = inputs.get("rules")
    if isinstance(rules, list):
        rules = [_Moved(_lifecycle_rule(rule, where), where) for where, rule in _indexed(rules, "rules")]
    request["LifecycleConfiguration"].value["rules"] = _Moved(rules, "rules")
    return request


def _lifecycle_rule(rule: Any, where: str) -> Any:
    conjunction: Any = (rule.get("filter") or {}).get("and") if isinstance(rule, dict) else None
    tags = conjunction.get("tags") if isinstance(conjunction, dict) else None
    if not isinstance(tags, dict):
        return rule
    path = _join(where, "filter.and.tags")
    listed = _Moved(
        [{"Key": _Moved(k, _join(path, k)), "Value": _Moved(v, _join(path, k))} for k, v in tags.items()], path
    )
    return {**rule, "filter": {**rule["filter"], "and": {**conjunction, "tags": listed}}}


_S3_NAME_RULE = "S3 bucket naming rules"
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*[a-z0-9]")
_BUCKET_PREFIX = re.compile(r"[a-z0-9][a-z0-9.-]*")
_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_PREFIX_MAX = 37  # pulumi_aws appends 26 characters to a bucketPrefix


def _bucket_name_problem(name: str, prefix: bool = False) -> str | None:
    """What is wrong with a general purpose bucket name (or a bucketPrefix), None if nothing."""
    if prefix and len(name) > _PREFIX_MAX:
        return f"a bucketPrefix of at most {_PREFIX_MAX} characters"
    if not prefix and not 3 <= len(name) <= 63:
        return "a bucket name of 3-63 characters"
    if not (_BUCKET_PREFIX if prefix else _BUCKET_NAME).fullmatch(name):
        return "lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit"
    if ".." in name:
        return "no two adjacent dots"
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name):
        return "a name not formatted as an IP address"
    if name.startswith(_RESERVED_PREFIXES):
        return f"a name not starting with {', '.join(_RESERVED_PREFIXES)}"
    if not prefix and name.endswith(_RESERVED_SUFFIXES):
        return f"a name not ending with {', '.join(_RESERVED_SUFFIXES)}"
    return None


def _bucket_names(inputs: dict[str, Any]) -> Iterator[_Issue]:
    for key, prefix in (("bucket", False), ("bucketPrefix", True)):
        name = inputs.get(key)
        if isinstance(name, str) and not _unknown(name) and (problem := _bucket_name_problem(name, prefix)):
            yield _Issue(key, name, problem, _S3_NAME_RULE)


def _cidrs(key: str, prefixes: tuple[int, int]) -> _Rule:
    """A rule: input `key` is an IPv4 CIDR block (network address) with a prefix in `prefixes`."""

    def rule(inputs: dict[str, Any]) -> Iterator[_Issue]:
        value = inputs.get(key)
        if not isinstance(value, str) or _unknown(value):
            return
        low, high = prefixes
        expected = f"an IPv4 CIDR block with a prefix /{low} to /{high}"
        try:
            network = ipaddress.IPv4Network(value, strict=True)
        except ValueError as e:
            yield _Issue(key, value, f"{expected} ({e})", "EC2 CIDR rules")
            return
        if "/" not in value or not low <= network.prefixlen <= high:
            yield _Issue(key, value, expected, "EC2 CIDR rules")

    return rule


def _asg_tag_request(inputs: dict[str, Any]) -> dict[str, Any]:
    """One Pulumi `tag` of an Auto Scaling group as the request's Tags[0]."""
    request = {k: v for k, v in inputs.items() if k not in ("autoscalingGroupName", "tag")}
    tag = inputs.get("tag")
    if isinstance(tag, dict):
        group = _Moved(inputs.get("autoscalingGroupName"), "autoscalingGroupName")
        tag = {**tag, "ResourceId": group, "ResourceType": "auto-scaling-group"}
    request["Tags"] = [_Moved(tag, "tag")]
    return request


def _asg_tag_key(inputs: dict[str, Any]) -> Iterator[_Issue]:
    tag = inputs.get("tag")
    key = tag.get("key") if isinstance(tag, dict) else None
    if isinstance(key, str) and key.lower().startswith("aws:"):
        yield _Issue("tag.key", key, "a tag key not starting with aws: (reserved for AWS's own tags)", "AWS tag rules")


# --------------------------------------------------------------------------- the mapping

_IAM_ROLE_NAME = {"role": "RoleName"}
_S3_LEGACY_INLINE = (
    # pulumi_aws 7 Bucket's deprecated inline settings: each is another S3 call (and resource).
    "accelerationStatus",
    "acl",
    "corsRules",
    "grants",
    "lifecycleRules",
    "logging",
    "loggings",
    "objectLockConfiguration",
    "policy",
    "replicationConfiguration",
    "replicationConfigurations",
    "requestPayer",
    "serverSideEncryptionConfiguration",
    "serverSideEncryptionConfigurations",
    "versioning",
    "versionings",
    "website",
    "websites",
)
_S3_BUCKET = AwsTarget(
    "s3",
    "CreateBucket",
    renames={"objectLockEnabled": "ObjectLockEnabledForBucket"},
    pulumi_only=("bucketPrefix", "forceDestroy", *_S3_LEGACY_INLINE),
    generated=("Bucket",),
    rules=(_bucket_names,),
    note="the deprecated inline settings are separate S3 calls: declare their own resources to have them checked",
)
_S3_VERSIONING = AwsTarget(
    "s3",
    "PutBucketVersioning",
    renames={"mfaDelete": "MFADelete", "mfa": "MFA"},
    provider_required=("versioningConfiguration.status",),
    pulumi_values={"versioningConfiguration.status": ("Disabled",)},  # the provider's "never versioned"
)
_S3_ENCRYPTION = AwsTarget(
    "s3",
    "PutBucketEncryption",
    renames={"sseAlgorithm": "SSEAlgorithm", "kmsMasterKeyId": "KMSMasterKeyID"},
    reshape=_s3_encryption_request,
)

TARGETS: dict[str, AwsTarget] = {
    "aws:eks/cluster:Cluster": AwsTarget(
        "eks",
        "CreateCluster",
        renames={"vpcConfig": "resourcesVpcConfig"},
        pulumi_only=(
            "defaultAddonsToRemoves",
            "forceUpdateVersion",
            "vpcConfig.clusterSecurityGroupId",  # outputs EKS fills in
            "vpcConfig.vpcId",
            "kubernetesNetworkConfig.serviceIpv6Cidr",
        ),
        generated=("name",),
        provider_required=("vpcConfig.subnetIds",),
        reshape=_eks_cluster_request,
    ),
    "aws:eks/nodeGroup:NodeGroup": AwsTarget(
        "eks",
        "CreateNodegroup",
        renames={
            "nodeGroupName": "nodegroupName",
            "subnetIds": "subnets",
            "nodeRoleArn": "nodeRole",
            "sourceSecurityGroupIds": "sourceSecurityGroups",
        },
        pulumi_only=("nodeGroupNamePrefix", "forceUpdateVersion"),
        generated=("nodegroupName",),
        provider_required=(
            "scalingConfig",
            "scalingConfig.desiredSize",
            "scalingConfig.maxSize",
            "scalingConfig.minSize",
            "taints.key",
            "taints.effect",
        ),
        rules=(_nodegroup_sizes,),
    ),
    "aws:eks/addon:Addon": AwsTarget(
        "eks",
        "CreateAddon",
        # the create and the update conflict settings take the one enum
        renames={"resolveConflictsOnCreate": "resolveConflicts", "resolveConflictsOnUpdate": "resolveConflicts"},
        pulumi_only=("preserve",),
        json_inputs=("configurationValues",),
    ),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": AwsTarget(
        "eks", "CreatePodIdentityAssociation", documents={"policy": "identity"}
    ),
    "aws:eks/accessEntry:AccessEntry": AwsTarget("eks", "CreateAccessEntry", renames={"userName": "username"}),
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation": AwsTarget(
        "eks", "AssociateAccessPolicy", rules=(_access_scope,)
    ),
    "aws:fis/experimentTemplate:ExperimentTemplate": AwsTarget(
        "fis",
        "CreateExperimentTemplate",
        renames={
            "actions.target": "targets",
            "actions.startAfters": "startAfter",
            "cloudwatchLogsConfiguration": "cloudWatchLogsConfiguration",
            "cloudwatchDashboards": "cloudWatchDashboards",
        },
        provider_required=(
            "actions.name",
            "actions.parameters.key",
            "actions.parameters.value",
            "actions.target.key",
            "actions.target.value",
            "targets.name",
            "targets.resourceTags.key",
            "targets.resourceTags.value",
        ),
        reshape=_fis_request,
        rules=(_fis_rules,),
    ),
    "aws:iam/role:Role": AwsTarget(
        "iam",
        "CreateRole",
        renames={"assumeRolePolicy": "AssumeRolePolicyDocument", "name": "RoleName"},
        pulumi_only=("namePrefix", "forceDetachPolicies", "inlinePolicies", "managedPolicyArns"),
        generated=("RoleName",),
        documents={"assumeRolePolicy": "trust"},
        note="inlinePolicies and managedPolicyArns (deprecated) are other calls: use RolePolicy/RolePolicyAttachment",
    ),
    "aws:iam/rolePolicy:RolePolicy": AwsTarget(
        "iam",
        "PutRolePolicy",
        renames={"policy": "PolicyDocument", "name": "PolicyName", **_IAM_ROLE_NAME},
        pulumi_only=("namePrefix",),
        generated=("PolicyName",),
        documents={"policy": "identity"},
    ),
    "aws:iam/policy:Policy": AwsTarget(
        "iam",
        "CreatePolicy",
        renames={"policy": "PolicyDocument", "name": "PolicyName"},
        pulumi_only=("namePrefix", "delayAfterPolicyCreationInMs"),
        generated=("PolicyName",),
        documents={"policy": "identity"},
    ),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": AwsTarget("iam", "AttachRolePolicy", renames=_IAM_ROLE_NAME),
    "aws:ecr/repository:Repository": AwsTarget(
        "ecr",
        "CreateRepository",
        renames={"name": "repositoryName"},
        pulumi_only=("forceDelete", "region"),
        generated=("repositoryName",),
        reshape=_ecr_repository_request,
        note="forceDelete (delete with images) and region (the provider's) are Pulumi's own",
    ),
    "aws:s3/bucket:Bucket": _S3_BUCKET,
    "aws:s3/bucketV2:BucketV2": _S3_BUCKET,
    "aws:s3/bucketVersioning:BucketVersioning": _S3_VERSIONING,
    "aws:s3/bucketVersioningV2:BucketVersioningV2": _S3_VERSIONING,
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": _S3_ENCRYPTION,
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2": _S3_ENCRYPTION,
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": AwsTarget(
        "s3",
        "PutBucketLifecycleConfiguration",
        renames={"rules.id": "ID"},
        pulumi_only=("timeouts",),
        provider_required=("rules.id", "rules.noncurrentVersionExpiration.noncurrentDays"),
        reshape=_s3_lifecycle_request,
    ),
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": AwsTarget(
        "s3",
        "PutPublicAccessBlock",
        pulumi_only=("skipDestroy",),
        reshape=_nest("PublicAccessBlockConfiguration", ("bucket",)),
    ),
    "aws:ec2/vpc:Vpc": AwsTarget(
        "ec2",
        "CreateVpc",
        renames={"assignGeneratedIpv6CidrBlock": "AmazonProvidedIpv6CidrBlock"},
        more_operations=("ModifyVpcAttribute",),
        rules=(_cidrs("cidrBlock", (16, 28)),),
        note="the DNS and usage-metrics flags are ModifyVpcAttribute's; tags go in TagSpecifications (tag rules only)",
    ),
    "aws:ec2/subnet:Subnet": AwsTarget(
        "ec2",
        "CreateSubnet",
        renames={"enableResourceNameDnsAaaaRecordOnLaunch": "EnableResourceNameDnsAAAARecordOnLaunch"},
        more_operations=("ModifySubnetAttribute",),
        rules=(_cidrs("cidrBlock", (16, 28)),),
        note="the on-launch flags are ModifySubnetAttribute's; tags go in TagSpecifications (tag rules only)",
    ),
    "aws:ec2/internetGateway:InternetGateway": AwsTarget(
        "ec2",
        "CreateInternetGateway",
        more_operations=("AttachInternetGateway",),
        note="vpcId is AttachInternetGateway's",
    ),
    "aws:ec2/natGateway:NatGateway": AwsTarget("ec2", "CreateNatGateway", renames={"privateIp": "PrivateIpAddress"}),
    "aws:ec2/eip:Eip": AwsTarget(
        "ec2",
        "AllocateAddress",
        renames={
            "instance": "InstanceId",
            "networkInterface": "NetworkInterfaceId",
            "associateWithPrivateIp": "PrivateIpAddress",
        },
        more_operations=("AssociateAddress",),
        note="instance, networkInterface and associateWithPrivateIp are AssociateAddress's",
    ),
    "aws:ec2/routeTable:RouteTable": AwsTarget(
        "ec2",
        "CreateRouteTable",
        pulumi_only=("routes", "propagatingVgws"),
        note="inline routes (CreateRoute) and propagating gateways (EnableVgwRoutePropagation) are not checked: "
        "declare aws:ec2/route:Route resources",
    ),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": AwsTarget("ec2", "AssociateRouteTable"),
    "aws:ec2/vpcEndpoint:VpcEndpoint": AwsTarget(
        "ec2",
        "CreateVpcEndpoint",
        renames={"policy": "PolicyDocument"},
        pulumi_only=("autoAccept",),
        json_inputs=("policy",),
        note="autoAccept is AcceptVpcEndpointConnections' (the service owner's); tags go in TagSpecifications",
    ),
    "aws:ec2/route:Route": AwsTarget(
        "ec2",
        "CreateRoute",
        renames={"egressOnlyGatewayId": "EgressOnlyInternetGatewayId"},
        rules=(_cidrs("destinationCidrBlock", (0, 32)),),
    ),
    "aws:autoscaling/tag:Tag": AwsTarget(
        "autoscaling",
        "CreateOrUpdateTags",
        provider_required=("tag.value", "tag.propagateAtLaunch"),
        reshape=_asg_tag_request,
        rules=(_asg_tag_key,),
    ),
}


# --------------------------------------------------------------------------- checking resources


def _issues(target: AwsTarget, inputs: dict[str, Any]) -> list[_Issue]:
    """Every issue of a mapped resource's inputs: documents, the provider's required inputs,
    the service's rules, the request against the model, and the tags."""
    inputs = {k: v for k, v in inputs.items() if v is not None}
    issues = [*_document_issues(target, inputs), *_provider_required(target.provider_required, inputs)]
    for rule in target.rules:
        issues += rule(inputs)
    for name in target.documents:  # the API takes a policy document as a JSON string
        if isinstance(inputs.get(name), (dict, list)):
            inputs[name] = json.dumps(inputs[name])
    walker = _Walker(target)
    walker.structure(target.reshape(inputs) if target.reshape else inputs, walker.main, "")
    return issues + walker.issues + list(_tag_issues(inputs.get("tags")))


def _finding(resource: RecordedResource, issue: _Issue) -> Finding:
    return Finding(CHECK, issue.severity, resource.label, issue.path, issue.value, f"{issue.expected} [{issue.source}]")


def check_resource(resource: RecordedResource) -> list[Finding]:
    """Every finding of one recorded resource: an aws:* type mapped in TARGETS is checked
    against its botocore operation; any other aws:* type is an error unless UNCHECKED (its
    tags are still checked). Resources of other providers have none."""
    if not resource.type.startswith(_PREFIX):
        return []
    target = TARGETS.get(resource.type)
    if target is not None:
        return [_finding(resource, issue) for issue in _issues(target, resource.inputs)]
    findings = [_finding(resource, issue) for issue in _tag_issues(resource.inputs.get("tags"))]
    if resource.type in dict(UNCHECKED):
        return findings
    unmapped = Finding.error(
        CHECK,
        resource,
        "<type>",
        resource.type,
        "a type mapped to a botocore operation in lab/plan/aws_api.py TARGETS (unchecked resources are not allowed)",
    )
    return [unmapped, *findings]


def _checked(plan: Plan) -> list[RecordedResource]:
    return [r for r in plan.resources if r.custom and r.type.startswith(_PREFIX)]


def applies(plan: Plan) -> bool:
    """True when the plan declares any aws:* custom resource."""
    return bool(_checked(plan))


def aws_conformance(plan: Plan) -> Iterable[Finding]:
    """pulumi_aws inputs against the botocore models of the AWS API requests they become; tags against AWS's rules"""
    for resource in _checked(plan):
        yield from check_resource(resource)

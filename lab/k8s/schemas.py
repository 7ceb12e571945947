"""Offline validation of Kubernetes objects.

- Built-in kinds: the Kubernetes JSON schemas shipped by `kubernetes-validate`, in strict
  mode (unknown fields are errors, as `kubectl apply --validate=strict` would make them),
  for the cluster's Kubernetes version or the nearest older one the package ships.
- PyTorchJob: the openAPIV3Schema of the training operator v1.9.4 CRD
  (schemas/kubeflow.org_pytorchjobs.v1.9.4.yaml, carried with the project), also strict: the API server
  would silently prune an unknown field, which is how typos in jobs go unnoticed.

Each failure is a `SchemaViolation`: the object, the path in it, the message, the schema.
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from lab.k8s.objects import object_id
from lab.vocab.errors import LabError
from lab.vocab.layout import SCHEMAS_DIR

CRD_FILE = "kubeflow.org_pytorchjobs.v1.9.4.yaml"
ENV_SCHEMAS_DIR = "ELASTIC_LAB_SCHEMAS"


class CrdSchemaMissing(LabError, FileNotFoundError):
    """The PyTorchJob CRD schema file is not where we look for it. `looked_in`: the
    directories searched, in order."""

    def __init__(self, message: str, looked_in: list[Path] | None = None) -> None:
        super().__init__(message)
        self.looked_in = list(looked_in or [])


@dataclass(frozen=True)
class SchemaViolation:
    """One validation failure: which object, where in it, and what is wrong."""

    obj: str  # Kind/namespace/name
    path: str  # dotted path inside the object
    message: str
    schema: str  # what it was checked against

    def __str__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"{self.obj}{where}: {self.message} [{self.schema}]"


# ------------------------------------------------------------ Kubernetes versions
def _minor(version: str) -> tuple[int, int]:
    m = re.match(r"^v?(\d+)\.(\d+)", str(version).strip())
    if not m:
        raise ValueError(f"kubernetesVersion={version!r} is invalid: expected MAJOR.MINOR such as 1.33")
    return int(m.group(1)), int(m.group(2))


@functools.cache
def shipped_schema_versions() -> tuple[str, ...]:
    from kubernetes_validate import utils

    versions = {".".join(v.split(".")[:2]) for v in utils.all_versions()}
    return tuple(sorted(versions, key=_minor))


def schema_version_for(kubernetes_version: str) -> tuple[str, str]:
    """(schema version used, note): the newest shipped schema not newer than the cluster;
    a cluster newer than every shipped schema uses the newest (and says so)."""
    wanted = _minor(kubernetes_version)
    shipped = shipped_schema_versions()
    older = [v for v in shipped if _minor(v) <= wanted]
    if not older:
        raise ValueError(
            f"kubernetesVersion={kubernetes_version!r} is invalid: expected {shipped[0]} or newer "
            f"(kubernetes-validate ships schemas {shipped[0]}..{shipped[-1]})"
        )
    used = older[-1]
    if _minor(used) == wanted:
        return used, f"Kubernetes {used} schemas"
    return used, f"Kubernetes {used} schemas (nearest shipped to {kubernetes_version})"


def validate_builtin(obj: Mapping[str, Any], kubernetes_version: str) -> list[SchemaViolation]:
    used, _ = schema_version_for(kubernetes_version)
    label = f"kubernetes {used} (strict)"
    try:
        validator = _builtin_validator(used, str(obj.get("kind", "")), str(obj.get("apiVersion", "")))
    except _SchemaNotFound as exc:
        return [SchemaViolation(object_id(obj), "", str(exc), label)]
    error = next(iter(validator.iter_errors(dict(obj))), None)  # the first, as the package reports it
    if error is not None:
        return [SchemaViolation(object_id(obj), _path(error.absolute_path), error.message, label)]
    return []


class _SchemaNotFound(LookupError):
    """kubernetes-validate ships no schema for a kind and API version."""


@functools.cache
def _builtin_validator(version: str, kind: str, api_version: str) -> Any:
    """A strict validator for one kind and API version of the schemas `kubernetes-validate`
    ships for `version` (MAJOR.MINOR), built once: it finds the same schema files as the
    package's own `validate`, which reads and resolves them anew on every call."""
    from kubernetes_validate import utils
    from referencing import Registry, Resource

    shipped = [v for v in utils.all_versions() if utils.major_minor(v) <= utils.major_minor(version)][-1]
    schema_dir = f"v{shipped}-local-strict"
    # rbac.authorization.k8s.io/v1 -> rbac-v1, as the package names its files
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = utils.schema_contents(f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{api}.json", version)
    except FileNotFoundError:
        raise _SchemaNotFound(
            utils.SchemaNotFoundError(kind, utils.major_minor(version), api_version).message
        ) from None
    definitions = utils.schema_contents(f"kubernetes-json-schema/{schema_dir}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


# ------------------------------------------------------------------ the CRD
def schema_dirs() -> list[Path]:
    dirs = []
    if os.environ.get(ENV_SCHEMAS_DIR):
        dirs.append(Path(os.environ[ENV_SCHEMAS_DIR]))
    dirs.append(SCHEMAS_DIR)
    return dirs


def crd_path() -> Path:
    dirs = schema_dirs()
    for d in dirs:
        if (d / CRD_FILE).is_file():
            return d / CRD_FILE
    raise CrdSchemaMissing(
        f"{CRD_FILE} not found in "
        + ", ".join(str(d) for d in dirs)
        + f" (set {ENV_SCHEMAS_DIR} to the directory holding it)",
        dirs,
    )


def is_pytorchjob(obj: Mapping[str, Any]) -> bool:
    return obj.get("apiVersion") == "kubeflow.org/v1" and obj.get("kind") == "PyTorchJob"


@functools.lru_cache(maxsize=4)
def _crd_validator(path: str) -> jsonschema.protocols.Validator:
    crd = yaml.safe_load(Path(path).read_text())
    versions = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = _strict(copy.deepcopy(versions[0]["schema"]["openAPIV3Schema"]))
    cls = jsonschema.validators.extend(jsonschema.Draft4Validator, {"x-kubernetes-list-type": _list_type})
    return cls(schema)


def _strict(schema: Any) -> Any:
    """Unknown fields are errors where the schema lists the fields (and does not say
    x-kubernetes-preserve-unknown-fields)."""
    if isinstance(schema, dict):
        for value in schema.values():
            _strict(value)
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        for item in schema:
            _strict(item)
    return schema


def _list_type(
    validator: jsonschema.protocols.Validator, list_type: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    if not isinstance(instance, list):
        return
    if list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen: set[tuple[Any, ...]] = set()
        for item in instance:
            if isinstance(item, dict):
                key = tuple(item.get(k) for k in keys)
                if key in seen:
                    yield jsonschema.ValidationError(f"duplicate entry for key {dict(zip(keys, key, strict=True))}")
                seen.add(key)
    elif list_type == "set":
        seen_items: list[Any] = []
        for item in instance:
            if item in seen_items:
                yield jsonschema.ValidationError(f"duplicate entry {item!r} in a set")
            seen_items.append(item)


def validate_pytorchjob(obj: Mapping[str, Any], crd: Path | None = None) -> list[SchemaViolation]:
    path = crd or crd_path()
    validator = _crd_validator(str(path))
    problems = [
        SchemaViolation(object_id(obj), _path(err.absolute_path), err.message, "PyTorchJob CRD v1.9.4 (strict)")
        for err in sorted(validator.iter_errors(dict(obj)), key=lambda e: list(e.absolute_path))
    ]
    return problems + [
        SchemaViolation(object_id(obj), where, message, "training operator v1.9.4")
        for where, message in _operator_refusals(obj)
    ]


def _operator_refusals(obj: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(path, what is wrong) of what training operator v1.9.4 refuses or crashes on that its CRD
    lets through."""
    spec = obj.get("spec") or {}
    policy = spec.get("elasticPolicy") or {}
    if "rdzvConf" in policy and not policy["rdzvConf"]:
        yield (
            "spec.elasticPolicy.rdzvConf",
            "an empty list: operator v1.9.4 slices it "
            "(val[:len(val)-1]) and crashes; omit the key when there is no conf",
        )
    if "nProcPerNode" in policy and "nprocPerNode" in spec:
        yield (
            "spec.elasticPolicy.nProcPerNode",
            "set together with spec.nprocPerNode: the operator rejects both; use spec.nprocPerNode",
        )
    replicas = spec.get("pytorchReplicaSpecs") or {}
    if policy and "Worker" not in replicas:
        yield "spec.pytorchReplicaSpecs", "elasticPolicy needs a Worker replica spec"
    for rtype, rspec in replicas.items():
        containers = (((rspec or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        if not any(c.get("name") == "pytorch" for c in containers):
            yield f"spec.pytorchReplicaSpecs.{rtype}", "no container named pytorch (the operator requires it)"
    name = (obj.get("metadata") or {}).get("name", "")
    if not re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", name) or len(name) > 63:
        yield "metadata.name", "not a DNS-1035 label (the operator rejects it)"


# ------------------------------------------------------------------ everything
def validate_objects(objects: Iterable[Mapping[str, Any]], kubernetes_version: str) -> list[SchemaViolation]:
    """Every object against its schema. Raises CrdSchemaMissing when there is a PyTorchJob
    and no CRD (validate_builtins checks the others alone)."""
    problems: list[SchemaViolation] = []
    for obj in objects:
        if is_pytorchjob(obj):
            problems += validate_pytorchjob(obj)
        else:
            problems += validate_builtin(obj, kubernetes_version)
    return problems


def _path(parts: Iterable[Any]) -> str:
    return ".".join(str(p) for p in parts)

"""What one run of the program declared, as the Pulumi engine would have received it: each
resource with its inputs (wire names, secrets unwrapped but remembered), options and mocked
outputs; the stack's outputs and the invokes made."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from lab.vocab.names import PROJECT

SECRET_PLACEHOLDER = "[secret]"


@dataclass
class RecordedResource:
    """One resource as the engine would have received it."""

    urn: str
    type: str
    name: str
    parent: str | None  # parent URN (None for the stack itself)
    custom: bool
    remote: bool
    inputs: dict[str, Any]
    secret_inputs: list[str]  # dotted paths of inputs that were secrets
    id: str | None = None
    state: dict[str, Any] = field(default_factory=dict)  # mocked outputs
    ignore_changes: list[str] = field(default_factory=list)
    replace_on_changes: list[str] = field(default_factory=list)
    dependencies: list[str] = field(default_factory=list)  # every dependency (URNs), implied ones too
    depends_on: list[str] = field(default_factory=list)  # explicit `depends_on` (not implied by an input)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)  # input -> URNs it came from
    provider: str | None = None
    protect: bool = False
    delete_before_replace: bool = False
    retain_on_delete: bool = False
    additional_secret_outputs: list[str] = field(default_factory=list)
    outputs: dict[str, Any] | None = None  # registered outputs (components)
    secret_outputs: list[str] = field(default_factory=list)

    @property
    def parent_name(self) -> str | None:
        return self.parent.rsplit("::", 1)[-1] if self.parent else None

    @property
    def label(self) -> str:
        return f"{self.type} {self.name!r}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["parent_name"] = self.parent_name
        return d


@dataclass
class Plan:
    """Everything one run of the program declared."""

    project: str
    stack: str
    config: dict[str, str]
    resources: list[RecordedResource]
    outputs: dict[str, Any]
    secret_outputs: list[str]
    invokes: list[dict[str, Any]]
    unknown_invokes: list[str] = field(default_factory=list)
    imported: list[tuple[str, str]] = field(default_factory=list)  # (type, id) taken back from the cloud
    prices: str | None = None  # the price table its cost is read from (`plan --prices`); None: the project's

    @property
    def kept_by_destroy(self) -> set[str]:
        """Ids of what `pulumi destroy` would leave in the cloud (retainOnDelete)."""
        return {str(r.id) for r in self.resources if r.retain_on_delete and r.id}

    @property
    def cloud(self) -> str | None:
        return self.config.get(f"{PROJECT}:cloud")

    def of_type(self, *types: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.type in types]

    def one(self, type_: str, name: str | None = None) -> RecordedResource:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            raise LookupError(
                f"expected exactly one {type_} {name or ''!s}, found {len(found)}: {[r.name for r in found]}"
            )
        return found[0]

    def by_urn(self, urn: str) -> RecordedResource | None:
        return next((r for r in self.resources if r.urn == urn), None)

    def waits_for(self, later: RecordedResource, earlier: RecordedResource) -> bool:
        """True when `later` depends on `earlier`, directly or through other resources."""
        seen, todo = set(), list(later.dependencies)
        while todo:
            urn = todo.pop()
            if urn == earlier.urn:
                return True
            if urn in seen:
                continue
            seen.add(urn)
            if (r := self.by_urn(urn)) is not None:
                todo.extend(r.dependencies)
        return False

    def children(self, urn: str | None) -> list[RecordedResource]:
        return [r for r in self.resources if r.parent == urn]

    def to_json_dict(self, *, show_secrets: bool = False) -> dict[str, Any]:
        def mask(r: RecordedResource) -> dict[str, Any]:
            d = r.to_dict()
            if not show_secrets:
                d["inputs"] = mask_paths(d["inputs"], r.secret_inputs)
                if d["outputs"] is not None:
                    d["outputs"] = mask_paths(d["outputs"], r.secret_outputs)
                d["state"] = mask_paths(d["state"], r.secret_inputs)
            return d

        outputs = {
            k: (SECRET_PLACEHOLDER if k in self.secret_outputs and not show_secrets else v)
            for k, v in self.outputs.items()
        }
        return {
            "project": self.project,
            "stack": self.stack,
            "config": self.config,
            "resources": [mask(r) for r in self.resources],
            "outputs": outputs,
            "secret_outputs": sorted(self.secret_outputs),
            "invokes": self.invokes,
        }


def mask_paths(value: Any, paths: Iterable[str]) -> Any:
    """Copy of `value` with each dotted path replaced by SECRET_PLACEHOLDER."""
    value = json.loads(json.dumps(value, default=str))
    for path in paths:
        parts = path.split(".") if path else []
        if not parts:
            return SECRET_PLACEHOLDER
        cur = value
        for i, part in enumerate(parts):
            key: Any = int(part) if isinstance(cur, list) and part.isdigit() else part
            last = i == len(parts) - 1
            try:
                if last:
                    cur[key] = SECRET_PLACEHOLDER
                else:
                    cur = cur[key]
            except (KeyError, IndexError, TypeError):
                break
    return value

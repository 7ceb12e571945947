"""Checks of a recorded plan and what they report.

A check is a name, a line of description and a test of whether it applies to a plan. Checks
answered by one pass over the plan come as a `CheckSuite`: its `run(plan)` yields a
`Finding` per problem, each naming its check, the resource, the property, the value and
what was expected:

    ERROR [guardrail:spot-pool] azure-native:containerservice:AgentPool 'aks-gpu-spot':
        scaleSetEvictionPolicy='Deallocate': expected 'Delete' (...)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from lab.program.recording import Plan, RecordedResource

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One problem: which check, how bad, which resource and property, the value, what fits."""

    check: str
    severity: str  # "error" | "warning"
    resource: str  # "<type token> '<name>'" (or "stack" for stack outputs)
    property: str  # dotted path (ARM body path for conformance, input path otherwise)
    value: Any
    expected: str

    def __str__(self) -> str:
        return (
            f"{self.severity.upper()} [{self.check}] {self.resource}: "
            f"{self.property}={_short(self.value)}: expected {self.expected}"
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["message"] = str(self)
        return d

    @classmethod
    def error(cls, check: str, resource: RecordedResource | str, prop: str, value: Any, expected: str) -> Finding:
        return cls(check, ERROR, _label(resource), prop, value, expected)

    @classmethod
    def warning(cls, check: str, resource: RecordedResource | str, prop: str, value: Any, expected: str) -> Finding:
        return cls(check, WARNING, _label(resource), prop, value, expected)


def _label(resource: Any) -> str:
    return resource if isinstance(resource, str) else resource.label


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == ERROR]


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    applies: Callable[[Plan], bool]


@dataclass(frozen=True)
class CheckSuite:
    """Checks one pass over the plan answers: `run` yields findings named after them."""

    checks: tuple[Check, ...]
    run: Callable[[Plan], Iterable[Finding]]


def single(name: str, run: Callable[[Plan], Iterable[Finding]], applies: Callable[[Plan], bool]) -> CheckSuite:
    """A suite of one check; its description is the first line of `run`'s docstring."""
    description = (run.__doc__ or name).strip().splitlines()[0]
    return CheckSuite((Check(name, description, applies),), run)


def custom_resources(plan: Plan, prefixes: str | tuple[str, ...]) -> list[RecordedResource]:
    """The plan's custom resources (those a provider creates, not components) whose type
    starts with `prefixes` (one, or any of several)."""
    return [r for r in plan.resources if r.custom and r.type.startswith(prefixes)]

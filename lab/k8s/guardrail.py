"""What a guardrail is: the context it reads (`GuardrailContext`), what it reports
(`Violation`) and the guardrail itself (`Guardrail`: a name and a check of every object we would
apply). lab/k8s/platform_guardrails.py lists the guardrails."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lab.vocab.platform_facts import PlatformFacts


@dataclass(frozen=True)
class GuardrailContext:
    facts: PlatformFacts = field(default_factory=PlatformFacts)
    # True when the objects include the platform itself (plan); False for a job alone (submit).
    expect_platform: bool = True
    inference_priority_class: str = "elastic-inference"


@dataclass(frozen=True)
class Violation:
    """Where (object), which property, its value, and what is expected instead."""

    where: str
    prop: str
    value: Any
    expected: str

    def __str__(self) -> str:
        prop = f" {self.prop}={self.value!r}" if self.prop else ""
        return f"{self.where}:{prop}: expected {self.expected}"


Objects = list[Mapping[str, Any]]


@dataclass(frozen=True)
class Guardrail:
    name: str
    check: Callable[[Objects, GuardrailContext], list[Violation]]

    @property
    def description(self) -> str:
        return (self.check.__doc__ or self.name).strip().splitlines()[0]

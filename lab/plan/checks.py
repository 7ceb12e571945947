"""Check registry of `elastic-lab plan`: functions `check(plan) -> iterable of Finding`.

A check receives the recorded `Plan` (lab.plan.harness) and yields a `Finding` per problem.
Each finding names the resource, the property, the value and what was expected:

    ERROR [guardrail:spot-pool] azure-native:containerservice:AgentPool 'aks-gpu-spot':
        scaleSetEvictionPolicy='Deallocate': expected 'Delete' (...)

Add checks from any module:

    from lab.plan.checks import Finding, register_check

    @register_check("k8s:pytorchjob-schema", applies=lambda plan: bool(plan.with_prefix("kubernetes:")))
    def pytorchjob_schema(plan):
        for r in plan.with_prefix("kubernetes:kubeflow.org/v1:PyTorchJob"):
            ...
            yield Finding.error("k8s:pytorchjob-schema", r, "spec.elasticPolicy.rdzvId", value, "a unique id")

and make sure the module is imported before `run_checks`: list it in `CHECK_MODULES`, or
name it `lab/plan/check_<something>.py` (imported automatically).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:
    from lab.plan.harness import Plan, RecordedResource

ERROR = "error"
WARNING = "warning"

# Modules whose import registers checks (in this order). Modules named
# lab/plan/check_*.py are imported as well.
CHECK_MODULES = ["lab.plan.arm", "lab.plan.guardrails"]


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
    def error(cls, check: str, resource: "RecordedResource | str", prop: str, value: Any, expected: str) -> "Finding":
        return cls(check, ERROR, _label(resource), prop, value, expected)

    @classmethod
    def warning(cls, check: str, resource: "RecordedResource | str", prop: str, value: Any, expected: str) -> "Finding":
        return cls(check, WARNING, _label(resource), prop, value, expected)


def _label(resource: Any) -> str:
    return resource if isinstance(resource, str) else resource.label


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


CheckFn = Callable[["Plan"], Iterable[Finding]]


@dataclass(frozen=True)
class RegisteredCheck:
    name: str
    fn: CheckFn
    applies: Callable[["Plan"], bool]
    description: str


_REGISTRY: dict[str, RegisteredCheck] = {}


def register_check(
    name: str, *, applies: Callable[["Plan"], bool] | None = None, description: str = ""
) -> Callable[[CheckFn], CheckFn]:
    """Decorator: add `fn` to the registry under `name` (re-registering replaces it).
    `applies(plan)` says whether the check is relevant to this plan (default: always)."""

    def deco(fn: CheckFn) -> CheckFn:
        doc = description or next(iter((fn.__doc__ or "").strip().splitlines()), "")
        _REGISTRY[name] = RegisteredCheck(name, fn, applies or (lambda plan: True), doc)
        return fn

    return deco


def load_check_modules() -> None:
    """Import CHECK_MODULES and every lab/plan/check_*.py (each registers its checks)."""
    for mod in CHECK_MODULES:
        importlib.import_module(mod)
    import lab.plan as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("check_"):
            importlib.import_module(f"lab.plan.{info.name}")


def registered_checks() -> dict[str, RegisteredCheck]:
    load_check_modules()
    return dict(_REGISTRY)


class UnknownCheck(LookupError):
    """`run_checks(only=...)` named checks nobody registered; `names` and `known` list them."""

    def __init__(self, names: list[str], known: list[str]):
        self.names, self.known = list(names), sorted(known)
        super().__init__(
            f"unknown check(s) {', '.join(map(repr, self.names))}: expected one of {', '.join(self.known)}"
        )

    def __str__(self) -> str:
        return str(self.args[0])


def check_unknown(names: Iterable[str] | None) -> None:
    """Raise UnknownCheck if any of `names` is not a registered check (None: all checks)."""
    if names is None:
        return
    checks = registered_checks()
    unknown = [n for n in names if n not in checks]
    if unknown:
        raise UnknownCheck(unknown, list(checks))


@dataclass
class CheckRun:
    name: str
    applied: bool
    findings: list[Finding]


def run_checks(plan: "Plan", only: Iterable[str] | None = None) -> list[CheckRun]:
    """Run every registered check (or those named in `only`) that applies to `plan`.

    Raises UnknownCheck (before running any) when `only` names an unregistered check.
    A check that raises is reported as an error finding of that check, not a crash."""
    checks = registered_checks()
    wanted = list(only) if only is not None else list(checks)
    check_unknown(wanted)
    runs: list[CheckRun] = []
    for name in wanted:
        check = checks[name]
        if not check.applies(plan):
            runs.append(CheckRun(name, False, []))
            continue
        try:
            findings = list(check.fn(plan))
        except Exception as exc:  # noqa: BLE001 - a broken check must not hide the others
            findings = [Finding.error(name, "plan", "<check>", f"{type(exc).__name__}: {exc}", "the check to run without crashing")]
        runs.append(CheckRun(name, True, findings))
    return runs


def findings_of(runs: Iterable[CheckRun]) -> list[Finding]:
    return [f for r in runs for f in r.findings]


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == ERROR]

"""The training platform's offline checks (lab/k8s/checks.py) in the plan's check registry.

Every Kubernetes object the platform declares or renders (real Helm) is validated against
the Kubernetes schema of the cluster's version and, for PyTorchJobs, the training operator
v1.9.4 CRD; then the platform guardrails run. Imported automatically (lab/plan/check_*.py).

Without the CRD file (../shared/schemas, or $ELASTIC_LAB_SCHEMAS) `k8s:pytorchjob-crd` is
skipped with a warning naming where it looked: the plan still passes, and says so.
"""

from __future__ import annotations

from typing import Any, Iterable

from lab.k8s.checks import HELM_CHART_TYPE, PLATFORM_TYPE, PlatformReport, check_platforms
from lab.k8s.guardrails import GUARDRAILS
from lab.k8s.validate import CRD_FILE
from lab.plan.checks import Finding, register_check

# The last plan checked and its reports (the plan is held, so its identity is not reused).
_LAST: list[Any] = [None, []]


def _reports(plan: Any) -> list[PlatformReport]:
    if _LAST[0] is not plan:
        _LAST[:] = [plan, check_platforms(plan.resources)]
    return _LAST[1]


def _has_platform(plan: Any) -> bool:
    return bool(plan.of_type(PLATFORM_TYPE))


def _has_device_plugin(plan: Any) -> bool:
    return any(not str(r.inputs.get("chart", "")).startswith(("charts/", "/")) for r in plan.of_type(HELM_CHART_TYPE))


def _findings(plan: Any, check: str, prefix: str) -> Iterable[Finding]:
    for report in _reports(plan):
        if check in report.skipped:
            yield Finding.warning(check, f"{PLATFORM_TYPE} {report.component!r}", "crd", CRD_FILE, report.skipped[check])
        for item in report.failed(prefix):
            yield Finding.error(check, item.resource, item.prop or "-", item.value, item.expected)


def _register(check: str, prefix: str, doc: str, applies: Any = _has_platform) -> None:
    def fn(plan: Any) -> Iterable[Finding]:
        return list(_findings(plan, check, prefix))

    fn.__doc__ = doc
    register_check(check, applies=applies, description=doc)(fn)


_register("k8s:render", "k8s:render", "our charts render with the values the platform passes (helm-python-sdk)")
_register("k8s:schema", "k8s:schema", "every platform object validates against the cluster version's Kubernetes schema (strict)")
_register("k8s:pytorchjob-crd", "k8s:pytorchjob-crd", "rendered PyTorchJobs validate against the training operator v1.9.4 CRD")
_register("platform:device-plugin", "platform:device-plugin", "NVIDIA device plugin 0.20.0 on GPU nodes, tolerating the spot and GPU taints",
          lambda plan: _has_platform(plan) and _has_device_plugin(plan))
_register("platform:training-operator", "platform:training-operator", "training operator v1.9.x standalone overlay at a pinned ref")
for _name, _fn in GUARDRAILS.items():
    _register(f"guardrail:{_name}", f"guardrail:{_name}", (_fn.__doc__ or _name).strip().splitlines()[0])

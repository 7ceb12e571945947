"""The checks `elastic-lab plan` runs on a recorded plan, as one explicit list.

`run_checks` runs every suite (lab.plan.findings.CheckSuite) with a wanted, applicable check
once, and reports a `CheckRun` per check; a suite that raises is an error finding of each of
its checks, not a crash.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lab.plan import (
    aks_guardrails,
    arm,
    aws_api,
    capacity_checks,
    cost_checks,
    eks_guardrails,
    platform_checks,
    registry_checks,
    secret_outputs,
)
from lab.plan.findings import CheckSuite, Finding, single
from lab.program.recording import Plan
from lab.vocab.errors import Refused

CHECKS: list[CheckSuite] = [
    single(arm.CHECK, arm.arm_conformance, arm.applies),
    single("guardrail:spot-pool", aks_guardrails.spot_pools, aks_guardrails.is_aks),
    single("guardrail:gpu-pool", aks_guardrails.gpu_pool, aks_guardrails.is_aks),
    single(capacity_checks.CHECK, capacity_checks.ranks, capacity_checks.applies),
    single("guardrail:on-demand-pools", aks_guardrails.on_demand_pools, aks_guardrails.is_aks),
    single("guardrail:autoscaled-count", aks_guardrails.autoscaled_count, aks_guardrails.is_aks),
    single("guardrail:cluster-features", aks_guardrails.cluster_features, aks_guardrails.has_managed_cluster),
    single("guardrail:network-policy", aks_guardrails.network_policy, aks_guardrails.has_managed_cluster),
    single(
        "guardrail:storage-outside-node-rg",
        aks_guardrails.storage_outside_node_rg,
        aks_guardrails.has_checkpoint_account,
    ),
    single("guardrail:pool-operations", aks_guardrails.pool_operations, aks_guardrails.is_aks),
    single("guardrail:checkpoints-kept", aks_guardrails.checkpoints_kept, aks_guardrails.has_checkpoint_account),
    single("guardrail:maintenance-window", aks_guardrails.maintenance_window, aks_guardrails.has_managed_cluster),
    single(cost_checks.CHECK, cost_checks.priced, cost_checks.applies),
    single(registry_checks.CHECK, registry_checks.image_registry, registry_checks.applies),
    single(registry_checks.TRAINER_IMAGE_CHECK, registry_checks.trainer_image, registry_checks.has_platform),
    single("guardrail:no-plain-secrets", secret_outputs.no_plain_secrets, lambda plan: True),
    single(aws_api.CHECK, aws_api.aws_conformance, aws_api.applies),
    single("guardrail:eks-on-demand-groups", eks_guardrails.on_demand_groups, eks_guardrails.is_eks),
    single("guardrail:eks-gpu-group", eks_guardrails.gpu_group, eks_guardrails.is_eks),
    single("guardrail:eks-scale-from-zero", eks_guardrails.scale_from_zero, eks_guardrails.is_eks),
    single("guardrail:eks-group-operations", eks_guardrails.group_operations, eks_guardrails.is_eks),
    single("guardrail:eks-network-policy", eks_guardrails.network_policy_enforced, eks_guardrails.is_eks),
    single("guardrail:eks-metrics-server", eks_guardrails.metrics_server, eks_guardrails.is_eks),
    single("guardrail:bucket-not-public", eks_guardrails.bucket_not_public, eks_guardrails.has_bucket),
    single("guardrail:eks-checkpoints-kept", eks_guardrails.checkpoints_kept, eks_guardrails.has_bucket),
    single("guardrail:bucket-lifecycle", eks_guardrails.bucket_lifecycle, eks_guardrails.has_bucket),
    single("guardrail:eks-registry-force-delete", eks_guardrails.registry_force_deleted, eks_guardrails.has_registry),
    single("guardrail:eks-s3-endpoint", eks_guardrails.s3_gateway_endpoint, eks_guardrails.has_nat_routes),
    single("guardrail:fis-targets-gpu-spot", eks_guardrails.fis_targets_gpu_spot, eks_guardrails.has_fis),
    platform_checks.SUITE,
]


def check_names(checks: Sequence[CheckSuite] = CHECKS) -> list[str]:
    return [c.name for suite in checks for c in suite.checks]


class UnknownCheck(Refused, LookupError):
    """`run_checks(only=...)` named checks that are not in the list; `names` and `known` list them."""

    def __init__(self, names: list[str], known: list[str]):
        self.names, self.known = list(names), sorted(known)
        super().__init__(
            f"unknown check(s) {', '.join(map(repr, self.names))}: expected one of {', '.join(self.known)}"
        )

    def __str__(self) -> str:
        return str(self.args[0])


def check_unknown(names: Iterable[str] | None, checks: Sequence[CheckSuite] = CHECKS) -> None:
    """Raise UnknownCheck if any of `names` is not a check of `checks` (None: all checks)."""
    if names is None:
        return
    known = check_names(checks)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UnknownCheck(unknown, known)


@dataclass
class CheckRun:
    name: str
    applied: bool
    findings: list[Finding]


def run_checks(plan: Plan, only: Iterable[str] | None = None, checks: Sequence[CheckSuite] = CHECKS) -> list[CheckRun]:
    """Run every check (or those named in `only`) that applies to `plan`, in list order.

    Raises UnknownCheck (before running any) when `only` names a check not in `checks`."""
    wanted = list(only) if only is not None else check_names(checks)
    check_unknown(wanted, checks)
    runs: dict[str, CheckRun] = {}
    for suite in checks:
        chosen = [c for c in suite.checks if c.name in wanted]
        applied = [c for c in chosen if c.applies(plan)]
        for c in chosen:
            runs[c.name] = CheckRun(c.name, c in applied, [])
        if not applied:
            continue
        names = {c.name for c in applied}
        try:
            for finding in suite.run(plan):
                if finding.check in names:
                    runs[finding.check].findings.append(finding)
        except Exception as exc:  # noqa: BLE001 - a broken check must not hide the others
            for name in names:
                runs[name].findings = [
                    Finding.error(
                        name, "plan", "<check>", f"{type(exc).__name__}: {exc}", "the check to run without crashing"
                    )
                ]
    return [runs[name] for name in wanted]


def findings_of(runs: Iterable[CheckRun]) -> list[Finding]:
    return [f for r in runs for f in r.findings]

"""The checks of `elastic-lab plan` as a Pulumi policy pack, so that
`pulumi preview/up --policy-pack policy` enforces them on the real deployment: the same check
functions (lab.plan.check_list.CHECKS) run on a `Plan` rebuilt from what the engine hands a pack.

What the engine hands a pack, and how it becomes a Plan (lab.program.recording), shaped as the
harness records one under mocks:

- Resource policies (`Analyze`) receive each resource's inputs as it is registered; stack
  policies (`AnalyzeStack`) receive every resource of the stack at the end with its outputs
  (the engine passes `Outputs` there, and pulumi-policy documents `PolicyResource.props` as
  "the outputs of the resource"), options, parent, provider and dependencies. The pack has one
  resource policy, `plan-inputs`, that reports nothing and keeps each resource's inputs by URN
  (`InputsSeen`); the stack policies rebuild each `RecordedResource` from those inputs and the
  stack's view: its outputs as `state` (a component's as its registered `outputs`), its
  `ignore_changes`, `protect`, parent and dependencies (`depends_on`: the dependencies no
  input implies, as the recording monitor derives them). A resource whose inputs no resource
  policy kept (the policy disabled by policy config) has its outputs stand for its inputs: in a
  preview of a create they are the same.
- Values: pulumi-policy hands plain values with secrets unwrapped and, in a preview, unknown
  values as sentinel strings; the engine sends numbers as doubles. They are read back as
  lab.program.wire reads the recording monitor's: whole numbers are ints again, an unknown is
  "<unknown>" (UNKNOWN).
- Remote components: the engine registers a Helm Chart v4 or kustomize Directory v2 without
  its inputs (chart, version, values, directory), and registers what it renders as its
  children: each Kubernetes object a custom resource whose parent is the component, the whole
  object its inputs. The platform's checks run on those (lab.plan.platform_checks): our charts'
  objects as Helm rendered them, the device plugin's DaemonSets (chart label, image,
  tolerations, node affinity; its repository is not visible on them), the operator's
  Deployment as its transforms left it (its image, instead of the overlay's ref). A finding
  naming a rendered object (`Kind/namespace/name`) is reported on that object's URN. Only
  where a chart or Directory of the platform shows neither inputs nor a rendered object (a
  preview where it could not be rendered) do the platform's checks report "not applicable",
  naming it.
- The stack resource (`pulumi:pulumi:Stack`): its outputs are the stack's outputs.
- Config: the CLI starts the pack's process with the stack's config in PULUMI_CONFIG (secrets
  decrypted), which `pulumi.runtime.get_config_env` reads; project and stack names come from
  the URNs.

The policies:

- One StackValidationPolicy per check of CHECKS, named after it, MANDATORY: it reports each
  error finding of its check with the message `elastic-lab plan` prints, on the URN of the
  resource the finding names. A check that applies to nothing in the stack (`plan`'s "not
  applied") reports "not applicable".
- `plan-warnings`, ADVISORY: every warning finding (its message names its check), and every
  error finding that cannot be decided yet because it turns on a value unknown in the preview
  (or a check that crashed on a plan holding unknowns). pulumi-policy gives a policy one
  enforcement level for all it reports, so a check's own MANDATORY policy cannot report a
  warning without failing the deployment; one advisory policy carries them all.
- Evidence the engine does not hand a pack: secretness (pulumi-policy unwraps secrets before a
  validation policy sees them; only remediations keep the mark) and `retainOnDelete` (not among
  the options a policy sees: PolicyResourceOptions holds protect, ignoreChanges,
  deleteBeforeReplace, aliases, customTimeouts, additionalSecretOutputs and parent). The checks
  that need them (WITHHELD) report "not applicable" with the reason; `elastic-lab plan` runs them.

Importing this module starts nothing: `pack()` builds the PolicyPack, whose constructor serves
the analyzer to the CLI until it is stopped, and only policy/__main__.py calls it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pulumi.runtime.config import get_config_env
from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyPack,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy import proxy as policy_proxy
from pulumi_policy.deserialize import serialize_properties

from lab.k8s.objects import object_id
from lab.plan import platform_checks
from lab.plan.check_list import CHECKS, CheckRun, run_checks
from lab.plan.findings import ERROR, WARNING, CheckSuite, Finding
from lab.program.recording import Plan, RecordedResource
from lab.program.wire import decode
from lab.vocab.names import PROJECT

PACK_NAME = PROJECT
WARNINGS_POLICY = "plan-warnings"
INPUTS_POLICY = "plan-inputs"
STACK_TYPE = "pulumi:pulumi:Stack"
PROVIDER_PREFIX = "pulumi:providers:"
# How an unknown value reads in a Plan (lab.program.wire.decode turns the wire's sentinel into it).
UNKNOWN = "<unknown>"
# run_checks reports a check that crashed as an error finding of this property.
CRASHED = "<check>"

_RETAIN_ON_DELETE = (
    "retainOnDelete is not among the resource options the engine hands a policy pack (pulumi-policy's "
    "PolicyResourceOptions: protect, ignoreChanges, deleteBeforeReplace, aliases, customTimeouts, "
    "additionalSecretOutputs, parent): `elastic-lab plan` checks it"
)
# Checks whose evidence the engine never hands a pack: their policies report "not applicable", with why.
WITHHELD: dict[str, str] = {
    "guardrail:no-plain-secrets": (
        "pulumi-policy hands a validation policy every value with its secretness stripped (it keeps the mark "
        "for remediations only), so a plain output cannot be told from a secret one: `elastic-lab plan` checks it"
    ),
    "guardrail:checkpoints-kept": _RETAIN_ON_DELETE,
    "guardrail:eks-checkpoints-kept": _RETAIN_ON_DELETE,
}
# The platform's checks: its charts from their inputs, or from what they rendered (lab.plan.platform_checks).
PLATFORM_CHECKS = frozenset(c.name for c in platform_checks.SUITE.checks)

# pulumi-policy's sentinels of an unknown value, by type; the wire's string sentinel stands for all.
_UNKNOWN_SENTINELS = frozenset(
    {
        policy_proxy.UNKNOWN_BOOLEAN_VALUE,
        policy_proxy.UNKNOWN_NUMBER_VALUE,
        policy_proxy.UNKNOWN_STRING_VALUE,
        policy_proxy.UNKNOWN_ARRAY_VALUE,
        policy_proxy.UNKNOWN_ASSET_VALUE,
        policy_proxy.UNKNOWN_ARCHIVE_VALUE,
        policy_proxy.UNKNOWN_OBJECT_VALUE,
    }
)


# --------------------------------------------------------------------------- values


def plain(props: Mapping[str, Any] | None) -> dict[str, Any]:
    """Properties as pulumi-policy hands them (proxies that raise on unknowns, numbers as doubles)
    -> plain Python as the recording monitor keeps them: ints, "<unknown>", keys sorted."""
    if not props:
        return {}
    # serialize_properties unwraps pulumi-policy's proxies without reading the unknowns through them.
    raw = _one_unknown(serialize_properties(props))
    return dict(decode(raw, "", []))


def _one_unknown(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _one_unknown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_one_unknown(v) for v in value]
    if isinstance(value, str) and value in _UNKNOWN_SENTINELS:
        return policy_proxy.UNKNOWN_STRING_VALUE
    return value


def _has_unknown(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_unknown(v) for v in value)
    return isinstance(value, str) and value == UNKNOWN


# --------------------------------------------------------------------------- inputs


class InputsSeen:
    """Each resource's inputs, by URN, as the engine hands them to resource policies (`Analyze`).

    The engine may analyze resources in parallel (the pack serves from a thread pool): a lock
    guards the map."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inputs: dict[str, dict[str, Any]] = {}

    def record(self, args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        """The `plan-inputs` policy's validation: keeps the inputs, reports nothing."""
        inputs = plain(args.props)
        with self._lock:
            self._inputs[args.urn] = inputs

    def get(self, urn: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._inputs.get(urn)
        return copy.deepcopy(found) if found is not None else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._inputs)


def input_recorder(inputs: InputsSeen) -> ResourceValidationPolicy:
    """The resource policy that keeps every resource's inputs for the stack policies."""
    return ResourceValidationPolicy(
        name=INPUTS_POLICY,
        description="Keeps each resource's inputs for the checks of `elastic-lab plan` (reports nothing).",
        validate=inputs.record,
        enforcement_level=EnforcementLevel.ADVISORY,
    )


# --------------------------------------------------------------------------- the plan


def plan_from_stack(
    args: StackValidationArgs, *, inputs: InputsSeen | None = None, config: Mapping[str, Any] | None = None
) -> Plan:
    """The Plan the engine's view of the stack amounts to (see the module's docstring).

    inputs: the inputs the resource policies kept (None: each resource's outputs stand for them).
    config: the stack's config, full keys (None: PULUMI_CONFIG, as the CLI passes it to the pack)."""
    values = dict(get_config_env()) if config is None else dict(config)
    stack_outputs: dict[str, Any] = {}
    resources: list[RecordedResource] = []
    for pr in args.resources:
        outputs = plain(pr.props)
        if pr.resource_type == STACK_TYPE:
            stack_outputs = outputs
            continue
        resources.append(_recorded(pr, outputs, inputs.get(pr.urn) if inputs is not None else None))
    stack, project = _stack_and_project(pr.urn for pr in args.resources)
    return Plan(
        project=project,
        stack=stack,
        config={k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()},
        resources=resources,
        outputs=stack_outputs,
        secret_outputs=[],  # secretness is stripped before a policy sees a value (WITHHELD)
        invokes=[],
    )


def _recorded(pr: PolicyResource, outputs: dict[str, Any], inputs: dict[str, Any] | None) -> RecordedResource:
    # The engine names a provider for every custom resource (default providers too), none for a
    # component; a provider resource is custom and has none.
    custom = pr.provider is not None or pr.resource_type.startswith(PROVIDER_PREFIX)
    parent = pr.parent.urn if pr.parent is not None else pr.opts.parent
    deps = [d.urn for d in pr.dependencies]
    prop_deps = {k: [d.urn for d in v] for k, v in pr.property_dependencies.items()}
    implied = {u for urns in prop_deps.values() for u in urns}
    return RecordedResource(
        urn=pr.urn,
        type=pr.resource_type,
        name=pr.name,
        parent=parent or None,
        custom=custom,
        remote=False,  # the engine does not say; no check reads it
        inputs=inputs if inputs is not None else copy.deepcopy(outputs),
        secret_inputs=[],
        state=outputs if custom else {},
        ignore_changes=list(pr.opts.ignore_changes or []),
        dependencies=deps,
        depends_on=[d for d in deps if d not in implied and d != parent],
        property_dependencies=prop_deps,
        provider=pr.provider.urn if pr.provider is not None else None,
        protect=bool(pr.opts.protect),
        delete_before_replace=bool(pr.opts.delete_before_replace),
        additional_secret_outputs=list(pr.opts.additional_secret_outputs or []),
        outputs=None if custom else outputs,
    )


def _stack_and_project(urns: Any) -> tuple[str, str]:
    """(stack, project) from the first URN: urn:pulumi:<stack>::<project>::<type>::<name>."""
    for urn in urns:
        head, _, rest = str(urn).partition("::")
        if head.startswith("urn:pulumi:") and rest:
            return head.removeprefix("urn:pulumi:"), rest.split("::", 1)[0]
    return "", PROJECT


# --------------------------------------------------------------------------- checking


@dataclass
class StackView:
    """One stack as the pack sees it: its Plan, and each check's run, made once (lazily, one
    suite at a time) however many policies ask."""

    plan: Plan
    checks: Sequence[CheckSuite]
    urns: dict[str, str]  # label of a resource ("<type> '<name>'") or object ("Kind/ns/name") -> its URN
    unknowns: bool  # the plan holds values unknown until the update (a preview)
    remote_unseen: str | None  # why the platform's checks cannot run, or None
    runs: dict[str, CheckRun] = field(default_factory=dict)

    @classmethod
    def of(cls, plan: Plan, checks: Sequence[CheckSuite]) -> StackView:
        unseen = [r.label for r in platform_checks.unseen_components(plan.resources)]
        return cls(
            plan=plan,
            checks=checks,
            urns=_urns(plan),
            unknowns=any(_has_unknown(r.inputs) or _has_unknown(r.state) for r in plan.resources),
            remote_unseen=(
                f"neither the inputs nor a rendered object of {', '.join(unseen)} reached the policy pack (the engine "
                "registers a remote component without its inputs, and it rendered nothing): the platform's checks "
                "run in `elastic-lab plan`"
                if unseen
                else None
            ),
        )

    def withheld(self, name: str) -> str | None:
        """Why the check cannot run on what the engine hands a pack, or None."""
        if name in WITHHELD:
            return WITHHELD[name]
        if name in PLATFORM_CHECKS:
            return self.remote_unseen
        return None

    def run(self, name: str) -> CheckRun:
        if name not in self.runs:
            suite = next(s for s in self.checks if any(c.name == name for c in s.checks))
            for run in run_checks(self.plan, [c.name for c in suite.checks], [suite]):
                self.runs[run.name] = run
        return self.runs[name]

    def undecided(self, finding: Finding) -> bool:
        """An error that turns on a value unknown in this preview: decided by the update's analysis."""
        return self.unknowns and (UNKNOWN in repr(finding.value) or finding.property == CRASHED)

    def urn(self, finding: Finding) -> str | None:
        """The URN of the resource a finding names (None: the stack as a whole)."""
        return self.urns.get(finding.resource)


def _urns(plan: Plan) -> dict[str, str]:
    """Each resource's label, and each Kubernetes object's `Kind/namespace/name` (how the platform's
    guardrails name one), to its URN where it names one resource only."""
    names = [(r.label, r.urn) for r in plan.resources]
    names += [
        (object_id(r.inputs), r.urn)
        for r in plan.resources
        if r.custom and r.type.startswith("kubernetes:") and {"apiVersion", "kind"} <= set(r.inputs)
    ]
    counts = Counter(name for name, _ in names)
    return {name: urn for name, urn in names if counts[name] == 1}


class _Views:
    """The last stack seen by the policies of one pack. The engine calls every stack policy with
    the same stack, each time as new objects: the plan's fingerprint tells it is the same."""

    def __init__(self, checks: Sequence[CheckSuite], inputs: InputsSeen | None) -> None:
        self._checks, self._inputs = checks, inputs
        self._lock = threading.Lock()
        self._key: str | None = None
        self._view: StackView | None = None

    def check(self, args: StackValidationArgs, use: Callable[[StackView], None]) -> None:
        plan = plan_from_stack(args, inputs=self._inputs)
        key = hashlib.sha256(json.dumps(asdict(plan), sort_keys=True, default=str).encode()).hexdigest()
        with self._lock:
            if self._view is None or self._key != key:
                self._key, self._view = key, StackView.of(plan, self._checks)
            use(self._view)


def _enforce(name: str, views: _Views) -> Callable[[StackValidationArgs, ReportViolation], None]:
    """The validation of a check's own policy: its error findings, decided ones only."""

    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        def use(view: StackView) -> None:
            reason = view.withheld(name)
            if reason:
                args.not_applicable(reason)
            run = view.run(name)
            if not run.applied:
                args.not_applicable("the check applies to nothing in this stack (as in `elastic-lab plan`)")
            for finding in run.findings:
                if finding.severity == ERROR and not view.undecided(finding):
                    report_violation(str(finding), view.urn(finding))

        views.check(args, use)

    return validate


def _advise(views: _Views) -> Callable[[StackValidationArgs, ReportViolation], None]:
    """The validation of `plan-warnings`: every check's warnings and undecided errors."""

    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        def use(view: StackView) -> None:
            for suite in view.checks:
                for check in suite.checks:
                    if view.withheld(check.name):
                        continue
                    for finding in view.run(check.name).findings:
                        if finding.severity == WARNING:
                            report_violation(str(finding), view.urn(finding))
                        elif view.undecided(finding):
                            report_violation(f"UNKNOWN UNTIL THE UPDATE: {finding}", view.urn(finding))

        views.check(args, use)

    return validate


def policies(inputs: InputsSeen | None = None, checks: Sequence[CheckSuite] = CHECKS) -> list[StackValidationPolicy]:
    """One MANDATORY policy per check of `checks`, named after it, and the ADVISORY `plan-warnings`.

    inputs: what the pack's `plan-inputs` resource policy keeps (None: outputs stand for inputs)."""
    views = _Views(checks, inputs)
    made = [
        StackValidationPolicy(
            name=check.name,
            description=check.description,
            validate=_enforce(check.name, views),
            enforcement_level=EnforcementLevel.MANDATORY,
        )
        for suite in checks
        for check in suite.checks
    ]
    made.append(
        StackValidationPolicy(
            name=WARNINGS_POLICY,
            description="Warnings of the checks of `elastic-lab plan`, and errors that a preview cannot decide yet.",
            validate=_advise(views),
            enforcement_level=EnforcementLevel.ADVISORY,
        )
    )
    return made


def pack(name: str = PACK_NAME) -> PolicyPack:
    """Build the pack and serve it to the Pulumi CLI: PolicyPack's constructor prints the port and
    serves until the CLI stops the process. Only policy/__main__.py calls this."""
    inputs = InputsSeen()
    every: list[Policy] = [input_recorder(inputs), *policies(inputs)]
    return PolicyPack(
        name=name,
        policies=every,
        description="The checks of `elastic-lab plan` (guardrails and API conformance) on the real deployment.",
    )

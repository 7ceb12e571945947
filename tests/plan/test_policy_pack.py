"""The policy pack (lab.plan.policy_pack) under pulumi-policy's own seams: each resource's inputs
handed to the resource policies and the whole stack to the stack policies, as the engine and
pulumi-policy's analyzer server build them (protobuf Structs with numbers as doubles, read back by
the SDK's deserializer into its unknown-checking proxies), from the recorded plans of the real
stacks. The real stacks pass; each broken variant of the guardrail tests fails the policy named
after its check with the very messages `elastic-lab plan` prints. The platform's checks also run
on a real preview's view (tests/plan/real_preview.py: charts without inputs, their rendered
objects as children), where each broken variant of the platform guardrails fails too."""

from __future__ import annotations

import copy
import json
import re
import runpy
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyProviderResource,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import deserialize_properties

# What the SDK's analyzer server catches when a policy calls `args.not_applicable(reason)`.
from pulumi_policy.policy import _NotApplicableError
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from lab.k8s.job_values import chart_values, for_cluster
from lab.plan import platform_checks, policy_pack
from lab.plan.check_list import check_names, findings_of, run_checks
from lab.plan.findings import Finding, errors
from lab.plan.policy_pack import (
    INPUTS_POLICY,
    PLATFORM_CHECKS,
    STACK_TYPE,
    WARNINGS_POLICY,
    WITHHELD,
    InputsSeen,
    input_recorder,
    plan_from_stack,
    policies,
)
from lab.program.recording import Plan, RecordedResource
from lab.vocab.job import FaultTolerance, JobSpec, RdzvBackend
from lab.vocab.layout import ROOT
from lab.vocab.names import PROJECT
from lab.vocab.platform_facts import PlatformFacts
from tests.k8s.test_platform_guardrails import BROKEN as PLATFORM_BROKEN

from .real_preview import break_stack, real_preview, remote_components
from .test_aks_guardrails import BROKEN as AKS_BROKEN
from .test_aks_guardrails import GPU as AKS_GPU
from .test_eks_guardrails import BROKEN as EKS_BROKEN
from .test_eks_guardrails import GPU as EKS_GPU

MANDATORY, ADVISORY = EnforcementLevel.MANDATORY, EnforcementLevel.ADVISORY


# --------------------------------------------------------------------------- the engine's view


def _props(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """Properties as a policy receives them: a protobuf Struct from the engine, turned into a dict
    and deserialized by pulumi-policy, wrapped in its unknown-checking proxy."""
    struct = struct_pb2.Struct()
    struct.update(json.loads(json.dumps(value)))
    return unknown_checking_proxy(deserialize_properties(json_format.MessageToDict(struct)))


def _options(r: RecordedResource | None = None, parent: str | None = None) -> PolicyResourceOptions:
    return PolicyResourceOptions(
        bool(r and r.protect),
        list(r.ignore_changes) if r else [],
        bool(r and r.delete_before_replace),
        [],
        PolicyCustomTimeouts(0, 0, 0),
        list(r.additional_secret_outputs) if r else [],
        parent,
    )


@dataclass
class Engine:
    """What the engine hands the pack in one deployment of a plan: each resource's inputs to the
    resource policies, then the stack (outputs, options, parent, dependencies) to the stack policies."""

    resources: list[ResourceValidationArgs]
    stack: StackValidationArgs


def engine(plan: Plan, *, chart_inputs: bool = False) -> Engine:
    """The engine's view of `plan`. A custom resource has a provider (a default one where the program
    named none) and its mocked outputs; a component its registered outputs; a remote component
    (Helm Chart v4, kustomize Directory v2) is registered by its provider without inputs, and its
    outputs (the rendered objects) are left out; `chart_inputs` hands its inputs as if it had them."""
    stack_urn = f"urn:pulumi:{plan.stack}::{plan.project}::{STACK_TYPE}::{plan.project}-{plan.stack}"
    providers: dict[str, PolicyProviderResource] = {}

    def provider_of(r: RecordedResource) -> PolicyProviderResource | None:
        if not r.custom or r.type.startswith("pulumi:providers:"):
            return None
        if r.provider:
            urn = r.provider.rsplit("::", 1)[0]  # a provider reference is "<urn>::<id>"
        else:
            urn = f"urn:pulumi:{plan.stack}::{plan.project}::pulumi:providers:{r.type.split(':')[0]}::default"
        kind, name = urn.split("::")[2].rsplit("$", 1)[-1], urn.rsplit("::", 1)[-1]
        return providers.setdefault(urn, PolicyProviderResource(kind, _props({}), urn, name))

    analyzed = []
    for r in plan.resources:
        inputs = r.inputs if not r.remote or chart_inputs else {}
        analyzed.append(
            ResourceValidationArgs(r.type, _props(inputs), r.urn, r.name, _options(r, r.parent), provider_of(r))
        )

    # (resource, parent URN, dependencies, property dependencies), linked as the analyzer server does.
    pending: list[tuple[PolicyResource, str | None, list[str], dict[str, list[str]]]] = [
        (
            PolicyResource(
                STACK_TYPE, _props(plan.outputs), stack_urn, f"{PROJECT}-{plan.stack}", _options(), None, None, [], {}
            ),
            None,
            [],
            {},
        )
    ]
    known = {r.urn for r in plan.resources}
    for p in providers.values():
        if p.urn not in known:
            pending.append(
                (
                    PolicyResource(p.resource_type, p.props, p.urn, p.name, _options(), None, None, [], {}),
                    stack_urn,
                    [],
                    {},
                )
            )
    for r in plan.resources:
        outputs = r.state if r.custom else ({} if r.remote else r.outputs or {})
        resource = PolicyResource(r.type, _props(outputs), r.urn, r.name, _options(r), provider_of(r), None, [], {})
        pending.append((resource, r.parent, list(r.dependencies), dict(r.property_dependencies)))
    by_urn = {resource.urn: resource for resource, *_ in pending}
    for resource, parent, deps, prop_deps in pending:
        if parent is not None and parent in by_urn:
            resource.parent = by_urn[parent]
        resource.dependencies.extend(by_urn[d] for d in deps if d in by_urn)
        for key, urns in prop_deps.items():
            resource.property_dependencies[key] = [by_urn[u] for u in urns if u in by_urn]
    return Engine(analyzed, StackValidationArgs([resource for resource, *_ in pending]))


@dataclass
class Report:
    """What the pack answered: violations as (policy, level, message, URN), and the policies that
    said they do not apply, with why."""

    violations: list[tuple[str, EnforcementLevel, str, str | None]] = field(default_factory=list)
    not_applicable: dict[str, str] = field(default_factory=dict)

    def mandatory(self) -> set[tuple[str, str | None]]:
        return {(m, u) for _, level, m, u in self.violations if level == MANDATORY}


def analyze(plan: Plan, monkeypatch: pytest.MonkeyPatch, names: Iterable[str] | None = None, **view: Any) -> Report:
    """One deployment of `plan` under the pack: the stack's config in PULUMI_CONFIG (as the CLI
    starts the pack), every resource through `plan-inputs`, then the stack policies (all, or those
    named), each with a collector in place of pulumi-policy's `report_violation`."""
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps(plan.config))
    seen = InputsSeen()
    recorder = input_recorder(seen)
    made = policies(seen)
    seen_by_engine = engine(plan, **view)
    for args in seen_by_engine.resources:
        recorder.validate(args, _must_not_report)
    wanted = set(names) if names is not None else None
    report = Report()
    for policy in made:
        if wanted is not None and policy.name not in wanted:
            continue

        def collect(message: str, urn: str | None = None, policy: StackValidationPolicy = policy) -> None:
            report.violations.append((policy.name, policy.enforcement_level, message, urn))

        try:
            policy.validate(seen_by_engine.stack, collect)
        except _NotApplicableError as exc:
            report.not_applicable[policy.name] = exc.reason
    return report


def _must_not_report(message: str, urn: str | None = None) -> None:
    raise AssertionError(f"{INPUTS_POLICY} reported {message!r}")


def _urns_by_label(plan: Plan) -> dict[str, str]:
    counts = Counter(r.label for r in plan.resources)
    return {r.label: r.urn for r in plan.resources if counts[r.label] == 1}


# --------------------------------------------------------------------------- the policies


def test_every_check_is_a_mandatory_policy_of_its_name():
    made = policies()
    assert all(isinstance(p, StackValidationPolicy) for p in made)
    assert [p.name for p in made if p.enforcement_level == MANDATORY] == check_names()
    assert [(p.name, p.enforcement_level) for p in made if p.name not in check_names()] == [(WARNINGS_POLICY, ADVISORY)]
    assert all(p.description for p in made)
    assert set(WITHHELD) <= set(check_names())
    recorder = input_recorder(InputsSeen())
    assert isinstance(recorder, ResourceValidationPolicy)
    assert (recorder.name, recorder.enforcement_level) == (INPUTS_POLICY, ADVISORY)


@pytest.mark.processes
def test_importing_the_module_serves_nothing():
    # PolicyPack's constructor prints a port and serves forever: an import that built it would hang.
    done = subprocess.run(
        [sys.executable, "-c", "import lab.plan.policy_pack; print('imported')"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert (done.returncode, done.stdout) == (0, "imported\n"), done.stderr


def test_the_packs_entry_point_serves_the_pack(monkeypatch):
    served: list[dict[str, Any]] = []
    monkeypatch.setattr(policy_pack, "PolicyPack", lambda **kwargs: served.append(kwargs))
    runpy.run_path(str(ROOT / "policy" / "__main__.py"), run_name="__main__")
    [kwargs] = served
    assert kwargs["name"] == "elastic-spot-lab"
    assert [p.name for p in kwargs["policies"]] == [INPUTS_POLICY, *check_names(), WARNINGS_POLICY]


# --------------------------------------------------------------------------- the real stacks


def test_the_pack_sees_the_plan_the_harness_records(aks_plan, monkeypatch):
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps(aks_plan.config))
    seen = InputsSeen()
    view = engine(aks_plan, chart_inputs=True)
    for args in view.resources:
        input_recorder(seen).validate(args, _must_not_report)
    plan = plan_from_stack(view.stack, inputs=seen)
    assert (plan.project, plan.stack, plan.config, plan.outputs) == (
        aks_plan.project,
        aks_plan.stack,
        aks_plan.config,
        aks_plan.outputs,
    )
    fields = ("type", "name", "parent", "custom", "inputs", "ignore_changes", "dependencies", "depends_on")
    for recorded in aks_plan.resources:
        rebuilt = plan.by_urn(recorded.urn)
        assert rebuilt is not None, recorded.label
        assert {f: getattr(rebuilt, f) for f in fields} == {f: getattr(recorded, f) for f in fields}, recorded.label
        assert rebuilt.property_dependencies == recorded.property_dependencies, recorded.label
        if recorded.custom:
            assert rebuilt.state == recorded.state, recorded.label
        else:
            assert rebuilt.outputs == (recorded.outputs or {}), recorded.label
    # The engine's view has the default providers the program never declared, and nothing else more.
    extra = {r.type for r in plan.resources if aks_plan.by_urn(r.urn) is None}
    assert extra == {"pulumi:providers:azure-native"}


def test_without_kept_inputs_and_config_outputs_stand_in(eks_plan, monkeypatch):
    monkeypatch.delenv("PULUMI_CONFIG", raising=False)
    plan = plan_from_stack(engine(eks_plan).stack)
    assert plan.config == {}
    bucket = plan.one("aws:s3/bucket:Bucket")
    assert bucket.inputs == bucket.state == eks_plan.one("aws:s3/bucket:Bucket").state


@pytest.fixture(scope="module")
def aks_preview(aks_plan):
    return real_preview(aks_plan)


@pytest.fixture(scope="module")
def eks_preview(eks_plan):
    return real_preview(eks_plan)


@pytest.mark.parametrize("stack", ["aks_preview", "eks_preview"])
def test_the_real_stacks_pass_a_real_preview(request, monkeypatch, stack):
    """Every check applies as in `elastic-lab plan` (the platform's on what the charts rendered),
    save the withheld ones; nothing fails."""
    plan = request.getfixturevalue(stack)
    assert remote_components(plan) and not any(r.inputs for r in remote_components(plan))
    report = analyze(plan, monkeypatch)
    assert report.violations == []
    applied = {r.name: r.applied for r in run_checks(plan)}
    assert all(applied[name] for name in PLATFORM_CHECKS)
    for name in check_names():
        if name in WITHHELD:
            assert report.not_applicable[name] == WITHHELD[name]
        else:
            assert (name in report.not_applicable) == (not applied[name]), name


@pytest.mark.parametrize("stack", ["aks_plan", "eks_plan"])
def test_charts_with_neither_inputs_nor_rendered_objects_are_not_applicable(request, monkeypatch, stack):
    """A preview in which the charts rendered nothing: the platform's checks have nothing to go by."""
    plan = request.getfixturevalue(stack)
    report = analyze(plan, monkeypatch)  # the engine's view without the charts' children
    assert report.violations == []
    applied = {r.name: r.applied for r in run_checks(plan)}
    for name in check_names():
        if name in WITHHELD:
            assert report.not_applicable[name] == WITHHELD[name]
        elif name in PLATFORM_CHECKS and applied[name]:
            reason = report.not_applicable[name]
            assert "neither the inputs nor a rendered object of" in reason, name
            assert "kubernetes:helm.sh/v4:Chart 'platform-etcd'" in reason
        else:
            assert (name in report.not_applicable) == (not applied[name]), name


def test_one_chart_that_rendered_nothing_withholds_the_platforms_checks(aks_preview, monkeypatch):
    etcd = aks_preview.one("kubernetes:helm.sh/v4:Chart", "platform-etcd")
    plan = copy.deepcopy(aks_preview)
    plan.resources = [r for r in plan.resources if r.parent != etcd.urn]
    report = analyze(plan, monkeypatch, PLATFORM_CHECKS)
    assert report.violations == []
    assert set(report.not_applicable) == PLATFORM_CHECKS
    assert all(
        reason.startswith("neither the inputs nor a rendered object of kubernetes:helm.sh/v4:Chart 'platform-etcd' ")
        for reason in report.not_applicable.values()
    )


def test_the_platform_checks_run_where_the_charts_inputs_are_seen(aks_plan, monkeypatch):
    report = analyze(aks_plan, monkeypatch, PLATFORM_CHECKS, chart_inputs=True)
    assert report.violations == []
    applied = {r.name for r in run_checks(aks_plan, sorted(PLATFORM_CHECKS)) if r.applied}
    assert applied and not applied & set(report.not_applicable)


# --------------------------------------------------------------------------- broken variants

CASES = [("broken_plan", *case) for case in AKS_BROKEN] + [("broken_eks_plan", *case) for case in EKS_BROKEN]


@pytest.mark.parametrize(
    "fixture,check,mutate,fragments", [c[:1] + c[2:] for c in CASES], ids=[f"{c[0]}: {c[1]}" for c in CASES]
)
def test_a_broken_variant_fails_the_policy_of_its_check(request, monkeypatch, fixture, check, mutate, fragments):
    plan = request.getfixturevalue(fixture)
    mutate(plan)
    report = analyze(plan, monkeypatch, [check])
    if check in WITHHELD:
        assert (report.violations, report.not_applicable) == ([], {check: WITHHELD[check]})
        return
    urns = _urns_by_label(plan)
    expected = {(str(f), urns.get(f.resource)) for f in errors(findings_of(run_checks(plan, [check])))}
    assert expected, f"{check} passes the broken plan"
    assert {(policy, level) for policy, level, *_ in report.violations} == {(check, MANDATORY)}
    assert report.mandatory() == expected
    assert any(all(f in message for f in fragments) for message, _ in report.mandatory())
    assert any(urn is not None for _, urn in report.mandatory())


def test_a_warning_is_advisory(broken_plan, monkeypatch):
    broken_plan.one(*AKS_GPU).inputs["spotMaxPrice"] = 0.2
    report = analyze(broken_plan, monkeypatch, ["guardrail:spot-pool", WARNINGS_POLICY])
    [(policy, level, message, urn)] = report.violations
    assert (policy, level, urn) == (WARNINGS_POLICY, ADVISORY, broken_plan.one(*AKS_GPU).urn)
    assert message.startswith("WARNING [guardrail:spot-pool] ") and "never for price" in message


def test_an_eks_warning_is_advisory(broken_eks_plan, monkeypatch):
    broken_eks_plan.one(*EKS_GPU).inputs["instanceTypes"] = ["g5.xlarge"]
    report = analyze(broken_eks_plan, monkeypatch, ["guardrail:eks-gpu-group", WARNINGS_POLICY])
    assert [(p, level) for p, level, *_ in report.violations] == [(WARNINGS_POLICY, ADVISORY)]
    assert "WARNING [guardrail:eks-gpu-group]" in report.violations[0][2]


def test_a_value_unknown_in_the_preview_is_advisory(broken_plan, monkeypatch):
    broken_plan.one(*AKS_GPU).inputs["scaleSetEvictionPolicy"] = UNKNOWN_STRING_VALUE
    report = analyze(broken_plan, monkeypatch, ["guardrail:spot-pool", "arm-conformance", WARNINGS_POLICY])
    assert report.mandatory() == set()
    assert any(
        policy == WARNINGS_POLICY
        and message.startswith("UNKNOWN UNTIL THE UPDATE: ERROR [guardrail:spot-pool] ")
        and "scaleSetEvictionPolicy='<unknown>'" in message
        for policy, _, message, _ in report.violations
    ), report.violations


# --------------------------------------------------------------------------- broken platforms, real preview


def _jobs_named_as_in_the_guardrail_tests(facts: PlatformFacts) -> list[tuple[str, dict[str, Any]]]:
    """The sample jobs of the platform's check, named as tests/k8s's baseline names its jobs."""
    specs = [
        JobSpec(name="job-etcd"),
        JobSpec(name="job-c10d", rdzv_backend=RdzvBackend.C10D),
        JobSpec(name="job-perstep", fault_tolerance=FaultTolerance.PER_STEP),
        JobSpec(name="job-burst", min_nodes=1, max_nodes=3, burst_nodes=2),
    ]
    return [(f"sample job ({s.name})", chart_values(for_cluster(s, facts), facts)) for s in specs]


def _break_the_sample_jobs(monkeypatch: pytest.MonkeyPatch, breakage: Any) -> None:
    """A breakage of a job: the check renders its sample jobs from the platform's facts (no object
    of the stack), so it is applied to the objects the guardrails get."""
    monkeypatch.setattr(platform_checks, "sample_jobs", _jobs_named_as_in_the_guardrail_tests)
    guardrails = platform_checks.run_guardrails

    def run_broken(objects: list[dict[str, Any]], ctx: Any) -> Any:
        breakage(objects)
        return guardrails(objects, ctx)

    monkeypatch.setattr(platform_checks, "run_guardrails", run_broken)


def _one_run(message: str) -> str:
    """`message` with a sample job's rendezvous id masked: each rendering of the job draws it anew."""
    return re.sub(r"rdzvId='([a-z0-9-]+)-[0-9a-f]{8}'", r"rdzvId='\1-<run>'", message)


def _in_full(f: Finding) -> str:
    return f"{f.resource}: {f.property}={f.value!r}: expected {f.expected}"


@pytest.mark.parametrize("name", PLATFORM_BROKEN)
def test_a_broken_platform_fails_the_policy_of_its_guardrail_on_a_real_preview(aks_preview, monkeypatch, name):
    case = PLATFORM_BROKEN[name]
    check = f"guardrail:{case.guardrail}"
    plan = copy.deepcopy(aks_preview)
    if not break_stack(plan, case.breakage):
        _break_the_sample_jobs(monkeypatch, case.breakage)
    report = analyze(plan, monkeypatch, [check])
    found = errors(findings_of(run_checks(plan, [check])))
    assert found, f"{check} passes the broken plan"
    assert report.not_applicable == {}
    assert {(policy, level) for policy, level, *_ in report.violations} == {(check, MANDATORY)}
    assert {_one_run(message) for message, _ in report.mandatory()} == {_one_run(str(f)) for f in found}
    assert any(case.message in _in_full(f) for f in found), [_in_full(f) for f in found]


def test_a_rendered_objects_violation_is_reported_on_its_urn(aks_preview, monkeypatch):
    plan = copy.deepcopy(aks_preview)
    assert break_stack(plan, PLATFORM_BROKEN["etcd/no-node-selector"].breakage)
    deployment = plan.one("kubernetes:apps/v1:Deployment", "platform-etcd:training/etcd-rendezvous")
    report = analyze(plan, monkeypatch, ["guardrail:etcd-not-on-spot"])
    assert {urn for _, urn in report.mandatory()} == {deployment.urn}


def _device_plugin(plan: Plan) -> dict[str, Any]:
    name = "platform-nvidia-device-plugin:kube-system/platform-nvidia-device-plugin"
    return plan.one("kubernetes:apps/v1:DaemonSet", name).inputs


def _operator(plan: Plan) -> dict[str, Any]:
    return plan.one("kubernetes:apps/v1:Deployment", "platform-training-operator:kubeflow/training-operator").inputs


@pytest.mark.parametrize(
    "check,breakage,prop,fragment",
    [
        pytest.param(
            "platform:device-plugin",
            lambda plan: _device_plugin(plan)["metadata"]["labels"].update(
                {"helm.sh/chart": "nvidia-device-plugin-0.17.0"}
            ),
            "metadata.labels.helm.sh/chart",
            "expected 'nvidia-device-plugin-0.20.0'",
            id="device-plugin-chart-version",
        ),
        pytest.param(
            "platform:device-plugin",
            lambda plan: _device_plugin(plan)["spec"]["template"]["spec"]["containers"][0].update(
                {"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}
            ),
            "spec.template.spec.containers[nvidia-device-plugin-ctr].image",
            "expected nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
            id="device-plugin-image",
        ),
        pytest.param(
            "platform:device-plugin",
            lambda plan: _device_plugin(plan)["spec"]["template"]["spec"]["tolerations"].pop(),
            "spec.template.spec.tolerations",
            "expected a toleration of the GPU spot pool's taint kubernetes.azure.com/scalesetpriority=spot:NoSchedule",
            id="device-plugin-spot-taint",
        ),
        pytest.param(
            "platform:device-plugin",
            lambda plan: _device_plugin(plan)["spec"]["template"]["spec"].pop("affinity"),
            "spec.template.spec.affinity",
            "expected required node affinity to the GPU pool",
            id="device-plugin-affinity",
        ),
        pytest.param(
            "platform:training-operator",
            lambda plan: _operator(plan)["spec"]["template"]["spec"]["containers"][0].update(
                {"image": "ghcr.io/kubeflow/training-v1/training-operator:latest"}
            ),
            "spec.template.spec.containers[training-operator].image",
            "expected the image a v1.9.x standalone overlay pins",
            id="operator-image",
        ),
    ],
)
def test_a_broken_remote_chart_fails_its_policy_on_a_real_preview(
    aks_preview, monkeypatch, check, breakage, prop, fragment
):
    plan = copy.deepcopy(aks_preview)
    breakage(plan)
    report = analyze(plan, monkeypatch, [check])
    [finding] = errors(findings_of(run_checks(plan, [check])))
    assert (finding.property, report.not_applicable) == (prop, {})
    [(message, urn)] = report.mandatory()
    assert message == str(finding) and fragment in message
    assert urn == _urns_by_label(plan)[finding.resource]

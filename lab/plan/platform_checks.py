"""Offline checks of a declared training platform (what `elastic-lab plan` and the tests run).

Input: the resources a Pulumi program declared under mocks (lab.plan.recording.RecordedResource).
For every TrainingPlatform component:

1. its Kubernetes objects: the typed ones it declares (PriorityClass, Namespace, ...) from
   their inputs, and everything our own charts render (real Helm, helm-python-sdk) with the
   exact values and namespace the component passes; plus sample jobs rendered from
   charts/elastic-pytorchjob for the platform's facts (etcd-v2 and c10d);
   and the training operator's Deployment as its transforms place it (the component's
   `operatorPlacement` output: the overlay itself is remote and not rendered offline);
2. each object validated against the Kubernetes schema of the cluster's version, each
   PyTorchJob against the training operator v1.9.4 CRD (skipped, and said so, when the
   CRD file is absent: see lab/k8s/schemas.py);
3. the guardrails (lab/k8s/platform_guardrails.py), and checks of what cannot be rendered
   offline: the device plugin's chart, version, repository and values, and the operator's
   pinned kustomize ref.

`SUITE` reports each of these as a check of the plan (`k8s:render`, `k8s:schema`,
`k8s:pytorchjob-crd`, `platform:device-plugin`, `platform:training-operator`,
`guardrail:<name>`), all from one pass over the plan. Without the CRD file (schemas/ of the
project, or $ELASTIC_LAB_SCHEMAS) `k8s:pytorchjob-crd` is skipped with a warning naming where it
looked: the plan still passes, and says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.platform.values import operator_skeleton
from lab.k8s.helm import ChartRenderError, render_chart
from lab.k8s.job_values import chart_values, for_cluster
from lab.k8s.placement import pins_to, tolerates
from lab.k8s.platform_guardrails import GUARDRAILS, GuardrailContext, run_guardrails
from lab.k8s.schemas import (
    CRD_FILE,
    ENV_SCHEMAS_DIR,
    CrdSchemaMissing,
    crd_path,
    is_pytorchjob,
    schema_version_for,
    validate_objects,
)
from lab.plan.findings import Check, CheckSuite, Finding
from lab.plan.recording import Plan, RecordedResource
from lab.spec.job import JobSpec, RdzvBackend
from lab.spec.layout import JOB_CHART, ROOT
from lab.spec.names import PLATFORM_TYPE
from lab.spec.platform_facts import PlatformFacts
from lab.spec.versions import DEFAULT_KUBERNETES_VERSION, DEVICE_PLUGIN_CHART, DEVICE_PLUGIN_REPO, DEVICE_PLUGIN_VERSION

HELM_CHART_TYPE = "kubernetes:helm.sh/v4:Chart"
KUSTOMIZE_TYPE = "kubernetes:kustomize/v2:Directory"
# What the platform must install (lab/spec/versions.py: one definition).
DEVICE_PLUGIN = {"chart": DEVICE_PLUGIN_CHART, "version": DEVICE_PLUGIN_VERSION, "repo": DEVICE_PLUGIN_REPO}
CRD_CHECK = "k8s:pytorchjob-crd"
OPERATOR_DIRECTORY = re.compile(
    r"^(https://)?github\.com/kubeflow/(trainer|training-operator)(\.git)?/+manifests/overlays/standalone\?ref=v1\.9\.\d+$"
)


def problem(check: str, where: str, prop: str, value: Any, expected: str) -> Finding:
    """A failed check of one platform (an error of the plan); `prop` '-' when the whole
    object is meant."""
    return Finding.error(check, where, prop or "-", value, expected)


@dataclass
class PlatformReport:
    component: str  # the TrainingPlatform's name
    kubernetes_version: str
    schema_note: str
    objects: list[dict[str, Any]] = field(default_factory=list)
    items: list[Finding] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)  # check name -> objects/values checked
    skipped: dict[str, str] = field(default_factory=dict)  # check name -> what it needs and did not find

    def failed(self, check_prefix: str = "") -> list[Finding]:
        return [i for i in self.items if i.check.startswith(check_prefix)]


def typed_object(resource: RecordedResource) -> dict[str, Any] | None:
    """A typed pulumi-kubernetes resource's inputs as the Kubernetes object it applies."""
    inputs = dict(resource.inputs or {})
    if "apiVersion" not in inputs or "kind" not in inputs:
        return None
    return {k: v for k, v in inputs.items() if v is not None}


def _local_chart(chart: str) -> Path | None:
    path = Path(chart)
    if not path.is_absolute():
        path = ROOT / path
    return path if (path / "Chart.yaml").is_file() else None


def sample_jobs(facts: PlatformFacts) -> list[tuple[str, dict[str, Any]]]:
    """(label, chart values) of representative jobs on this platform: the default JobSpec
    with each rendezvous backend."""
    out = []
    for backend in (RdzvBackend.ETCD_V2, RdzvBackend.C10D):
        spec = for_cluster(JobSpec(name=f"sample-{backend.value.replace('-', '')}", rdzv_backend=backend), facts)
        out.append((f"sample job ({backend.value})", chart_values(spec, facts)))
    return out


def check_device_plugin(
    values: Mapping[str, Any], inputs: Mapping[str, Any], facts: PlatformFacts, label: str
) -> list[Finding]:
    items = []
    name = "platform:device-plugin"
    for key, want in (("chart", DEVICE_PLUGIN["chart"]), ("version", DEVICE_PLUGIN["version"])):
        if inputs.get(key) != want:
            items.append(problem(name, label, key, inputs.get(key), repr(want)))
    repo = (inputs.get("repositoryOpts") or {}).get("repo")
    if repo != DEVICE_PLUGIN["repo"]:
        items.append(problem(name, label, "repositoryOpts.repo", repo, DEVICE_PLUGIN["repo"]))
    tolerations = values.get("tolerations") or []
    for taint in facts.pools.gpu_taints:
        if not tolerates(tolerations, taint):
            items.append(
                problem(
                    name,
                    label,
                    "values.tolerations",
                    tolerations,
                    f"a toleration of the GPU spot pool's taint {taint.text()}",
                )
            )
    if not pins_to(
        {"affinity": values.get("affinity") or {}, "nodeSelector": values.get("nodeSelector") or {}},
        facts.pools.gpu_labels,
    ):
        items.append(
            problem(
                name,
                label,
                "values.affinity",
                values.get("affinity"),
                f"required node affinity to the GPU pool {dict(facts.pools.gpu_labels)}",
            )
        )
    return items


def operator_deployment(placement: Mapping[str, Any]) -> dict[str, Any]:
    """The operator's Deployment with the pod spec its transforms produce (the component's
    `operatorPlacement` output): what the guardrails and the schema check see of it."""
    obj = operator_skeleton()
    obj["spec"]["template"]["spec"] = dict(placement)
    return obj


def check_operator(inputs: Mapping[str, Any], label: str) -> list[Finding]:
    directory = inputs.get("directory", "")
    if not OPERATOR_DIRECTORY.match(str(directory)):
        return [
            problem(
                "platform:training-operator",
                label,
                "directory",
                directory,
                "the v1.9.x standalone overlay at a pinned tag (…/manifests/overlays/standalone?ref=v1.9.4), "
                "never master",
            )
        ]
    return []


def check_platforms(resources: Iterable[RecordedResource]) -> list[PlatformReport]:
    resources = list(resources)
    reports = []
    for comp in (r for r in resources if r.type == PLATFORM_TYPE):
        outputs = dict(comp.outputs or {})
        reports.append(_check_one(comp, outputs, [r for r in resources if r.parent == comp.urn]))
    return reports


def _check_one(comp: RecordedResource, outputs: Mapping[str, Any], children: list[RecordedResource]) -> PlatformReport:
    version = str(outputs.get("kubernetesVersion", DEFAULT_KUBERNETES_VERSION))
    try:
        _, note = schema_version_for(version)
    except ValueError as exc:
        note = str(exc)
    report = PlatformReport(comp.name, version, note)
    facts = PlatformFacts.from_dict(outputs["jobFacts"])
    ctx = GuardrailContext(
        facts=facts,
        inference_priority_class=str((outputs.get("priorityClasses") or {}).get("inference", "elastic-inference")),
    )
    objects: list[dict[str, Any]] = []
    for r in children:
        label = f"{r.type} {r.name!r}"
        if r.type == HELM_CHART_TYPE:
            inputs = dict(r.inputs or {})
            chart = _local_chart(str(inputs.get("chart", "")))
            if chart is None:
                report.items += check_device_plugin(inputs.get("values") or {}, inputs, facts, label)
                report.checked["platform:device-plugin"] = report.checked.get("platform:device-plugin", 0) + 1
                continue
            try:
                objects += render_chart(
                    chart,
                    inputs.get("values") or {},
                    release=inputs.get("name") or r.name,
                    namespace=inputs.get("namespace") or "default",
                )
            except ChartRenderError as exc:
                report.items.append(
                    problem("k8s:render", label, "values", inputs.get("values"), f"values the chart accepts ({exc})")
                )
        elif r.type == KUSTOMIZE_TYPE:
            report.items += check_operator(dict(r.inputs or {}), label)
            report.checked["platform:training-operator"] = 1
        elif r.type.startswith("kubernetes:") and r.custom:
            obj = typed_object(r)
            if obj is not None:
                objects.append(obj)
    if isinstance(outputs.get("operatorPlacement"), Mapping):
        objects.append(operator_deployment(outputs["operatorPlacement"]))
    for label, values in sample_jobs(facts):
        try:
            objects += render_chart(JOB_CHART, values, release=values["name"], namespace=facts.namespace)
        except ChartRenderError as exc:
            report.items.append(problem("k8s:render", label, "values", None, f"values the job chart accepts ({exc})"))
    report.objects = objects
    jobs = [o for o in objects if is_pytorchjob(o)]
    try:
        if jobs:
            crd_path()
        checkable = objects
    except CrdSchemaMissing as exc:
        # No CRD here: check every other object, and say loudly that PyTorchJobs were not.
        checkable = [o for o in objects if not is_pytorchjob(o)]
        report.skipped[CRD_CHECK] = (
            f"the file in one of {', '.join(str(d) for d in exc.looked_in)} (set {ENV_SCHEMAS_DIR} to the directory "
            f"holding it); check SKIPPED: {len(jobs)} PyTorchJob(s) not validated against the training operator "
            "v1.9.4 CRD"
        )
    for p in validate_objects(checkable, version):
        check = CRD_CHECK if "CRD" in p.schema or "operator" in p.schema else "k8s:schema"
        report.items.append(problem(check, p.obj, p.path, None, f"{p.message} [{p.schema}]"))
    report.checked["k8s:schema"] = len(objects) - len(jobs)
    if CRD_CHECK not in report.skipped:
        report.checked[CRD_CHECK] = len(jobs)
    for name, violations in run_guardrails(objects, ctx).items():
        report.checked[f"guardrail:{name}"] = len(objects)
        report.items += [problem(f"guardrail:{name}", v.where, v.prop, v.value, v.expected) for v in violations]
    return report


# ------------------------------------------------------------------ as checks of the plan
def has_platform(plan: Plan) -> bool:
    return bool(plan.of_type(PLATFORM_TYPE))


def has_device_plugin(plan: Plan) -> bool:
    """A platform with a remote (the device plugin's) chart among its charts."""
    return has_platform(plan) and any(
        _local_chart(str(r.inputs.get("chart", ""))) is None for r in plan.of_type(HELM_CHART_TYPE)
    )


PLATFORM_CHECKS = (
    Check("k8s:render", "our charts render with the values the platform passes (helm-python-sdk)", has_platform),
    Check(
        "k8s:schema",
        "every platform object validates against the cluster version's Kubernetes schema (strict)",
        has_platform,
    ),
    Check(CRD_CHECK, "rendered PyTorchJobs validate against the training operator v1.9.4 CRD", has_platform),
    Check(
        "platform:device-plugin",
        "NVIDIA device plugin 0.20.0 on GPU nodes, tolerating the spot and GPU taints",
        has_device_plugin,
    ),
    Check("platform:training-operator", "training operator v1.9.x standalone overlay at a pinned ref", has_platform),
    *(Check(f"guardrail:{g.name}", g.description, has_platform) for g in GUARDRAILS),
)


def findings(plan: Plan) -> Iterator[Finding]:
    """Every platform report of the plan as findings, each named after its check."""
    for report in check_platforms(plan.resources):
        where = f"{PLATFORM_TYPE} {report.component!r}"
        for check, note in report.skipped.items():
            yield Finding.warning(check, where, "crd", CRD_FILE, note)
        yield from report.items


SUITE = CheckSuite(PLATFORM_CHECKS, findings)

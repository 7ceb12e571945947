"""Offline checks of a declared platform (what `elastic-lab plan` and the tests run).

Input: the resources a Pulumi program declared under mocks (anything with `type`, `name`,
`inputs`, `outputs`, `urn`, `parent`, e.g. lab.plan.harness.RecordedResource). For every
TrainingPlatform component:

1. its Kubernetes objects: the typed ones it declares (PriorityClass, Namespace, ...) from
   their inputs, and everything our own charts render (real Helm, helm-python-sdk) with the
   exact values and namespace the component passes; plus sample jobs rendered from
   charts/elastic-pytorchjob for the platform's facts (etcd-v2 and c10d);
   and the training operator's Deployment as its transforms place it (the component's
   `operatorPlacement` output: the overlay itself is remote and not rendered offline);
2. each object validated against the Kubernetes schema of the cluster's version, each
   PyTorchJob against the training operator v1.9.4 CRD (skipped, and said so, when the
   CRD file is absent: see lab/k8s/validate.py);
3. the guardrails (lab/k8s/guardrails.py), and checks of what cannot be rendered offline:
   the device plugin's chart, version, repository and values, and the operator's pinned
   kustomize ref.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from components.platform.settings import DEVICE_PLUGIN_CHART, DEVICE_PLUGIN_REPO, DEVICE_PLUGIN_VERSION
from components.platform.values import operator_skeleton
from components.versions import DEFAULT_KUBERNETES_VERSION
from lab.jobspec import JobSpec, RdzvBackend
from lab.k8s.guardrails import GuardrailContext, Violation, run_guardrails
from lab.k8s.job_values import CHARTS_DIR, JOB_CHART, PlatformFacts, chart_values, facts_from_dict, for_cluster
from lab.k8s.render import ChartRenderError, render_chart
from lab.k8s.scheduling import taint_text
from lab.k8s.validate import ENV_SCHEMAS_DIR, CrdSchemaMissing, crd_path, is_pytorchjob, validate_objects
from lab.plan.harness import numbers_back

PLATFORM_TYPE = "elastic-spot-lab:platform:TrainingPlatform"
HELM_CHART_TYPE = "kubernetes:helm.sh/v4:Chart"
KUSTOMIZE_TYPE = "kubernetes:kustomize/v2:Directory"
# What the platform must install (components/platform/settings.py: one definition).
DEVICE_PLUGIN = {"chart": DEVICE_PLUGIN_CHART, "version": DEVICE_PLUGIN_VERSION, "repo": DEVICE_PLUGIN_REPO}
CRD_CHECK = "k8s:pytorchjob-crd"
OPERATOR_DIRECTORY = re.compile(
    r"^(https://)?github\.com/kubeflow/(trainer|training-operator)(\.git)?/+manifests/overlays/standalone\?ref=v1\.9\.\d+$"
)


@dataclass(frozen=True)
class Item:
    """One failed check: which check, which resource or object, property, value, expected."""

    check: str
    resource: str
    prop: str
    value: Any
    expected: str

    def __str__(self) -> str:
        prop = f" {self.prop}={self.value!r}" if self.prop else ""
        return f"[{self.check}] {self.resource}:{prop}: expected {self.expected}"


@dataclass
class PlatformReport:
    component: str  # the TrainingPlatform's name
    kubernetes_version: str
    schema_note: str
    objects: list[dict[str, Any]] = field(default_factory=list)
    items: list[Item] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)  # check name -> objects/values checked
    skipped: dict[str, str] = field(default_factory=dict)  # check name -> what it needs and did not find

    def failed(self, check_prefix: str = "") -> list[Item]:
        return [i for i in self.items if i.check.startswith(check_prefix)]


def typed_object(resource: Any) -> dict[str, Any] | None:
    """A typed pulumi-kubernetes resource's inputs as the Kubernetes object it applies."""
    inputs = numbers_back(dict(resource.inputs or {}))
    if "apiVersion" not in inputs or "kind" not in inputs:
        return None
    return {k: v for k, v in inputs.items() if v is not None}


def _local_chart(chart: str) -> Path | None:
    path = Path(chart)
    if not path.is_absolute():
        path = CHARTS_DIR.parent / path
    return path if (path / "Chart.yaml").is_file() else None


def sample_jobs(facts: PlatformFacts) -> list[tuple[str, dict[str, Any]]]:
    """(label, chart values) of representative jobs on this platform: the default JobSpec
    with each rendezvous backend."""
    out = []
    for backend in (RdzvBackend.ETCD_V2, RdzvBackend.C10D):
        spec = for_cluster(JobSpec(name=f"sample-{backend.value.replace('-', '')}", rdzv_backend=backend), facts)
        out.append((f"sample job ({backend.value})", chart_values(spec, facts)))
    return out


def check_device_plugin(values: Mapping[str, Any], inputs: Mapping[str, Any], facts: PlatformFacts, label: str) -> list[Item]:
    items = []
    name = "platform:device-plugin"
    for key, want in (("chart", DEVICE_PLUGIN["chart"]), ("version", DEVICE_PLUGIN["version"])):
        if inputs.get(key) != want:
            items.append(Item(name, label, key, inputs.get(key), repr(want)))
    repo = (inputs.get("repositoryOpts") or {}).get("repo")
    if repo != DEVICE_PLUGIN["repo"]:
        items.append(Item(name, label, "repositoryOpts.repo", repo, DEVICE_PLUGIN["repo"]))
    from lab.k8s.guardrails import pins_to, tolerates

    tolerations = values.get("tolerations") or []
    for taint in facts.pools.gpu_taints:
        if not tolerates(tolerations, taint):
            items.append(Item(name, label, "values.tolerations", tolerations, f"a toleration of the GPU spot pool's taint {taint_text(taint)}"))
    if not pins_to({"affinity": values.get("affinity") or {}, "nodeSelector": values.get("nodeSelector") or {}}, facts.pools.gpu_labels):
        items.append(Item(name, label, "values.affinity", values.get("affinity"), f"required node affinity to the GPU pool {dict(facts.pools.gpu_labels)}"))
    return items


def operator_deployment(placement: Mapping[str, Any]) -> dict[str, Any]:
    """The operator's Deployment with the pod spec its transforms produce (the component's
    `operatorPlacement` output): what the guardrails and the schema check see of it."""
    obj = operator_skeleton()
    obj["spec"]["template"]["spec"] = dict(placement)
    return obj


def check_operator(inputs: Mapping[str, Any], label: str) -> list[Item]:
    directory = inputs.get("directory", "")
    if not OPERATOR_DIRECTORY.match(str(directory)):
        return [Item("platform:training-operator", label, "directory", directory,
                     "the v1.9.x standalone overlay at a pinned tag (…/manifests/overlays/standalone?ref=v1.9.4), never master")]
    return []


def check_platforms(resources: Iterable[Any]) -> list[PlatformReport]:
    resources = list(resources)
    reports = []
    for comp in (r for r in resources if r.type == PLATFORM_TYPE):
        outputs = numbers_back(dict(comp.outputs or {}))
        reports.append(_check_one(comp, outputs, [r for r in resources if r.parent == comp.urn]))
    return reports


def _check_one(comp: Any, outputs: Mapping[str, Any], children: list[Any]) -> PlatformReport:
    from lab.k8s.validate import schema_version_for

    version = str(outputs.get("kubernetesVersion", DEFAULT_KUBERNETES_VERSION))
    try:
        _, note = schema_version_for(version)
    except ValueError as exc:
        note = str(exc)
    report = PlatformReport(comp.name, version, note)
    facts = facts_from_dict(outputs["jobFacts"])
    ctx = GuardrailContext(
        facts=facts,
        cloud=str(outputs.get("cloud", "aks")),
        inference_priority_class=str((outputs.get("priorityClasses") or {}).get("inference", "elastic-inference")),
    )
    objects: list[dict[str, Any]] = []
    for r in children:
        label = f"{r.type} {r.name!r}"
        if r.type == HELM_CHART_TYPE:
            inputs = numbers_back(dict(r.inputs or {}))
            chart = _local_chart(str(inputs.get("chart", "")))
            if chart is None:
                report.items += check_device_plugin(inputs.get("values") or {}, inputs, facts, label)
                report.checked["platform:device-plugin"] = report.checked.get("platform:device-plugin", 0) + 1
                continue
            try:
                objects += render_chart(chart, inputs.get("values") or {}, release=inputs.get("name") or r.name,
                                        namespace=inputs.get("namespace") or "default")
            except ChartRenderError as exc:
                report.items.append(Item("k8s:render", label, "values", inputs.get("values"), f"values the chart accepts ({exc})"))
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
            report.items.append(Item("k8s:render", label, "values", None, f"values the job chart accepts ({exc})"))
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
            f"holding it); check SKIPPED: {len(jobs)} PyTorchJob(s) not validated against the training operator v1.9.4 CRD"
        )
    for p in validate_objects(checkable, version):
        check = CRD_CHECK if "CRD" in p.schema or "operator" in p.schema else "k8s:schema"
        report.items.append(Item(check, p.obj, p.path, None, f"{p.message} [{p.schema}]"))
    report.checked["k8s:schema"] = len(objects) - len(jobs)
    if CRD_CHECK not in report.skipped:
        report.checked[CRD_CHECK] = len(jobs)
    for name, violations in run_guardrails(objects, ctx).items():
        report.checked[f"guardrail:{name}"] = len(objects)
        report.items += [Item(f"guardrail:{name}", v.where, v.prop, v.value, v.expected) for v in violations]
    return report


__all__ = ["CRD_CHECK", "Item", "PlatformReport", "Violation", "check_platforms", "operator_deployment", "sample_jobs"]

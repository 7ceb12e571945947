"""Offline checks of a declared training platform (what `elastic-lab plan` and the tests run).

Input: the resources a Pulumi program declared (lab.program.recording.RecordedResource), under
mocks or as the engine hands them to the policy pack. For every TrainingPlatform component:

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

A remote component seen without its inputs (a real `pulumi preview/up`: the engine registers a
Helm Chart v4 or kustomize Directory v2 without them) is checked by what it rendered: its
children, each Kubernetes object registered as a custom resource whose parent is the component.
Our charts' children are the objects Helm would render offline; the device plugin is checked on
its DaemonSets (chart and version from the helm.sh/chart label and the image, tolerations and
node affinity from the pod template; its repository is not visible there); the operator's
Deployment, as the transforms left it, stands in for the `operatorPlacement` reconstruction,
its image pinned to one a v1.9.x standalone overlay uses instead of the ref. The objects of a
chart stay out of the platform's own typed objects (their parent is the chart): none is counted
twice. `unseen_components` names the remote components of which neither is visible.

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
from lab.k8s.objects import containers, object_id, operator_workloads, pod_template
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
from lab.program.recording import Plan, RecordedResource
from lab.vocab.checkpoint_location import CheckpointAccess
from lab.vocab.job import FaultTolerance, JobSpec, RdzvBackend
from lab.vocab.layout import JOB_CHART, ROOT
from lab.vocab.names import PLATFORM_TYPE
from lab.vocab.platform_facts import PlatformFacts
from lab.vocab.versions import (
    DEFAULT_KUBERNETES_VERSION,
    DEVICE_PLUGIN_CHART,
    DEVICE_PLUGIN_REPO,
    DEVICE_PLUGIN_VERSION,
)

HELM_CHART_TYPE = "kubernetes:helm.sh/v4:Chart"
KUSTOMIZE_TYPE = "kubernetes:kustomize/v2:Directory"
# What the platform must install (lab/vocab/versions.py: one definition).
DEVICE_PLUGIN = {"chart": DEVICE_PLUGIN_CHART, "version": DEVICE_PLUGIN_VERSION, "repo": DEVICE_PLUGIN_REPO}
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin"  # the chart's image, tagged v<appVersion>
CRD_CHECK = "k8s:pytorchjob-crd"
OPERATOR_DIRECTORY = re.compile(
    r"^(https://)?github\.com/kubeflow/(trainer|training-operator)(\.git)?/+manifests/overlays/standalone\?ref=v1\.9\.\d+$"
)
# The operator image each v1.9.x standalone overlay pins (`images` of its kustomization.yaml):
# the tag is a commit, so the release is told by the whole image.
OPERATOR_IMAGES = {
    "v1.9.0": "kubeflow/training-operator:v1-5170a36",
    "v1.9.1": "ghcr.io/kubeflow/training-v1/training-operator:v1-5c0e763",
    "v1.9.2": "ghcr.io/kubeflow/training-v1/training-operator:v1-3f15cb8",
    "v1.9.3": "ghcr.io/kubeflow/training-v1/training-operator:v1-d6eb98e",
    "v1.9.4": "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489",
}
# The input without which a remote component of the platform shows nothing of itself but its children.
REMOTE_INPUT = {HELM_CHART_TYPE: "chart", KUSTOMIZE_TYPE: "directory"}


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
    with each rendezvous backend, in per-step mode (its lighthouse), with a burst (its core and
    its borrowed part), and writing its checkpoints with its own clients where the platform's
    storage has a URL."""
    out = []
    for backend in (RdzvBackend.ETCD_V2, RdzvBackend.C10D):
        spec = for_cluster(JobSpec(name=f"sample-{backend.value.replace('-', '')}", rdzv_backend=backend), facts)
        out.append((f"sample job ({backend.value})", chart_values(spec, facts)))
    spec = for_cluster(JobSpec(name="sample-perstep", fault_tolerance=FaultTolerance.PER_STEP), facts)
    out.append(("sample job (per-step)", chart_values(spec, facts)))
    if facts.burst_priority_class:
        spec = for_cluster(JobSpec(name="sample-burst", burst_nodes=1), facts)
        out.append(("sample job (a core and a burst)", chart_values(spec, facts)))
    if facts.checkpoint_url:
        spec = for_cluster(JobSpec(name="sample-client"), facts, CheckpointAccess.CLIENT)
        out.append(("sample job (checkpoint access client)", chart_values(spec, facts)))
    return out


def team_sample_jobs(facts: PlatformFacts) -> list[tuple[str, dict[str, Any], str]]:
    """(label, chart values, namespace) of a job of each team, with a burst, in its namespace: it
    must reach the platform's etcd (its NetworkPolicy), mount the team's claim and fit its quota."""
    out = []
    for team in facts.teams:
        seen = facts.for_team(team)
        spec = for_cluster(JobSpec(name=f"sample-{team}"[:40].rstrip("-"), burst_nodes=1), seen)
        out.append((f"sample job of team {team}", chart_values(spec, seen), seen.namespace))
    return out


Rendered = list[tuple[RecordedResource, dict[str, Any]]]  # a remote component's children and their objects


def rendered_children(resources: Iterable[RecordedResource], urn: str) -> Rendered:
    """What a remote component rendered, as the engine registers it: each Kubernetes object a
    custom resource whose parent is the component, the object its inputs."""
    out = []
    for r in resources:
        if r.parent == urn and r.custom and (obj := typed_object(r)) is not None:
            out.append((r, obj))
    return out


def inputs_unseen(resource: RecordedResource) -> bool:
    """A remote component registered without the input that says what it installs."""
    return resource.type in REMOTE_INPUT and REMOTE_INPUT[resource.type] not in (resource.inputs or {})


def unseen_components(resources: Iterable[RecordedResource]) -> list[RecordedResource]:
    """The platforms' remote components of which neither the inputs nor a rendered object is
    visible (e.g. a preview where a chart could not be rendered): nothing to check them by."""
    resources = list(resources)
    platforms = {r.urn for r in resources if r.type == PLATFORM_TYPE}
    return [
        r for r in resources if r.parent in platforms and inputs_unseen(r) and not rendered_children(resources, r.urn)
    ]


def is_device_plugin(obj: Mapping[str, Any]) -> bool:
    """A DaemonSet of the NVIDIA device plugin's chart: its name label, chart label or image."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    images = [str(c.get("image", "")) for c in containers((pod_template(obj) or {}).get("spec") or {})]
    return obj.get("kind") == "DaemonSet" and (
        labels.get("app.kubernetes.io/name") == DEVICE_PLUGIN["chart"]
        or str(labels.get("helm.sh/chart", "")).startswith(f"{DEVICE_PLUGIN['chart']}-")
        or any(image.split(":")[0] == DEVICE_PLUGIN_IMAGE for image in images)
    )


def _placement_problems(pod: Mapping[str, Any], facts: PlatformFacts, label: str, at: str) -> list[Finding]:
    """The device plugin's pods (`pod`: its values or its pod spec, `at` the path to them) on
    every GPU spot node and nowhere else: each GPU pool taint tolerated, the GPU pool required."""
    name = "platform:device-plugin"
    items = []
    tolerations = pod.get("tolerations") or []
    for taint in facts.pools.gpu_taints:
        if not tolerates(tolerations, taint):
            items.append(
                problem(
                    name,
                    label,
                    f"{at}tolerations",
                    tolerations,
                    f"a toleration of the GPU spot pool's taint {taint.text()}",
                )
            )
    if not pins_to(
        {"affinity": pod.get("affinity") or {}, "nodeSelector": pod.get("nodeSelector") or {}},
        facts.pools.gpu_labels,
    ):
        items.append(
            problem(
                name,
                label,
                f"{at}affinity",
                pod.get("affinity"),
                f"required node affinity to the GPU pool {dict(facts.pools.gpu_labels)}",
            )
        )
    return items


def check_device_plugin(
    values: Mapping[str, Any], inputs: Mapping[str, Any], facts: PlatformFacts, label: str
) -> list[Finding]:
    """The device plugin's chart as the platform declares it: chart, version, repository, values."""
    items = []
    name = "platform:device-plugin"
    for key, want in (("chart", DEVICE_PLUGIN["chart"]), ("version", DEVICE_PLUGIN["version"])):
        if inputs.get(key) != want:
            items.append(problem(name, label, key, inputs.get(key), repr(want)))
    repo = (inputs.get("repositoryOpts") or {}).get("repo")
    if repo != DEVICE_PLUGIN["repo"]:
        items.append(problem(name, label, "repositoryOpts.repo", repo, DEVICE_PLUGIN["repo"]))
    return items + _placement_problems(values, facts, label, "values.")


def check_rendered_device_plugin(rendered: Rendered, facts: PlatformFacts) -> list[Finding]:
    """The device plugin's chart as it rendered: on each of its DaemonSets, chart and version (its
    helm.sh/chart label and image) and the pods' tolerations and node affinity. The repository a
    chart came from leaves no trace on what it renders: only its inputs show it."""
    items = []
    name = "platform:device-plugin"
    release = f"{DEVICE_PLUGIN['chart']}-{DEVICE_PLUGIN['version']}"
    image = f"{DEVICE_PLUGIN_IMAGE}:v{DEVICE_PLUGIN['version']}"
    for child, obj in rendered:
        if not is_device_plugin(obj):
            continue
        chart_label = ((obj.get("metadata") or {}).get("labels") or {}).get("helm.sh/chart")
        if chart_label is not None and chart_label != release:
            items.append(problem(name, child.label, "metadata.labels.helm.sh/chart", chart_label, repr(release)))
        pod = (pod_template(obj) or {}).get("spec") or {}
        for c in containers(pod):
            if c.get("image") != image:
                items.append(_image_problem(name, child, c, image))
        items += _placement_problems(pod, facts, child.label, "spec.template.spec.")
    return items


def _image_problem(check: str, child: RecordedResource, container: Mapping[str, Any], expected: str) -> Finding:
    """A rendered workload's container runs another image than `expected`."""
    where = f"spec.template.spec.containers[{container.get('name')}].image"
    return problem(check, child.label, where, container.get("image"), expected)


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


def check_rendered_operator(rendered: Rendered, label: str) -> list[Finding]:
    """The operator's overlay as it rendered: its Deployment runs the image a v1.9.x release pins."""
    name = "platform:training-operator"
    deployments = [(child, obj) for child, obj in rendered if operator_workloads([obj])]
    if not deployments:
        return [
            problem(
                name,
                label,
                "-",
                sorted(object_id(obj) for _, obj in rendered),
                "the training operator's Deployment among the objects the overlay rendered",
            )
        ]
    items = []
    for child, obj in deployments:
        for c in containers((pod_template(obj) or {}).get("spec") or {}):
            if c.get("image") not in OPERATOR_IMAGES.values():
                expected = (
                    f"the image a v1.9.x standalone overlay pins ({OPERATOR_IMAGES['v1.9.4']} at v1.9.4), "
                    "never master's"
                )
                items.append(_image_problem(name, child, c, expected))
    return items


def check_platforms(resources: Iterable[RecordedResource]) -> list[PlatformReport]:
    resources = list(resources)
    reports = []
    for comp in (r for r in resources if r.type == PLATFORM_TYPE):
        outputs = dict(comp.outputs or {})
        reports.append(_check_one(comp, outputs, resources))
    return reports


def _count(report: PlatformReport, check: str) -> None:
    report.checked[check] = report.checked.get(check, 0) + 1


def _chart_objects(
    chart: RecordedResource, rendered: Rendered, facts: PlatformFacts, report: PlatformReport
) -> list[dict[str, Any]]:
    """The objects one Helm chart of the platform adds to the platform's (the device plugin's none:
    its own check reads it), its findings into `report`."""
    inputs = dict(chart.inputs or {})
    if inputs_unseen(chart) and rendered:
        if any(is_device_plugin(obj) for _, obj in rendered):
            report.items += check_rendered_device_plugin(rendered, facts)
            _count(report, "platform:device-plugin")
            return []
        return [obj for _, obj in rendered]
    local = _local_chart(str(inputs.get("chart", "")))
    if local is None:
        report.items += check_device_plugin(inputs.get("values") or {}, inputs, facts, chart.label)
        _count(report, "platform:device-plugin")
        return []
    try:
        return render_chart(
            local,
            inputs.get("values") or {},
            release=inputs.get("name") or chart.name,
            namespace=inputs.get("namespace") or "default",
        )
    except ChartRenderError as exc:
        report.items.append(
            problem("k8s:render", chart.label, "values", inputs.get("values"), f"values the chart accepts ({exc})")
        )
        return []


def _check_one(comp: RecordedResource, outputs: Mapping[str, Any], resources: list[RecordedResource]) -> PlatformReport:
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
    objects = _platform_objects(comp, outputs, resources, facts, report)
    samples = [(label, values, facts.namespace) for label, values in sample_jobs(facts)]
    samples += team_sample_jobs(facts)
    for label, values, namespace in samples:
        try:
            objects += render_chart(JOB_CHART, values, release=values["name"], namespace=namespace)
        except ChartRenderError as exc:
            report.items.append(problem("k8s:render", label, "values", None, f"values the job chart accepts ({exc})"))
    report.objects = objects
    _check_schemas(objects, version, report)
    for name, violations in run_guardrails(objects, ctx).items():
        report.checked[f"guardrail:{name}"] = len(objects)
        report.items += [problem(f"guardrail:{name}", v.where, v.prop, v.value, v.expected) for v in violations]
    return report


def _platform_objects(
    comp: RecordedResource,
    outputs: Mapping[str, Any],
    resources: list[RecordedResource],
    facts: PlatformFacts,
    report: PlatformReport,
) -> list[dict[str, Any]]:
    """The Kubernetes objects the platform component declares: its charts' and the operator
    overlay's as they render (the operator's Deployment rebuilt from its placement where the
    overlay did not render), and its own objects."""
    objects: list[dict[str, Any]] = []
    operator_rendered = False
    for r in [child for child in resources if child.parent == comp.urn]:
        rendered = rendered_children(resources, r.urn) if r.type in REMOTE_INPUT else []
        if r.type == HELM_CHART_TYPE:
            objects += _chart_objects(r, rendered, facts, report)
        elif r.type == KUSTOMIZE_TYPE:
            if inputs_unseen(r) and rendered:
                # What the overlay rendered, after the transforms: the real Deployment, not its reconstruction.
                report.items += check_rendered_operator(rendered, r.label)
                objects += [obj for _, obj in rendered]
                operator_rendered = True
            else:
                report.items += check_operator(dict(r.inputs or {}), r.label)
            report.checked["platform:training-operator"] = 1
        elif r.type.startswith("kubernetes:") and r.custom:
            obj = typed_object(r)
            if obj is not None:
                objects.append(obj)
    if not operator_rendered and isinstance(outputs.get("operatorPlacement"), Mapping):
        objects.append(operator_deployment(outputs["operatorPlacement"]))
    return objects


def _check_schemas(objects: list[dict[str, Any]], version: str, report: PlatformReport) -> None:
    """Every object against the Kubernetes schemas of `version`, PyTorchJobs against the
    training operator's CRD (skipped, and said so, where the CRD's file is missing)."""
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


# ------------------------------------------------------------------ as checks of the plan
def has_platform(plan: Plan) -> bool:
    return bool(plan.of_type(PLATFORM_TYPE))


def has_device_plugin(plan: Plan) -> bool:
    """A platform with a remote (the device plugin's) chart among its charts, or, where a chart's
    inputs are unseen, with the device plugin among what a chart rendered."""
    platforms = {r.urn for r in plan.of_type(PLATFORM_TYPE)}
    for chart in plan.of_type(HELM_CHART_TYPE):
        if chart.parent not in platforms:
            continue
        if not inputs_unseen(chart):
            if _local_chart(str(chart.inputs.get("chart", ""))) is None:
                return True
        elif any(is_device_plugin(obj) for _, obj in rendered_children(plan.resources, chart.urn)):
            return True
    return False


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
        "NVIDIA device plugin 0.20.0 on GPU nodes, tolerating the spot and GPU taints (its chart repository only "
        "where the chart's inputs are seen: nothing it renders shows it)",
        has_device_plugin,
    ),
    Check(
        "platform:training-operator",
        "training operator v1.9.x standalone overlay at a pinned ref (where only what it rendered is seen: "
        "the image a v1.9.x overlay pins)",
        has_platform,
    ),
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

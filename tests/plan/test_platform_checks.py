"""The platform's checks in the plan of the project's stacks (aks-dev: cluster and platform
in one tree; byo: the platform alone from a kubeconfig path), and config problems of the
platform reported before anything is declared; and the same checks on a real preview's view
(tests/plan/real_preview.py), where the charts show what they rendered instead of their inputs."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest

from lab.k8s.objects import object_id
from lab.k8s.platform_guardrails import GUARDRAILS
from lab.plan.check_list import findings_of, run_checks
from lab.plan.findings import errors
from lab.plan.platform_checks import check_platforms, unseen_components
from lab.program.harness import run_program
from lab.vocab.layout import ROOT
from lab.vocab.names import PLATFORM_TYPE as PLATFORM
from lab.vocab.problems import InvalidInput
from tests.placements import TRAINER_IMAGE

from .real_preview import real_preview, remote_components

PLATFORM_CHECKS = {
    "k8s:render",
    "k8s:schema",
    "k8s:pytorchjob-crd",
    "platform:device-plugin",
    "platform:training-operator",
    "guardrail:etcd-not-on-spot",
    "guardrail:operator-on-cpu-pool",
    "guardrail:infra-not-preemptible-by-inference",
    "guardrail:workers-tolerate-exactly-gpu-spot-taints",
    "guardrail:rdzv-host-is-etcd-service",
    "guardrail:etcd-image-v3.5",
    "guardrail:no-global-default-priority-class",
    "guardrail:etcd-private",
    "guardrail:workers-spot-ready",
    "guardrail:checkpoints-writable-by-workers",
    "guardrail:rendezvous-moved-by-drains-only",
    "guardrail:disruption-budgets-satisfiable",
    "guardrail:notice-handler-on-spot-nodes",
    "guardrail:worker-failures-surface",
    "guardrail:job-autoscaler-fits",
    "platform:trainer-image",
}


def _plan(stack: str, overrides: dict | None = None):
    return run_program(stack, overrides)


@pytest.fixture(scope="module")
def aks_plan():
    return _plan("aks-dev", {"trainerImage": TRAINER_IMAGE})  # deployed: its image pushed


@pytest.fixture(scope="module")
def byo_plan():
    return _plan("byo")


def test_aks_dev_declares_cluster_and_platform_in_one_tree(aks_plan):
    platform = aks_plan.one(PLATFORM)
    cluster = aks_plan.one("elastic-spot-lab:aks:Cluster")
    assert platform.parent == cluster.parent  # both children of the stack
    children = {r.type for r in aks_plan.children(platform.urn)}
    assert {
        "kubernetes:helm.sh/v4:Chart",
        "kubernetes:kustomize/v2:Directory",
        "kubernetes:core/v1:PersistentVolume",
        "kubernetes:scheduling.k8s.io/v1:PriorityClass",
    } <= children
    # The platform uses the cluster's provider, its storage container and its federated identity.
    provider = aks_plan.one("pulumi:providers:kubernetes")
    assert all(r.provider and r.provider.startswith(provider.urn) for r in aks_plan.children(platform.urn) if r.custom)
    pv = aks_plan.one("kubernetes:core/v1:PersistentVolume")
    account = aks_plan.one("azure-native:storage:StorageAccount")
    assert pv.inputs["spec"]["csi"]["volumeAttributes"]["storageaccount"] == account.state["accountName"]
    identity = aks_plan.one("azure-native:managedidentity:UserAssignedIdentity", "aks-training")
    assert pv.inputs["spec"]["csi"]["volumeAttributes"]["clientID"] == identity.state["clientId"]
    fed = aks_plan.one("azure-native:managedidentity:FederatedIdentityCredential")
    sa = aks_plan.one("kubernetes:core/v1:ServiceAccount").inputs["metadata"]
    assert fed.inputs["subject"] == f"system:serviceaccount:{sa['namespace']}:{sa['name']}"
    # Workers tolerate exactly the taints the GPU spot pool declares.
    gpu_pool = aks_plan.one("azure-native:containerservice:AgentPool", "aks-gpu-spot")
    facts = platform.outputs["jobFacts"]
    assert sorted(facts["pools"]["gpuSpot"]["taints"]) == sorted(gpu_pool.inputs["nodeTaints"])


def test_byo_plans_the_platform_alone(byo_plan):
    types = {r.type for r in byo_plan.resources}
    assert not any(t.startswith(("azure-native:", "aws:")) for t in types)
    platform = byo_plan.one(PLATFORM)
    provider = byo_plan.one("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == "stacks/byo.kubeconfig.example.yaml"
    assert "kubeconfig" in provider.secret_inputs
    assert "platform-nvidia-device-plugin" not in {r.name for r in byo_plan.children(platform.urn)}  # gpusPerNode 0


@pytest.mark.parametrize("stack", ["aks-dev", "byo"])
def test_plan_checks_pass(stack, request, crd):
    plan = request.getfixturevalue("aks_plan" if stack == "aks-dev" else "byo_plan")
    runs = run_checks(plan)
    guardrails = {g.name for g in GUARDRAILS}
    ours = {
        r.name
        for r in runs
        if r.name.startswith(("k8s:", "platform:")) or r.name.removeprefix("guardrail:") in guardrails
    }
    assert ours == PLATFORM_CHECKS
    assert {r.name for r in runs if r.name in ours and not r.applied} == (
        set() if stack == "aks-dev" else {"platform:device-plugin"}
    )
    assert [str(f) for f in findings_of(runs)] == []


def test_plan_reports_a_broken_platform_config():
    with pytest.raises(InvalidInput, match=r"elastic-spot-lab:platform.etcd.tag.*expected a v3.5.x tag") as info:
        _plan(
            "byo",
            {
                "platform": {
                    "etcd": {"tag": "latest"},
                    "checkpoint": {"storageClass": "standard"},
                    "pools": {"gpuSpot": {"taints": ["x=y:NoSchedule"]}},
                }
            },
        )
    [problem] = info.value.problems
    # Key, value and expected as the platform's error carries them: the value quoted once.
    assert (problem.key, problem.value) == ("elastic-spot-lab:platform.etcd.tag", "latest")
    assert "elastic-spot-lab:platform.etcd.tag='latest' is invalid: expected a v3.5.x tag" in str(info.value)
    assert "\"'latest'\"" not in str(info.value)


def test_plan_rejects_a_checkpoint_auth_conflict_naming_both_keys():
    with pytest.raises(InvalidInput) as info:
        _plan("aks-dev", {"platform": {"checkpoint": {"workloadIdentityToken": True}}})
    [problem] = info.value.problems
    assert (problem.key, problem.value) == ("elastic-spot-lab:platform.checkpoint.workloadIdentityToken", True)
    assert "elastic-spot-lab:checkpointAuth='workload-identity-key'" in problem.expected
    plan = _plan(
        "aks-dev",
        {"platform": {"checkpoint": {"workloadIdentityToken": True}}, "checkpointAuth": "workload-identity-token"},
    )
    pv = plan.one("kubernetes:core/v1:PersistentVolume")
    assert pv.inputs["spec"]["csi"]["volumeAttributes"]["mountWithWorkloadIdentityToken"] == "true"


def test_aks_dev_checkpoint_mount_follows_checkpoint_auth(aks_plan):
    """The cluster's default checkpointAuth (workload-identity-key) mounts with the account key."""
    pv = aks_plan.one("kubernetes:core/v1:PersistentVolume")
    assert "mountWithWorkloadIdentityToken" not in pv.inputs["spec"]["csi"]["volumeAttributes"]


def _broken_etcd_values(settings, pools):
    from components.platform.values import etcd_values

    v = etcd_values(settings, pools)
    v["image"]["tag"] = "latest"  # the chart's schema rejects it
    return v


@pytest.mark.parametrize(
    "check,attr,replacement,message",
    [
        pytest.param(
            "k8s:render",
            "etcd_values",
            _broken_etcd_values,
            "values the chart accepts (chart etcd-rendezvous: invalid values: at '/image/tag'",
            id="render",
        ),
        pytest.param(
            "k8s:schema",
            "PART_OF",
            {"app.kubernetes.io/part-of": 5},
            "metadata.labels.app.kubernetes.io/part-of=None: expected 5 is not of type 'string'",
            id="schema",
        ),
    ],
)
def test_plan_checks_fail_on_a_broken_platform(check, attr, replacement, message, monkeypatch):
    """The plan's own checks (not only the report behind them) fail on a declared platform."""
    import components.platform.component as component

    monkeypatch.setattr(component, attr, replacement)
    plan = _plan("byo")
    [run] = run_checks(plan, [check])
    assert run.applied and errors(run.findings), check
    assert any(message in str(f) for f in run.findings), [str(f) for f in run.findings]


def test_plan_without_the_crd_warns_and_passes(monkeypatch, capsys):
    """No CRD file: `elastic-lab plan` skips the CRD check with a warning saying where it
    looked and how to point it elsewhere, and still exits 0."""
    from lab import cli
    from lab.k8s import schemas

    monkeypatch.setattr(schemas, "schema_dirs", lambda: [schemas.Path("/nowhere/shared/schemas")])
    status = cli.main(["plan", "--stack", "byo"])
    out = capsys.readouterr().out
    assert status == 0, out[-3000:]
    line = next(line for line in out.splitlines() if "WARNING [k8s:pytorchjob-crd]" in line)
    assert "/nowhere/shared/schemas" in line and "ELASTIC_LAB_SCHEMAS" in line and "SKIPPED" in line
    assert "✓ k8s:schema: ok" in out


@pytest.mark.processes
def test_cli_plan_byo():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "lab.cli", "plan", "--stack", "byo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "elastic-spot-lab:platform:TrainingPlatform platform" in proc.stdout
    assert "✓ guardrail:rdzv-host-is-etcd-service" in proc.stdout


@pytest.mark.parametrize(
    "stack,overrides,key",
    [
        pytest.param(
            "aks-dev",
            {"platform": {"etcd": {"tag": "latest"}}},
            "elastic-spot-lab:platform.etcd.tag",
            id="aks-etcd-latest",
        ),
        pytest.param(
            "aks-dev",
            {"platform": {"namespace": "jobs"}},
            "elastic-spot-lab:platform.namespace",
            id="aks-namespace-not-federated",
        ),
        pytest.param(
            "aks-dev",
            {"platform": {"checkpoint": {"workloadIdentityToken": True}}},
            "elastic-spot-lab:platform.checkpoint.workloadIdentityToken",
            id="aks-checkpoint-auth-conflict",
        ),
        pytest.param(
            "byo",
            {
                "platform": {
                    "etcd": {"tag": "latest"},
                    "checkpoint": {"storageClass": "standard"},
                    "pools": {"gpuSpot": {"taints": ["x=y:NoSchedule"]}},
                }
            },
            "elastic-spot-lab:platform.etcd.tag",
            id="byo-etcd-latest",
        ),
        pytest.param("byo", {"kubeconfig": None}, "elastic-spot-lab:kubeconfig", id="byo-no-kubeconfig"),
    ],
)
def test_bad_platform_config_declares_nothing(stack, overrides, key):
    """The platform's settings are checked by a config validator, inside config.load(): a bad
    value fails the program before the first resource (the cluster's included)."""
    with pytest.raises(InvalidInput) as info:
        _plan(stack, overrides)
    assert [p.key for p in info.value.problems] == [key]
    assert info.value.recorded_resources == []


def test_platform_problems_come_with_the_clusters(monkeypatch):
    """One InvalidInput lists the cluster's problems and the platform's together."""
    with pytest.raises(InvalidInput) as info:
        _plan("aks-dev", {"platform": {"etcd": {"tag": "latest"}}, "gpuMaxNodes": -1})
    fields = {p.key for p in info.value.problems}
    assert {"elastic-spot-lab:platform.etcd.tag", "elastic-spot-lab:gpuMaxNodes"} <= fields
    assert info.value.recorded_resources == []


# ------------------------------------------------------------------ a real preview's view
@pytest.mark.parametrize("stack", ["aks-dev", "eks-dev"])
def test_a_real_preview_checks_what_the_charts_rendered(stack, crd):
    """Charts without inputs, their objects as children: the same objects are checked (the
    operator's overlay adds its own), nothing fails, nothing is counted twice."""
    plan = _plan(stack)
    preview = real_preview(plan)
    [offline] = check_platforms(plan.resources)
    [seen] = check_platforms(preview.resources)
    assert [str(i) for i in seen.items] == [] and seen.skipped == {}
    ids = [object_id(o) for o in seen.objects]
    assert len(ids) == len(set(ids))
    assert {object_id(o) for o in offline.objects} <= set(ids)
    assert set(ids) - {object_id(o) for o in offline.objects} == {
        "Namespace/kubeflow",
        "ServiceAccount/kubeflow/training-operator",
        "Service/kubeflow/training-operator",
    }
    # Our charts' objects are what Helm renders offline; the operator's is the overlay's own.
    charts = {c.urn for c in remote_components(preview) if c.type == "kubernetes:helm.sh/v4:Chart"}
    rendered = {object_id(r.inputs) for r in preview.resources if r.parent in charts}
    assert "Deployment/training/etcd-rendezvous" in rendered
    by_id = {object_id(o): o for o in offline.objects}
    for o in seen.objects:
        if object_id(o) in rendered:
            assert o == by_id[object_id(o)], object_id(o)
    assert seen.checked.keys() == offline.checked.keys()
    assert seen.checked["platform:device-plugin"] == seen.checked["platform:training-operator"] == 1


def _only(preview, type_, name):
    return preview.one(type_, name).inputs


DEVICE_PLUGIN = (
    "kubernetes:apps/v1:DaemonSet",
    "platform-nvidia-device-plugin:kube-system/platform-nvidia-device-plugin",
)
OPERATOR = ("kubernetes:apps/v1:Deployment", "platform-training-operator:kubeflow/training-operator")


def test_a_real_preview_checks_the_device_plugin_on_its_daemonset(aks_plan):
    preview = real_preview(aks_plan)
    plugin = _only(preview, *DEVICE_PLUGIN)
    plugin["metadata"]["labels"]["helm.sh/chart"] = "nvidia-device-plugin-0.17.0"
    pod = plugin["spec"]["template"]["spec"]
    pod["containers"][0]["image"] = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    pod["tolerations"] = [t for t in pod["tolerations"] if t.get("key") != "nvidia.com/gpu"]
    pod["nodeSelector"] = {"kubernetes.io/os": "linux"}
    del pod["affinity"]
    [run] = run_checks(preview, ["platform:device-plugin"])
    assert run.applied
    label = f"{DEVICE_PLUGIN[0]} {DEVICE_PLUGIN[1]!r}"
    assert {(f.resource, f.property) for f in run.findings} == {
        (label, "metadata.labels.helm.sh/chart"),
        (label, "spec.template.spec.containers[nvidia-device-plugin-ctr].image"),
        (label, "spec.template.spec.tolerations"),
        (label, "spec.template.spec.affinity"),
    }
    assert any("nvidia.com/gpu=present:NoSchedule" in str(f) for f in run.findings)


def test_a_real_preview_without_the_device_plugin_does_not_check_it(aks_plan):
    """A chart whose rendered objects hold no device plugin DaemonSet is one of the platform's own."""
    preview = real_preview(aks_plan)
    chart = preview.one("kubernetes:helm.sh/v4:Chart", "platform-nvidia-device-plugin")
    preview.resources = [r for r in preview.resources if r.urn != chart.urn and r.parent != chart.urn]
    [run] = run_checks(preview, ["platform:device-plugin"])
    assert not run.applied


def test_a_real_preview_checks_the_operators_image_not_its_ref(aks_plan):
    preview = real_preview(aks_plan)
    pod = _only(preview, *OPERATOR)["spec"]["template"]["spec"]
    pod["containers"][0]["image"] = "ghcr.io/kubeflow/training-v1/training-operator:latest"
    [run] = run_checks(preview, ["platform:training-operator"])
    [finding] = run.findings
    assert (finding.resource, finding.property) == (
        f"{OPERATOR[0]} {OPERATOR[1]!r}",
        "spec.template.spec.containers[training-operator].image",
    )
    assert "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489 at v1.9.4" in finding.expected


def test_a_real_preview_prefers_the_rendered_operator_to_its_reconstruction(aks_plan):
    """The Deployment the overlay rendered is the one checked: gone, nothing stands in for it."""
    preview = real_preview(aks_plan)
    pod = _only(preview, *OPERATOR)["spec"]["template"]["spec"]
    pod["nodeSelector"] = {"elastic-spot-lab/pool": "gpu-spot"}
    runs = run_checks(preview, ["guardrail:operator-on-cpu-pool", "platform:training-operator"])
    assert [(f.check, f.resource, f.property) for f in findings_of(runs)] == [
        ("guardrail:operator-on-cpu-pool", "Deployment/kubeflow/training-operator", "nodeSelector")
    ]
    operator = preview.one(*OPERATOR)
    preview.resources = [r for r in preview.resources if r.urn != operator.urn]
    runs = run_checks(preview, ["guardrail:operator-on-cpu-pool", "platform:training-operator"])
    assert {f.check for f in errors(findings_of(runs))} == {
        "guardrail:operator-on-cpu-pool",
        "platform:training-operator",
    }
    assert any(
        "the training operator's Deployment among the objects the overlay rendered" in str(f) for f in findings_of(runs)
    )


def test_charts_objects_are_not_the_platforms_own(aks_plan):
    """A chart's objects have the chart as parent: `unseen_components` and the typed objects
    tell them apart from the platform's own resources."""
    preview = real_preview(aks_plan)
    assert unseen_components(preview.resources) == []
    assert [r.label for r in unseen_components(aks_plan.resources)] == []  # inputs seen
    stripped = copy.deepcopy(preview)
    stripped.resources = [r for r in stripped.resources if r.parent not in {c.urn for c in remote_components(stripped)}]
    assert sorted(r.name for r in unseen_components(stripped.resources)) == [
        "platform-etcd",
        "platform-nvidia-device-plugin",
        "platform-spot-notice-handler",
        "platform-training-operator",
    ]

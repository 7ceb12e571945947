"""The platform in the project's program: `elastic-lab plan` (aks-dev: cluster and platform
in one tree; byo: the platform alone from a kubeconfig path) and `elastic-lab submit`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab.k8s.guardrails import GUARDRAILS

ROOT = Path(__file__).resolve().parents[2]
PLATFORM = "elastic-spot-lab:platform:TrainingPlatform"
PLATFORM_CHECKS = {
    "k8s:render", "k8s:schema", "k8s:pytorchjob-crd", "platform:device-plugin", "platform:training-operator",
    "guardrail:etcd-not-on-spot", "guardrail:operator-on-cpu-pool", "guardrail:infra-not-preemptible-by-inference",
    "guardrail:workers-tolerate-exactly-gpu-spot-taints", "guardrail:rdzv-host-is-etcd-service", "guardrail:etcd-image-v3.5",
    "guardrail:no-global-default-priority-class", "guardrail:etcd-private", "guardrail:workers-spot-ready",
}


def _plan(stack: str, overrides: dict | None = None):
    from lab.plan.harness import run_program

    return run_program(stack, overrides)


@pytest.fixture(scope="module")
def aks_plan():
    return _plan("aks-dev")


@pytest.fixture(scope="module")
def byo_plan():
    return _plan("byo")


def test_aks_dev_declares_cluster_and_platform_in_one_tree(aks_plan):
    platform = aks_plan.one(PLATFORM)
    cluster = aks_plan.one("elastic-spot-lab:aks:Cluster")
    assert platform.parent == cluster.parent  # both children of the stack
    children = {r.type for r in aks_plan.children(platform.urn)}
    assert {"kubernetes:helm.sh/v4:Chart", "kubernetes:kustomize/v2:Directory", "kubernetes:core/v1:PersistentVolume",
            "kubernetes:scheduling.k8s.io/v1:PriorityClass"} <= children
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
    from lab.plan.checks import findings_of, run_checks

    plan = request.getfixturevalue("aks_plan" if stack == "aks-dev" else "byo_plan")
    runs = run_checks(plan)
    ours = {r.name for r in runs if r.name.startswith(("k8s:", "platform:")) or r.name.removeprefix("guardrail:") in GUARDRAILS}
    assert ours == PLATFORM_CHECKS
    assert {r.name for r in runs if r.name in ours and not r.applied} == (set() if stack == "aks-dev" else {"platform:device-plugin"})
    assert [str(f) for f in findings_of(runs)] == []


def test_plan_reports_a_broken_platform_config():
    from components.config import ConfigError

    with pytest.raises(ConfigError, match=r"elastic-spot-lab:platform.etcd.tag.*expected a v3.5.x tag") as info:
        _plan("byo", {"platform": {"etcd": {"tag": "latest"}, "checkpoint": {"storageClass": "standard"},
                                   "pools": {"gpuSpot": {"taints": ["x=y:NoSchedule"]}}}})
    [problem] = info.value.problems
    # Key, value and expected as the platform's error carries them: the value quoted once.
    assert (problem.field, problem.value) == ("elastic-spot-lab:platform.etcd.tag", "latest")
    assert "elastic-spot-lab:platform.etcd.tag='latest' is invalid: expected a v3.5.x tag" in str(info.value)
    assert "\"'latest'\"" not in str(info.value)


def test_plan_rejects_a_checkpoint_auth_conflict_naming_both_keys():
    from components.config import ConfigError

    with pytest.raises(ConfigError) as info:
        _plan("aks-dev", {"platform": {"checkpoint": {"workloadIdentityToken": True}}})
    [problem] = info.value.problems
    assert (problem.field, problem.value) == ("elastic-spot-lab:platform.checkpoint.workloadIdentityToken", True)
    assert "elastic-spot-lab:checkpointAuth='workload-identity-key'" in problem.expected
    plan = _plan("aks-dev", {"platform": {"checkpoint": {"workloadIdentityToken": True}}, "checkpointAuth": "workload-identity-token"})
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
        pytest.param("k8s:render", "etcd_values", _broken_etcd_values, "values the chart accepts (chart etcd-rendezvous: invalid values: at '/image/tag'",
                     id="render"),
        pytest.param("k8s:schema", "PART_OF", {"app.kubernetes.io/part-of": 5}, "metadata.labels.app.kubernetes.io/part-of=None: expected 5 is not of type 'string'",
                     id="schema"),
    ],
)
def test_plan_checks_fail_on_a_broken_platform(check, attr, replacement, message, monkeypatch):
    """The plan's own checks (not only the report behind them) fail on a declared platform."""
    import components.platform.component as component
    from lab.plan.checks import errors, run_checks

    monkeypatch.setattr(component, attr, replacement)
    plan = _plan("byo")
    [run] = run_checks(plan, [check])
    assert run.applied and errors(run.findings), check
    assert any(message in str(f) for f in run.findings), [str(f) for f in run.findings]


def test_plan_without_the_crd_warns_and_passes(monkeypatch, capsys):
    """No CRD file: `elastic-lab plan` skips the CRD check with a warning saying where it
    looked and how to point it elsewhere, and still exits 0."""
    from lab import cli
    from lab.k8s import validate

    monkeypatch.setattr(validate, "schema_dirs", lambda: [validate.Path("/nowhere/shared/schemas")])
    status = cli.main(["plan", "--stack", "byo"])
    out = capsys.readouterr().out
    assert status == 0, out[-3000:]
    line = next(line for line in out.splitlines() if "WARNING [k8s:pytorchjob-crd]" in line)
    assert "/nowhere/shared/schemas" in line and "ELASTIC_LAB_SCHEMAS" in line and "SKIPPED" in line
    assert "✓ k8s:schema: ok" in out


def _cli(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_cli_plan_byo():
    proc = _cli("plan", "--stack", "byo")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "elastic-spot-lab:platform:TrainingPlatform platform" in proc.stdout
    assert "✓ guardrail:rdzv-host-is-etcd-service" in proc.stdout


def test_cli_submit_dry_run(crd):
    proc = _cli("submit", "--stack", "byo", "--dry-run", "--min-nodes", "1", "--max-nodes", "4", "--backend", "c10d",
                "--image", "registry.example/trainer:1", "--name", "demo", "--", "--steps", "100")
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    job = next(d for d in docs if d["kind"] == "PyTorchJob")
    policy = job["spec"]["elasticPolicy"]
    assert (policy["minReplicas"], policy["maxReplicas"], policy["rdzvBackend"]) == (1, 4, "c10d")
    assert policy["rdzvHost"] == "demo-rdzv-store.training.svc.cluster.local"
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/trainer:1"
    assert container["args"] == ["-m", "lab.train", "--steps", "100"]
    assert {d["kind"] for d in docs} == {"PyTorchJob", "Deployment", "Service", "NetworkPolicy"}
    assert "token" not in proc.stdout


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--min-nodes", "3", "--max-nodes", "2"], "min_nodes=3 is invalid: expected <= max_nodes (2)"),
        (["--backend", "etcd"], "rdzv_backend='etcd' is invalid: expected one of etcd-v2, c10d"),
        (["--image", ""], "chart elastic-pytorchjob: invalid values: at '/image'"),
        (["--name", "Bad_Name"], "name='Bad_Name' is invalid"),
    ],
)
def test_cli_submit_rejects_bad_jobs(flags, message):
    proc = _cli("submit", "--stack", "byo", "--dry-run", *flags)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_cli_submit_without_a_cluster_fails_clearly():
    proc = _cli("submit", "--stack", "byo")
    assert proc.returncode == 1
    if "kubectl is not installed" not in proc.stderr:
        assert "no Kubernetes API server reachable with kubeconfig" in proc.stderr
    assert "placeholder" not in proc.stderr  # nothing of the kubeconfig is printed
    proc = _cli("submit", "--stack", "aks-dev")
    assert proc.returncode == 1
    assert "kubeconfig" in proc.stderr and ("--kubeconfig" in proc.stderr or "deployed" in proc.stderr)


def test_cli_submit_unknown_stack():
    proc = _cli("submit", "--stack", "nope", "--dry-run")
    assert proc.returncode != 0 and "nope" in proc.stderr


@pytest.mark.parametrize(
    "stack,overrides,key",
    [
        pytest.param("aks-dev", {"platform": {"etcd": {"tag": "latest"}}}, "elastic-spot-lab:platform.etcd.tag", id="aks-etcd-latest"),
        pytest.param("aks-dev", {"platform": {"namespace": "jobs"}}, "elastic-spot-lab:platform.namespace", id="aks-namespace-not-federated"),
        pytest.param("aks-dev", {"platform": {"checkpoint": {"workloadIdentityToken": True}}},
                     "elastic-spot-lab:platform.checkpoint.workloadIdentityToken", id="aks-checkpoint-auth-conflict"),
        pytest.param("byo", {"platform": {"etcd": {"tag": "latest"}, "checkpoint": {"storageClass": "standard"},
                                          "pools": {"gpuSpot": {"taints": ["x=y:NoSchedule"]}}}},
                     "elastic-spot-lab:platform.etcd.tag", id="byo-etcd-latest"),
        pytest.param("byo", {"kubeconfig": None}, "elastic-spot-lab:kubeconfig", id="byo-no-kubeconfig"),
    ],
)
def test_bad_platform_config_declares_nothing(stack, overrides, key):
    """The platform's settings are checked by a config validator, inside config.load(): a bad
    value fails the program before the first resource (the cluster's included)."""
    from components.config import ConfigError

    with pytest.raises(ConfigError) as info:
        _plan(stack, overrides)
    assert [p.field for p in info.value.problems] == [key]
    assert info.value.recorded_resources == []


def test_platform_validator_is_registered():
    from components import config as config_mod
    from components.platform.stack import validate_platform

    assert validate_platform in config_mod.validators()


def test_platform_problems_come_with_the_clusters(monkeypatch):
    """One ConfigError lists the cluster's problems and the platform's together."""
    from components.config import ConfigError

    with pytest.raises(ConfigError) as info:
        _plan("aks-dev", {"platform": {"etcd": {"tag": "latest"}}, "gpuMaxNodes": -1})
    fields = {p.field for p in info.value.problems}
    assert {"elastic-spot-lab:platform.etcd.tag", "elastic-spot-lab:gpuMaxNodes"} <= fields
    assert info.value.recorded_resources == []

"""The platform in the project's program: `elastic-lab plan` (aks-dev: cluster and platform
in one tree; byo: the platform alone from a kubeconfig path) and `elastic-lab submit`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLATFORM = "elastic-spot-lab:platform:TrainingPlatform"


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
    ours = [r for r in runs if r.name.startswith(("k8s:", "platform:", "guardrail:etcd", "guardrail:workers",
                                                    "guardrail:rdzv", "guardrail:no-global"))]
    assert len(ours) == 12
    assert {r.name for r in ours if not r.applied} == (set() if stack == "aks-dev" else {"platform:device-plugin"})
    assert [str(f) for f in findings_of(runs)] == []


def test_plan_reports_a_broken_platform_config():
    from components.config import ConfigError

    with pytest.raises(ConfigError, match=r"elastic-spot-lab:platform.etcd.tag.*expected a v3.5.x tag"):
        _plan("byo", {"platform": {"etcd": {"tag": "latest"}, "checkpoint": {"storageClass": "standard"},
                                   "pools": {"gpuSpot": {"taints": ["x=y:NoSchedule"]}}}})


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

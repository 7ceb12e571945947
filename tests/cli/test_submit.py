"""`elastic-lab submit`: the job rendered for a stack's platform, checked, and applied."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from lab.vocab.layout import ROOT
from tests.placements import TRAINER_IMAGE


def _cli(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "lab.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.processes
def test_cli_submit_dry_run(crd):
    flags = (
        "--dry-run --min-nodes 1 --max-nodes 4 --backend c10d --image registry.example/trainer:1 --name demo "
        "--join-timeout 1800"
    )
    proc = _cli("submit", "--stack", "byo", *flags.split(), "--", "--steps", "100")
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    job = next(d for d in docs if d["kind"] == "PyTorchJob")
    policy = job["spec"]["elasticPolicy"]
    assert (policy["minReplicas"], policy["maxReplicas"], policy["rdzvBackend"]) == (1, 4, "c10d")
    assert policy["rdzvHost"] == "demo-rdzv-store.training.svc.cluster.local"
    conf = {c["key"]: c["value"] for c in policy["rdzvConf"]}
    assert (conf["join_timeout"], conf["server_outage"]) == ("1800", "60")
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/trainer:1"
    assert container["args"] == ["-m", "lab.runtime.train", "--steps", "100"]
    assert {d["kind"] for d in docs} == {"PyTorchJob", "Deployment", "PodDisruptionBudget", "Service", "NetworkPolicy"}
    assert "token" not in proc.stdout


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--min-nodes", "3", "--max-nodes", "2"], "--min-nodes=3 is invalid: expected <= max_nodes (2)"),
        (["--backend", "etcd"], "--backend='etcd' is invalid: expected one of etcd-v2, c10d"),
        (["--image", ""], "--image='' is invalid: expected a container image reference"),
        (["--name", "Bad_Name"], "name='Bad_Name' is invalid"),
        (["--join-timeout", "0"], "--join-timeout=0.0 is invalid: expected a finite number of seconds > 0"),
        (["--core", "2", "--burst", "1", "--autoscale-cpu", "60"], "--autoscale-cpu=60 is invalid: expected no HPA"),
        (["--core", "2", "--burst", "1", "--replicas", "3"], "--replicas=3 is invalid: expected between --min-nodes"),
    ],
)
@pytest.mark.processes
def test_cli_submit_rejects_bad_jobs(flags, message):
    proc = _cli("submit", "--stack", "byo", "--dry-run", *flags)
    assert proc.returncode == 2
    assert message in proc.stderr


@pytest.mark.processes
def test_cli_submit_without_a_cluster_fails_clearly():
    proc = _cli("submit", "--stack", "byo")
    assert proc.returncode == 1
    if "kubectl is not installed" not in proc.stderr:
        assert "no Kubernetes API server reachable with kubeconfig" in proc.stderr
    assert "placeholder" not in proc.stderr  # nothing of the kubeconfig is printed
    proc = _cli("submit", "--stack", "aks-dev", "--image", TRAINER_IMAGE)
    assert proc.returncode == 1
    assert "kubeconfig" in proc.stderr and ("--kubeconfig" in proc.stderr or "deployed" in proc.stderr)


@pytest.mark.processes
def test_cli_submit_unknown_stack():
    proc = _cli("submit", "--stack", "nope", "--dry-run")
    assert proc.returncode != 0 and "nope" in proc.stderr

"""`--team`: a team's jobs on a shared platform, in its namespace, under its quotas, with
checkpoints in its folder and the rendezvous at the platform's etcd; against a loopback API
server, on the byo stack given two teams."""

from __future__ import annotations

import functools

import pytest
import yaml

from lab.cli import main
from lab.program import harness
from lab.stacks import target as stack_target
from lab.vocab.layout import ROOT

TEAMS = {"vision": {"namespace": "team-vision", "gpus": 4, "borrowedGpus": 8}, "speech": {}}


@pytest.fixture
def shared_byo(monkeypatch):
    """The byo stack on GPU nodes (one GPU each), shared by teams vision and speech."""
    stack = yaml.safe_load((ROOT / "stacks" / "Pulumi.byo.yaml").read_text())["config"]
    platform = {**stack["elastic-spot-lab:platform"], "gpusPerNode": 1, "teams": TEAMS}
    monkeypatch.setattr(
        stack_target, "run_program", functools.partial(harness.run_program, config_overrides={"platform": platform})
    )


@pytest.fixture
def kubeconfig(api_server, tmp_path):
    return str(api_server.kubeconfig(tmp_path, namespace="default"))


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _documents(text: str) -> dict[str, dict]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(text) if d}


def test_a_teams_job_runs_in_its_namespace_with_its_folder_and_the_platforms_etcd(shared_byo, capsys):
    code, out, err = _run(capsys, "submit", "--stack", "byo", "--team", "vision", "--name", "demo", "--dry-run")
    assert code == 0, err
    job = _documents(out)["PyTorchJob/demo"]
    assert job["metadata"]["namespace"] == "team-vision"
    assert job["spec"]["elasticPolicy"]["rdzvHost"] == "etcd-rendezvous.training.svc.cluster.local"
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["serviceAccountName"] == "trainer"
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == ["elastic-checkpoints"]  # the team's claim of the platform's name, in its namespace
    # The team's namespace given as --namespace names the team as well.
    code, out, err = _run(capsys, "submit", "--stack", "byo", "-n", "team-vision", "--name", "demo", "--dry-run")
    assert code == 0, err
    assert _documents(out)["PyTorchJob/demo"]["metadata"]["namespace"] == "team-vision"


def test_a_core_beyond_the_teams_share_is_refused_at_submit(shared_byo, capsys):
    code, _, err = _run(
        capsys,
        "submit",
        "--stack",
        "byo",
        "--team",
        "vision",
        "--name",
        "demo",
        "--core",
        "5",
        "--burst",
        "1",
        "--dry-run",
    )
    assert code == 2
    assert (
        "--core=5 is invalid: expected at most 4 node(s) of 1 GPU(s): team 'vision''s share is 4 GPU(s) (the "
        "stack's platform.teams.vision;" in err
    )
    # The platform's own namespace has no quota; team speech has none either.
    for team in ((), ("--team", "speech")):
        code, _, err = _run(
            capsys, "submit", "--stack", "byo", *team, "--name", "demo", "--core", "5", "--burst", "1", "--dry-run"
        )
        assert code == 0, err


@pytest.mark.parametrize(
    "argv,message",
    [
        (("--team", "nlp"), "--team='nlp' is invalid: expected one of stack 'byo''s teams: speech, vision"),
        (
            ("--team", "vision", "--namespace", "speech"),
            "--namespace='speech' is invalid: expected team 'vision''s namespace 'team-vision', or none",
        ),
    ],
)
def test_a_team_the_stack_does_not_have_is_refused_naming_the_teams(shared_byo, capsys, argv, message):
    code, out, err = _run(capsys, "submit", "--stack", "byo", *argv, "--name", "demo", "--dry-run")
    assert (code, out) == (2, "")
    assert message in err


def test_a_team_without_a_stack_is_refused(capsys, kubeconfig):
    code, _, err = _run(capsys, "status", "--kubeconfig", kubeconfig, "--team", "vision")
    assert code == 2
    assert "--team='vision' is invalid: expected a team of a stack: pass --stack" in err


def test_a_stack_without_teams_says_so(capsys):
    code, _, err = _run(capsys, "submit", "--stack", "byo", "--team", "vision", "--name", "demo", "--dry-run")
    assert code == 2
    assert "--team='vision' is invalid: expected no team: stack 'byo' has none (platform.teams)" in err


def test_the_teams_job_is_created_followed_and_deleted_in_its_namespace(shared_byo, api_server, kubeconfig, capsys):
    base = ("--stack", "byo", "--kubeconfig", kubeconfig, "--team", "vision")
    # The team's share in use by its other jobs: its namespace's quota refuses the core, nothing is created.
    _full_quota(api_server, "team-vision")
    code, out, err = _run(capsys, "submit", *base, "--name", "demo")
    assert code == 2
    assert "ResourceQuota team-vision/elastic-preemptible-gpus allows 4 GPU(s) at priority elastic-preemptible" in err
    assert api_server.of_kind("PyTorchJob") == []
    _full_quota(api_server, "team-vision", used="0")
    code, out, err = _run(capsys, "submit", *base, "--name", "demo")
    assert code == 0, err
    assert "created PyTorchJob/demo in namespace team-vision" in out
    assert "drill:   elastic-lab drill --stack byo --job demo --namespace team-vision" in out
    assert api_server.get("PyTorchJob", "demo", "team-vision") is not None
    assert api_server.get("PyTorchJob", "demo", "training") is None
    code, out, err = _run(capsys, "status", *base, "demo", "-o", "json")
    assert code == 0, err
    assert '"namespace": "team-vision"' in out
    code, out, err = _run(capsys, "delete", *base, "demo")
    assert code == 0, err
    assert api_server.get("PyTorchJob", "demo", "team-vision") is None


def _full_quota(api_server, namespace: str, used: str = "4") -> None:
    """The team's share at the workers' class, 4 GPUs, `used` of them in use [all]."""
    gpus = {"requests.nvidia.com/gpu": "4"}
    scope = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["elastic-preemptible"]}]}
    api_server.put(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "elastic-preemptible-gpus", "namespace": namespace},
            "spec": {"hard": gpus, "scopeSelector": scope},
            "status": {"hard": gpus, "used": {"requests.nvidia.com/gpu": used}},
        }
    )


def test_teardown_sweeps_every_teams_namespace_before_the_destroy(
    shared_byo, api_server, kubeconfig, capsys, monkeypatch
):
    for team in ((), ("--team", "vision"), ("--team", "speech")):
        code, _, err = _run(capsys, "submit", "--stack", "byo", "--kubeconfig", kubeconfig, *team, "--name", "demo")
        assert code == 0, err
    base = ("teardown", "--stack", "byo", "--kubeconfig", kubeconfig)
    code, out, err = _run(capsys, *base, "--dry-run")
    assert code == 0, err
    for namespace in ("training", "team-vision", "speech"):
        assert f"on the cluster, in namespace {namespace}: 1 to delete" in out
    monkeypatch.setenv("PATH", "/nonexistent")  # no Pulumi CLI here: the destroy fails after the sweep
    code, out, err = _run(capsys, *base, "--yes")
    assert api_server.of_kind("PyTorchJob") == []
    assert code == 1 and "Pulumi CLI: not on PATH" in err

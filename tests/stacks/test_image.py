"""`elastic-lab image`: where the image goes, how Docker logs in (ECR through botocore's Stubber,
the token never on a command line), the build for the nodes' architecture, and the stack's
trainerImage set through the Automation API (signature-bound stand-in)."""

from __future__ import annotations

import base64
import inspect
import json
import os
import re
import shutil
import subprocess

import boto3
import pytest
from botocore.stub import Stubber
from pulumi import automation

from lab.cli import main
from lab.stacks import image
from lab.stacks.automation import StackError
from lab.vocab.layout import ROOT
from lab.vocab.names import IMAGE_REFERENCE
from lab.vocab.problems import InvalidInput

ACR = "eslacr636ed551d34ae649.azurecr.io"
ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com/esl-eks-dev/trainer"


def test_the_image_goes_under_the_acr_or_is_the_ecr_repository():
    assert image.image_reference("aks", ACR, "abc123") == f"{ACR}/elastic-spot-lab/trainer:abc123"
    assert image.image_reference("eks", ECR, "abc123") == f"{ECR}:abc123"
    with pytest.raises(StackError, match="is not one Docker takes"):
        image.image_reference("aks", "Not A Registry", "abc")


def test_ecr_login_hands_the_token_to_docker_on_its_standard_input():
    ecr = boto3.client("ecr", region_name="us-east-1")
    token = base64.b64encode(b"AWS:very-secret-token").decode()
    with Stubber(ecr) as stub:
        stub.add_response(
            "get_authorization_token",
            {
                "authorizationData": [
                    {
                        "authorizationToken": token,
                        "proxyEndpoint": "https://123456789012.dkr.ecr.us-east-1.amazonaws.com",
                    }
                ]
            },
        )
        (login,) = image.login_steps("eks", ECR, "us-east-1", ecr=ecr)
    assert login.argv == (
        "docker",
        "login",
        "--username",
        "AWS",
        "--password-stdin",
        "123456789012.dkr.ecr.us-east-1.amazonaws.com",
    )
    assert login.stdin == b"very-secret-token"
    assert "very-secret-token" not in str(login) and "not shown" in str(login)


def test_acr_login_needs_the_azure_cli(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(StackError, match="needs the Azure CLI"):
        image.login_steps("aks", ACR, None)
    (tmp_path / "az").write_text("#!/bin/sh\n")
    (tmp_path / "az").chmod(0o755)
    (login,) = image.login_steps("aks", ACR, None)
    assert login.argv == ("az", "acr", "login", "--name", "eslacr636ed551d34ae649") and login.stdin is None


def test_the_build_is_for_the_gpu_nodes_architecture():
    build, push = image.build_steps(f"{ACR}/elastic-spot-lab/trainer:1", ["TORCH_INDEX_URL=https://x/cu128"])
    assert build.argv == (
        "docker",
        "build",
        "--platform",
        "linux/amd64",
        "--build-arg",
        "TORCH_INDEX_URL=https://x/cu128",
        "-t",
        f"{ACR}/elastic-spot-lab/trainer:1",
        str(ROOT),
    )
    assert push.argv == ("docker", "push", f"{ACR}/elastic-spot-lab/trainer:1")


def test_without_docker_nothing_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    ran = []
    with pytest.raises(StackError, match="needs Docker, which is not on PATH"):
        image.run_steps(image.build_steps("r.io/t:1"), say=lambda line: None, run=lambda *a, **k: ran.append(a))
    assert ran == []


def test_steps_run_in_order_and_the_first_failure_names_its_step(monkeypatch, tmp_path):
    (tmp_path / "docker").write_text("#!/bin/sh\n")
    (tmp_path / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    ran, said = [], []

    def run(argv, input=None, check=False):
        ran.append((argv[:2], input))
        if argv[1] == "push":
            raise subprocess.CalledProcessError(1, argv)

    login = image.Step("log in", ("docker", "login", "--password-stdin", "r.io"), stdin=b"pw")
    with pytest.raises(StackError, match="push it to the stack's registry failed"):
        image.run_steps([login, *image.build_steps("r.io/t:1")], say=said.append, run=run)
    assert ran == [(["docker", "login"], b"pw"), (["docker", "build"], None), (["docker", "push"], None)]
    assert all("pw" not in line for line in said)


def test_the_image_becomes_the_stacks_trainer_image(monkeypatch):
    set_calls = []

    class Stack:
        def set_config(self, key, value, *, path=False):
            inspect.signature(automation.Stack.set_config).bind(self, key, value, path=path)
            set_calls.append((key, value.value, value.secret))

    monkeypatch.setattr(automation, "select_stack", lambda **kwargs: Stack())
    image.remember("aks-dev", f"{ACR}/elastic-spot-lab/trainer:1")
    assert set_calls == [("elastic-spot-lab:trainerImage", f"{ACR}/elastic-spot-lab/trainer:1", False)]


def test_the_command_line_says_every_step_in_a_dry_run(capsys):
    assert main(["image", "--stack", "eks-dev", "--tag", "v1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "docker build --platform linux/amd64 -t <imageRegistry of eks-dev>:v1" in out
    assert (
        "would set elastic-spot-lab:trainerImage=<imageRegistry of eks-dev>:v1@<its digest> in stack 'eks-dev'" in out
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--stack", "byo"], "--stack='byo' is invalid: expected an aks or eks stack"),
        (["--stack", "aks-dev", "--tag", "no spaces"], "--tag='no spaces' is invalid: expected a Docker tag"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(capsys, argv, said):
    assert main(["image", *argv, "--dry-run"]) == 2
    assert said in capsys.readouterr().err


def test_the_stack_runs_the_pushed_image_by_its_digest():
    digest = "sha256:" + "ab" * 32
    ran = []

    def run(argv, **kwargs):
        ran.append(argv)
        out = json.dumps([f"other.io/x@sha256:{'00' * 32}", f"{ACR}/elastic-spot-lab/trainer@{digest}"])
        return subprocess.CompletedProcess(argv, 0, stdout=out)

    pinned = image.pushed_reference(f"{ACR}/elastic-spot-lab/trainer:1", run=run)
    assert pinned == f"{ACR}/elastic-spot-lab/trainer:1@{digest}"
    assert IMAGE_REFERENCE.match(pinned)
    assert ran == [
        ["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", f"{ACR}/elastic-spot-lab/trainer:1"]
    ]


@pytest.mark.parametrize("stdout", ["[]", "null", "not json", json.dumps([f"{ACR}/elsewhere@sha256:{'ab' * 32}"])])
def test_an_image_without_a_digest_from_its_registry_is_not_remembered(stdout):
    def run(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 0, stdout=stdout)

    with pytest.raises(StackError, match="digest"):
        image.pushed_reference(f"{ACR}/elastic-spot-lab/trainer:1", run=run)


def _git(repo, *argv):
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "commit.gpgsign=false",
            *argv,
        ],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout of its own, with a commit and an ignored folder, as the project's ROOT."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "train.py").write_text("steps = 1\n")
    (repo / ".gitignore").write_text("runs/\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "first")
    monkeypatch.setattr(image, "ROOT", repo)
    return repo


def test_a_checkouts_tag_names_its_content(checkout):
    """ECR's tags are immutable: the same content must give the same tag, and other content
    (tracked or untracked, staged or not) another."""
    clean = image.commit_tag()
    assert re.fullmatch(r"[0-9a-f]{12}", clean)
    (checkout / "train.py").write_text("steps = 2\n")
    changed = image.commit_tag()
    assert changed.startswith(f"{clean}-dirty-") and image.TAG.match(changed)
    assert image.commit_tag() == changed  # the same changes, the same tag
    (checkout / "train.py").write_text("steps = 3\n")
    assert image.commit_tag() not in (clean, changed)
    (checkout / "train.py").write_text("steps = 2\n")
    _git(checkout, "add", "train.py")
    assert image.commit_tag() == changed  # staged or not, the same content
    (checkout / "data.py").write_text("a\n")
    untracked = image.commit_tag()
    assert untracked != changed
    (checkout / "data.py").write_text("b\n")
    assert image.commit_tag() not in (untracked, changed)  # an untracked file counts by its content
    (checkout / "data.py").unlink()
    (checkout / "runs").mkdir()
    (checkout / "runs" / "events.jsonl").write_text("{}\n")
    assert image.commit_tag() == changed  # what .gitignore excludes does not
    (checkout / "vendor").mkdir()
    _git(checkout / "vendor", "init", "-q")  # a repository of its own: it counts by its name
    nested = image.commit_tag()
    assert nested not in (changed, clean) and image.commit_tag() == nested
    shutil.rmtree(checkout / "vendor")
    with_args = image.commit_tag(["TORCH_INDEX_URL=https://x/cu128"])
    assert with_args.startswith(f"{changed}-args-") and image.TAG.match(with_args)
    assert image.commit_tag(["TORCH_INDEX_URL=https://x/cu126"]) != with_args


DIGEST = "sha256:" + "5" * 64


def test_an_image_ecr_holds_under_the_tag_is_found_by_describe_images():
    ecr = boto3.client("ecr", region_name="us-east-1")
    asked = {"registryId": "123456789012", "repositoryName": "esl-eks-dev/trainer", "imageIds": [{"imageTag": "abc"}]}
    with Stubber(ecr) as stub:
        stub.add_response("describe_images", {"imageDetails": [{"imageDigest": DIGEST, "imageTags": ["abc"]}]}, asked)
        stub.add_client_error("describe_images", service_error_code="ImageNotFoundException", expected_params=asked)
        assert image.earlier_push("eks", ECR, "abc", "us-east-1", tag_given=False, ecr=ecr) == f"{ECR}:abc@{DIGEST}"
        assert image.earlier_push("eks", ECR, "abc", "us-east-1", tag_given=False, ecr=ecr) is None
        stub.assert_no_pending_responses()
    # An ACR's tags move on push: nothing to look up.
    assert image.earlier_push("aks", ACR, "abc", None, tag_given=True, ecr=object()) is None


def test_a_tag_given_that_ecr_holds_is_refused_naming_the_image():
    ecr = boto3.client("ecr", region_name="us-east-1")
    with Stubber(ecr) as stub:
        stub.add_response("describe_images", {"imageDetails": [{"imageDigest": DIGEST, "imageTags": ["v1"]}]})
        with pytest.raises(InvalidInput) as refused:
            image.earlier_push("eks", ECR, "v1", "us-east-1", tag_given=True, ecr=ecr)
    (problem,) = refused.value.problems
    assert (problem.key, problem.value) == ("--tag", "v1") and f"{ECR}:v1@{DIGEST} has it" in problem.expected


def test_a_missing_ecr_repository_says_to_deploy_the_stack():
    ecr = boto3.client("ecr", region_name="us-east-1")
    with Stubber(ecr) as stub:
        stub.add_client_error("describe_images", service_error_code="RepositoryNotFoundException")
        with pytest.raises(StackError, match=r"esl-eks-dev/trainer does not exist in account 123456789012"):
            image.earlier_push("eks", ECR, "v1", "us-east-1", tag_given=False, ecr=ecr)

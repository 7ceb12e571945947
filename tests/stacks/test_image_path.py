"""The documented path after a stack is up, offline: `elastic-lab image -s STACK` records the
pushed image by its digest, and `plan`, `up --yes`, `submit --dry-run` and `drill --dry-run`
then take exactly that reference, on both cloud stacks.

The fakes sit at the boundaries the commands cross: Docker and the Azure CLI are executables on
PATH (as `subprocess` runs them), ECR is botocore's Stubber against the real service model, and
the Pulumi Automation API's stack is bound to the real methods' signatures, its `set_config`
writing the stack file as `pulumi config set` does with the project's `stackConfigDir`
(stacks/Pulumi.<stack>.yaml, under `config:`), in a copy of the project's stacks/."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from pulumi import automation

from lab.cli import main
from lab.k8s.helm import render_chart
from lab.program import harness, stack_files
from lab.stacks import automation as stacks
from lab.stacks import image
from lab.vocab.layout import NOTICE_CHART, ROOT
from lab.vocab.names import PLATFORM_TYPE, ImageReference
from lab.vocab.platform_facts import NOTICE_HANDLER_WAITS
from tests.stacks.test_automation import FakeStack

CLOUD_OF = {"aks-dev": "aks", "eks-dev": "eks"}
HANDLER_CHART = ("kubernetes:helm.sh/v4:Chart", "platform-spot-notice-handler")

# Docker as the commands run it: each call is logged (with what it read on standard input);
# `image inspect` knows a digest only of what was pushed, as the registry gave it.
FAKE_DOCKER = """#!{python}
import hashlib, json, pathlib, sys
log = pathlib.Path({log!r})
argv = sys.argv[1:]
stdin = sys.stdin.read() if "--password-stdin" in argv else None
with log.open("a") as out:
    out.write(json.dumps({{"argv": ["docker", *argv], "stdin": stdin}}) + "\\n")
if argv[:2] == ["image", "inspect"]:
    ref = argv[-1]
    pushed = [json.loads(line)["argv"] for line in log.read_text().splitlines()]
    digest = "sha256:" + hashlib.sha256(ref.encode()).hexdigest()
    print(json.dumps([ref.rsplit(":", 1)[0] + "@" + digest] if ["docker", "push", ref] in pushed else []))
"""
FAKE_AZ = """#!{python}
import json, pathlib, sys
with pathlib.Path({log!r}).open("a") as out:
    out.write(json.dumps({{"argv": ["az", *sys.argv[1:]], "stdin": None}}) + "\\n")
"""


def registry_digest(reference: str) -> str:
    """The digest the fake registry gives `reference` on push."""
    return "sha256:" + hashlib.sha256(reference.encode()).hexdigest()


class DeployedStack(FakeStack):
    """A deployed stack through the Automation API: its outputs are the offline plan's (as
    `up` would have exported them) but for the kubeconfig (no cluster answers here), and its
    config lives in the stack file."""

    def __init__(self, name: str, stack_dir: Path) -> None:
        super().__init__()
        self.name, self.stack_dir = name, stack_dir
        self.exported = {k: v for k, v in harness.run_program(name).outputs.items() if k != "kubeconfig"}

    def outputs(self):
        self._bind("outputs")
        return {key: automation.OutputValue(value, False) for key, value in self.exported.items()}

    def set_config(self, key, value, *, path=False):
        self._bind("set_config", key, value)
        assert not path and not value.secret
        file = self.stack_dir / f"Pulumi.{self.name}.yaml"
        doc = yaml.safe_load(file.read_text())
        doc["config"][key] = value.value
        file.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.config = {**self.config, key: value}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A copy of the project's stacks/ that every command reads; Docker and az on PATH; the
    deployed stacks behind the Automation API; every prerequisite of `up` present."""
    copy = tmp_path / "project"
    shutil.copytree(ROOT / "stacks", copy / "stacks")
    real_stack_file = stack_files.stack_file
    monkeypatch.setattr(stack_files, "stack_file", lambda stack, root=ROOT: real_stack_file(stack, copy))

    bin_dir, log = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir()
    log.touch()
    for name, script in (("docker", FAKE_DOCKER), ("az", FAKE_AZ)):
        (bin_dir / name).write_text(script.format(python=sys.executable, log=str(log)))
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(shutil.which('git') or '/usr/bin/git').parent}")
    monkeypatch.delenv("KUBECONFIG", raising=False)

    deployed: dict[str, DeployedStack] = {}

    def select(stack_name, work_dir=None, **kwargs):
        assert work_dir == str(ROOT)
        if stack_name not in deployed:
            deployed[stack_name] = DeployedStack(stack_name, copy / "stacks")
        return deployed[stack_name]

    monkeypatch.setattr(automation, "select_stack", select)
    monkeypatch.setattr(automation, "create_or_select_stack", select)
    monkeypatch.setattr(stacks, "missing_prerequisites", lambda cloud, stack, quota=None, **kw: None)

    class Project:
        stacks_dir = copy / "stacks"

        @staticmethod
        def calls() -> list[dict[str, Any]]:
            return [json.loads(line) for line in log.read_text().splitlines()]

        stacks = deployed

    return Project


def ecr_answering(monkeypatch, *responses: tuple[str, dict[str, Any]]) -> Stubber:
    """boto3's ECR client, stubbed with `responses` in order ("error:<code>" for an error)."""
    ecr = boto3.client("ecr", region_name="us-east-1")
    stub = Stubber(ecr)
    for operation, answer in responses:
        if operation.startswith("error:"):
            stub.add_client_error(answer["operation"], service_error_code=operation.removeprefix("error:"))
        else:
            stub.add_response(operation, answer)
    stub.activate()
    real_client = boto3.client
    monkeypatch.setattr(boto3, "client", lambda service, **kw: ecr if service == "ecr" else real_client(service, **kw))
    return stub


ECR_TOKEN = {
    "authorizationData": [
        {
            "authorizationToken": "QVdTOnNlY3JldC10b2tlbg==",  # AWS:secret-token
            "proxyEndpoint": "https://123456789012.dkr.ecr.us-east-1.amazonaws.com",
        }
    ]
}


def _ok(capsys, argv: list[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, (argv, out, err)
    return out


def _images(manifests: str) -> set[str]:
    """Every container image in a stream of rendered manifests."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("containers", "initContainers") and isinstance(value, list):
                    found.update(c["image"] for c in value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for doc in yaml.safe_load_all(manifests):
        walk(doc)
    return found


@pytest.mark.parametrize("stack", ["aks-dev", "eks-dev"])
def test_image_then_plan_up_submit_and_drill_run_exactly_the_pushed_image(project, monkeypatch, capsys, stack):
    cloud = CLOUD_OF[stack]
    stub = None
    if cloud == "eks":
        stub = ecr_answering(
            monkeypatch,
            ("error:ImageNotFoundException", {"operation": "describe_images"}),
            ("get_authorization_token", ECR_TOKEN),
        )

    # 1. `elastic-lab image -s STACK`: built, pushed, recorded by the digest the registry gave it.
    said = _ok(capsys, ["image", "-s", stack])
    pushed = yaml.safe_load((project.stacks_dir / f"Pulumi.{stack}.yaml").read_text())["config"][
        image.TRAINER_IMAGE_KEY
    ]
    reference = ImageReference.parse(pushed)
    assert reference is not None and reference.digest == registry_digest(f"{reference.repository}:{reference.tag}")
    assert f"{image.TRAINER_IMAGE_KEY}={pushed}" in said
    registry = project.stacks[stack].exported["imageRegistry"]
    assert pushed.startswith(registry)
    ran = [c["argv"][:2] for c in project.calls()]
    assert ran == [
        ["az", "acr"] if cloud == "aks" else ["docker", "login"],
        ["docker", "build"],
        ["docker", "push"],
        ["docker", "image"],
    ]
    if stub is not None:
        stub.assert_no_pending_responses()
        assert project.calls()[0]["stdin"] == "secret-token"  # never on a command line

    # 2. `plan`: the stack's config is valid and the platform takes the image as recorded.
    planned: list[Any] = []
    real_run_program = harness.run_program

    def recorded(*args: Any, **kwargs: Any) -> Any:
        planned.append(real_run_program(*args, **kwargs))
        return planned[-1]

    monkeypatch.setattr(harness, "run_program", recorded)
    _ok(capsys, ["plan", "-s", stack])
    assert planned and planned[-1].config[image.TRAINER_IMAGE_KEY] == pushed
    _the_handler_runs(planned[-1], pushed, installed=cloud == "aks")

    # 3. `up --yes`: the offline checks pass with it, and the update goes to the Automation API.
    planned.clear()
    _ok(capsys, ["up", "-s", stack, "--yes"])
    assert [name for name, _ in project.stacks[stack].calls] == ["up"]
    _the_handler_runs(planned[0], pushed, installed=cloud == "aks")

    # 4. `submit --dry-run`: every container of the job runs it.
    manifests = _ok(capsys, ["submit", "-s", stack, "--dry-run"])
    assert _images(manifests) == {pushed}

    # 5. `drill --dry-run`: no cluster answers here, so it says the drill from the offline plan,
    # with the job's image exactly as pushed.
    out = _ok(capsys, ["drill", "-s", stack, "--dry-run"])
    assert f"from the image {pushed}," in out
    assert "kubeflow-training: TrainingClient.create_job(PyTorchJob training/" in out


def _the_handler_runs(plan: Any, pushed: str, *, installed: bool) -> None:
    """The spot-notice handler (AKS) is installed from `pushed`, as Helm renders its values."""
    platform = next(r for r in plan.resources if r.type == PLATFORM_TYPE)
    assert platform.outputs.get("noticeHandler") != NOTICE_HANDLER_WAITS
    charts = [r for r in plan.resources if (r.type, r.name) == HANDLER_CHART]
    if not installed:
        assert charts == []
        return
    (chart,) = charts
    values = chart.inputs["values"]
    reference = ImageReference.parse(pushed)
    assert reference is not None
    assert values["image"] == {"repository": reference.repository, "tag": reference.tag, "digest": reference.digest}
    objects = render_chart(NOTICE_CHART, values, release="spot-notice-handler", namespace="training")
    (daemonset,) = [o for o in objects if o["kind"] == "DaemonSet"]
    assert [c["image"] for c in daemonset["spec"]["template"]["spec"]["containers"]] == [pushed]


def test_a_second_image_of_the_same_content_uses_what_ecr_holds(project, monkeypatch, capsys):
    """ECR's tags are immutable: a push of a tag it holds would fail. The tag names the
    checkout's content, so the image ECR holds under it is the one to use, without a build."""
    tag = image.commit_tag()
    registry = automation.select_stack(stack_name="eks-dev", work_dir=str(ROOT)).exported["imageRegistry"]
    digest = "sha256:" + "5" * 64
    ecr_answering(
        monkeypatch,
        (
            "describe_images",
            {"imageDetails": [{"registryId": "123456789012", "imageDigest": digest, "imageTags": [tag]}]},
        ),
    )
    said = _ok(capsys, ["image", "-s", "eks-dev"])
    assert "not built again" in said
    assert project.calls() == []  # no login, build or push
    recorded = yaml.safe_load((project.stacks_dir / "Pulumi.eks-dev.yaml").read_text())["config"]
    assert recorded[image.TRAINER_IMAGE_KEY] == f"{registry}:{tag}@{digest}"


def test_a_tag_given_that_ecr_holds_is_refused_before_any_build(project, monkeypatch, capsys):
    ecr_answering(
        monkeypatch,
        ("describe_images", {"imageDetails": [{"imageDigest": "sha256:" + "5" * 64, "imageTags": ["v1"]}]}),
    )
    assert main(["image", "-s", "eks-dev", "--tag", "v1"]) == 2
    err = capsys.readouterr().err
    assert "--tag='v1' is invalid: expected a tag the stack's ECR repository does not hold yet" in err
    assert project.calls() == []

"""`elastic-lab up | preview | destroy`: the offline checks and credentials first, then the
Automation API (whose Stack methods are checked against their real signatures)."""

from __future__ import annotations

import inspect
import os
from typing import Any

import pytest
from pulumi import automation
from pulumi.automation.events import OpType

from lab.program import harness
from lab.stacks import automation as stacks
from lab.stacks import prerequisites
from lab.stacks.automation import StackError


class FakeStack:
    """Stands in for automation.Stack; every call is bound to the real method's signature."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        # The stack's state and config (not counted among the operations in `calls`).
        self.deployment: dict = {}
        self.config: dict = {}
        # What a preview reports, as the CLI's engine counts it.
        self.changes = {OpType.CREATE: 40, OpType.SAME: 2, OpType.DELETE: 1}

    def _call(self, name: str, kwargs: dict) -> Any:
        inspect.signature(getattr(automation.Stack, name)).bind(self, **kwargs)  # raises on a wrong keyword
        self.calls.append((name, kwargs))
        kwargs["on_output"](f"{name} done\n")
        if name.startswith("preview"):
            return automation.PreviewResult(stdout=f"{name} done\n", stderr="", change_summary=dict(self.changes))
        return f"{name}-result"

    def up(self, **kwargs):
        return self._call("up", kwargs)

    def preview(self, **kwargs):
        return self._call("preview", kwargs)

    def preview_destroy(self, **kwargs):
        return self._call("preview_destroy", kwargs)

    def destroy(self, **kwargs):
        return self._call("destroy", kwargs)

    def _bind(self, name: str, *args) -> None:
        inspect.signature(getattr(automation.Stack, name)).bind(self, *args)

    def export_stack(self):
        self._bind("export_stack")
        return automation.Deployment(version=3, deployment=self.deployment)

    def get_all_config(self):
        self._bind("get_all_config")
        return dict(self.config)

    def set_config(self, key, value):
        self._bind("set_config", key, value)
        self.config = {**self.config, key: value}

    def remove_config(self, key):
        self._bind("remove_config", key)
        self.config = {k: v for k, v in self.config.items() if k != key}


REAL_PREREQUISITES = stacks.missing_prerequisites
REAL_AWS = prerequisites.aws


def _sts_answering() -> Any:
    """An STS client that answers get_caller_identity once (botocore's Stubber)."""
    import boto3
    from botocore.stub import Stubber

    sts = boto3.client("sts", region_name="us-east-1")
    stub = Stubber(sts)
    stub.add_response("get_caller_identity", {"Account": "123456789012", "Arn": "arn:aws:iam::123456789012:user/a"})
    stub.activate()
    return sts


@pytest.fixture
def fake_stack(monkeypatch):
    """The Automation API's stack, on a machine that has every prerequisite (the tests that
    take one away put the real check back)."""
    monkeypatch.setattr(stacks, "missing_prerequisites", lambda cloud, stack, quota=None, **kw: None)
    stack = FakeStack()
    selected = []

    def select(**kwargs):
        selected.append(kwargs)
        return stack

    monkeypatch.setattr(automation, "create_or_select_stack", select)
    monkeypatch.setattr(automation, "select_stack", select)
    stack.selected = selected
    return stack


def test_a_stack_failing_a_check_is_refused_before_the_cli_is_touched(monkeypatch):
    real = harness.run_program

    def broken(stack, overrides=None):
        plan = real(stack, overrides)
        pool = next(r for r in plan.resources if r.name == "aks-gpu-spot")
        pool.inputs["scaleSetPriority"] = "Regular"
        return plan

    def untouchable(**kwargs):
        raise AssertionError("the Pulumi CLI must not be touched")

    monkeypatch.setattr(harness, "run_program", broken)
    monkeypatch.setattr(automation, "create_or_select_stack", untouchable)
    with pytest.raises(StackError, match=r"fails \d+ check\(s\) of `elastic-lab plan`; nothing was started") as err:
        stacks.run("up", "aks-dev", say=lambda line: None)
    assert "[guardrail:gpu-capacity-ranks]" in str(err.value) and "expected spot: rank 1" in str(err.value)


def test_without_the_pulumi_cli_the_message_says_so(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(StackError, match=r"preview of stack 'byo' \(byo\) cannot start here; missing:") as err:
        stacks.run("preview", "byo", say=lambda line: None)
    assert "✗ Pulumi CLI: not on PATH\n    fix: install it: https://www.pulumi.com/docs/install/" in str(err.value)


def test_without_azure_credentials_nothing_starts(monkeypatch, fake_stack, tmp_path):
    for var in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_USERNAME", "IDENTITY_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")  # no az, azd or pwsh to ask
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(stacks, "missing_prerequisites", REAL_PREREQUISITES)
    with pytest.raises(StackError, match=r"up of stack 'aks-dev' \(aks\) cannot start here") as err:
        stacks.run("up", "aks-dev", say=lambda line: None)
    # Every problem at once: the CLI and the credentials.
    assert "✗ Pulumi CLI: not on PATH" in str(err.value)
    assert "✗ Azure credentials: " in str(err.value) and "fix: `az login`" in str(err.value)
    assert fake_stack.calls == []


def test_without_aws_credentials_nothing_starts(monkeypatch, fake_stack, tmp_path):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(stacks, "missing_prerequisites", REAL_PREREQUISITES)
    with pytest.raises(StackError, match=r"up of stack 'eks-dev' \(eks\) cannot start here") as err:
        stacks.run("up", "eks-dev", say=lambda line: None)
    assert "✗ AWS credentials: none found in boto3's credential chain" in str(err.value)
    assert "fix: `aws configure`" in str(err.value)
    assert fake_stack.calls == []


@pytest.mark.parametrize("operation", ["up", "preview", "destroy"])
def test_operations_go_through_the_automation_api(fake_stack, operation):
    lines = []
    result = stacks.run(operation, "byo", say=lambda line: None, on_output=lines.append)
    assert lines == [f"{operation} done\n"]
    if operation == "preview":
        assert stacks.changes_of(result) == "40 to create, 1 to delete"
    else:
        assert result == f"{operation}-result"
    ((name, kwargs),) = fake_stack.calls
    assert name == operation
    assert fake_stack.selected == [{"stack_name": "byo", "work_dir": str(stacks.ROOT)}]
    if operation != "destroy":
        policy = [str(stacks.POLICY_DIR)] if (stacks.POLICY_DIR / "PulumiPolicy.yaml").is_file() else []
        assert kwargs["policy_packs"] == policy


def test_a_failed_update_names_the_cli_error(fake_stack, monkeypatch):
    def fail(**kwargs):
        raise automation.errors.CommandError(
            automation.CommandResult(stdout="", stderr="error: resource quota exceeded", code=255)
        )

    monkeypatch.setattr(fake_stack, "up", fail)
    with pytest.raises(StackError, match=r"pulumi up of stack 'byo' failed: .*resource quota exceeded"):
        stacks.run("up", "byo", say=lambda line: None)


def test_without_the_aws_cli_nothing_starts(monkeypatch, fake_stack, tmp_path):
    """The EKS kubeconfig execs `aws eks get-token`: credentials alone are not enough."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE00")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no aws here
    monkeypatch.setattr(stacks, "missing_prerequisites", REAL_PREREQUISITES)
    # (no quota asked: that is tests/stacks/test_quota.py's)
    monkeypatch.setattr(prerequisites, "aws", lambda quota=None: REAL_AWS(sts=_sts_answering()))
    with pytest.raises(StackError, match=r"up of stack 'eks-dev' \(eks\) cannot start here") as err:
        stacks.run("up", "eks-dev", say=lambda line: None)
    assert "✗ AWS CLI: not on PATH (the cluster's kubeconfig runs `aws eks get-token`)" in str(err.value)
    assert "✓" not in str(err.value) and "not-a-real-secret" not in str(err.value)
    assert fake_stack.calls == []


def test_a_stack_whose_config_no_longer_validates_can_still_be_destroyed(monkeypatch, fake_stack):
    """Destroying works from the stack's state: a config a newer check refuses must not keep its
    resources (and their bill) alive. Every other operation still refuses it."""
    from lab.vocab.problems import InvalidInput, Problem

    def refused(stack, overrides=None):
        raise InvalidInput([Problem("elastic-spot-lab:gpuVmSize", "Standard_NC6s_v3", "a GPU the image can run")])

    monkeypatch.setattr(harness, "run_program", refused)
    said = []
    assert stacks.run("destroy", "byo", say=said.append) == "destroy-result"
    assert [name for name, _ in fake_stack.calls] == ["destroy"]
    assert any("no longer validates" in line and "Standard_NC6s_v3" in line for line in said), said
    with pytest.raises(InvalidInput, match="Standard_NC6s_v3"):
        stacks.run("up", "byo", say=said.append)
    assert [name for name, _ in fake_stack.calls] == ["destroy"]


def _state_of(plan) -> dict:
    """The plan as `pulumi stack export` would show it after an `up`."""
    return {
        "resources": [
            {"urn": r.urn, "type": r.type, "id": r.id, "retainOnDelete": r.retain_on_delete} for r in plan.resources
        ]
    }


@pytest.mark.parametrize(
    "stack,roles",
    [("aks-dev", {"resourceGroup", "account", "container"}), ("eks-dev", {"bucket"})],
)
def test_up_destroy_up_takes_the_kept_checkpoint_storage_back(fake_stack, monkeypatch, stack, roles):
    """The destroy keeps the checkpoint storage and writes its ids to the stack's config; an
    up without them fails as the cloud does (azure-native: it exists) or leaves the bucket
    behind (S3: a new name); the next up imports them under the same URNs, then drops the key."""
    import json

    from lab.stacks import kept_storage
    from lab.vocab.checkpoint_location import KEPT_ROLES

    first = harness.run_program(stack)
    fake_stack.deployment = _state_of(first)
    said: list[str] = []
    stacks.run("destroy", stack, say=said.append, on_output=lambda line: None)
    value = fake_stack.config[kept_storage.ADOPT_KEY]
    ids = json.loads(value.value)
    assert set(ids) == roles and set(ids.values()) <= first.kept_by_destroy
    assert any("the next `elastic-lab up" in line for line in said)

    kept = first.kept_by_destroy  # what the cloud still holds
    if stack == "aks-dev":
        with pytest.raises(Exception, match="already exists"):
            harness.run_program(stack, cloud=kept)
    else:
        again = harness.run_program(stack, cloud=kept)
        assert again.one("aws:s3/bucket:Bucket").id not in kept  # a second bucket; the first is lost to the stack
    adopted = harness.run_program(stack, {"adoptCheckpoints": ids}, cloud=kept)
    assert {rid for _, rid in adopted.imported} == set(ids.values())
    before = {r.urn for r in first.resources if r.type in KEPT_ROLES}
    assert {r.urn for r in adopted.resources if r.type in KEPT_ROLES} == before

    stacks.run("up", stack, say=said.append, on_output=lambda line: None)
    assert kept_storage.ADOPT_KEY not in fake_stack.config
    assert any("is the stack's again" in line for line in said)


def test_a_destroy_that_keeps_nothing_writes_nothing(fake_stack):
    fake_stack.deployment = {"resources": [{"urn": "u", "type": "aws:s3/bucket:Bucket", "id": "b"}]}
    stacks.run("destroy", "byo", say=lambda line: None, on_output=lambda line: None)
    assert fake_stack.config == {}


@pytest.mark.parametrize("answer", [True, False], ids=["yes", "no"])
def test_up_previews_says_the_changes_and_the_cost_then_asks(fake_stack, monkeypatch, answer):
    """Asked, `up` previews first (the CLI's diff streamed), says what it would change and what
    the stack costs an hour, and updates only on a yes; a no changes nothing."""
    said, questions, streamed = [], [], []

    def ask(question: str) -> bool:
        questions.append(question)
        return answer

    run = lambda: stacks.run("up", "aks-dev", say=said.append, on_output=streamed.append, confirm=ask)  # noqa: E731
    if answer:
        assert run() == "up-result"
        assert [name for name, _ in fake_stack.calls] == ["preview", "up"]
    else:
        with pytest.raises(stacks.NotConfirmed, match="up of stack 'aks-dev' not confirmed: nothing was changed"):
            run()
        assert [name for name, _ in fake_stack.calls] == ["preview"]
    assert streamed[0] == "preview done\n"
    assert "preview of up for stack 'aks-dev': 40 to create, 1 to delete" in said
    assert any("idle (every pool at its minimum, GPU pool at zero):" in line for line in said)
    assert questions == ["up stack 'aks-dev' (40 to create, 1 to delete)?"]
    preview_kwargs = fake_stack.calls[0][1]
    assert preview_kwargs["policy_packs"] == fake_stack.calls[-1][1]["policy_packs"]  # the same checks


def test_destroy_previews_what_it_deletes_then_asks(fake_stack):
    fake_stack.changes = {OpType.DELETE: 42}
    questions = []
    with pytest.raises(stacks.NotConfirmed):
        stacks.run("destroy", "byo", say=lambda line: None, confirm=lambda q: questions.append(q) or False)
    assert [name for name, _ in fake_stack.calls] == ["preview_destroy"]
    assert questions == ["destroy stack 'byo' (42 to delete)?"]


def test_a_preview_that_changes_nothing_says_so():
    assert stacks.changes_of(automation.PreviewResult("", "", {OpType.SAME: 12})) == "no changes"
    assert stacks.changes_of(automation.PreviewResult("", "", {})) == "no changes"


@pytest.mark.parametrize(
    ("argv", "code", "calls"),
    [
        (["up", "--stack", "byo"], 1, ["preview"]),  # not a terminal: nobody to ask
        (["up", "--stack", "byo", "--yes"], 0, ["up"]),
        (["destroy", "--stack", "byo"], 1, ["preview_destroy"]),
        (["destroy", "--stack", "byo", "--yes"], 0, ["destroy"]),
        (["preview", "--stack", "byo"], 0, ["preview"]),
    ],
)
def test_the_command_line_asks_unless_told_yes(fake_stack, monkeypatch, capsys, argv, code, calls):
    from lab.cli import main

    with open(os.devnull) as stdin:  # not a terminal
        monkeypatch.setattr("sys.stdin", stdin)
        assert main(argv) == code
    assert [name for name, _ in fake_stack.calls] == calls
    if code:
        assert "(not a terminal: pass --yes)" in capsys.readouterr().err


def test_up_says_what_the_image_step_will_miss_before_the_cluster_is_billed(fake_stack, monkeypatch):
    found = [
        prerequisites.Prerequisite("Pulumi CLI", True, "version 3.200.0"),
        prerequisites.Prerequisite("Azure CLI (for `elastic-lab image`)", False, "not on PATH", "install it", False),
        prerequisites.Prerequisite("Azure role rights", False, "not checked until x works", checked=False),
    ]
    monkeypatch.setattr(stacks, "missing_prerequisites", REAL_PREREQUISITES)
    monkeypatch.setattr(stacks, "stack_prerequisites", lambda cloud, stack, quota=None, **kw: found)
    said: list[str] = []
    stacks.run("up", "aks-dev", say=said.append, confirm=lambda question: True)
    warning = said.index("warning: ! Azure CLI (for `elastic-lab image`): not on PATH\n    fix: install it")
    assert warning < next(i for i, line in enumerate(said) if line.startswith("preview of up"))
    assert not any("Azure role rights" in line for line in said)
    assert [c[0] for c in fake_stack.calls][-1] == "up"

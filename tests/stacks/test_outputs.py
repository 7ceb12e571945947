"""A deployed stack's outputs as a typed record, and the kubeconfig file a command gets for a
stack: the record is built from what the program exports under mocks, so a renamed export
fails here; the kubeconfig secret never shows in a repr and its file is private and removed."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from lab.program.harness import run_program
from lab.stacks import outputs as stack_outputs
from lab.stacks.automation import StackError
from lab.stacks.outputs import StackOutputs, kubeconfig_file


def _exported(stack: str) -> dict:
    """The stack's outputs as the program exports them (values as the mocks resolve them)."""
    return dict(run_program(stack).outputs)


@pytest.mark.parametrize(
    "stack,present,absent",
    [
        (
            "aks-dev",
            ["kubeconfig", "cluster_name", "resource_group_name", "node_resource_group", "storage_account_name"],
            ["region", "fis_template_id", "kubeconfig_path"],
        ),
        (
            "eks-dev",
            ["kubeconfig", "cluster_name", "region", "vpc_id", "checkpoint_bucket", "fis_template_id", "fis_role_arn"],
            ["resource_group_name", "node_resource_group", "kubeconfig_path"],
        ),
        ("byo", ["kubeconfig_path"], ["kubeconfig", "cluster_name", "region"]),
    ],
)
def test_the_record_holds_what_each_stack_exports(stack, present, absent):
    record = StackOutputs.from_outputs(stack, _exported(stack))
    for name in present:
        assert getattr(record, name), name
    for name in absent:
        assert getattr(record, name) is None, name
    assert record.platform_namespace == "training" and record.checkpoint_claim
    if stack == "aks-dev":
        assert record.gpu_pool("pool_names") == record.pool_names["gpu-spot"]
        # The drills may evict from every spot rank, never from the on-demand one.
        assert record.spot_gpu_pools("pool_names") == ("gpuspot", "gpuspot2")
    if stack == "eks-dev":
        assert record.gpu_pool("node_group_names") == record.node_group_names["gpu-spot"]
        assert record.spot_gpu_pools("node_group_names") == ("gpu-spot", "gpu-spot-2")
    if stack == "byo":
        assert record.gpu_ranks == ()


def test_the_kubeconfig_never_shows_in_the_record():
    record = StackOutputs.from_outputs("aks-dev", {"kubeconfig": "apiVersion: v1\nusers: [token: s3cr3t]"})
    assert "s3cr3t" not in repr(record) and "s3cr3t" not in str(record)


def test_a_missing_output_is_named():
    record = StackOutputs.from_outputs("eks-dev", {"region": "eu-west-1"})
    assert record.need("region") == "eu-west-1"
    with pytest.raises(StackError, match=r"stack 'eks-dev' has no `fisTemplateId` output"):
        record.need("fis_template_id")
    with pytest.raises(StackError, match=r"`nodeGroupNames` output names no gpu-spot pool"):
        record.gpu_pool("node_group_names")


def test_an_explicit_or_configured_kubeconfig_must_exist(tmp_path):
    present = tmp_path / "kubeconfig"
    present.write_text("apiVersion: v1\n")
    with kubeconfig_file("byo", explicit=str(present)) as path:
        assert path == str(present)
    with kubeconfig_file("byo", configured=str(present)) as path:
        assert path == str(present)
    with pytest.raises(StackError, match=r"--kubeconfig /nope: no such file"), kubeconfig_file("byo", explicit="/nope"):
        pass
    with (
        pytest.raises(StackError, match="kubeconfig /nope does not exist"),
        kubeconfig_file("byo", configured="/nope"),
    ):
        pass


def test_the_stack_output_is_written_to_a_private_file_that_is_removed(monkeypatch):
    secret = "apiVersion: v1\nusers: [token: s3cr3t]\n"
    monkeypatch.setattr(stack_outputs, "read_outputs", lambda stack: StackOutputs(stack, kubeconfig=secret))
    with kubeconfig_file("aks-dev") as name:
        path = Path(name)
        assert path.read_text() == secret
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not path.exists()


def test_a_stack_without_a_kubeconfig_output_is_an_error(monkeypatch):
    monkeypatch.setattr(stack_outputs, "read_outputs", lambda stack: StackOutputs(stack))
    with pytest.raises(StackError, match="has no `kubeconfig` output"), kubeconfig_file("aks-dev"):
        pass


def test_without_the_pulumi_cli_reading_outputs_says_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(StackError, match="not installed here"):
        stack_outputs.read_outputs("aks-dev")

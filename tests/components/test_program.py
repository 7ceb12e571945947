"""The program's order: every config problem is reported before the first resource is
declared; a cloud without a cluster component is a config error; `__main__.py` runs exactly
`components.program.main`, which `elastic-lab plan` runs under mocks."""

from __future__ import annotations

import ast

import pytest

from lab.program.harness import run_program
from lab.vocab.layout import ROOT
from lab.vocab.names import AKS_CLUSTER_TYPE, BYO_CLUSTER_TYPE, PLATFORM_TYPE
from lab.vocab.problems import InvalidInput


def test_main_py_runs_the_program_body_and_nothing_else():
    tree = ast.parse((ROOT / "__main__.py").read_text())
    statements = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    assert [ast.unparse(n) for n in statements] == ["from components.program import main", "main()"]


@pytest.mark.parametrize(
    ("stack", "cluster_type"),
    [pytest.param("aks-dev", AKS_CLUSTER_TYPE, id="aks"), pytest.param("byo", BYO_CLUSTER_TYPE, id="byo")],
)
def test_the_stacks_cloud_picks_the_cluster_and_the_platform_goes_on_it(stack, cluster_type):
    plan = run_program(stack)
    cluster = plan.one(cluster_type)
    platform = plan.one(PLATFORM_TYPE)
    # The platform waits for the whole cluster (Pulumi expands a component to its children).
    assert {r.urn for r in plan.children(cluster.urn) if r.custom} <= set(platform.depends_on)
    assert {"platformNamespace", "etcdHost", "checkpointClaim"} <= set(plan.outputs)


def test_problems_of_cluster_and_platform_come_together_and_nothing_is_declared():
    with pytest.raises(InvalidInput) as info:
        run_program("aks-dev", {"gpuVmSize": "Standard_D4s_v5", "platform": {"etcd": {"tag": "latest"}}})
    assert {p.key for p in info.value.problems} == {
        "elastic-spot-lab:gpuVmSize",
        "elastic-spot-lab:platform.etcd.tag",
    }
    assert info.value.recorded_resources == []  # not the cluster, not anything


def test_another_clouds_keys_are_errors_that_name_the_cloud():
    """The AKS stack's file with `cloud: eks`: every AKS-only key is named as such, the
    missing region is reported, and nothing is declared."""
    with pytest.raises(InvalidInput) as info:
        run_program("aks-dev", {"cloud": "eks"})
    by_key = {p.key: p for p in info.value.problems}
    assert by_key["elastic-spot-lab:location"].expected.startswith(
        "a key of cloud eks ('location' belongs to cloud aks)"
    )
    assert "elastic-spot-lab:gpuVmSize" in by_key and "elastic-spot-lab:kubernetesVersion" not in by_key
    assert by_key["elastic-spot-lab:region"].expected.startswith("an AWS region code")
    assert info.value.recorded_resources == []


def test_a_cloud_without_a_cluster_component_is_a_config_error():
    with pytest.raises(InvalidInput) as info:
        run_program("aks-dev", {"cloud": "gke"})
    problem = next(p for p in info.value.problems if p.key == "elastic-spot-lab:cloud")
    assert problem.value == "gke" and problem.expected == "one of aks, eks, byo"
    assert info.value.recorded_resources == []

"""The provider a cloud's cluster component hands the platform."""

from __future__ import annotations

import pulumi

from components.cluster_info import kubernetes_provider
from lab.program.harness import run_program


def test_the_provider_applies_server_side_after_what_the_platform_needs():
    def program() -> None:
        parent = pulumi.ComponentResource("test:index:Cluster", "c")
        pool = pulumi.CustomResource("test:index:Pool", "c-pool", {}, pulumi.ResourceOptions(parent=parent))
        kubernetes_provider("c", pulumi.Output.secret("kubeconfig"), parent=parent, after=[pool])

    plan = run_program("test", program=program, config={})
    provider = plan.one("pulumi:providers:kubernetes", "c-k8s")
    assert provider.inputs["enableServerSideApply"] == "true"
    assert "kubeconfig" in provider.secret_inputs
    assert provider.parent_name == "c"
    assert provider.depends_on == [plan.one("test:index:Pool", "c-pool").urn]

"""Fixtures for the infrastructure tests: plans of the real program, under mocks, offline."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from lab.plan.harness import Plan, list_stacks, read_stack_config, run_program

AKS_STACKS = [s for s in list_stacks() if read_stack_config(s)[0].get("elastic-spot-lab:cloud") == "aks"]

# The checks this issue owns (others register theirs in the same registry).
OUR_CHECKS = [
    "arm-conformance",
    "guardrail:spot-pool",
    "guardrail:gpu-pool",
    "guardrail:on-demand-pools",
    "guardrail:autoscaled-count",
    "guardrail:cluster-features",
    "guardrail:network-policy",
    "guardrail:storage-outside-node-rg",
    "guardrail:no-plain-secrets",
]


@pytest.fixture(scope="session")
def aks_plan() -> Plan:
    """The aks-dev stack, planned once. Tests that mutate it take `broken_plan` instead."""
    return run_program("aks-dev")


@pytest.fixture()
def broken_plan(aks_plan: Plan) -> Plan:
    """A private deep copy of the aks-dev plan, to break on purpose."""
    return copy.deepcopy(aks_plan)


@pytest.fixture(scope="session")
def cluster_only_plan() -> Callable[..., Plan]:
    """Plan of just the AksCluster component (no platform), from aks-dev config + overrides."""
    from components import config as config_mod

    def run(**overrides: Any) -> Plan:
        def program() -> None:
            import pulumi

            from components.aks import AksCluster

            cfg = config_mod.load()
            cluster = AksCluster("aks", cfg.aks_args())
            for k, v in cluster.outputs().items():
                pulumi.export(k, v)

        return run_program("aks-dev", overrides, program=program)

    return run

"""Fixtures for the infrastructure tests: plans of the real program, under mocks, offline."""

from __future__ import annotations

import copy

import pytest

from lab.program.harness import run_program
from lab.program.recording import Plan
from lab.program.stack_files import list_stacks, read_stack_config
from tests.placements import TRAINER_IMAGE

AKS_STACKS = [s for s in list_stacks() if read_stack_config(s)[0].get("elastic-spot-lab:cloud") == "aks"]

# The checks of the AKS cluster and of every stack's outputs (the platform's are in platform_checks).
CLUSTER_CHECKS = [
    "arm-conformance",
    "guardrail:spot-pool",
    "guardrail:gpu-pool",
    "guardrail:gpu-capacity-ranks",
    "guardrail:on-demand-pools",
    "guardrail:autoscaled-count",
    "guardrail:cluster-features",
    "guardrail:network-policy",
    "guardrail:storage-outside-node-rg",
    "guardrail:pool-operations",
    "guardrail:checkpoints-kept",
    "guardrail:maintenance-window",
    "cost:priced",
    "guardrail:image-registry",
    "platform:trainer-image",
    "guardrail:no-plain-secrets",
]


@pytest.fixture(scope="session")
def aks_plan() -> Plan:
    """The aks-dev stack, planned once. Tests that mutate it take `broken_plan` instead."""
    return run_program("aks-dev", {"trainerImage": TRAINER_IMAGE})  # deployed: its image pushed


@pytest.fixture()
def broken_plan(aks_plan: Plan) -> Plan:
    """A private deep copy of the aks-dev plan, to break on purpose."""
    return copy.deepcopy(aks_plan)


# The checks of the EKS cluster (the platform's and the outputs' are shared with every stack).
EKS_CHECKS = [
    "aws-api-conformance",
    "guardrail:eks-on-demand-groups",
    "guardrail:eks-gpu-group",
    "guardrail:eks-scale-from-zero",
    "guardrail:eks-group-operations",
    "guardrail:eks-network-policy",
    "guardrail:eks-metrics-server",
    "guardrail:bucket-not-public",
    "guardrail:eks-checkpoints-kept",
    "guardrail:bucket-lifecycle",
    "guardrail:eks-registry-force-delete",
    "guardrail:eks-s3-endpoint",
    "guardrail:fis-targets-gpu-spot",
]


@pytest.fixture(scope="session")
def eks_plan() -> Plan:
    """The eks-dev stack, planned once."""
    return run_program("eks-dev")


@pytest.fixture()
def broken_eks_plan(eks_plan: Plan) -> Plan:
    """A private deep copy of the eks-dev plan, to break on purpose."""
    return copy.deepcopy(eks_plan)

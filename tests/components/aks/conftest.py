"""Plans of the AKS cluster component alone, under the plan's own mocks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lab.program.harness import run_program
from lab.program.recording import Plan


@pytest.fixture(scope="session")
def cluster_only_plan() -> Callable[..., Plan]:
    """Plan of just the AksCluster component (no platform), from aks-dev config + overrides."""
    from components import config as config_mod

    def run(**overrides: Any) -> Plan:
        def program() -> None:
            import pulumi

            from components.aks import AksCluster, AksClusterArgs

            cfg = config_mod.load()
            assert isinstance(cfg.cluster, AksClusterArgs)
            cluster = AksCluster("aks", cfg.cluster)
            for k, v in cluster.outputs().items():
                pulumi.export(k, v)

        return run_program("aks-dev", overrides, program=program)

    return run

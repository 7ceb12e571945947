"""The name of each pool's resource: one rule for AKS pools and EKS node groups alike."""

from __future__ import annotations

import pytest

from components.capacity import pool_resource_name
from lab.vocab import pools as labels


@pytest.mark.parametrize(
    "role,rank,name",
    [
        (labels.POOL_CPU, 0, f"c-{labels.POOL_CPU}"),
        # Rank 1 keeps the name the GPU spot pool had before there were ranks: no replacement.
        (labels.POOL_GPU_SPOT, 1, f"c-{labels.POOL_GPU_SPOT}"),
        (labels.POOL_GPU_SPOT, 2, f"c-{labels.POOL_GPU_SPOT}-rank2"),
    ],
)
def test_a_pool_resource_is_named_by_its_role_and_rank(role, rank, name):
    assert pool_resource_name("c", role, rank) == name

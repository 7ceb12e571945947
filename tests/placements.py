"""Pool placements of real clusters, for tests that need one: the AKS component's own, an
EKS-like one, and the byo stack file's."""

from __future__ import annotations

from components.aks.args import AksClusterArgs
from components.aks.node_pools import gpu_rank_specs, placement, pool_specs
from components.platform.settings import PlatformSettings
from lab.vocab.job import CheckpointWrites
from lab.vocab.platform_facts import PlatformFacts
from lab.vocab.pools import PoolPlacement, Taint

# The trainer image as `docker push` to an AKS stack's registry leaves it: what the tests of a
# deployed AKS stack (its spot-notice handler installed) set as elastic-spot-lab:trainerImage.
TRAINER_IMAGE = "eslacr636ed551d34ae649.azurecr.io/elastic-spot-lab/trainer:0.1.0"

_AKS_ARGS = AksClusterArgs(location="eastus", resource_group_name="rg", cluster_name="c")
AKS_PLACEMENT = placement(pool_specs(_AKS_ARGS), gpu_rank_specs(_AKS_ARGS))
EKS_PLACEMENT = PoolPlacement(
    gpu_labels={"elastic-spot-lab/pool": "gpu-spot", "eks.amazonaws.com/capacityType": "SPOT"},
    gpu_taints=(Taint("elastic-spot-lab/spot", "true"), Taint("nvidia.com/gpu", "present")),
    spot_labels={"eks.amazonaws.com/capacityType": "SPOT"},
)
BYO_PLACEMENT = PoolPlacement(
    gpu_taints=("elastic-spot-lab/spot=true:NoSchedule",), spot_labels={"elastic-spot-lab/capacity": "spot"}
)


def aks_facts(settings: PlatformSettings | None = None) -> PlatformFacts:
    """What jobs see of the default platform on the AKS cluster."""
    return (settings or PlatformSettings()).facts(AKS_PLACEMENT, writes=CheckpointWrites.RENAME, eviction_notice_s=30)

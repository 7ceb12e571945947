"""AKS cluster component: one file per concern.

args.py        AksClusterArgs: typed, validated arguments (and the config keys they come from)
cluster.py     AksCluster: the ComponentResource that composes everything below
node_pools.py  system pool profile, on-demand CPU pool, GPU spot pool, their placement
identity.py    control-plane identity, training workload identity + federated credential
storage.py     checkpoint storage account + container + role assignments
registry.py    the stack's container registry, where `elastic-lab image` pushes and the nodes pull
maintenance.py planned maintenance: when AKS may upgrade the cluster and reimage its nodes
"""

from components.aks.args import AksClusterArgs
from components.aks.cluster import AksCluster

__all__ = ["AksCluster", "AksClusterArgs"]

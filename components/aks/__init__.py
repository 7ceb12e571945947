"""AKS cluster component (issue 3): one file per concern.

  args.py      AksClusterArgs: typed, validated arguments (and the config keys they come from)
  cluster.py   AksCluster: the ComponentResource that composes everything below
  pools.py     system pool profile, on-demand CPU pool, GPU spot pool
  identity.py  control-plane identity, training workload identity + federated credential
  storage.py   checkpoint storage account + container + role assignments
"""

from components.aks.args import AksArgsError, AksClusterArgs
from components.aks.cluster import COMPONENT_TYPE, AksCluster

__all__ = ["AksArgsError", "AksCluster", "AksClusterArgs", "COMPONENT_TYPE"]

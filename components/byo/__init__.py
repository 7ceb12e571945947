"""Bring-your-own cluster component: an existing cluster reached through its kubeconfig."""

from components.byo.cluster import ByoCluster, ByoClusterArgs

__all__ = ["ByoCluster", "ByoClusterArgs"]

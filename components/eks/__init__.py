"""The EKS cluster component and its arguments."""

from components.eks.args import EksClusterArgs
from components.eks.cluster import EksCluster

__all__ = ["EksCluster", "EksClusterArgs"]

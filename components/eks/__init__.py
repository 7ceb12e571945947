"""The EKS cluster component and its arguments.

args.py         EksClusterArgs: typed, validated arguments (and the config keys they come from)
catalogue.py    what AWS offers as the args check it: instance types, their GPUs, AMI types, regions
cluster.py      EksCluster: the ComponentResource that composes everything below
network.py      the VPC: subnets, gateways, routes (or an existing VPC's subnets)
iam.py          the cluster's and the nodes' roles
node_groups.py  the on-demand CPU group and the GPU spot groups
autoscaler.py   Cluster Autoscaler and what it may scale
storage.py      the checkpoint bucket, its CSI driver and the training identity
fis.py          the FIS experiment that interrupts a spot instance
"""

from components.eks.args import EksClusterArgs
from components.eks.cluster import EksCluster

__all__ = ["EksCluster", "EksClusterArgs"]

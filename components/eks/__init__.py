"""EKS cluster component: one file per concern.

args.py         EksClusterArgs: every knob of the EKS stack, typed and validated
cluster.py      EksCluster: the ComponentResource that composes everything below
network.py      the VPC: private subnets for nodes, public ones for load balancers, one NAT gateway
node_groups.py  managed node groups: the on-demand CPU group, the spot GPU group, labels, taints, tags
catalogue.py    what AWS offers as the args check it: instance types, their GPUs, AMI types, regions
iam.py          IAM policy documents (pure data, checked offline) and the roles built on them
autoscaler.py   Cluster Autoscaler on the CPU group, allowed to resize only this cluster's groups
storage.py      checkpoint storage: an S3 bucket mounted by the Mountpoint for S3 CSI driver
fis.py          the drill's AWS side: an FIS experiment template that interrupts a spot instance
"""

from components.eks.args import EksClusterArgs
from components.eks.cluster import EksCluster

__all__ = ["EksCluster", "EksClusterArgs"]

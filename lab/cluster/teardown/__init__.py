"""What `pulumi destroy` cannot see: the things a cluster's controllers and a local run create
outside Pulumi's state, found and deleted so that tearing a stack down leaves nothing billing.

A Kubernetes controller makes cloud resources on its own: a LoadBalancer Service gets a cloud
load balancer (and, on Azure, a public IP; on AWS, security groups and target groups), a
PersistentVolumeClaim gets a disk, the VPC CNI gets network interfaces. Pulumi never created
them, so `pulumi destroy` leaves them, and some (an ENI, a load balancer's security group)
even block the deletion of the VPC it does own. Each cloud has a `Sweep` that finds them by
the tags the controllers put on them, and only those:

- `KubernetesSweep`: the namespace's PyTorchJobs (their pods go with them), its LoadBalancer
  Services (so that their cloud load balancers are released by the cloud provider while it
  still runs) and, unless checkpoints are kept, its PersistentVolumeClaims;
- `AzureSweep`: resource groups carrying the stack's cluster tag, and in the node resource
  group the managed disks of the Azure Disk CSI driver and the public IPs of the cloud
  provider's load balancers;
- `AwsSweep`: load balancers (elbv2 and classic), target groups, available ENIs, available
  EBS volumes of PVCs and the controllers' security groups, in the stack's VPC and tagged for
  its cluster; the stack's image repository with its images (Pulumi made it, but ECR refuses to
  delete it unforced once an image is pushed, which stops `pulumi destroy`); the checkpoint
  bucket only when asked;
- `LocalTeardown`: the processes a local run (lab.local.LocalTarget) started for a work
  directory, then the directory.

`find()` makes read requests only and returns the `Leftover`s; what it deliberately leaves
(the checkpoint storage, a disk still attached, another cluster's resource) is in `kept`.
`delete(items)` deletes, in an order that lets each deletion succeed (a load balancer before
its security group), treats a thing already gone as deleted, and raises one `TeardownError`
naming what it could not delete after trying everything. `calls()` lists the requests for a
dry run without making any. The checkpoint storage (Azure's storage account and its resource
group, AWS's bucket) is never touched unless `keep_checkpoints=False`.

The clouds' SDKs are made lazily, as lab.cluster.aks_eviction and lab.cluster.eks_eviction do:
`client_kwargs` (an azure-core transport) and `clients` (botocore clients) are the seams the
tests use, and a missing login is a TeardownError saying which call needed it and how to log
in, never a stack trace (and never a secret).

  base.py         what every sweep shares: the leftover record, the Sweep protocol, TeardownError
  kubernetes.py   KubernetesSweep: the namespace's jobs, LoadBalancer Services, volume claims
  azure.py        AzureSweep; aws.py, AwsSweep
  local.py        a local run's processes and work directory
"""

from __future__ import annotations

from lab.cluster.teardown.aws import AwsSweep
from lab.cluster.teardown.azure import AzureSweep
from lab.cluster.teardown.base import Leftover, Sweep, TeardownError
from lab.cluster.teardown.kubernetes import KubernetesSweep, kubernetes_sweep_calls
from lab.cluster.teardown.local import STORE_LOG, TMP_PREFIX, LocalTeardown
from lab.local.workdir import EVENTS_FILE

__all__ = [
    "EVENTS_FILE",
    "STORE_LOG",
    "TMP_PREFIX",
    "AwsSweep",
    "AzureSweep",
    "KubernetesSweep",
    "Leftover",
    "LocalTeardown",
    "Sweep",
    "TeardownError",
    "kubernetes_sweep_calls",
]

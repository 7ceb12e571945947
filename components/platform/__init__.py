"""The training platform: PriorityClasses, NVIDIA device plugin, training operator v1.9.4,
etcd rendezvous, checkpoint volume, jobs' namespace and service account, and the teams that
share it.

  settings.py   PlatformSettings: the stack's `platform` settings, validated
  teams.py      TeamSettings: the teams sharing the platform (`platform.teams`), validated
  quota.py      GpuQuota: a namespace's GPUs by PriorityClass (ResourceQuotas)
  mapping_keys.py  the unknown keys of a stack-config mapping, as problems
  values.py     values and patches handed to Helm and kustomize (pure functions)
  checkpoint_volume.py  the checkpoint volume's specs (pure): a static CSI volume and its
                claim, or a StorageClass claim
  component.py  TrainingPlatform: the ComponentResource, on any cluster's ClusterInfo
"""

from components.platform.component import TrainingPlatform
from components.platform.settings import PlatformSettings

__all__ = ["PlatformSettings", "TrainingPlatform"]

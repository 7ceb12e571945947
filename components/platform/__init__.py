"""The training platform: PriorityClasses, NVIDIA device plugin, training operator v1.9.4,
etcd rendezvous, checkpoint volume, jobs' namespace and service account."""

from components.platform.component import (
    AzureBlobCheckpoint,
    S3Checkpoint,
    StorageClassCheckpoint,
    TrainingPlatform,
)
from components.platform.settings import PlatformConfigError, PlatformSettings

__all__ = [
    "AzureBlobCheckpoint",
    "PlatformConfigError",
    "PlatformSettings",
    "S3Checkpoint",
    "StorageClassCheckpoint",
    "TrainingPlatform",
]

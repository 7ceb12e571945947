"""Where a job's checkpoints live, as `LAB_CHECKPOINT_DIR` names it.

  /checkpoints                     a directory (on a cluster: a volume mounted on every node)
  s3://bucket[/prefix]             S3, written by the pods' own clients (their IAM role)
  az://account/container[/prefix]  Azure Blob Storage, written by the pods' own clients
                                   (their workload identity)

The runtime opens them (lab.runtime.object_store); the job chart mounts a volume only for
a directory. How a job on a cluster reaches its storage is its checkpoint access: `mount`
(the platform's volume) or `client` (the storage's URL, with the pods' identity).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

S3_SCHEME = "s3://"
# The CSI drivers of the platform's mounted checkpoint volumes on object storage.
BLOB_CSI_DRIVER = "blob.csi.azure.com"  # blobfuse
S3_CSI_DRIVER = "s3.csi.aws.com"  # Mountpoint for S3
BLOB_SCHEME = "az://"
EXPECTED = {S3_SCHEME: "s3://bucket[/prefix]", BLOB_SCHEME: "az://account/container[/prefix]"}


class CheckpointAccess(StrEnum):
    """How a job on a cluster reaches the platform's checkpoint storage."""

    MOUNT = "mount"  # the platform's volume, mounted at the job's checkpoint directory
    CLIENT = "client"  # the storage's URL, written by S3/Blob clients with the pods' identity


@dataclass(frozen=True)
class ObjectStoreLocation:
    """An object-store URL taken apart: S3 has no account (`account` is "")."""

    scheme: str
    account: str
    container: str
    prefix: str


def is_object_store(location: str) -> bool:
    return location.startswith((S3_SCHEME, BLOB_SCHEME))


def parse(location: str) -> ObjectStoreLocation | None:
    """The parts of an object-store URL; None for a directory or a URL missing its bucket,
    account or container (`problem` says which)."""
    if location.startswith(S3_SCHEME):
        bucket, _, prefix = location[len(S3_SCHEME) :].partition("/")
        return ObjectStoreLocation(S3_SCHEME, "", bucket, prefix.strip("/")) if bucket else None
    if location.startswith(BLOB_SCHEME):
        account, _, rest = location[len(BLOB_SCHEME) :].partition("/")
        container, _, prefix = rest.partition("/")
        return (
            ObjectStoreLocation(BLOB_SCHEME, account, container, prefix.strip("/")) if account and container else None
        )
    return None


def problem(location: str) -> str | None:
    """What is wrong with an object-store URL (the form it should have), or None."""
    for scheme, expected in EXPECTED.items():
        if location.startswith(scheme) and parse(location) is None:
            return expected
    return None


def join(location: str, name: str) -> str:
    """`name` under `location` (a URL or a directory)."""
    return f"{location.rstrip('/')}/{name}"


# Kept checkpoint storage that `up` takes back into a stack (stack config `adoptCheckpoints`,
# written by `elastic-lab destroy`): the role of each resource -> its cloud id. `pulumi destroy`
# leaves them (retainOnDelete) and the clouds refuse to create them again. Resource type -> role:
KEPT_ROLES = {
    "azure-native:resources:ResourceGroup": "resourceGroup",  # ARM ids
    "azure-native:storage:StorageAccount": "account",
    "azure-native:storage:BlobContainer": "container",
    "aws:s3/bucket:Bucket": "bucket",  # its name (its versioning, encryption and access block share it)
}
AKS_KEPT = tuple(role for typ, role in KEPT_ROLES.items() if typ.startswith("azure-native:"))
EKS_KEPT = tuple(role for typ, role in KEPT_ROLES.items() if typ.startswith("aws:"))


def adoption_problems(ids: object, roles: tuple[str, ...], key: str) -> list[tuple[str, object, str]]:
    """(key, value, expected) of each bad entry of an adoption mapping."""
    if not isinstance(ids, dict):
        return [(key, ids, "a mapping of " + ", ".join(roles) + " to cloud ids")]
    out: list[tuple[str, object, str]] = []
    for role, value in ids.items():
        if role not in roles:
            out.append((f"{key}.{role}", value, "one of the roles " + ", ".join(roles)))
        elif not isinstance(value, str) or not value.strip():
            out.append((f"{key}.{role}", value, "the resource's cloud id (a non-empty string)"))
    return out

"""Where sharded checkpoints live: a mounted directory, or an object store reached with the
pod's own identity (no mount, no rename).

`LAB_CHECKPOINT_DIR` (`--checkpoint-dir`) names it:

  /checkpoints                              a directory (a volume mounted on every node)
  s3://bucket/prefix                        S3, through boto3's default credentials (on EKS:
                                            the pod's IAM role, IRSA or EKS Pod Identity)
  az://account/container/prefix             Azure Blob Storage, through azure-identity's
                                            DefaultAzureCredential (on AKS: workload identity)

Every backend writes an object whole or not at all (one PUT; one block list committed) and
never renames: a checkpoint's `.metadata`, written last, commits it
(lab.runtime.sharded_checkpoint). torch.distributed.checkpoint reads and writes through
`DcpFiles`, its file-system interface over any of them.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from torch.distributed.checkpoint.filesystem import FileSystemBase

from lab.runtime.checkpoint import CheckpointDirError, fsync_dir, write_file
from lab.vocab import checkpoint_location
from lab.vocab.job import CheckpointWrites


class ObjectStore(Protocol):
    """Objects under one root, addressed by keys relative to it ("step-000000120/.metadata")."""

    url: str

    def put(self, key: str, data: bytes) -> None:
        """Write `key` whole, durably, or not at all."""

    def get(self, key: str) -> bytes: ...

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """Every key under `prefix` with its size in bytes."""

    def delete_prefix(self, prefix: str) -> None:
        """Remove every key under `prefix` (missing ones are no error)."""


def open_store(location: str | os.PathLike[str], writes: CheckpointWrites = CheckpointWrites.RENAME) -> ObjectStore:
    """The store `location` names (see the module's docstring)."""
    text = str(location)
    if not checkpoint_location.is_object_store(text):
        return LocalFiles(Path(text), writes)
    parts = checkpoint_location.parse(text)
    if parts is None:
        raise CheckpointDirError(f"checkpoint_dir={text!r} is invalid: expected {checkpoint_location.problem(text)}")
    if parts.scheme == checkpoint_location.S3_SCHEME:
        return S3Objects(parts.container, parts.prefix)
    return BlobObjects(f"https://{parts.account}.blob.core.windows.net", parts.container, parts.prefix)


def _join(prefix: str, key: str) -> str:
    return f"{prefix.strip('/')}/{key}" if prefix.strip("/") else key


class LocalFiles:
    """A directory: on a POSIX volume (`rename`) each file is written to a temporary name,
    fsynced and renamed; on an object-store mount (`write-once`) written once under its name."""

    def __init__(self, root: Path, writes: CheckpointWrites = CheckpointWrites.RENAME) -> None:
        self.root, self.writes, self.url = root, writes, str(root)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointDirError(f"checkpoint_dir={str(root)!r} cannot be created: {exc.strerror}") from None
        if not os.access(root, os.W_OK | os.X_OK):
            raise CheckpointDirError(f"checkpoint_dir={str(root)!r} is not writable: expected a writable directory")

    def put(self, key: str, data: bytes) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, data, self.writes, temporary=f"{path.name}.tmp")
        if self.writes is not CheckpointWrites.WRITE_ONCE:
            fsync_dir(path.parent)  # the rename

    def get(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def sizes(self, prefix: str = "") -> dict[str, int]:
        base = self.root / prefix if prefix else self.root
        if not base.is_dir():
            return {}
        out = {}
        for dirpath, _, files in os.walk(base):
            for name in files:
                path = Path(dirpath) / name
                try:
                    out[str(path.relative_to(self.root))] = path.stat().st_size
                except FileNotFoundError:
                    continue  # removed meanwhile (pruned by another rank)
        return out

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self.root / prefix, ignore_errors=True)


class S3Objects:
    """An S3 prefix, through boto3 (credentials and region from its default chain)."""

    def __init__(self, bucket: str, prefix: str = "", client: Any = None) -> None:
        import boto3

        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.client = client if client is not None else boto3.client("s3")

    def put(self, key: str, data: bytes) -> None:
        # upload_fileobj switches to a multipart upload for large objects: the object
        # appears when the last part is committed, never in part.
        self.client.upload_fileobj(io.BytesIO(data), self.bucket, _join(self.prefix, key))

    def get(self, key: str) -> bytes:
        body: bytes = self.client.get_object(Bucket=self.bucket, Key=_join(self.prefix, key))["Body"].read()
        return body

    def sizes(self, prefix: str = "") -> dict[str, int]:
        base = _join(self.prefix, prefix) if prefix else self.prefix
        start = len(self.prefix) + 1 if self.prefix else 0
        out = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base):
            for obj in page.get("Contents", []):
                out[obj["Key"][start:]] = int(obj["Size"])
        return out

    def delete_prefix(self, prefix: str) -> None:
        keys = [_join(self.prefix, k) for k in self.sizes(prefix)]
        for i in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": k} for k in keys[i : i + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})


class BlobObjects:
    """An Azure Blob Storage container prefix, through azure-storage-blob with
    DefaultAzureCredential (workload identity on AKS)."""

    def __init__(
        self, account_url: str, container: str, prefix: str = "", credential: Any = None, **client_options: Any
    ) -> None:
        from azure.storage.blob import ContainerClient

        if credential is None:
            from azure.identity import DefaultAzureCredential

            credential = DefaultAzureCredential()
        self.prefix = prefix.strip("/")
        self.url = f"{account_url}/{container}/{self.prefix}".rstrip("/")
        self.container = ContainerClient(account_url, container, credential=credential, **client_options)

    def put(self, key: str, data: bytes) -> None:
        # Large blobs go up as blocks and appear when the block list is committed.
        self.container.upload_blob(_join(self.prefix, key), data, overwrite=True)

    def get(self, key: str) -> bytes:
        return bytes(self.container.download_blob(_join(self.prefix, key)).readall())

    def sizes(self, prefix: str = "") -> dict[str, int]:
        base = _join(self.prefix, prefix) if prefix else self.prefix
        start = len(self.prefix) + 1 if self.prefix else 0
        return {b.name[start:]: int(b.size) for b in self.container.list_blobs(name_starts_with=base or None)}

    def delete_prefix(self, prefix: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        for key in self.sizes(prefix):  # a step's few files: one request each
            try:
                self.container.delete_blob(_join(self.prefix, key))
            except ResourceNotFoundError:
                pass  # removed meanwhile


class _Upload(io.BytesIO):
    """An object's bytes as DCP writes them; they outlive `close` (DCP closes the stream
    itself), and are uploaded when the stream's context ends."""

    _closed_with = b""

    def close(self) -> None:
        if not self.closed:
            self._closed_with = self.getvalue()
        super().close()

    def contents(self) -> bytes:
        return self._closed_with if self.closed else self.getvalue()


class DcpFiles(FileSystemBase):
    """torch.distributed.checkpoint's file-system interface over an ObjectStore: a file is an
    object, written in one piece when its stream closes; nothing is ever renamed."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[io.IOBase]:
        if "w" in mode:
            buffer = _Upload()
            yield buffer
            self.store.put(str(path), buffer.contents())
        else:
            yield io.BytesIO(self.store.get(str(path)))

    def concat_path(self, path: str | os.PathLike[str], suffix: str) -> str:
        return _join(str(path), suffix)

    def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
        raise NotImplementedError("checkpoints are never renamed (their .metadata, written last, commits them)")

    def init_path(self, path: str | os.PathLike[str]) -> str:
        return str(path)

    def mkdir(self, path: str | os.PathLike[str]) -> None:
        return None  # keys need no directories

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return True

    def exists(self, path: str | os.PathLike[str]) -> bool:
        return str(path) in self.store.sizes(str(path))

    def rm_file(self, path: str | os.PathLike[str]) -> None:
        self.store.delete_prefix(str(path))

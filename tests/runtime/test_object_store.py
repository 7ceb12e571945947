"""lab.runtime.object_store: where sharded checkpoints live. S3 through moto (in this process,
and as a server on loopback for real torchrun ranks), a directory, and the locations' syntax."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
from pathlib import Path

import pytest
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex

from lab.runtime.checkpoint import CheckpointDirError
from lab.runtime.object_store import BlobObjects, DcpFiles, LocalFiles, S3Objects, open_store
from lab.runtime.sharded_checkpoint import METADATA, StepDirectories, step_dir_name
from lab.vocab.job import CheckpointWrites
from tests.patience import within

JOB = Path(__file__).with_name("sharded_job.py")


@pytest.fixture
def s3(monkeypatch):
    """A bucket in moto's S3, in this process."""
    from moto import mock_aws

    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        import boto3

        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="ckpt")
        yield S3Objects("ckpt", "runs/job-1", client=client)


def _step(store, step: int, shards: dict[str, int], *, metadata: bool = True) -> None:
    storage = {}
    for i, (name, size) in enumerate(shards.items()):
        store.put(f"{step_dir_name(step)}/{name}", b"x" * size)
        storage[MetadataIndex(f"t{i}")] = _StorageInfo(name, 0, size)
    if metadata:
        store.put(f"{step_dir_name(step)}/{METADATA}", pickle.dumps(Metadata({}, storage_data=storage)))


def test_objects_go_in_whole_and_come_out_under_the_prefix(s3):
    s3.put("step-000000001/a.distcp", b"abc")
    s3.put("step-000000001/.metadata", b"m")
    assert s3.get("step-000000001/a.distcp") == b"abc"
    assert s3.sizes() == {"step-000000001/a.distcp": 3, "step-000000001/.metadata": 1}
    keys = s3.client.list_objects_v2(Bucket="ckpt")["Contents"]
    assert {k["Key"] for k in keys} == {"runs/job-1/step-000000001/a.distcp", "runs/job-1/step-000000001/.metadata"}
    s3.delete_prefix("step-000000001/")
    assert s3.sizes() == {}


def test_pruning_deletes_more_objects_than_one_request_takes(s3):
    for i in range(1003):
        s3.put(f"step-000000001/__{i}_0.distcp", b"")
    s3.delete_prefix("step-000000001/")
    assert s3.sizes() == {}


def test_steps_on_s3_are_committed_by_their_metadata_and_pruned(s3):
    shards = {"__0_0.distcp": 10, "__1_0.distcp": 12}
    for step in (10, 20, 30):
        _step(s3, step, shards)
    _step(s3, 40, shards, metadata=False)  # in flight
    steps = StepDirectories(s3, keep=2)
    assert steps.newest_committed() == (30, ["step-000000040: no .metadata (an interrupted save)"])
    assert steps.prune() == [10]
    assert steps.steps() == [40, 30, 20]


def test_dcp_writes_an_object_per_file_and_never_renames(s3):
    files = DcpFiles(s3)
    path = files.concat_path("step-000000005", "__0_0.distcp")
    with files.create_stream(path, "wb") as stream:
        stream.write(b"shard")
    assert files.exists(path) and not files.exists("step-000000005/__1_0.distcp")
    with files.create_stream(path, "rb") as stream:
        stream.seek(1)
        assert stream.read(3) == b"har"
    with pytest.raises(NotImplementedError, match="never renamed"):
        files.rename(path, "elsewhere")


@pytest.mark.parametrize(
    "location, message",
    [
        ("s3://", "expected s3://bucket[/prefix]"),
        ("az://account", "expected az://account/container[/prefix]"),
        ("az:///container", "expected az://account/container[/prefix]"),
    ],
)
def test_a_bad_location_is_named(location, message):
    with pytest.raises(CheckpointDirError, match=re.escape(f"checkpoint_dir={location!r} is invalid: {message}")):
        open_store(location)


def test_a_directory_is_written_through_a_temporary_name_or_once(tmp_path):
    renamed = LocalFiles(tmp_path / "a")
    renamed.put("step-000000001/.metadata", b"1")
    renamed.put("step-000000001/.metadata", b"2")  # rename mode replaces
    assert renamed.get("step-000000001/.metadata") == b"2" and renamed.sizes() == {"step-000000001/.metadata": 1}
    once = LocalFiles(tmp_path / "b", CheckpointWrites.WRITE_ONCE)
    once.put("step-000000001/.metadata", b"1")
    with pytest.raises(FileExistsError):  # as an object-store mount refuses an overwrite
        once.put("step-000000001/.metadata", b"2")


@pytest.mark.timeout(240)
@pytest.mark.long
def test_ranks_save_to_s3_and_load_resharded_from_it(workdir, python):
    """Two FSDP2 ranks save straight to S3 (moto's server on loopback, reached the way a pod
    reaches S3: boto3's default credentials and endpoint), one rank loads it back."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
            "DRILL_MARK": str(workdir),
        }
        import boto3

        boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket="ckpt")
        location = "s3://ckpt/job"
        results = []
        for nproc, args in ((2, ("save", location, "4", "2")), (1, ("load", location))):
            proc = subprocess.run(
                [python, "-m", "lab.runtime.launch", "--standalone", f"--nproc-per-node={nproc}", str(JOB), *args],
                capture_output=True,
                text=True,
                timeout=within(180),
                env=env,
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
            results.append(
                [json.loads(x) for x in proc.stdout.splitlines() if x.startswith('{"rank"') and "world" in x]
            )
        saved, (loaded,) = results
        assert loaded["step"] == 4 and loaded["saved_world"] == 2
        assert loaded["model"] == pytest.approx(saved[0]["model"], rel=1e-9)
        assert loaded["moments"] == pytest.approx(saved[0]["moments"], rel=1e-9)
    finally:
        server.stop()


@pytest.fixture
def blob():
    """A container prefix in a Blob service on loopback (tests/runtime/fake_blob.py), reached
    with a shared key (the service is plain HTTP, where the SDK sends no bearer token). Blobs
    over 4 KiB go up as staged blocks and a block list, as large shards do on Azure."""
    from azure.core.credentials import AzureNamedKeyCredential

    from tests.runtime.fake_blob import FakeBlobService

    with FakeBlobService() as service:
        key = AzureNamedKeyCredential(service.account, "a2V5")
        store = BlobObjects(
            service.account_url, "ckpt", "runs/job-1", credential=key, max_single_put_size=4096, max_block_size=4096
        )
        yield store, service
        assert service.refused == []


def test_blobs_go_in_whole_and_come_out_under_the_prefix(blob):
    store, service = blob
    big = bytes(range(256)) * 64  # 16 KiB: four blocks and a block list
    store.put("step-000000001/__0_0.distcp", big)
    store.put("step-000000001/.metadata", b"m")
    assert store.get("step-000000001/__0_0.distcp") == big
    assert store.sizes() == {"step-000000001/__0_0.distcp": len(big), "step-000000001/.metadata": 1}
    assert ("ckpt", "runs/job-1/step-000000001/.metadata") in service.blobs and not service.staged
    store.delete_prefix("step-000000001/")
    assert store.sizes() == {} and service.blobs == {}


def test_a_checkpoint_written_to_blob_storage_commits_last_and_loads(blob):
    """DCP's save and load through the Blob store (one process): the shards, then .metadata."""
    import torch
    from torch.distributed.checkpoint.state_dict_loader import load
    from torch.distributed.checkpoint.state_dict_saver import save

    from lab.runtime.sharded_checkpoint import CommitLastWriter, _reader

    store, service = blob
    state = {"w": torch.arange(3000, dtype=torch.float32), "progress": {"step": 7}}
    save(state, storage_writer=CommitLastWriter(store, 7), no_dist=True)
    names = [n for (_, n) in service.blobs]
    assert names[-1] == "runs/job-1/step-000000007/.metadata"  # written last
    assert StepDirectories(store).newest_committed() == (7, [])
    back = {"w": torch.zeros(3000), "progress": {"step": 0}}
    load(back, storage_reader=_reader(store, 7), no_dist=True)
    assert torch.equal(back["w"], state["w"]) and back["progress"]["step"] == 7

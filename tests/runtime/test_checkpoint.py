import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from lab.runtime.checkpoint import CheckpointDirError, CheckpointError, CheckpointStore, write_file
from lab.vocab.job import CheckpointWrites
from tests.patience import within


def _state(step, size=100):
    return {"step": step, "w": torch.full((size,), float(step))}


def test_newest_valid_checkpoint_is_loaded(tmp_path):
    store = CheckpointStore(tmp_path, keep=5)
    for step in (10, 20, 30):
        store.save(_state(step), step, "r0")
    loaded = store.load_latest()
    assert loaded.step == 30 and loaded.state["w"][0] == 30 and not loaded.skipped


def test_corrupt_and_torn_checkpoints_are_skipped_with_a_warning(tmp_path, caplog):
    store = CheckpointStore(tmp_path, keep=5)
    store.save(_state(10), 10, "r0")
    store.save(_state(20), 20, "r0")
    # a bit flip in the newest payload
    payload = tmp_path / "step-000000020-r0.pt"
    data = bytearray(payload.read_bytes())
    data[-10] ^= 0xFF
    payload.write_bytes(bytes(data))
    # an interrupted write: a newer payload with no pointer
    (tmp_path / "step-000000030-r1.pt").write_bytes(b"half a file")
    loaded = store.load_latest()
    assert loaded.step == 10
    assert any("step-000000020-r0.json: torn or corrupt" in s for s in loaded.skipped)
    assert any("step-000000030-r1.pt: no pointer" in s for s in loaded.skipped)
    assert "skipping checkpoint" in caplog.text


def test_old_checkpoints_are_pruned(tmp_path):
    store = CheckpointStore(tmp_path, keep=2)
    for step in range(1, 6):
        store.save(_state(step), step, "r0")
    names = sorted(os.listdir(tmp_path))
    assert names == ["step-000000004-r0.json", "step-000000004-r0.pt", "step-000000005-r0.json", "step-000000005-r0.pt"]


def test_write_once_mode_never_renames_or_overwrites(tmp_path, monkeypatch):
    """S3 Mountpoint has no rename and no overwrite: the store must not need either."""

    def no_rename(*a, **k):
        raise OSError("rename is not supported on this mount")

    monkeypatch.setattr(os, "replace", no_rename)
    monkeypatch.setattr(os, "rename", no_rename)
    store = CheckpointStore(tmp_path, "write-once", keep=3)
    store.save(_state(1), 1, "r0")
    store.save(_state(2), 2, "r0")
    assert store.load_latest().step == 2
    with pytest.raises(FileExistsError):  # opening an existing file for writing is refused
        store.save(_state(2), 2, "r0")
    # rename mode on the same mount would fail: the mode matters
    with pytest.raises(OSError, match="rename is not supported"):
        CheckpointStore(tmp_path / "posix").save(_state(1), 1, "r0")


def test_write_file_renames_its_temporary_over_the_file_or_writes_once(tmp_path, monkeypatch):
    path = tmp_path / "f.pt"
    path.write_bytes(b"old")
    renamed = []
    monkeypatch.setattr(os, "replace", lambda src, dst: renamed.append((src, dst)) or os.rename(src, dst))
    write_file(path, b"new", CheckpointWrites.RENAME, temporary=".tmp-f.pt")
    assert path.read_bytes() == b"new" and renamed == [(tmp_path / ".tmp-f.pt", path)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.pt"]
    with pytest.raises(FileExistsError):  # write-once: never over a file that exists
        write_file(path, b"newer", CheckpointWrites.WRITE_ONCE, temporary=".tmp-f.pt")
    assert path.read_bytes() == b"new" and len(renamed) == 1


def test_unwritable_checkpoint_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(CheckpointDirError, match=r"checkpoint_dir='.*a-file/ckpt' cannot be created"):
        CheckpointStore(blocker / "ckpt")


WRITER = """
import sys, torch
from lab.runtime.checkpoint import CheckpointStore
store = CheckpointStore(sys.argv[1], sys.argv[2], keep=10)
store.save({"step": 1, "w": torch.ones(16)}, 1, "r0")
print("first saved", flush=True)
store.save({"step": 2, "w": torch.ones(60_000_000)}, 2, "r0")  # 240 MB: slow enough to be killed mid-write
print("second saved", flush=True)
"""


@pytest.mark.parametrize("mode", ["rename", "write-once"])
@pytest.mark.processes
def test_kill_during_a_checkpoint_write_leaves_the_previous_one_loadable(tmp_path, mode):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "first saved"
    # Wait until the second payload is being written, then kill the writer like a spot reclaim.
    target = ".tmp-step-000000002-r0.pt" if mode == "rename" else "step-000000002-r0.pt"
    deadline = time.monotonic() + within(30)
    while time.monotonic() < deadline:
        path = tmp_path / target
        if path.exists() and path.stat().st_size > 0:
            break
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait(within(10))
    assert not (tmp_path / "step-000000002-r0.json").exists(), "the writer finished before it was killed"
    loaded = CheckpointStore(tmp_path, mode, keep=10).load_latest()
    assert loaded is not None and loaded.step == 1 and loaded.state["w"].shape == (16,)
    pointer = json.loads((tmp_path / "step-000000001-r0.json").read_text())
    assert pointer["step"] == 1


def _corrupt(path):
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))


def test_every_checkpoint_corrupt_is_an_error_not_a_fresh_start(tmp_path):
    store = CheckpointStore(tmp_path, keep=5)
    store.save(_state(10), 10, "r0")
    store.save(_state(20), 20, "r0")
    _corrupt(tmp_path / "step-000000020-r0.pt")
    (tmp_path / "step-000000010-r0.json").write_text("{not json")
    with pytest.raises(CheckpointError) as caught:
        store.latest()
    message = str(caught.value)
    assert f"every checkpoint in {tmp_path} failed verification" in message
    assert "step-000000020-r0.json: torn or corrupt payload" in message
    assert "step-000000010-r0.json: unreadable (JSONDecodeError" in message
    assert "refusing to start from step 0" in message
    with pytest.raises(CheckpointError):
        store.load_latest()


def test_one_good_checkpoint_among_corrupt_ones_is_loaded(tmp_path):
    store = CheckpointStore(tmp_path, keep=5)
    for step in (10, 20, 30):
        store.save(_state(step), step, "r0")
    _corrupt(tmp_path / "step-000000030-r0.pt")
    _corrupt(tmp_path / "step-000000010-r0.pt")
    assert store.latest() == "step-000000020-r0.json"
    loaded = store.load_latest()
    assert loaded.step == 20 and loaded.state["w"][0] == 20
    assert [s.split(":")[0] for s in loaded.skipped] == ["step-000000030-r0.json"]


def test_no_checkpoint_is_a_fresh_start(tmp_path):
    store = CheckpointStore(tmp_path)
    assert store.latest() is None and store.load_latest() is None
    # a payload without a pointer never committed: still nothing to resume from
    (tmp_path / "step-000000010-r0.pt").write_bytes(b"half a file")
    assert store.latest() is None

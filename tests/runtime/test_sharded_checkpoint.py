"""Sharded checkpoints (lab.runtime.sharded_checkpoint): what counts as committed, what is
pruned, a load into other world sizes, and a kill in the middle of an asynchronous save. The
jobs run under the agent every target runs (torchrun through lab.runtime.launch)."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex

from lab.runtime.sharded_checkpoint import METADATA, StepDirectories, step_dir_name
from tests.patience import within
from tests.runtime.sharded_runs import JOB
from tests.runtime.sharded_runs import run_job as _run


def _step(root: Path, step: int, shards: dict[str, int], *, metadata: bool = True, cut: int = 0) -> Path:
    """A step directory as DCP writes it: shard files, then a .metadata naming their bytes."""
    directory = root / step_dir_name(step)
    directory.mkdir(parents=True)
    storage = {}
    for i, (name, size) in enumerate(shards.items()):
        (directory / name).write_bytes(b"x" * (size - (cut if i == 0 else 0)))
        storage[MetadataIndex(f"t{i}")] = _StorageInfo(name, 0, size)
    if metadata:
        (directory / METADATA).write_bytes(pickle.dumps(Metadata(state_dict_metadata={}, storage_data=storage)))
    return directory


SHARDS = {"__0_0.distcp": 100, "__1_0.distcp": 80}


def test_a_step_counts_when_its_metadata_and_every_shard_it_names_are_there(tmp_path):
    _step(tmp_path, 10, SHARDS)
    _step(tmp_path, 20, SHARDS, metadata=False)  # killed before the commit
    _step(tmp_path, 30, SHARDS, cut=1)  # a shard cut short
    torn = _step(tmp_path, 40, SHARDS)
    (torn / METADATA).write_bytes((torn / METADATA).read_bytes()[:20])  # a torn commit
    gone = _step(tmp_path, 50, SHARDS)
    (gone / "__1_0.distcp").unlink()
    steps = StepDirectories(tmp_path)
    assert steps.steps() == [50, 40, 30, 20, 10]
    assert steps.verify(10) is None
    assert steps.verify(20) == "no .metadata (an interrupted save)"
    assert steps.verify(30) == "shard __0_0.distcp cut short (99 of 100 bytes)"
    assert steps.verify(40).startswith(".metadata unreadable")
    assert steps.verify(50) == "shard __1_0.distcp missing"
    newest, skipped = steps.newest_committed()
    assert newest == 10 and [s.split(":")[0] for s in skipped] == [step_dir_name(s) for s in (50, 40, 30, 20)]


def test_pruning_keeps_the_newest_committed_and_a_save_in_flight(tmp_path):
    for step in (10, 20, 30, 40):
        _step(tmp_path, step, SHARDS)
    _step(tmp_path, 25, SHARDS, metadata=False)  # an interrupted save, older than the newest commit
    _step(tmp_path, 50, SHARDS, metadata=False)  # the save in flight
    removed = StepDirectories(tmp_path, keep=2).prune()
    assert sorted(removed) == [10, 20, 25]
    assert StepDirectories(tmp_path).steps() == [50, 40, 30]


def test_nothing_committed_prunes_nothing(tmp_path):
    _step(tmp_path, 10, SHARDS, metadata=False)
    assert StepDirectories(tmp_path, keep=2).prune() == []
    assert StepDirectories(tmp_path).steps() == [10]


@pytest.mark.timeout(240)
@pytest.mark.long
def test_a_checkpoint_saved_by_two_ranks_loads_into_one_and_into_three(workdir, python):
    """FSDP2 shards of a model and its AdamW state, saved asynchronously at world size 2, load
    resharded at world sizes 1 and 3: the same full state, the same progress."""
    ckpt = str(workdir / "ckpt")
    saved = _run(python, 2, "save", ckpt, "4", "2")
    assert saved[0]["committed"] == 4
    # World size 3 twice: into drawn weights, and into shards never drawn (a resumed job's
    # build, lab.runtime.workload.shards_to_fill): the load must set every tensor.
    for world, env in ((1, {}), (3, {}), (3, {"UNSET": "1"})):
        loaded = _run(python, world, "load", ckpt, env=env)
        assert len(loaded) == world
        for rank in loaded:
            assert rank["step"] == 4 and rank["saved_world"] == 2 and rank["skipped"] == []
            # the same full model and optimizer state, up to the order of float sums
            assert rank["model"] == pytest.approx(saved[0]["model"], rel=1e-9)
            assert rank["moments"] == pytest.approx(saved[0]["moments"], rel=1e-9)


@pytest.mark.timeout(240)
def test_a_kill_during_an_asynchronous_save_leaves_the_previous_checkpoint_loadable(workdir, python):
    """Both ranks are stopped while a save has written shards but not its .metadata, then
    killed: the torn step is skipped with its reason and the one before loads."""
    ckpt = workdir / "ckpt"
    proc = subprocess.Popen(
        [
            python,
            "-m",
            "lab.runtime.launch",
            "--standalone",
            "--nproc-per-node=2",
            str(JOB),
            "save",
            str(ckpt),
            "400",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "LAYERS": "8"},  # about 100 MB of state: each save takes a moment
    )

    def signal_all(sig: int) -> None:
        """The agent, its forkserver and its workers (which run in sessions of their own)."""
        root = psutil.Process(proc.pid)
        for p in [root, *root.children(recursive=True)]:
            try:
                p.send_signal(sig)
            except psutil.NoSuchProcess:
                pass

    torn = None
    try:
        deadline = time.monotonic() + within(150)
        while time.monotonic() < deadline and torn is None:
            steps = StepDirectories(ckpt)
            writing = [s for s in steps.steps() if steps.verify(s) is not None]
            if writing and any((ckpt / step_dir_name(writing[0])).glob("*.distcp")):
                signal_all(signal.SIGSTOP)  # freeze the job, then look again
                steps = StepDirectories(ckpt)
                newest = steps.steps()[0]
                if steps.verify(newest) is not None and steps.newest_committed()[0] is not None:
                    torn = newest
                else:
                    signal_all(signal.SIGCONT)
            time.sleep(0.01)
    finally:
        signal_all(signal.SIGKILL)
        proc.wait(within(30))
    assert torn is not None, "no save was caught between its shards and its commit"
    committed = StepDirectories(ckpt).newest_committed()[0]
    assert committed is not None and committed < torn
    loaded = _run(python, 2, "load", str(ckpt))
    for rank in loaded:
        assert rank["step"] == committed
        assert any(s.startswith(step_dir_name(torn)) for s in rank["skipped"])


# Two asynchronous saves in one process, the stager's copy table emptied after the first, as
# torch 2.11's DefaultStager does once it has staged a state.
TWO_SAVES = """
import sys
import torch
import torch.distributed as dist
from lab.runtime.sharded_checkpoint import Progress, ShardedCheckpoints

dist.init_process_group("gloo", init_method=f"file://{sys.argv[2]}", rank=0, world_size=1)
net = torch.nn.Linear(4, 4)
optimizer = torch.optim.AdamW(net.parameters())
net(torch.ones(1, 4)).sum().backward()
optimizer.step()
checkpoints = ShardedCheckpoints(sys.argv[1])
for step in (1, 2):
    checkpoints.save(Progress(step, 0, step, 1), net, optimizer, reason="interval")
    checkpoints.wait_for_staging()
    stats = checkpoints.wait()
    print(step, stats.error, flush=True)
    checkpoints._stager._state_dict_stager.close()
print("committed", checkpoints.steps.newest_committed()[0], flush=True)
checkpoints.close()
dist.destroy_process_group()
"""


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_stager_emptied_by_torch_after_a_save_still_stages_the_next(workdir, python):
    proc = subprocess.run(
        [python, "-c", TWO_SAVES, str(workdir / "ckpt"), str(workdir / "store")],
        capture_output=True,
        text=True,
        timeout=within(100),
    )
    assert proc.stdout.splitlines() == ["1 None", "2 None", "committed 2"], proc.stderr[-3000:]

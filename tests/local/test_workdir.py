"""A local run's work folder is held by one run at a time (lab/local/workdir.py): the lock
names its holder, and dies with it, however it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from lab.local import workdir
from lab.local.workdir import WorkdirInUse, WorkdirLock
from lab.vocab.errors import EXIT_REFUSED


def test_a_held_folder_is_refused_to_a_second_run_and_free_once_let_go(tmp_path):
    first, second = WorkdirLock(tmp_path), WorkdirLock(tmp_path)
    first.acquire()
    assert workdir.holder(tmp_path) == os.getpid()
    with pytest.raises(WorkdirInUse, match=rf"in use by another local run \(pid {os.getpid()}\)") as refused:
        second.acquire()
    assert refused.value.exit_code == EXIT_REFUSED
    first.release()
    assert workdir.holder(tmp_path) is None
    second.acquire()  # free now
    second.release()


def test_a_folder_never_held_has_no_holder(tmp_path):
    assert workdir.holder(tmp_path) is None and not workdir.is_earlier_run(tmp_path)
    assert workdir.holder(tmp_path / "missing") is None


def test_the_lock_dies_with_a_holder_that_was_killed(tmp_path):
    """A SIGKILLed drill leaves no folder locked: the kernel drops its flock with it."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pathlib; from lab.local.workdir import WorkdirLock; "
            "lock = WorkdirLock(pathlib.Path(sys.argv[1])); lock.acquire(); "
            "print('held', flush=True); sys.stdin.read()",
            str(tmp_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert workdir.holder(tmp_path) == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert workdir.holder(tmp_path) is None
    lock = WorkdirLock(tmp_path)
    lock.acquire()
    lock.release()


def test_setting_aside_keeps_the_checkpoints_and_numbers_each_earlier_run(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "events.jsonl").write_text("1")
    (tmp_path / "nodes").mkdir()
    assert workdir.is_earlier_run(tmp_path)
    assert workdir.set_aside(tmp_path) == tmp_path / "earlier-1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "earlier-1"]
    assert workdir.is_earlier_run(tmp_path)  # still a drill's folder: its checkpoints and what was set aside
    assert workdir.set_aside(tmp_path) is None  # nothing left to move
    (tmp_path / "events.jsonl").write_text("2")
    assert workdir.set_aside(tmp_path) == tmp_path / "earlier-2"
    assert (tmp_path / "earlier-2" / "events.jsonl").read_text() == "2"


def test_a_second_local_target_on_a_folder_in_use_is_refused_before_it_starts_anything(tmp_path):
    from lab.local.target import LocalTarget
    from lab.vocab.job import JobSpec, RdzvBackend

    spec = JobSpec(rdzv_backend=RdzvBackend.C10D, checkpoint_dir=str(tmp_path / "checkpoints"))
    first = LocalTarget(spec, tmp_path)
    try:
        with pytest.raises(WorkdirInUse, match=f"pid {os.getpid()}"):
            LocalTarget(spec, tmp_path)
    finally:
        first.close()
    # A target refused by a later check lets the folder go at once.
    with pytest.raises(Exception, match="does not exist"):
        LocalTarget(spec.replace(module=None, script=str(tmp_path / "missing.py")), tmp_path)
    assert workdir.holder(tmp_path) is None

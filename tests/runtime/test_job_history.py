"""The job's history beside its checkpoints: nodes lost and seconds lived, across restarts."""

from __future__ import annotations

from lab.runtime import job_history
from lab.runtime.object_store import LocalFiles
from lab.vocab.job import CheckpointWrites


def test_a_start_at_fewer_nodes_lost_the_difference_and_a_join_loses_none(tmp_path):
    store = LocalFiles(tmp_path)
    first = job_history.record_start(store, nodes=3, resumed=False, now=1000.0)
    assert (first.evictions, first.trained_s) == (0, 0.0)
    lost_one = job_history.record_start(store, nodes=2, resumed=True, now=1030.0)
    assert (lost_one.evictions, lost_one.trained_s) == (1, 30.0)
    joined = job_history.record_start(store, nodes=3, resumed=True, now=1040.0)
    assert (joined.evictions, joined.trained_s) == (1, 40.0)
    lost_two = job_history.record_start(store, nodes=1, resumed=True, now=1100.0)
    assert (lost_two.evictions, lost_two.trained_s) == (3, 100.0)


def test_a_fresh_start_begins_new_counts_and_old_records_are_pruned(tmp_path):
    store = LocalFiles(tmp_path)
    for i in range(8):
        job_history.record_start(store, nodes=3 - i % 2, resumed=True, now=1000.0 + i)
    assert len(job_history._records(store)) == job_history.KEEP
    again = job_history.record_start(store, nodes=2, resumed=False, now=5000.0)
    assert (again.evictions, again.trained_s) == (0, 0.0)


def test_write_once_storage_gets_a_new_object_for_every_start(tmp_path):
    store = LocalFiles(tmp_path, CheckpointWrites.WRITE_ONCE)  # opens with "xb": no overwrite
    job_history.record_start(store, nodes=3, resumed=False, now=1000.0)
    assert job_history.record_start(store, nodes=2, resumed=True, now=1001.0).evictions == 1


def test_a_torn_record_starts_the_counts_again(tmp_path):
    store = LocalFiles(tmp_path)
    job_history.record_start(store, nodes=3, resumed=False, now=1000.0)
    (key,) = job_history._records(store)
    (tmp_path / key).write_text("{")
    assert job_history.record_start(store, nodes=2, resumed=True, now=1010.0).evictions == 0

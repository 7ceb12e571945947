"""Sharded checkpoints loaded from node memory (lab.runtime.memory_tier): what each rank needs,
who holds it, how it is assigned, and whole jobs that save into memory and load from it (same
world size, fewer ranks, a slot caught changing, a step saved again)."""

import shutil

import pytest
from torch.distributed.checkpoint.filesystem import FileSystem

from lab.runtime.memory_tier import Holding, SparseFile, TeeFiles, assign, merge
from lab.runtime.node_memory import COMPLETE, WRITING, NodeMemory, Slot, SlotHeader, WorkerSlots
from lab.vocab.job import ENV_NODE_MEMORY
from tests.runtime.sharded_runs import run_job


def test_ranges_are_merged_where_they_touch_or_overlap_and_empty_ones_dropped():
    assert merge([(10, 20), (0, 10), (15, 30), (40, 40), (50, 60)]) == [(0, 30), (50, 60)]


def test_each_file_comes_from_the_needer_itself_else_an_own_copy_else_a_peer_copy_else_storage():
    needs = [
        {"a": [(0, 100)], "b": [(0, 50)]},  # rank 0 holds a itself; b only as rank 2's peer copy
        {"b": [(50, 100)], "c": [(0, 10)]},  # b from rank 0? no: rank 1 holds b as its own
        {"d": [(0, 5)]},  # nobody holds d
    ]
    held = [
        [Holding("a", "own", 100), Holding("c", "peer", 10)],
        [Holding("b", "own", 100)],
        [Holding("c", "own", 10), Holding("b", "peer", 100)],
    ]
    plan = assign(needs, held)
    assert plan.local == {0: {"a": "own"}, 1: {"b": "own"}}
    # b for rank 0 from rank 1's own copy, not rank 2's peer copy; c for rank 1 from rank 2's own
    assert [(t.source, t.target, t.file, t.kind, t.spans) for t in plan.transfers] == [
        (1, 0, "b", "own", ((0, 50),)),
        (2, 1, "c", "own", ((0, 10),)),
    ]
    assert plan.storage == {2: ["d"]}
    assert (plan.memory_bytes, plan.peer_bytes, plan.storage_bytes) == (150, 60, 5)


def test_a_copy_shorter_than_the_ranges_needed_is_not_used():
    plan = assign([{"a": [(0, 100)]}], [[Holding("a", "own", 60)]])
    assert plan.storage == {0: ["a"]} and plan.memory_bytes == 0


def test_a_sparse_file_reads_its_ranges_and_refuses_bytes_it_does_not_hold():
    f = SparseFile("x", [(10, memoryview(b"abcdef")), (100, memoryview(b"XYZ"))])
    f.seek(12)
    assert f.read(3) == b"cde"
    f.seek(100)
    assert f.read() == b"XYZ"
    f.seek(50)
    with pytest.raises(OSError, match="byte 50 is not among the ranges held in memory"):
        f.read(1)


@pytest.fixture
def slot():
    node = NodeMemory(1)
    own = Slot(node.paths().split(",")[0], "own")
    yield own
    own.close()
    node.close()


def test_a_tee_keeps_the_only_shard_file_a_rank_writes_and_none_of_two(tmp_path, slot):
    fs = TeeFiles(FileSystem(), slot, 8, "n")
    with fs.create_stream(tmp_path / "__0_0.distcp", "wb") as stream:
        stream.write(b"0123456789")
    assert slot.header() == SlotHeader(WRITING, 8, "n", "__0_0.distcp", 0)  # until the commit
    assert fs.teed == SlotHeader(COMPLETE, 8, "n", "__0_0.distcp", 10)
    assert bytes(slot.data(10)) == (tmp_path / "__0_0.distcp").read_bytes()
    with fs.create_stream(tmp_path / "__0_1.distcp", "wb") as stream:
        stream.write(b"more")
    assert fs.teed is None


# ------------------------------------------------------------------ whole jobs on loopback
@pytest.fixture
def memory(monkeypatch):
    """Memory for three local ranks, owned here so that it outlives each run's agent."""
    node = NodeMemory(3)
    monkeypatch.setenv(ENV_NODE_MEMORY, node.paths())
    yield node
    node.close()


def _slots(node: NodeMemory, local_rank: int) -> WorkerSlots:
    paths = node.paths().split(",")
    return WorkerSlots(Slot(paths[2 * local_rank], "own"), Slot(paths[2 * local_rank + 1], "peer"))


def _same_state(loaded: list[dict], saved: dict) -> None:
    for rank in loaded:
        assert rank["model"] == pytest.approx(saved["model"], rel=1e-9)
        assert rank["moments"] == pytest.approx(saved["moments"], rel=1e-9)


@pytest.mark.processes
@pytest.mark.long
@pytest.mark.timeout(300)
def test_survivors_load_from_memory_and_a_lost_ranks_shard_from_its_ring_successor(workdir, python, memory):
    """Saved at world size 3 into memory: the same world loads with no byte from storage; two
    ranks (the third lost) load with none either, its shard coming from the copy its successor
    holds; one rank alone reads from storage exactly the shard no one left holds."""
    ckpt = str(workdir / "ckpt")
    saved = run_job(python, 3, "save", ckpt, "4", "2")[0]
    assert saved["committed"] == 4
    shard_1 = (workdir / "ckpt" / "step-000000004" / "__1_0.distcp").stat().st_size
    same = run_job(python, 3, "load", ckpt)
    fewer = run_job(python, 2, "load", ckpt)
    alone = run_job(python, 1, "load", ckpt)
    for loaded in (same, fewer, alone):
        assert [r["step"] for r in loaded] == [4] * len(loaded)
        _same_state(loaded, saved)
    tiers = [loaded[0]["tiers"] for loaded in (same, fewer, alone)]
    # Values every rank holds alike (the progress, each parameter's optimizer step count) are
    # saved once, in one rank's file: the others take those few bytes from that rank.
    assert tiers[0]["from_storage"] == 0 and 0 < tiers[0]["from_peers"] < tiers[0]["from_memory"] / 100
    assert tiers[1]["from_storage"] == 0 and tiers[1]["from_peers"] > 0
    # rank 1's shard is held by local ranks 1 (its own) and 2 (a copy): neither runs
    assert tiers[2]["from_storage"] == shard_1
    assert all("memory_refused" not in t for t in tiers)


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_a_slot_caught_changing_is_refused_and_its_shard_read_from_storage(workdir, python, memory):
    """Rank 0's shard, in its own slot and in its successor's copy, is marked as being written
    (a kill in the middle of a publish): it comes from storage, the rest from memory, and the
    state is the one saved."""
    ckpt = str(workdir / "ckpt")
    saved = run_job(python, 2, "save", ckpt, "2", "2")[0]
    for local_rank, kind in ((0, "own"), (1, "peer")):
        slots = _slots(memory, local_rank)
        slot = slots.own if kind == "own" else slots.peer
        header = slot.header()
        assert header is not None and header.state == COMPLETE and header.file == "__0_0.distcp"
        slot.begin(header.step, header.nonce, header.file)
        slots.close()
    loaded = run_job(python, 2, "load", ckpt)
    _same_state(loaded, saved)
    tiers = loaded[0]["tiers"]
    shard_0 = (workdir / "ckpt" / "step-000000002" / "__0_0.distcp").stat().st_size
    assert tiers["from_storage"] == shard_0 and tiers["from_memory"] > 0
    assert sorted(tiers["memory_refused"]) == [
        "rank 0 own slot: step 2 being written",
        "rank 1 peer slot: step 2 being written",
    ]


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_memory_of_an_earlier_save_of_the_same_step_is_refused(workdir, python, memory):
    """Memory holds step 2 of one save; the step is then saved again by another run (another
    model) that kept nothing in memory: the load takes the committed save, all from storage."""
    ckpt = workdir / "ckpt"
    run_job(python, 2, "save", str(ckpt), "2", "2")
    shutil.rmtree(ckpt)
    again = run_job(python, 2, "save", str(ckpt), "2", "2", env={"SEED": "1", ENV_NODE_MEMORY: "off"})[0]
    loaded = run_job(python, 2, "load", str(ckpt))
    _same_state(loaded, again)
    tiers = loaded[0]["tiers"]
    assert tiers["from_memory"] == 0 and tiers["from_peers"] == 0 and tiers["from_storage"] > 0
    assert len(tiers["memory_refused"]) == 4  # both slots of both ranks: step 2, another save
    assert all(r.endswith("step 2 another save of it") for r in tiers["memory_refused"])

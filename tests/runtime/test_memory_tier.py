"""Sharded checkpoints loaded from node memory (lab.runtime.memory_tier): what each rank needs,
who holds it, how it is assigned, and whole jobs that save into memory and load from it (same
world size, fewer ranks, a slot caught changing, a step saved again)."""

import os
import shutil

import pytest
from torch.distributed.checkpoint.filesystem import FileSystem

from lab.runtime.memory_tier import Holding, SparseFile, TeeFiles, assign, merge, ring_hop
from lab.runtime.node_memory import COMPLETE, WRITING, NodeMemory, Slot, SlotHeader, WorkerSlots
from lab.vocab.job import ENV_NODE_MEMORY
from tests.runtime.sharded_runs import run_job, run_nodes


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


@pytest.mark.parametrize(
    ("per_node", "hop"),
    [([1, 1, 1], 1), ([4] * 8, 4), ([4] * 4, 0), ([1], 0), ([4] * 6, 1), ([2, 2, 1], 1)],
)
def test_a_copy_goes_to_the_same_local_rank_of_the_next_node(per_node, hop):
    # one node's ranks only: no other node to hold a copy; ranks not in whole nodes, or nodes of
    # different sizes: the next rank
    assert ring_hop(len(per_node), per_node) == hop


def test_a_sparse_file_reads_its_ranges_and_refuses_bytes_it_does_not_hold():
    f = SparseFile("x", [(10, memoryview(b"abcdef")), (100, memoryview(b"XYZ"))], length=110)
    f.seek(12)
    assert f.read(3) == b"cde"
    f.seek(100)
    assert f.read(3) == b"XYZ"
    for outside in (50, 103, 0):  # between ranges, past the last one, before the first
        f.seek(outside)
        with pytest.raises(OSError, match=f"byte {outside} is not among the ranges held in memory"):
            f.read(1)
    f.seek(0, os.SEEK_END)
    assert f.tell() == 110 and f.read() == b""  # the file's own end


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
def memories():
    """Three nodes' memory, owned here so that it outlives each run's agents."""
    nodes = [NodeMemory(1) for _ in range(3)]
    yield nodes
    for node in nodes:
        node.close()


def _env(*nodes: NodeMemory) -> list[dict]:
    return [{ENV_NODE_MEMORY: node.paths()} for node in nodes]


def _slots(node: NodeMemory) -> WorkerSlots:
    own, peer = node.paths().split(",")
    return WorkerSlots(Slot(own, "own"), Slot(peer, "peer"))


def _holding(nodes: list[NodeMemory], file: str) -> NodeMemory:
    """The node whose own memory holds `file` (which rank a node was is the rendezvous's choice)."""
    for node in nodes:
        slots = _slots(node)
        header = slots.own.header()
        slots.close()
        if header is not None and header.file == file:
            return node
    raise AssertionError(f"no node holds {file} in its own memory")


def _same_state(loaded: list[dict], saved: dict) -> None:
    for rank in loaded:
        assert rank["model"] == pytest.approx(saved["model"], rel=1e-9)
        assert rank["moments"] == pytest.approx(saved["moments"], rel=1e-9)


@pytest.mark.processes
@pytest.mark.long
@pytest.mark.timeout(400)
def test_survivors_load_from_memory_and_a_lost_nodes_shard_from_its_ring_successor(workdir, python, memories):
    """Saved by 3 nodes into their memory: the same 3 load with no byte from storage; 2 of them
    (the third lost) load with none either, its shard coming from the copy its ring successor
    holds; one node alone reads from storage exactly the shard that no node left holds."""
    ckpt = str(workdir / "ckpt")
    saved = run_nodes(python, _env(*memories), "save", ckpt, "4", "2")[0]
    assert saved["committed"] == 4
    step = workdir / "ckpt" / "step-000000004"
    first, second = (_holding(memories, f"__{rank}_0.distcp") for rank in range(2))
    same = run_nodes(python, _env(*memories), "load", ckpt)
    fewer = run_nodes(python, _env(first, second), "load", ckpt)  # third's shard: a copy in first's memory
    alone = run_nodes(python, _env(first), "load", ckpt)  # second's shard: in second's and third's only
    for loaded in (same, fewer, alone):
        assert [r["step"] for r in loaded] == [4] * len(loaded)
        _same_state(loaded, saved)
    tiers = [loaded[0]["tiers"] for loaded in (same, fewer, alone)]
    assert tiers[0]["from_storage"] == 0 and tiers[0]["from_memory"] > 0
    assert tiers[1]["from_storage"] == 0 and tiers[1]["from_peers"] > 0
    assert tiers[2]["from_storage"] == (step / "__1_0.distcp").stat().st_size
    assert all("memory_refused" not in t for t in tiers)
    # Each load's seconds by part, on every rank: a transfer only where a peer sent something.
    for loaded in (same, fewer, alone):
        for r in loaded:
            assert list(r["split"]) == ["state_s", "plan_s", "exchange_s", "read_s", "apply_s"]
            assert all(v >= 0 for v in r["split"].values()) and r["split"]["read_s"] > 0
    assert all(r["split"]["exchange_s"] < 0.05 for r in alone)  # nothing to send


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_a_slot_caught_changing_is_refused_and_its_shard_read_from_storage(workdir, python, memories):
    """Rank 0's shard, in its node's own memory and in its successor's copy, is marked as being
    written (a kill in the middle of a publish): it comes from storage, the rest from memory,
    and the state is the one saved."""
    ckpt = str(workdir / "ckpt")
    pair = memories[:2]
    saved = run_nodes(python, _env(*pair), "save", ckpt, "2", "2")[0]
    holder = _holding(pair, "__0_0.distcp")
    for node, kind in ((holder, "own"), (pair[1] if holder is pair[0] else pair[0], "peer")):
        slots = _slots(node)
        slot = slots.own if kind == "own" else slots.peer
        header = slot.header()
        assert header is not None and header.state == COMPLETE and header.file == "__0_0.distcp"
        slot.begin(header.step, header.nonce, header.file)
        slots.close()
    loaded = run_nodes(python, _env(*pair), "load", ckpt)
    _same_state(loaded, saved)
    tiers = loaded[0]["tiers"]
    assert tiers["from_storage"] == (workdir / "ckpt" / "step-000000002" / "__0_0.distcp").stat().st_size
    assert tiers["from_memory"] + tiers["from_peers"] > 0
    refused = sorted(why.split(" ", 2)[2] for why in tiers["memory_refused"])  # "rank N <why>"
    assert refused == ["own slot: step 2 being written", "peer slot: step 2 being written"]


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_memory_of_an_earlier_save_of_the_same_step_is_refused(workdir, python, memories):
    """Memory holds step 2 of one save; the step is then saved again by another run (another
    model) that kept nothing in memory: the load takes the committed save, all from storage."""
    ckpt = workdir / "ckpt"
    pair = memories[:2]
    run_nodes(python, _env(*pair), "save", str(ckpt), "2", "2")
    shutil.rmtree(ckpt)
    off = [{ENV_NODE_MEMORY: "off", "SEED": "1"}] * 2
    again = run_nodes(python, off, "save", str(ckpt), "2", "2")[0]
    loaded = run_nodes(python, _env(*pair), "load", str(ckpt))
    _same_state(loaded, again)
    tiers = loaded[0]["tiers"]
    assert tiers["from_memory"] == 0 and tiers["from_peers"] == 0 and tiers["from_storage"] > 0
    assert len(tiers["memory_refused"]) == 4  # both slots of both nodes: step 2, another save
    assert all(r.endswith("step 2 another save of it") for r in tiers["memory_refused"])


@pytest.mark.processes
@pytest.mark.timeout(300)
def test_the_workers_of_one_node_keep_no_copies_of_each_other(workdir, python):
    """One node of two workers: each keeps its own shard; a copy on the same node would go with
    it, so none is made, and the node's next workers load from its memory alone."""
    node = NodeMemory(2)
    try:
        ckpt = str(workdir / "ckpt")
        saved = run_job(python, 2, "save", ckpt, "2", "2", env={ENV_NODE_MEMORY: node.paths()})[0]
        slots = [Slot(p, "") for p in node.paths().split(",")]
        headers = [s.header() for s in slots]
        assert [h.state if h else None for h in headers] == [COMPLETE, None, COMPLETE, None]
        for slot in slots:
            slot.close()
        loaded = run_job(python, 2, "load", ckpt, env={ENV_NODE_MEMORY: node.paths()})
        _same_state(loaded, saved)
        assert loaded[0]["tiers"]["from_storage"] == 0
    finally:
        node.close()

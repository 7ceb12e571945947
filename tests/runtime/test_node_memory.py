"""Node memory (lab.runtime.node_memory): slots that outlive the workers that fill them, their
headers, and the agent's side."""

import os
import subprocess
import sys

import pytest

from lab.runtime.node_memory import (
    COMPLETE,
    HEADER_BYTES,
    WRITING,
    NodeMemory,
    Slot,
    SlotHeader,
    TeeStream,
    agent_memory,
    local_ranks_of,
    worker_slots,
)
from lab.vocab.job import ENV_NODE_MEMORY


@pytest.fixture
def memory():
    node = NodeMemory(2)
    yield node
    node.close()


def test_a_header_reads_back_what_was_written_and_holds_only_its_own_complete_save():
    header = SlotHeader(COMPLETE, 12, "abc", "__1_0.distcp", 4096)
    assert SlotHeader.decode(header.encode()) == header
    assert header.holds(12, "abc")
    assert not header.holds(12, "abd")  # the same step saved again
    assert not header.holds(8, "abc")
    assert not SlotHeader(WRITING, 12, "abc", "__1_0.distcp", 0).holds(12, "abc")
    assert not SlotHeader(COMPLETE, 12, "", "__1_0.distcp", 0).holds(12, "")  # no nonce: nothing to match


@pytest.mark.parametrize("data", [b"", b"\0" * 64, b"not a slot header at all" * 10])
def test_anything_that_is_not_a_header_reads_as_none(data):
    assert SlotHeader.decode(data) is None


def test_a_file_name_too_long_for_the_header_page_is_refused_with_its_name():
    with pytest.raises(ValueError, match="too long"):
        SlotHeader(COMPLETE, 1, "n", "x" * HEADER_BYTES, 0).encode()


def test_a_worker_reaches_its_agents_slots_by_local_rank_and_they_keep_what_it_wrote(memory):
    env = {ENV_NODE_MEMORY: memory.paths(), "LOCAL_RANK": "1"}
    slots = worker_slots(env)
    assert slots is not None
    slots.own.begin(4, "n1", "__1_0.distcp")
    slots.own.write_at(0, b"shard bytes")
    slots.own.mark(SlotHeader(COMPLETE, 4, "n1", "__1_0.distcp", 11))
    slots.close()  # the worker is gone; the agent's memory is not
    again = worker_slots(env)
    assert again is not None
    assert again.own.header() == SlotHeader(COMPLETE, 4, "n1", "__1_0.distcp", 11)
    assert bytes(again.own.data(11)) == b"shard bytes"
    assert again.peer.header() is None  # never written
    other = worker_slots({ENV_NODE_MEMORY: memory.paths(), "LOCAL_RANK": "0"})
    assert other is not None and other.own.header() is None  # local rank 0's slots are its own
    for s in (again, other):
        s.close()


def test_without_memory_or_with_it_gone_a_worker_has_no_slots(memory):
    assert worker_slots({}) is None
    assert worker_slots({ENV_NODE_MEMORY: "off"}) is None
    assert worker_slots({ENV_NODE_MEMORY: memory.paths(), "LOCAL_RANK": "2"}) is None  # two local ranks only
    paths = memory.paths()
    memory.close()
    assert worker_slots({ENV_NODE_MEMORY: paths, "LOCAL_RANK": "0"}) is None


def test_a_tee_writes_the_file_and_the_slot_alike(memory, tmp_path):
    slot = Slot(memory.paths().split(",")[0], "own")
    with open(tmp_path / "f", "wb") as inner:
        tee = TeeStream(inner, slot)
        tee.write(b"abc")
        tee.write(memoryview(b"defg"))
        assert tee.tell() == 7
        tee.close()
    assert (tmp_path / "f").read_bytes() == b"abcdefg"
    assert bytes(slot.data(7)) == b"abcdefg"
    slot.close()


def test_a_slot_that_refuses_a_write_stops_the_copy_not_the_write_to_storage(memory, tmp_path):
    path = memory.paths().split(",")[0]
    slot = Slot(path, "own")
    os.close(slot.fd)
    slot.fd = os.open(path, os.O_RDONLY)  # memory that takes no write
    with open(tmp_path / "f", "wb") as inner:
        tee = TeeStream(inner, slot)
        assert tee.write(b"abc") == 3 and tee.write(b"def") == 3
        tee.close()
    assert tee.broken and (tmp_path / "f").read_bytes() == b"abcdef"
    slot.close()


# A worker of the process that runs this: the headers of its slots (own, peer).
WORKER = """
from lab.runtime.node_memory import worker_slots
slots = worker_slots()
print(None if slots is None else (slots.own.header(), slots.peer.header()))
"""


def test_workers_find_their_agents_memory_by_local_rank_and_the_environment_is_left_alone(monkeypatch):
    monkeypatch.delenv(ENV_NODE_MEMORY, raising=False)
    before = dict(os.environ)
    with agent_memory(["--nproc-per-node=3", "train.py"]) as node:
        assert node is not None and len(node.fds) == 6
        assert dict(os.environ) == before  # its workers find it: nothing to pass on
        own = node.paths().split(",")[2]
        slot = Slot(own, "own")
        slot.mark(SlotHeader(COMPLETE, 7, "n", "__1_0.distcp", 0))
        slot.close()
        found = subprocess.run(
            [sys.executable, "-c", WORKER], env={**os.environ, "LOCAL_RANK": "1"}, capture_output=True, text=True
        )
        assert found.returncode == 0, found.stderr
        # what this process wrote into local rank 1's own slot, read by the child; its peer slot unwritten
        assert found.stdout.strip() == repr((SlotHeader(COMPLETE, 7, "n", "__1_0.distcp", 0), None))
    assert not os.path.exists(own)  # freed with the agent
    alone = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True)
    assert alone.stdout.strip() == "None"  # no agent's memory above it
    monkeypatch.setenv(ENV_NODE_MEMORY, "off")
    with agent_memory([]) as node:
        assert node is None and os.environ[ENV_NODE_MEMORY] == "off"


def test_memory_named_by_an_owner_outside_the_agent_is_used_as_it_is(memory, monkeypatch):
    monkeypatch.setenv(ENV_NODE_MEMORY, memory.paths())
    with agent_memory(["--nproc-per-node=2"]) as node:
        assert node is None and os.environ[ENV_NODE_MEMORY] == memory.paths()


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["--nproc-per-node=4", "x.py"], {}, 4),
        (["--nproc_per_node", "2", "x.py"], {}, 2),
        (["x.py"], {"PET_NPROC_PER_NODE": "3"}, 3),
        (["x.py"], {}, 1),
        (["--nproc-per-node=cpu", "x.py"], {}, os.cpu_count()),
        (["--nproc-per-node=auto", "x.py"], {}, os.cpu_count()),  # no GPU here: a worker per CPU
    ],
)
def test_the_agent_makes_slots_for_each_local_rank(argv, env, expected):
    assert local_ranks_of(argv, env) == expected


def test_no_slots_for_no_workers_is_an_error_naming_the_value():
    with pytest.raises(ValueError, match="local_ranks=0"):
        NodeMemory(0)

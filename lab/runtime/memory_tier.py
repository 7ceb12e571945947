"""A sharded checkpoint loaded from the nodes' memory first, storage only for what no node holds.

Every node keeps, in memory its agent owns (lab.runtime.node_memory), its own shard file of the
last committed checkpoint and a copy of its ring predecessor's. Loading a step:
1. each rank works out which byte ranges of which shard files its new shards need (DCP's own
   load planner on the step's `.metadata`: this is where a 3 -> 2 reshard is decided);
2. the ranks share what they need and what their memory holds for that step (its nonce, DCP's
   `save_id` in `.metadata`, must match: a slot from a save that never committed, or from an
   earlier save of the same step, is refused);
3. every rank computes the same assignment: ranges its own memory holds are read in place, ranges
   another rank holds are sent by that rank (gloo, point to point), the rest come from storage;
4. DCP then loads as always, through a reader whose files are those ranges where memory gave them.

The exchange is exact or nothing: a range comes whole from one copy of one save. Storage is read
only when no node holds a file (two neighbours lost at once, a wipeout, the first start).

Saving (`publish`): once a step is committed, each rank marks its own slot complete (its bytes were
teed into it as DCP wrote the file) and sends it to its ring successor's peer slot: the same local
rank of the next node, so that no node holds the only copies of its own shards.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemBase, FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata

from lab.runtime.node_memory import COMPLETE, EMPTY, WRITING, Slot, SlotHeader, TeeStream, WorkerSlots

log = logging.getLogger(__name__)

Ranges = list[tuple[int, int]]  # [start, end) byte ranges of one file, sorted and merged
Served = tuple[int, list[tuple[int, memoryview]]]  # a file's length, and the ranges held of it
_STATE_NAMES = {EMPTY: "empty", WRITING: "being written", COMPLETE: "complete"}
_HEADER_WIRE = 1024  # a slot header on the wire, padded


def needed_ranges(state: dict[str, Any], metadata: Metadata) -> dict[str, Ranges]:
    """Which byte ranges of which saved files this rank's `state` reads (DCP's load plan)."""
    planner = DefaultLoadPlanner()
    planner.set_up_planner(state, metadata, is_coordinator=False)
    plan = planner.create_local_plan()
    storage = metadata.storage_data or {}
    ranges: dict[str, Ranges] = {}
    for item in plan.items:
        info = storage[item.storage_index]
        ranges.setdefault(info.relative_path, []).append((info.offset, info.offset + info.length))
    return {name: merge(spans) for name, spans in ranges.items()}


def merge(spans: Ranges) -> Ranges:
    merged: Ranges = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def span_bytes(spans: Ranges) -> int:
    return sum(end - start for start, end in spans)


@dataclass(frozen=True)
class Holding:
    """A file of the step being loaded that a rank's memory holds whole."""

    file: str
    kind: str  # "own" or "peer"
    length: int


def holdings(slots: WorkerSlots, step: int, nonce: str) -> tuple[list[Holding], list[str]]:
    """What this rank's slots hold of step `step` saved under `nonce`, and why any slot that
    holds something else is refused."""
    held: list[Holding] = []
    refused: list[str] = []
    for slot in (slots.own, slots.peer):
        header = slot.header()
        if header is None or header.state == EMPTY:
            continue
        if header.holds(step, nonce):
            held.append(Holding(header.file, slot.kind, header.length))
        elif header.step == step or header.state == WRITING:
            why = "another save of it" if header.state == COMPLETE else _STATE_NAMES[header.state]
            refused.append(f"{slot.kind} slot: step {header.step} {why}")
    return held, refused


@dataclass(frozen=True)
class Transfer:
    """Ranges of `file` that rank `source` sends to rank `target` from its `kind` slot."""

    source: int
    target: int
    file: str
    kind: str
    spans: tuple[tuple[int, int], ...]
    length: int  # the whole file's


@dataclass
class Assignment:
    """Where every rank's ranges come from; computed the same on every rank."""

    local: dict[int, dict[str, str]] = field(default_factory=dict)  # rank -> file -> slot kind
    transfers: list[Transfer] = field(default_factory=list)
    storage: dict[int, list[str]] = field(default_factory=dict)  # rank -> files read from storage
    memory_bytes: int = 0
    peer_bytes: int = 0
    storage_bytes: int = 0


def assign(needs: list[dict[str, Ranges]], held: list[list[Holding]]) -> Assignment:
    """Each rank's ranges from its own memory, else from a rank that holds the file in its own
    slot, else in a peer slot (among those, the one that sends least so far, then the lowest),
    else from storage."""
    out = Assignment()
    sending: dict[int, int] = {}
    holders: dict[str, list[tuple[int, int, str, int]]] = {}
    for rank, items in enumerate(held):
        for h in items:
            holders.setdefault(h.file, []).append((0 if h.kind == "own" else 1, rank, h.kind, h.length))
    for file_holders in holders.values():
        file_holders.sort()
    for rank, need in enumerate(needs):
        for file, spans in sorted(need.items()):
            nbytes = span_bytes(spans)
            candidates = [c for c in holders.get(file, []) if spans[-1][1] <= c[3]]
            mine = [c for c in candidates if c[1] == rank]
            if mine:
                out.local.setdefault(rank, {})[file] = mine[0][2]
                out.memory_bytes += nbytes
            elif candidates:
                _, source, kind, length = min(candidates, key=lambda c: (c[0], sending.get(c[1], 0), c[1]))
                sending[source] = sending.get(source, 0) + nbytes
                out.transfers.append(Transfer(source, rank, file, kind, tuple(spans), length))
                out.peer_bytes += nbytes
            else:
                out.storage.setdefault(rank, []).append(file)
                out.storage_bytes += nbytes
    return out


class SparseFile(io.RawIOBase):
    """A read stream over some ranges of a file of `length` bytes (in memory): reading outside
    them fails, but at the file's end."""

    def __init__(self, name: str, pieces: list[tuple[int, memoryview]], length: int) -> None:
        super().__init__()
        self.name_ = name
        self.pieces = sorted(pieces, key=lambda p: p[0])
        self.length = length
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET, /) -> int:
        if whence == os.SEEK_SET:
            self.position = offset
        elif whence == os.SEEK_CUR:
            self.position += offset
        else:
            self.position = self.length + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer: Any) -> int:
        target = memoryview(buffer).cast("B")
        for start, view in self.pieces:
            if start <= self.position < start + len(view):
                chunk = view[self.position - start : self.position - start + len(target)]
                target[: len(chunk)] = chunk
                self.position += len(chunk)
                return len(chunk)
        if target.nbytes == 0 or self.position >= self.length:
            return 0  # the file's end
        raise OSError(f"{self.name_}: byte {self.position} is not among the ranges held in memory")


class _Wrapped(FileSystemBase):
    """DCP's file interface, passed on to `inner` (the store's own)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[io.IOBase]:
        with self.inner.create_stream(path, mode) as stream:
            yield stream

    def concat_path(self, path: str | os.PathLike[str], suffix: str) -> str | os.PathLike[str]:
        return self.inner.concat_path(path, suffix)  # type: ignore[no-any-return]

    def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
        self.inner.rename(path, new_path)

    def init_path(self, path: str | os.PathLike[str]) -> str | os.PathLike[str]:
        return self.inner.init_path(path)  # type: ignore[no-any-return]

    def mkdir(self, path: str | os.PathLike[str]) -> None:
        self.inner.mkdir(path)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return True

    def exists(self, path: str | os.PathLike[str]) -> bool:
        return self.inner.exists(path)  # type: ignore[no-any-return]

    def rm_file(self, path: str | os.PathLike[str]) -> None:
        self.inner.rm_file(path)


class TieredFiles(_Wrapped):
    """Reading: files that memory gave are read from there, the rest from storage."""

    def __init__(self, inner: Any, served: dict[str, Served]) -> None:
        super().__init__(inner)
        self.served = served

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[io.IOBase]:
        name = os.path.basename(str(path))
        if "r" in mode and name in self.served:
            length, pieces = self.served[name]
            yield SparseFile(name, pieces, length)
            return
        with self.inner.create_stream(path, mode) as stream:
            yield stream


class TeeFiles(_Wrapped):
    """Writing: the rank's shard file goes to storage and, byte for byte, into its own slot
    (marked as being written until `publish` marks it complete). A rank that writes more than
    one file keeps none in memory."""

    def __init__(self, inner: Any, slot: Slot, step: int, nonce: str) -> None:
        super().__init__(inner)
        self.slot, self.step, self.nonce = slot, step, nonce
        self.files = 0
        self.teed: SlotHeader | None = None

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[io.IOBase]:
        name = os.path.basename(str(path))
        if "w" not in mode:
            with self.inner.create_stream(path, mode) as stream:
                yield stream
            return
        self.files += 1
        self.teed = None
        self.slot.begin(self.step, self.nonce, name)
        with self.inner.create_stream(path, mode) as stream:
            tee = TeeStream(stream, self.slot)
            yield tee
        if self.files == 1 and not tee.broken:
            self.teed = SlotHeader(COMPLETE, self.step, self.nonce, name, tee.position)


@dataclass
class TierLoad:
    """Where one load's bytes came from, summed over every rank."""

    memory_bytes: int = 0  # read in place from a rank's own node memory
    peer_bytes: int = 0  # sent by another rank from its node memory
    storage_bytes: int = 0
    refused: list[str] = field(default_factory=list)  # memory slots not used, and why
    plan_s: float = 0.0  # this rank's seconds to read the metadata, plan and agree on the plan
    exchange_s: float = 0.0  # this rank's seconds sending and receiving other nodes' memory

    def fields(self) -> dict[str, Any]:
        return {
            "from_memory": self.memory_bytes,
            "from_peers": self.peer_bytes,
            "from_storage": self.storage_bytes,
            **({"memory_refused": self.refused} if self.refused else {}),
        }


def _views(slot: Slot, length: int, spans: Ranges | tuple[tuple[int, int], ...]) -> list[tuple[int, memoryview]]:
    data = slot.data(length)
    return [(start, data[start:end]) for start, end in spans]


# What can go wrong with memory on one rank alone (a slot gone, memory short): that rank's part
# is read from storage instead, and the others learn it before anything is sent.
_LOCAL_FAILURES = (OSError, ValueError, BufferError, MemoryError)


def prepare(
    state: dict[str, Any], reader: FileSystemReader, slots: WorkerSlots | None, step: int, group: dist.ProcessGroup
) -> TierLoad:
    """Called by every rank before DCP loads `step` through `reader`: fetch what memory holds
    and point the reader at it. Without slots this rank holds nothing but still takes part.
    Memory is a shortcut: where a rank cannot plan or map its part, every rank learns it before
    anything is sent, and what memory would have given is read from storage."""
    started = time.perf_counter()
    mine: tuple[dict[str, Ranges], list[Holding], list[str]] | str
    try:
        metadata = reader.read_metadata()
        nonce = str(getattr(getattr(metadata, "storage_meta", None), "save_id", "") or "")
        need = needed_ranges(state, metadata)
        held, refused = holdings(slots, step, nonce) if slots is not None and nonce else ([], [])
        mine = (need, held, refused)
    except Exception as exc:  # noqa: BLE001 - DCP's own load reports what is wrong; memory just stays out
        mine = f"{type(exc).__name__}: {exc}"
    shared: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(shared, mine, group=group)
    failed = [f"rank {r} could not plan a load from memory ({s})" for r, s in enumerate(shared) if isinstance(s, str)]
    if failed:
        return TierLoad(refused=failed, plan_s=round(time.perf_counter() - started, 4))
    me = dist.get_rank(group)
    need, held = shared[me][0], shared[me][1]
    plan = assign([s[0] for s in shared], [s[1] for s in shared])
    load = TierLoad(plan.memory_bytes, plan.peer_bytes, plan.storage_bytes)
    load.refused = [f"rank {r} {why}" for r, s in enumerate(shared) for why in s[2]]
    by_kind = {"own": slots.own, "peer": slots.peer} if slots is not None else {}
    lengths = {h.file: h.length for h in held}
    served: dict[str, Served] = {}
    try:
        for file, kind in plan.local.get(me, {}).items():
            served[file] = (lengths[file], _views(by_kind[kind], lengths[file], need[file]))
        exchange = _Exchange.planned(plan.transfers, me, by_kind, lengths)
    except _LOCAL_FAILURES as exc:
        log.warning("node memory unusable on this rank (%s): its checkpoint loads from storage", exc)
        served, exchange = {}, _Exchange(broken=True)
    ready = torch.tensor([0 if exchange.broken else 1], dtype=torch.int64)
    dist.all_reduce(ready, op=dist.ReduceOp.MIN, group=group)
    planned = time.perf_counter()
    load.plan_s = round(planned - started, 4)
    if int(ready.item()):
        exchange.run(group, served)
        load.exchange_s = round(time.perf_counter() - planned, 4)
    else:
        load.storage_bytes += load.peer_bytes
        load.peer_bytes = 0
        load.refused.append("a rank could not map its node memory: nothing was sent between ranks")
    reader.fs = TieredFiles(reader.fs, served)  # type: ignore[assignment]  # any FileSystemBase serves
    return load


@dataclass
class _Exchange:
    """This rank's part of the transfers: what it sends and the buffers it receives into, all
    made (and any failure met) before any rank sends."""

    sends: list[tuple[int, int, torch.Tensor]] = field(default_factory=list)  # (target, tag, bytes)
    # (source, tag, file, its length, start, a buffer left unfilled: zeroing a fresh buffer
    # first would touch every page of it once more than the receive does)
    receives: list[tuple[int, int, str, int, int, torch.Tensor]] = field(default_factory=list)
    broken: bool = False

    @classmethod
    def planned(
        cls, transfers: list[Transfer], me: int, by_kind: dict[str, Slot], lengths: dict[str, int]
    ) -> _Exchange:
        out = cls()
        for tag, t in enumerate(transfers):
            if t.source == me:
                for _, view in _views(by_kind[t.kind], lengths[t.file], t.spans):
                    out.sends.append((t.target, tag, torch.frombuffer(view, dtype=torch.uint8)))
            elif t.target == me:
                for start, end in t.spans:
                    out.receives.append((t.source, tag, t.file, t.length, start, _buffer(end - start)))
        return out

    def run(self, group: dist.ProcessGroup, served: dict[str, Served]) -> None:
        """Every send and receive at once (one tag per transfer); what came in, served."""
        works = [dist.isend(data, group=group, group_dst=target, tag=tag) for target, tag, data in self.sends]
        for source, tag, file, length, start, buffer in self.receives:
            works.append(dist.irecv(buffer, group=group, group_src=source, tag=tag))
            served.setdefault(file, (length, []))[1].append((start, buffer.numpy().data))
        _wait_all(works)


def _buffer(size: int) -> torch.Tensor:
    """`size` bytes to receive into; MemoryError when there is no room for them (torch's
    allocator says so with a RuntimeError, which would read as a failed collective)."""
    try:
        return torch.empty(size, dtype=torch.uint8)
    except RuntimeError as exc:
        raise MemoryError(f"{size} bytes to receive a peer's shard into: {exc}") from exc


def ring_hop(size: int, per_node: list[int]) -> int:
    """How far along the ranks a rank's copy goes (`per_node`: every rank's LOCAL_WORLD_SIZE):
    to the same local rank of the next node (torchrun numbers a node's workers one after the
    other), so that a node lost takes no copy of its own shards with it; 0 when there is no
    other node to hold one; the next rank where nodes differ in size."""
    sizes = set(per_node)
    if len(sizes) != 1:
        return 1
    hop = sizes.pop()
    if hop < 1 or size % hop:
        return 1
    return hop if size > hop else 0


def publish(slots: WorkerSlots, group: dist.ProcessGroup, header: SlotHeader | None, hop: int) -> None:
    """After a step committed, called by every rank: mark the own slot complete (`header`: what
    it holds; None when this rank's save did not fill it) and copy it `hop` ranks along the ring
    (`ring_hop`; 0: no copy)."""
    slots.own.mark(header if header is not None else _EMPTY)
    if hop == 0:
        return
    size, me = dist.get_world_size(group), dist.get_rank(group)
    slots.peer.begin(-1, "", "")
    try:
        theirs = _pass_along(slots, group, header, (me + hop) % size, (me - hop) % size)
    finally:
        slots.own.release()
        slots.peer.release()
    slots.peer.mark(theirs if theirs is not None else _EMPTY)


_EMPTY = SlotHeader(EMPTY, -1, "", "", 0)
_HEADER_TAG, _READY_TAG, _DATA_TAG = 1, 2, 3


def _pass_along(
    slots: WorkerSlots, group: dist.ProcessGroup, header: SlotHeader | None, successor: int, predecessor: int
) -> SlotHeader | None:
    """Send the own slot to `successor` and receive `predecessor`'s into the peer slot: the
    headers, then whether each side can take the bytes (its slot sized and mapped), then the
    bytes; a side that cannot says so first, and nothing is sent to it. The predecessor's header
    once its bytes are in, else None."""
    source = None
    if header is not None and header.length:
        try:
            source = torch.frombuffer(slots.own.data(header.length), dtype=torch.uint8)
        except _LOCAL_FAILURES as exc:
            log.warning("own node memory unreadable (%s): no copy of it this time", exc)
            header = None
    theirs = SlotHeader.decode(_swap(_wire(header), group, successor, predecessor))
    target = None
    if theirs is not None and theirs.state == COMPLETE and theirs.length:
        try:
            target = torch.frombuffer(slots.peer.data(theirs.length, resize=True), dtype=torch.uint8)
        except _LOCAL_FAILURES as exc:
            log.warning("peer node memory not writable (%s): no copy this time", exc)
    # Readiness goes the other way round: to the predecessor, from the successor.
    ready = torch.tensor([1 if target is not None else 0], dtype=torch.uint8)
    theirs_ready = torch.zeros(1, dtype=torch.uint8)
    _wait_all(
        [
            dist.isend(ready, group=group, group_dst=predecessor, tag=_READY_TAG),
            dist.irecv(theirs_ready, group=group, group_src=successor, tag=_READY_TAG),
        ]
    )
    works = []
    if source is not None and int(theirs_ready.item()):
        works.append(dist.isend(source, group=group, group_dst=successor, tag=_DATA_TAG))
    if target is not None:
        works.append(dist.irecv(target, group=group, group_src=predecessor, tag=_DATA_TAG))
    _wait_all(works)
    return theirs if target is not None else None


def _wire(header: SlotHeader | None) -> torch.Tensor:
    """A header as a fixed-size tensor (zeros: no header)."""
    out = torch.zeros(_HEADER_WIRE, dtype=torch.uint8)
    if header is not None:
        encoded = header.encode()
        out[: len(encoded)] = torch.frombuffer(bytearray(encoded), dtype=torch.uint8)
    return out


def _swap(outgoing: torch.Tensor, group: dist.ProcessGroup, successor: int, predecessor: int) -> bytes:
    """Send `outgoing` to the successor; the predecessor's, received the same way."""
    incoming = torch.zeros_like(outgoing)
    _wait_all(
        [
            dist.isend(outgoing, group=group, group_dst=successor, tag=_HEADER_TAG),
            dist.irecv(incoming, group=group, group_src=predecessor, tag=_HEADER_TAG),
        ]
    )
    return bytes(incoming.tolist())


def _wait_all(works: list[Any]) -> None:
    for work in works:
        work.wait()

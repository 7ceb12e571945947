"""A node's checkpoint state in host memory that outlives its workers: the agent owns it, the
workers fill it at each checkpoint and read it back after a membership change.

Every restart of torchrun's workers (a node lost, a node joining) starts new worker processes,
and each would read its shards back from storage. Here the agent creates, before it starts any
worker, two anonymous memory files (memfd) per local rank:
- *own*: the bytes of the shard file this rank wrote at the last checkpoint (a tee of the
  write, so it costs one copy in memory, not a second write to storage);
- *peer*: a copy of the ring predecessor's own slot, so that a lost node's shard is still in
  some survivor's memory.

Workers find them by name among the open files of the agent they descend from
(`/proc/<agent>/fd/<n>`), valid while the agent lives, whatever happened to earlier workers;
LAB_NODE_MEMORY=off in the agent's environment keeps none, and a list of such paths there names
memory another process owns (two per local rank: own, peer).
When the node goes (a kill takes the agent, its forkserver and its workers), the memory goes
with it: nothing is left in a shared /dev/shm.

Each slot starts with a header: its state (WRITING while it changes, COMPLETE once the step it
holds is committed to storage), the step, the save's nonce (DCP's `save_id`, which the step's
`.metadata` records), the shard file's name and its length. A slot is used only when it is
COMPLETE and its step and nonce are the ones every rank loads (lab.runtime.memory_tier): a slot
killed while it changed, a save that never committed, or a step saved again are refused.
"""

from __future__ import annotations

import contextlib
import io
import logging
import mmap
import os
import struct
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from lab.vocab.job import ENV_NODE_MEMORY

log = logging.getLogger(__name__)

HEADER_BYTES = 4096
_MAGIC = b"LABSLOT1"
_FIXED = struct.Struct("<8sIqqHH")  # magic, state, step, length, len(nonce), len(file)
EMPTY, WRITING, COMPLETE = 0, 1, 2
OFF = "off"  # LAB_NODE_MEMORY=off: the agent keeps nothing in memory
KINDS = ("own", "peer")


@dataclass(frozen=True)
class SlotHeader:
    """What a slot holds: the shard file `file` of step `step`, saved under `nonce`."""

    state: int
    step: int
    nonce: str
    file: str
    length: int

    def holds(self, step: int, nonce: str) -> bool:
        return self.state == COMPLETE and self.step == step and self.nonce == nonce and bool(nonce)

    def encode(self) -> bytes:
        nonce, file = self.nonce.encode(), self.file.encode()
        data = _FIXED.pack(_MAGIC, self.state, self.step, self.length, len(nonce), len(file)) + nonce + file
        if len(data) > HEADER_BYTES:
            raise ValueError(f"slot header of {len(data)} bytes: file name {self.file!r} is too long")
        return data

    @classmethod
    def decode(cls, data: bytes) -> SlotHeader | None:
        if len(data) < _FIXED.size:
            return None
        magic, state, step, length, n_nonce, n_file = _FIXED.unpack_from(data)
        if magic != _MAGIC or state not in (EMPTY, WRITING, COMPLETE):
            return None
        rest = data[_FIXED.size : _FIXED.size + n_nonce + n_file]
        if len(rest) < n_nonce + n_file:
            return None
        return cls(
            state, step, rest[:n_nonce].decode(errors="replace"), rest[n_nonce:].decode(errors="replace"), length
        )


class Slot:
    """One memory file: a header page, then a shard file's bytes."""

    def __init__(self, path: str, kind: str) -> None:
        self.path, self.kind = path, kind
        self.fd = os.open(path, os.O_RDWR)
        self._map: mmap.mmap | None = None

    def header(self) -> SlotHeader | None:
        return SlotHeader.decode(os.pread(self.fd, HEADER_BYTES, 0))

    def mark(self, header: SlotHeader) -> None:
        os.pwrite(self.fd, header.encode(), 0)

    def begin(self, step: int, nonce: str, file: str) -> None:
        """The slot is changing: refused by any reader until `complete`."""
        self._unmap()
        self.mark(SlotHeader(WRITING, step, nonce, file, 0))

    def complete(self, step: int, nonce: str, file: str, length: int) -> None:
        self.mark(SlotHeader(COMPLETE, step, nonce, file, length))

    def write_at(self, offset: int, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        while view:
            written = os.pwrite(self.fd, view, HEADER_BYTES + offset)
            view, offset = view[written:], offset + written

    def data(self, length: int, *, resize: bool = False) -> memoryview:
        """The slot's bytes [0, length) mapped in place (`resize`: the slot sized to `length`
        first, to be filled)."""
        self._unmap()
        if resize:
            os.ftruncate(self.fd, HEADER_BYTES + length)
        if length == 0:
            return memoryview(bytearray())
        self._map = mmap.mmap(self.fd, HEADER_BYTES + length)
        return memoryview(self._map)[HEADER_BYTES : HEADER_BYTES + length]

    def release(self) -> None:
        """Drop the mapping (after every view of it is gone)."""
        self._unmap()

    def _unmap(self) -> None:
        if self._map is not None:
            # A view still held keeps the mapping alive until it is released.
            with contextlib.suppress(BufferError):
                self._map.close()
            self._map = None

    def close(self) -> None:
        self._unmap()
        with contextlib.suppress(OSError):
            os.close(self.fd)


class TeeStream(io.RawIOBase):
    """A write stream that also copies what it writes into a slot, at the same offsets. A slot
    that refuses a write (memory short, the agent gone) only stops the copy (`broken`): the
    write to storage goes on."""

    def __init__(self, inner: io.IOBase, slot: Slot) -> None:
        super().__init__()
        self.inner, self.slot, self.position = inner, slot, 0
        self.broken = False

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(data).cast("B")
        written = self.inner.write(view)
        written = len(view) if written is None else written
        if not self.broken:
            try:
                self.slot.write_at(self.position, view[:written])
            except OSError as exc:
                log.warning("node memory refused a write (%s): this save is kept in storage only", exc)
                self.broken = True
        self.position += written
        return written

    def tell(self) -> int:
        return self.position

    def seekable(self) -> bool:
        return False

    def flush(self) -> None:
        self.inner.flush()

    def fileno(self) -> int:
        return self.inner.fileno()

    def close(self) -> None:
        was_open = not self.closed
        super().close()  # flushes the inner stream first
        if was_open:
            self.inner.close()


@dataclass
class WorkerSlots:
    """This worker's two slots (own and peer), from the agent's memory."""

    own: Slot
    peer: Slot

    def close(self) -> None:
        self.own.close()
        self.peer.close()


def worker_slots(environ: Mapping[str, str] | None = None) -> WorkerSlots | None:
    """This worker's slots: those LAB_NODE_MEMORY names (memory owned outside the agent), else
    its agent's, found by name among the open files of the processes it descends from; None
    where there are none (`off`, an agent that keeps none, a path that no longer opens)."""
    env = os.environ if environ is None else environ
    value = env.get(ENV_NODE_MEMORY, "")
    local_rank = int(env.get("LOCAL_RANK", "0"))
    if value == OFF:
        return None
    paths = value.split(",") if value else _ancestors_slots(local_rank)
    if not paths:
        return None
    if not value:
        local_rank = 0  # the two found are this local rank's own
    if len(paths) < 2 * (local_rank + 1):
        log.warning("%s names %d slots: none for local rank %d", ENV_NODE_MEMORY, len(paths), local_rank)
        return None
    try:
        own = Slot(paths[2 * local_rank], "own")
    except OSError as exc:
        log.warning("node memory unreachable (%s): checkpoints load from storage", exc)
        return None
    try:
        peer = Slot(paths[2 * local_rank + 1], "peer")
    except OSError as exc:
        own.close()
        log.warning("node memory unreachable (%s): checkpoints load from storage", exc)
        return None
    return WorkerSlots(own, peer)


def _memfd_name(kind: str, local_rank: int) -> str:
    return f"lab-checkpoint-{kind}-{local_rank}"


def _ancestors_slots(local_rank: int, generations: int = 4) -> list[str]:
    """The paths of the two memory files named for `local_rank` held open by the nearest process
    this one descends from that holds them (its agent: the parent of a cold worker, the
    grandparent of one forked by the warm forkserver); [] where none does."""
    wanted = {f"/memfd:{_memfd_name(kind, local_rank)}": kind for kind in KINDS}
    pid = os.getppid()
    for _ in range(generations):
        if pid <= 1:
            break
        found: dict[str, str] = {}
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}").removesuffix(" (deleted)")
                    if target in wanted:
                        found[wanted[target]] = f"/proc/{pid}/fd/{fd}"
        if len(found) == len(KINDS):
            return [found[kind] for kind in KINDS]
        pid = _parent_of(pid)
    return []


def _parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # after the command's name in parentheses (which may hold spaces): state, then ppid
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


class NodeMemory:
    """The agent's side: two memory files per local rank, held open for the agent's life and
    found by its workers by their names (`lab-checkpoint-<own|peer>-<local rank>`)."""

    def __init__(self, local_ranks: int) -> None:
        if local_ranks < 1:
            raise ValueError(f"local_ranks={local_ranks!r} is invalid: expected at least 1")
        self.fds = [
            os.memfd_create(_memfd_name(kind, rank), os.MFD_CLOEXEC) for rank in range(local_ranks) for kind in KINDS
        ]

    def paths(self) -> str:
        """The memory as LAB_NODE_MEMORY names it, two paths per local rank (own, peer): for
        agents that use memory this process owns."""
        pid = os.getpid()
        return ",".join(f"/proc/{pid}/fd/{fd}" for fd in self.fds)

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []


def local_ranks_of(argv: list[str], environ: Mapping[str, str] | None = None) -> int:
    """How many workers torchrun starts per node (--nproc-per-node, or PET_NPROC_PER_NODE,
    where torchrun reads it): a number, or a worker per GPU (`gpu`, `auto` with GPUs) or per
    CPU (`cpu`, `auto` without)."""
    env = os.environ if environ is None else environ
    value = env.get("PET_NPROC_PER_NODE", "1")
    for i, arg in enumerate(argv):
        name, _, inline = arg.partition("=")
        if name in ("--nproc-per-node", "--nproc_per_node"):
            value = inline or (argv[i + 1] if i + 1 < len(argv) else value)
    try:
        return max(1, int(value))
    except ValueError:
        pass
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    # torchrun's own rule for the names: a worker per GPU, or per CPU where it says cpu (or auto
    # on a machine without one)
    if value == "gpu" or (value == "auto" and gpus):
        return max(1, gpus)
    if value in ("cpu", "auto"):
        return os.cpu_count() or 1
    return 1


@contextmanager
def agent_memory(argv: list[str]) -> Iterator[NodeMemory | None]:
    """For the agent's life: its node memory, which its workers find among its open files,
    freed when the agent returns. Nothing with LAB_NODE_MEMORY=off, and nothing new where it
    names memory already (its owner outlives this agent: a supervisor's, a test's)."""
    if os.environ.get(ENV_NODE_MEMORY):
        yield None
        return
    memory = NodeMemory(local_ranks_of(argv))
    try:
        yield memory
    finally:
        memory.close()

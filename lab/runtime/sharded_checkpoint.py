"""Sharded checkpoints through torch.distributed.checkpoint (DCP): every rank writes its own
shards, saves run in the background, and a checkpoint loads into any world size.

Layout: one directory per step, `<dir>/step-000000120/`, holding DCP's files: each rank's
shards (`__<rank>_<n>.distcp`) and the `.metadata` that describes them. A step counts only once
its `.metadata` exists and every shard file it names is there, whole: `.metadata` is written
last, by one rank, after every rank's shards are durable, and it is the commit. A kill at any
moment leaves either a committed step or a directory without `.metadata`, which is skipped
(and pruned later); the previous committed step still loads.

`.metadata` is written in one piece and never renamed: DCP's own writer writes
`.metadata.tmp` and renames it, and S3 (Mountpoint refuses renames on ordinary buckets) and
Blob have no rename but copy + delete. In `rename` mode (POSIX volumes) it is written to a
temporary name, fsynced and renamed, which is atomic there; in `write-once` mode (object-store
mounts) it is written once under its final name, where the object appears only when whole.

Saves (`save`) are asynchronous: training waits only for staging, the copy of its shards to
host memory (`wait_for_staging`, before the next optimizer step changes them), while writing
goes on in a thread with a process group of its own (gloo: async DCP needs a CPU backend, and
its collectives must not interleave with training's). One save is in flight at a time. A
`blocking` save (the last step, an emergency on a spot notice) writes before it returns.

What reshards is what DCP reshards: the model's and the optimizer's tensors. The training's
progress (step, data position) is saved beside them as plain values, the same on every rank.

Where the agent keeps node memory (lab.runtime.node_memory), each rank's shard file is also
teed into it as it is written, marked complete once the step commits and copied to the ring
successor's memory; a load then takes from memory what it can (lab.runtime.memory_tier). Every
save has a nonce, chosen by rank 0 and recorded as `.metadata`'s `save_id`: memory is used
only for the very save that committed.

`ShardedCheckpointer` puts them behind the trainer's contract (lab.runtime.checkpointer).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import re
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.checkpoint.storage import WriteResult

from lab.runtime import memory_tier
from lab.runtime.checkpoint import CheckpointError
from lab.runtime.checkpointer import Choice, PeerLost, Resumed, SaveRecord, TrainingState
from lab.runtime.node_memory import Slot, WorkerSlots, worker_slots
from lab.runtime.object_store import DcpFiles, LocalFiles, ObjectStore, open_store
from lab.runtime.optimizer_state import fill_adam_state
from lab.vocab.job import CheckpointWrites

log = logging.getLogger(__name__)

BACKGROUND_NICE = 10  # the background save's writer thread, below training's 0

METADATA = ".metadata"  # DCP's metadata file: the commit
_STEP_DIR = re.compile(r"^step-(\d{9})$")


def step_dir_name(step: int) -> str:
    return f"step-{step:09d}"


@dataclass(frozen=True)
class Progress:
    """Where training is, saved beside the sharded state (the same on every rank). What does
    not reshard lives here: the data position is global (sample positions), not per rank."""

    step: int
    epoch: int
    position: int
    world_size: int
    batches_committed: int = 0  # the per-step mode's TorchFT manager count

    def as_state(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Progress:
        return cls(**{k: int(v) for k, v in state.items()})


class CommitLastWriter(FileSystemWriter):
    """DCP's file writer, with the commit written last in one piece and never renamed (see
    the module's docstring). On a directory, shards stream to files as DCP writes them; on an
    object store each shard is one object (lab.runtime.object_store.DcpFiles)."""

    def __init__(self, store: ObjectStore, step: int, nonce: str = "", slot: Slot | None = None) -> None:
        local = isinstance(store, LocalFiles)
        key = step_dir_name(step)
        super().__init__(
            store.root / key if isinstance(store, LocalFiles) else key,
            single_file_per_rank=True,
            sync_files=local,  # an object is durable once its upload returns
            overwrite=False,
        )
        if not local:
            self.fs = DcpFiles(store)  # type: ignore[assignment]  # any FileSystemBase serves
        self.tee = memory_tier.TeeFiles(self.fs, slot, step, nonce) if slot is not None else None
        if self.tee is not None:
            self.fs = self.tee  # type: ignore[assignment]
        self.store, self.key, self.nonce = store, key, nonce or self.save_id
        self.written_bytes = 0  # by this rank: its shards (and the metadata on the coordinator)
        self.committed_at: float | None = None  # time.monotonic() once every rank's shards are committed

    def write_data(self, plan: Any, planner: Any) -> torch.futures.Future[list[WriteResult]]:
        if threading.current_thread() is not threading.main_thread():
            # A background save's writes yield the cores to training (a thread's own nice
            # value, on Linux): where the node has cores to spare it runs as fast as before.
            with contextlib.suppress(OSError, AttributeError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
        future = super().write_data(plan, planner)
        results = future.wait()  # the file writer has written: a completed torch Future
        self.written_bytes += sum(r.storage_data.length for r in results)
        return future

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Runs on the coordinator once every rank's shards are written and synced."""
        from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION

        metadata.version = CURRENT_DCP_VERSION
        metadata.storage_data = {r.index: r.storage_data for rank_results in results for r in rank_results}
        metadata.storage_meta = self.storage_meta()
        if metadata.storage_meta is not None:
            metadata.storage_meta.save_id = self.nonce  # the same on every rank: memory's key
        data = pickle.dumps(metadata)
        self.store.put(f"{self.key}/{METADATA}", data)
        self.written_bytes += len(data)


def _reader(store: ObjectStore, step: int) -> FileSystemReader:
    """DCP's file reader of one step, on a directory or an object store."""
    key = step_dir_name(step)
    if isinstance(store, LocalFiles):
        return FileSystemReader(store.root / key)
    reader = FileSystemReader(key)
    reader.fs = DcpFiles(store)  # type: ignore[assignment]  # any FileSystemBase serves
    return reader


@dataclass
class SaveStats:
    """One save, as the rank that made it saw it."""

    step: int
    reason: str
    started: float  # time.monotonic() when save() was called
    blocking_s: float = 0.0  # all the training loop waited for it: launch and staging
    seconds: float | None = None  # start to commit
    nbytes: int = 0  # this rank's bytes
    error: BaseException | None = None
    path: str = ""


@dataclass
class _InFlight:
    stats: SaveStats
    staging: Future[None] | None
    upload: Future[Any]
    writer: CommitLastWriter
    reported: bool = False
    on_done: list[Callable[[SaveStats], None]] = field(default_factory=list)


class StepDirectories:
    """The steps of a checkpoint store: which are committed and whole, and what to prune.
    Plain reads of the store: no process group needed."""

    def __init__(self, store: ObjectStore | str | os.PathLike[str], keep: int = 3) -> None:
        self.store = store if not isinstance(store, (str, os.PathLike)) else open_store(store)
        self.keep = keep

    def steps(self) -> list[int]:
        """Steps with a directory (objects under its prefix), committed or not, newest first."""
        names = {key.split("/", 1)[0] for key in self.store.sizes()}
        return sorted((int(m.group(1)) for n in names if (m := _STEP_DIR.match(n))), reverse=True)

    def verify(self, step: int) -> str | None:
        """Why step `step` cannot be loaded, or None when it is committed and whole."""
        key = step_dir_name(step)
        sizes = {k[len(key) + 1 :]: v for k, v in self.store.sizes(key + "/").items()}
        if METADATA not in sizes:
            return "no .metadata (an interrupted save)"
        try:
            metadata = pickle.loads(self.store.get(f"{key}/{METADATA}"))
        except Exception as exc:  # noqa: BLE001 - a torn or foreign file
            return f".metadata unreadable ({exc.__class__.__name__})"
        needed: dict[str, int] = {}
        for info in getattr(metadata, "storage_data", {}).values():
            needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
        for name, size in needed.items():
            have = sizes.get(name)
            if have is None:
                return f"shard {name} missing"
            if have < size:
                return f"shard {name} cut short ({have} of {size} bytes)"
        return None

    def newest_committed(self) -> tuple[int | None, list[str]]:
        """The newest step that loads, and why each newer one was skipped."""
        skipped: list[str] = []
        for step in self.steps():
            why = self.verify(step)
            if why is None:
                return step, skipped
            skipped.append(f"{step_dir_name(step)}: {why}")
        return None, skipped

    def prune(self) -> list[int]:
        """Keep the newest `keep` committed steps; remove older ones, and interrupted saves
        older than the newest committed step (a newer one may be in flight). The steps removed."""
        committed = [s for s in self.steps() if self.verify(s) is None]
        if not committed:
            return []
        kept = set(committed[: self.keep])
        removed = [s for s in self.steps() if s not in kept and s < committed[0]]
        for step in removed:
            self.store.delete_prefix(step_dir_name(step) + "/")
        return removed


class ShardedCheckpoints:
    """A job's sharded checkpoints in `directory` (shared by every rank). Create it on every
    rank after the process group is up: it makes the gloo group DCP's saves run on."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        writes: CheckpointWrites | str = CheckpointWrites.RENAME,
        keep: int = 3,
        group: dist.ProcessGroup | None = None,
        timeout_s: float = 300.0,
        pinned: bool | None = None,
    ) -> None:
        self.writes = CheckpointWrites(writes)
        if keep < 2:
            # The newest may be the one being written when the job is killed.
            raise ValueError(f"keep={keep!r} is invalid: expected at least 2 checkpoints to keep")
        self.keep = keep
        self.store = open_store(directory, self.writes)  # a directory, s3://..., az://...
        # Saves and their collectives on a group of their own, never the training's. Its
        # collectives wait for the slowest rank's writes: a timeout of minutes, not the
        # training group's seconds (a lost peer is found by training's collectives).
        from datetime import timedelta

        self.group = (
            group if group is not None else dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
        )
        self.rank = dist.get_rank(self.group)
        self.steps = StepDirectories(self.store, keep)
        # Staged in a thread into host memory; with `pinned` (the default on a GPU) into pinned
        # host buffers by non-blocking copies, which run at the link's full speed.
        self._pinned = torch.cuda.is_available() if pinned is None else pinned
        self._stager = self._new_stager()
        self._in_flight: _InFlight | None = None
        self.hop = 0
        self.slots = self._node_memory()
        self._publisher: ThreadPoolExecutor | None = None
        self.last_load: memory_tier.TierLoad | None = None
        self.last_split: dict[str, float] = {}  # the last load's seconds, by part (this rank's)

    def _node_memory(self) -> WorkerSlots | None:
        """This rank's node memory, used only when every rank has some (the load and the
        ring copy are collectives): else None on every rank. Sets how far along the ranks each
        rank's copy goes (`hop`), from every rank's count of workers on its node."""
        slots = worker_slots()
        mine = (slots is not None, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
        everyone: list[Any] = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(everyone, mine, group=self.group)
        if not all(has for has, _ in everyone):
            if slots is not None:
                slots.close()
            return None
        self.hop = memory_tier.ring_hop(len(everyone), [per_node for _, per_node in everyone])
        return slots

    # ------------------------------------------------------------------ loading
    def choose(self) -> tuple[int | None, list[str]]:
        """Rank 0 picks the checkpoint and every rank gets its choice: on storage with cached
        listings, ranks choosing for themselves could load different steps."""
        choice: list[Any] = [self.steps.newest_committed() if self.rank == 0 else None]
        dist.broadcast_object_list(choice, src=dist.get_global_rank(self.group, 0), group=self.group)
        step, skipped = choice[0]
        if step is None and skipped:
            raise CheckpointError(
                f"every checkpoint in {self.store.url} failed verification ({'; '.join(skipped)}): "
                "refusing to start from step 0; move them away to start fresh"
            )
        return step, skipped

    def load(self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> Progress:
        """Load step `step` into the (sharded) model and optimizer, resharded to this world
        size, and return its progress. `last_split` says where its seconds went: the state's
        dicts taken (`state_s`), node memory's plan and transfers (`plan_s`, `exchange_s`), DCP's
        read of every byte (`read_s`), the state put back into the model (`apply_s`)."""
        clock = time.perf_counter()
        self.last_split = split = {}

        def part(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            split[name] = round(now - clock, 4)
            clock = now

        fill_adam_state(optimizer)
        model_state, optim_state = get_state_dict(model, optimizer)
        state: dict[str, Any] = {
            "model": model_state,
            "optim": optim_state,
            "progress": dict.fromkeys(Progress.__dataclass_fields__, 0),
        }
        reader = _reader(self.store, step)
        self.last_load = None
        part("state_s")
        if self.slots is not None:
            try:
                self.last_load = memory_tier.prepare(state, reader, self.slots, step, self.group)
            except RuntimeError as exc:  # a collective failed: a peer is gone
                raise PeerLost(str(exc)) from exc
            split.update(plan_s=self.last_load.plan_s, exchange_s=self.last_load.exchange_s)
            clock = time.perf_counter()
        dcp_load(state, storage_reader=reader, process_group=self.group)
        part("read_s")
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        part("apply_s")
        return Progress.from_state(state["progress"])

    # ------------------------------------------------------------------- saving
    def save(
        self,
        progress: Progress,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        reason: str,
        blocking: bool = False,
    ) -> SaveStats:
        """Save `progress.step`. Asynchronous unless `blocking`: the state is staged in a thread
        (call `wait_for_staging` before the optimizer changes it again) and written by another.
        A save still in flight is waited for first (its time counts as blocking)."""
        started = time.monotonic()
        stats = SaveStats(step=progress.step, reason=reason, started=started)
        self.wait()
        stats.path = step_dir_name(progress.step)
        committed, nonce = self._committed_already(progress.step)
        if committed:
            stats.seconds = stats.blocking_s = time.monotonic() - started
            return stats
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state, "progress": progress.as_state()}
        writer = CommitLastWriter(self.store, progress.step, nonce, self.slots.own if self.slots else None)
        if blocking:
            try:
                dcp_save(state, storage_writer=writer, process_group=self.group)
            except Exception as exc:
                stats.error = exc
                raise
            finally:
                stats.nbytes = writer.written_bytes
            stats.seconds = time.monotonic() - started
            self._publish(writer)
            stats.blocking_s = time.monotonic() - started
            self._prune()
            return stats
        response = dcp_async_save(
            state, storage_writer=writer, process_group=self.group, async_stager=self._stager_for_a_save()
        )
        staging = getattr(response, "staging_completion", None)
        upload = cast(Future[Any], getattr(response, "upload_completion", response))
        if self.slots is not None:
            if self._publisher is None:
                self._publisher = ThreadPoolExecutor(1, thread_name_prefix="lab-checkpoint-memory")
            upload = self._publisher.submit(self._publish_once_committed, upload, writer)
        self._in_flight = _InFlight(stats, staging, upload, writer)
        stats.blocking_s = time.monotonic() - started
        return stats

    def _publish_once_committed(self, upload: Future[Any], writer: CommitLastWriter) -> Any:
        """The background save's end: its commit, then its bytes published to node memory."""
        result = upload.result()  # a failed save raises here, and publishes nothing
        writer.committed_at = time.monotonic()
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
        self._publish(writer)
        return result

    def _publish(self, writer: CommitLastWriter) -> None:
        """Mark this rank's memory complete and pass it along the ring (every rank together).
        The checkpoint is committed already: a failure here only costs memory its use."""
        if self.slots is None:
            return
        try:
            memory_tier.publish(self.slots, self.group, writer.tee.teed if writer.tee is not None else None, self.hop)
        except Exception as exc:  # noqa: BLE001 - the step is committed whatever happens to its copy in memory
            log.warning("checkpoint of step %s kept in storage only: node memory not updated (%s)", writer.key, exc)

    def wait_for_staging(self) -> float:
        """Wait until the save in flight has copied the state (before the optimizer changes
        it); the seconds waited."""
        flight = self._in_flight
        if flight is None or flight.staging is None or flight.staging.done():
            return 0.0
        t0 = time.monotonic()
        flight.staging.result()
        waited = time.monotonic() - t0
        flight.stats.blocking_s += waited
        return waited

    def finished(self) -> SaveStats | None:
        """The save in flight, once it has committed (or failed), reported once; None while it
        runs or when there is none."""
        flight = self._in_flight
        if flight is None or not flight.upload.done():
            return None
        return self._settle(flight)

    def wait(self) -> SaveStats | None:
        """Wait for the save in flight to commit (or fail); its stats, or None."""
        flight = self._in_flight
        if flight is None:
            return None
        try:
            flight.upload.result()
        except Exception:  # noqa: BLE001 - recorded in its stats by _settle
            pass
        return self._settle(flight)

    def _settle(self, flight: _InFlight) -> SaveStats | None:
        self._in_flight = None
        stats = flight.stats
        stats.nbytes = flight.writer.written_bytes
        exc = flight.upload.exception()
        if exc is not None:
            stats.error = exc
            log.error("checkpoint of step %d failed: %s: %s", stats.step, type(exc).__name__, exc)
        else:
            # start to commit (a copy into node memory may follow it, which the next save waits for)
            stats.seconds = (flight.writer.committed_at or time.monotonic()) - stats.started
            self._prune()
        return stats

    def close(self) -> None:
        self.wait()
        self._stager.close()
        if self._publisher is not None:
            self._publisher.shutdown(wait=True)
        if self.slots is not None:
            self.slots.close()

    def _new_stager(self) -> DefaultStager:
        return DefaultStager(StagingOptions(self._pinned, False, True, self._pinned))

    def _stager_for_a_save(self) -> DefaultStager:
        """The stager, kept from one save to the next (with its host buffers). Some torch
        versions (2.11) empty its copy table once it has staged a state, and its next save
        would fail (KeyError: <class 'type'>): such a stager is replaced."""
        table = getattr(getattr(self._stager, "_state_dict_stager", None), "_deepcopy_dispatch", None)
        if table is not None and not table:
            self._stager.close()
            self._stager = self._new_stager()
        return self._stager

    # -------------------------------------------------------------- retention
    def _committed_already(self, step: int) -> tuple[bool, str]:
        """Whether `step` is committed already, and the nonce of a new save of it (rank 0
        decides, every rank gets its answer: ranks that answered differently would part ways
        in the save's collectives). A directory left by an interrupted save of it is removed
        first: every rank writes new shards."""
        answer: list[Any] = [None]
        if self.rank == 0:
            committed = self.steps.verify(step) is None
            if not committed:
                self.store.delete_prefix(step_dir_name(step) + "/")
            answer[0] = (committed, uuid.uuid4().hex)
        dist.broadcast_object_list(answer, src=dist.get_global_rank(self.group, 0), group=self.group)
        return bool(answer[0][0]), str(answer[0][1])

    def _prune(self) -> None:
        """Old and interrupted steps removed (StepDirectories.prune), by rank 0 only."""
        if self.rank == 0:
            self.steps.prune()


class ShardedCheckpointer:
    """Sharded checkpoints as a trainer uses them (lab.runtime.checkpointer.Checkpointer): every
    rank saves its shards together with the others, in the background unless told to block; no
    rank can save alone. A save's record is rank 0's (its bytes: rank 0's shards)."""

    saves_alone = False

    def __init__(self, checkpoints: ShardedCheckpoints) -> None:
        self.checkpoints = checkpoints

    def choose(self) -> Choice | None:
        started = time.perf_counter()
        step, skipped = self.checkpoints.choose()
        return Choice(step, step_dir_name(step), tuple(skipped), started) if step is not None else None

    def load(self, choice: Choice, model: nn.Module, optimizer: torch.optim.Optimizer) -> Resumed:
        """Every rank reads the shards it holds now: the checkpoint may come from another world
        size (DCP reshards the model and the optimizer; the data position is global)."""
        progress = self.checkpoints.load(choice.step, model, optimizer)
        fields = {"path": choice.name, "skipped": list(choice.skipped), "world_size_saved": progress.world_size}
        if self.checkpoints.last_load is not None:
            fields.update(self.checkpoints.last_load.fields())
        if self.checkpoints.last_split:
            fields["split"] = dict(self.checkpoints.last_split)
        return Resumed.at(progress, time.perf_counter() - choice.started, fields)

    def save(
        self, state: TrainingState, reason: str, *, blocking: bool = False, since: float | None = None
    ) -> SaveRecord | None:
        progress = Progress(
            state.step, state.sampler.epoch, state.sampler.position, state.world_size, state.batches_committed
        )
        try:
            stats = self.checkpoints.save(progress, state.model, state.optimizer, reason=reason, blocking=blocking)
        except RuntimeError as exc:  # every rank saves its shards together: a collective failed
            raise PeerLost(str(exc)) from exc
        if not blocking:
            return None
        if since is not None:
            stats.blocking_s = time.perf_counter() - since
        return self._record(stats)

    def save_alone(self, state: TrainingState, reason: str) -> None:
        """A rank holds only its shards: the peers' are needed too."""
        return None

    def wait_for_staging(self) -> None:
        self.checkpoints.wait_for_staging()

    def finished(self) -> SaveRecord | None:
        return self._record(self.checkpoints.finished())

    def wait(self) -> SaveRecord | None:
        return self._record(self.checkpoints.wait())

    def close(self) -> None:
        self.checkpoints.close()

    def newest_step(self) -> int | None:
        steps = self.checkpoints.steps.steps()
        return steps[0] if steps else None

    def _record(self, stats: SaveStats | None) -> SaveRecord | None:
        """A save's record, on rank 0 only: every rank saved its shards of it."""
        if stats is None or self.checkpoints.rank != 0:
            return None
        return SaveRecord(
            step=stats.step,
            reason=stats.reason,
            seconds=stats.seconds or 0.0,
            blocking_s=stats.blocking_s,
            nbytes=stats.nbytes,
            path=stats.path,
            error=stats.error,
            marks={"sharded": True},
        )

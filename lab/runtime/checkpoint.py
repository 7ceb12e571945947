"""Checkpoints that survive a kill at any moment, on POSIX and object-store mounts alike.

Each checkpoint is two new files, never rewritten in place:

  step-000000120-<writer>.pt     the payload (torch.save of a dict)
  step-000000120-<writer>.json   a small pointer: payload name, size and sha256, step

The pointer is written only after the payload is durable, so it is the commit record: a
payload without a pointer is an interrupted write, and a payload whose digest does not
match its pointer is corrupt. Both are skipped with a warning and the next newest valid
checkpoint is loaded; when none is valid that is an error, not a silent start from step 0.
In `rename` mode each file is written to a temporary name, fsynced and renamed; in
`write-once` mode (S3 Mountpoint: no rename, no overwrite) files are written once under
their final names and the pointer alone makes them valid. The writer id in the names keeps
two ranks that save the same step from ever touching each other's files.

`WholeCheckpointer` puts them behind the trainer's contract (lab.runtime.checkpointer): rank 0
picks the checkpoint every rank loads, and any one rank can save the whole state, alone.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from lab.runtime.checkpointer import Choice, Resumed, SaveRecord, TrainingState
from lab.runtime.snapshot import TrainingSnapshot
from lab.vocab.errors import LabError, Refused
from lab.vocab.job import CheckpointWrites

log = logging.getLogger(__name__)

_POINTER = re.compile(r"^step-(\d{9})-([A-Za-z0-9_.]+)\.json$")
_PAYLOAD = re.compile(r"^step-(\d{9})-([A-Za-z0-9_.]+)\.pt$")


class CheckpointDirError(Refused, OSError):
    """The checkpoint directory cannot be used."""


class CheckpointError(LabError, RuntimeError):
    """A checkpoint that should be loadable is not."""


@dataclass(frozen=True)
class Saved:
    step: int
    path: Path
    nbytes: int
    seconds: float


@dataclass(frozen=True)
class Loaded:
    step: int
    path: Path
    state: dict[str, Any]
    seconds: float
    skipped: tuple[str, ...]  # newer files that were torn or corrupt


def write_file(path: Path, data: memoryview | bytes, writes: CheckpointWrites, temporary: str) -> None:
    """`data` at `path`, fsynced: written once under its own name (`write-once`: an object-store
    mount, where a file that exists is an error), else to `temporary` beside it, then renamed
    over it, so that a writer killed midway leaves the old file or none, never a torn one."""
    target = path if writes is CheckpointWrites.WRITE_ONCE else path.with_name(temporary)
    with open(target, "xb" if writes is CheckpointWrites.WRITE_ONCE else "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if target != path:
        os.replace(target, path)


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (a file renamed into it) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    def __init__(self, directory: str | Path, writes: CheckpointWrites | str = CheckpointWrites.RENAME, keep: int = 3):
        self.dir = Path(directory)
        self.writes = CheckpointWrites(writes)
        if keep < 1:
            raise ValueError(f"keep={keep!r} is invalid: expected at least 1 checkpoint to keep")
        self.keep = keep
        self._verified: tuple[str, dict[str, Any], float] | None = None  # what latest() checked
        self._skipped: tuple[str, ...] = ()
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointDirError(f"checkpoint_dir={str(self.dir)!r} cannot be created: {exc.strerror}") from None
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise CheckpointDirError(f"checkpoint_dir={str(self.dir)!r} is not writable: expected a writable directory")

    # ------------------------------------------------------------------ saving
    def save(self, state: dict[str, Any], step: int, writer: str) -> Saved:
        start = time.perf_counter()
        buf = io.BytesIO()
        torch.save(state, buf)
        payload = buf.getbuffer()
        stem = f"step-{step:09d}-{writer}"
        self._write(self.dir / f"{stem}.pt", payload)
        pointer = {
            "step": step,
            "payload": f"{stem}.pt",
            "bytes": len(payload),
            "sha256": hashlib.sha256(payload).hexdigest(),
            "time": time.time(),
        }
        self._write(self.dir / f"{stem}.json", json.dumps(pointer).encode())
        self._fsync_dir()
        self._prune()
        return Saved(step, self.dir / f"{stem}.pt", len(payload), time.perf_counter() - start)

    def has(self, step: int) -> bool:
        return any(s == step for s, _ in self._pointers())

    def _write(self, path: Path, data: memoryview | bytes) -> None:
        write_file(path, data, self.writes, temporary=f".tmp-{path.name}")

    def _fsync_dir(self) -> None:
        if self.writes is CheckpointWrites.WRITE_ONCE:
            return  # object-store mounts have no directory entries to sync
        fsync_dir(self.dir)

    def _prune(self) -> None:
        steps = sorted({s for s, _ in self._pointers()}, reverse=True)
        if len(steps) <= self.keep:
            return
        oldest_kept = steps[self.keep - 1]
        for entry in os.listdir(self.dir):
            m = _POINTER.match(entry) or _PAYLOAD.match(entry)
            stale_tmp = entry.startswith(".tmp-step-") and int(entry[10:19]) < oldest_kept
            if (m and int(m.group(1)) < oldest_kept) or stale_tmp:
                try:
                    os.unlink(self.dir / entry)
                except FileNotFoundError:
                    pass  # another rank pruned it first

    # ----------------------------------------------------------------- loading
    def _pointers(self) -> list[tuple[int, str]]:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        found = [(int(m.group(1)), name) for name in names if (m := _POINTER.match(name))]
        return sorted(found, reverse=True)

    def steps(self) -> list[int]:
        """Steps with a checkpoint pointer (verified or not), newest first."""
        return [step for step, _ in self._pointers()]

    def latest(self, map_location: Any = "cpu") -> str | None:
        """Name of the newest valid checkpoint's pointer; torn or corrupt ones are skipped
        with a warning. The verified state is kept for a following `load` of that name.
        None when there is no checkpoint; CheckpointError when there are some and every
        one fails verification (starting from step 0 would silently lose the training)."""
        start = time.perf_counter()
        skipped: list[str] = []
        newest_valid_step = -1
        chosen = None
        for step, name in self._pointers():
            reason, state = self._try_load(name, map_location)
            if state is not None:
                newest_valid_step, chosen = step, name
                self._verified = (name, state, time.perf_counter() - start)
                break
            log.warning("skipping checkpoint %s: %s", name, reason)
            skipped.append(f"{name}: {reason}")
        self._warn_orphans(newest_valid_step, skipped)
        self._skipped = tuple(skipped)
        if chosen is None and self._pointers():  # pointers that vanished meanwhile do not count
            raise CheckpointError(
                f"every checkpoint in {self.dir} failed verification ({'; '.join(skipped)}): "
                "refusing to start from step 0; move them away to start fresh"
            )
        return chosen

    def load(self, pointer_name: str, map_location: Any = "cpu") -> Loaded:
        """Load one checkpoint by its pointer name (as `latest` returned it, maybe on another
        rank); a file that fails verification here is an error, not a silent fallback."""
        cached = self._verified
        state: dict[str, Any] | None
        if cached and cached[0] == pointer_name:
            state, seconds = cached[1], cached[2]
        else:
            start = time.perf_counter()
            reason, state = self._try_load(pointer_name, map_location)
            if state is None:
                raise CheckpointError(f"checkpoint {pointer_name} chosen to resume from is unusable: {reason}")
            seconds = time.perf_counter() - start
        m = _POINTER.match(pointer_name)
        step = int(m.group(1)) if m else state["step"]
        return Loaded(step, self.dir / pointer_name.replace(".json", ".pt"), state, seconds, self._skipped)

    def load_latest(self, map_location: Any = "cpu") -> Loaded | None:
        name = self.latest(map_location)
        return self.load(name, map_location) if name else None

    def _warn_orphans(self, newest_valid_step: int, skipped: list[str]) -> None:
        """Payloads newer than the loaded checkpoint with no pointer: interrupted writes."""
        pointed = {name.replace(".json", ".pt") for _, name in self._pointers()}
        for entry in sorted(os.listdir(self.dir)):
            m = _PAYLOAD.match(entry)
            if m and entry not in pointed and int(m.group(1)) > newest_valid_step:
                log.warning("skipping checkpoint %s: no pointer (interrupted write)", entry)
                skipped.append(f"{entry}: no pointer (interrupted write)")

    def _try_load(self, pointer_name: str, map_location: Any) -> tuple[str, dict[str, Any] | None]:
        try:
            pointer = json.loads((self.dir / pointer_name).read_text())
            data = (self.dir / pointer["payload"]).read_bytes()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"unreadable ({exc.__class__.__name__}: {exc})", None
        if len(data) != pointer.get("bytes") or hashlib.sha256(data).hexdigest() != pointer.get("sha256"):
            return f"torn or corrupt payload ({len(data)} bytes, digest does not match its pointer)", None
        try:
            state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
        except Exception as exc:  # noqa: BLE001 - a payload that digests right but does not unpickle
            return f"cannot be unpickled ({exc.__class__.__name__})", None
        return "", state


class WholeCheckpointer:
    """Whole checkpoints as a trainer uses them (lab.runtime.checkpointer.Checkpointer): every
    rank holds the whole state, so a save of the group is written by rank 0, and a notice or a
    lost peer is saved by the rank that sees it, alone and at once. Saves block: writing the
    state of a model small enough to be held whole takes a moment.

    `exclusive` is held while rank 0 writes the group's save: the training loop's lock of a
    completed step (lab.runtime.spot_notice.SpotNotice.consistent), which a notice's save from
    another thread holds too. No save holds RNG streams: each rank's are derived from the step
    (lab.runtime.demo.derive_rng)."""

    saves_alone = True

    def __init__(
        self,
        store: CheckpointStore,
        *,
        writer: str,
        device: torch.device,
        exclusive: threading.Lock,
    ) -> None:
        self.store, self.writer, self.device = store, writer, device
        self.exclusive = exclusive
        self.rank = dist.get_rank()

    def choose(self) -> Choice | None:
        """Rank 0 picks the checkpoint and every rank loads that one: on storage with cached
        listings, ranks choosing for themselves could resume at different steps."""
        choice = [self.store.latest() if self.rank == 0 else None]
        dist.broadcast_object_list(choice, src=0)
        name = choice[0]
        m = _POINTER.match(name) if name else None
        return Choice(int(m.group(1)), name) if m and name else None

    def load(self, choice: Choice, model: nn.Module, optimizer: torch.optim.Optimizer) -> Resumed:
        loaded = self.store.load(choice.name, map_location=self.device)
        snapshot = TrainingSnapshot.from_payload(loaded.state)
        snapshot.apply(model, optimizer)
        fields = {"path": loaded.path.name, "skipped": list(loaded.skipped)}
        return Resumed.at(snapshot, loaded.seconds, fields)

    def save(
        self, state: TrainingState, reason: str, *, blocking: bool = False, since: float | None = None
    ) -> SaveRecord | None:
        """Rank 0 writes (every rank holds the same state); no collective. Always blocking."""
        if self.rank != 0:
            return None
        with self.exclusive:
            return self._write(state, reason, since)

    def save_alone(self, state: TrainingState, reason: str) -> SaveRecord:
        """This rank alone (its caller holds `exclusive`)."""
        return self._write(state, reason, None)

    def _write(self, state: TrainingState, reason: str, since: float | None) -> SaveRecord:
        if self.store.has(state.step):
            # Another rank (or the periodic timer) already saved this very step: nothing to write.
            return SaveRecord(state.step, reason, already=True)
        snapshot = TrainingSnapshot.capture(
            state.model,
            state.optimizer,
            state.sampler,
            step=state.step,
            world_size=state.world_size,
            batches_committed=state.batches_committed,
        )
        saved = self.store.save(snapshot.to_payload(), state.step, self.writer)
        # seconds: writing the files; blocking_s: all the training loop waited
        blocking = time.perf_counter() - since if since is not None else saved.seconds
        return SaveRecord(state.step, reason, saved.seconds, blocking, saved.nbytes, saved.path.name)

    def wait_for_staging(self) -> None:
        """Nothing in flight: every save has written before it returned."""

    def finished(self) -> SaveRecord | None:
        return None

    def wait(self) -> SaveRecord | None:
        return None

    def close(self) -> None:
        """Nothing held between saves."""

    def newest_step(self) -> int | None:
        steps = self.store.steps()
        return steps[0] if steps else None

"""A watched script's rounds, read back: which workers ran in each, what checkpoint each loaded
and saved, how each ended, and where each was by its own output.

The workers record their start, checkpoint files and end (lab.runtime.script_watch); a round is
the workers that shared a rendezvous round (the `round` of their events: torchrun's master port,
new at every round). What a worker printed is kept per round (lab.runtime.round_logs): the k-th
start of a node's workers wrote `<node>/torchelastic/<run>/round_<k>/attempt_<n>/<local rank>/`.
A script's own words for its position ("Epoch 12", "step 340", "Iter 7") give where each worker
started and got to; a script that prints none has no position here, and the report says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.drill.timeline import ROUND_SPREAD_S
from lab.vocab.events import Event
from lab.vocab.job import ROUND_DIR_PREFIX

# "Epoch 12", "epoch: 3", "Epoch: [3][ 10/100]", "step 340", "Step=7", "iter 20", "Iteration #5".
_POSITION = re.compile(r"\b(epoch|step|iter|iteration)\b\s*[:=#]?\s*\[?\s*(\d+)", re.IGNORECASE)
_KIND = {"iteration": "iter"}
_ROUND_DIR = re.compile(rf"^{ROUND_DIR_PREFIX}(\d+)$")


@dataclass(frozen=True)
class Position:
    """Where a worker was by its own output: the unit it counts (epoch, step, iter), the first
    and the highest number it printed."""

    kind: str
    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.kind} {self.first}" if self.first == self.last else f"{self.kind} {self.first} to {self.last}"


def position_of(lines: Iterable[str]) -> Position | None:
    """The position a worker's output says, in the unit it prints most (a line with an epoch
    counts as the epoch's: "Epoch 3 | Steps: 16" is epoch 3)."""
    seen: dict[str, list[int]] = {}
    for line in lines:
        found = _POSITION.findall(line)
        if not found:
            continue
        kinds = {k.lower(): int(n) for k, n in reversed(found)}  # the first number of each kind on the line
        kind = "epoch" if "epoch" in kinds else next(iter(kinds))
        seen.setdefault(_KIND.get(kind, kind), []).append(kinds[kind])
    if not seen:
        return None
    kind, numbers = max(seen.items(), key=lambda item: len(item[1]))
    return Position(kind, numbers[0], max(numbers))


@dataclass(frozen=True)
class FileUse:
    """A checkpoint file (or folder) a worker loaded or saved, when, and what it was then."""

    t: float
    path: str
    api: str
    bytes: int | None = None
    mtime: float | None = None
    at: str | None = None  # the script's file:line that called it


@dataclass
class WorkerRun:
    """One worker in one round."""

    node: str
    rank: int
    local_rank: int
    world_size: int
    started: float
    loaded: list[FileUse] = field(default_factory=list)
    saved: list[FileUse] = field(default_factory=list)
    ended: float | None = None  # None: it never said (killed, or still running)
    code: int | None = None
    error: str | None = None
    position: Position | None = None
    # Its process group: init_process_group's timeout (None: torch's default) and where it was called.
    group_timeout_s: float | None = None
    group_at: str | None = None
    # When it began its first optimizer step of the round, and its first after each of its saves.
    trained: list[float] = field(default_factory=list)
    logs: str | None = None  # the folder its output went to, where it said (lab.runtime.script_watch)

    @property
    def who(self) -> str:
        return f"rank {self.rank} ({self.node})"

    def first_load(self) -> FileUse | None:
        return self.loaded[0] if self.loaded else None

    def how_it_ended(self) -> str:
        if self.ended is None:
            return "was stopped (it never returned)"
        if self.code == 0:
            return "finished"
        return f"ended with {self.error} (exit {self.code})" if self.error else f"exited {self.code}"


@dataclass
class ScriptRound:
    """The workers of one rendezvous round, from the first one's start."""

    key: object
    t: float
    workers: list[WorkerRun] = field(default_factory=list)

    def nodes(self) -> set[str]:
        return {w.node for w in self.workers}


def script_rounds(events: Iterable[Mapping[str, Any]], nproc_per_node: int = 1) -> list[ScriptRound]:
    """The rounds of a watched script, oldest first, from its workers' events. A round is
    known by its master port (`round`); a start more than ROUND_SPREAD_S after its port's
    round began is another round that met the port again."""
    rounds: list[ScriptRound] = []
    current: dict[object, ScriptRound] = {}  # per port: its newest round
    workers: dict[tuple[object, int], WorkerRun] = {}
    for e in sorted(events, key=lambda e: e["t"]):
        kind, key, rank = e.get("event"), e.get("round"), e.get("rank")
        if not isinstance(rank, int):
            continue
        if kind == Event.SCRIPT_STARTED:
            group = int(e.get("group_rank") or 0)
            worker = WorkerRun(
                node=str(e.get("node")),
                rank=rank,
                local_rank=rank - group * nproc_per_node,
                world_size=int(e.get("world_size") or 0),
                started=e["t"],
                logs=e.get("logs"),
            )
            workers[(key, rank)] = worker
            same = current.get(key)
            if same is None or e["t"] - same.t > ROUND_SPREAD_S:
                same = current[key] = ScriptRound(key, e["t"])
                rounds.append(same)
            same.workers.append(worker)
            continue
        worker_of = workers.get((key, rank))
        if worker_of is None:
            continue
        if kind in (Event.SCRIPT_LOADED, Event.SCRIPT_SAVED):
            use = FileUse(e["t"], str(e.get("path")), str(e.get("api")), e.get("bytes"), e.get("mtime"), e.get("at"))
            (worker_of.loaded if kind == Event.SCRIPT_LOADED else worker_of.saved).append(use)
        elif kind == Event.SCRIPT_TRAINED:
            worker_of.trained.append(e["t"])
        elif kind == Event.SCRIPT_GROUP:
            worker_of.group_timeout_s, worker_of.group_at = e.get("timeout_s"), e.get("at")
        elif kind == Event.SCRIPT_ENDED:
            worker_of.ended, worker_of.code, worker_of.error = e["t"], int(e.get("code") or 0), e.get("error")
    return rounds


def read_positions(rounds: list[ScriptRound], log_dirs: Mapping[str, Path]) -> None:
    """Each worker's position from what it printed: in the folder it said its output went to;
    for a worker that did not say, the k-th round a node's workers started in wrote round_<k>/
    under that node's torchrun log folder (`log_dirs`: node -> folder). Counting is a guess that
    a start whose workers never reached the script (stopped first) would shift."""
    by_node: dict[str, list[ScriptRound]] = {}
    for r in rounds:
        for node in sorted(r.nodes()):
            by_node.setdefault(node, []).append(r)
    for node, theirs in by_node.items():
        folders = _round_folders(log_dirs.get(node))
        for k, r in enumerate(theirs, start=1):
            for w in r.workers:
                if w.node != node:
                    continue
                if w.logs is not None:
                    w.position = position_of(_streams(Path(w.logs)))
                elif (folder := folders.get(k)) is not None:
                    w.position = position_of(_lines(folder, w.local_rank))


def _round_folders(log_dir: Path | None) -> dict[int, Path]:
    """round number -> its folder, under every run folder of a node's torchrun log folder."""
    found: dict[int, Path] = {}
    if log_dir is None or not log_dir.is_dir():
        return found
    for run in sorted(log_dir.iterdir()):
        for folder in run.glob(f"{ROUND_DIR_PREFIX}*") if run.is_dir() else ():
            m = _ROUND_DIR.match(folder.name)
            if m:
                found[int(m.group(1))] = folder
    return found


def _lines(round_folder: Path, local_rank: int) -> list[str]:
    """What a worker of a round printed, in every attempt of the round."""
    return [line for attempt in sorted(round_folder.glob("attempt_*")) for line in _streams(attempt / str(local_rank))]


def _streams(folder: Path) -> list[str]:
    """What a worker printed into its folder, stdout then stderr (tqdm and logging write to stderr)."""
    out: list[str] = []
    for stream in ("stdout.log", "stderr.log"):
        try:
            out += (folder / stream).read_text(errors="replace").splitlines()
        except OSError:
            continue
    return out


def described(round_: ScriptRound, workdir: str | None = None) -> str:
    """Each worker of a round in a few words: the checkpoint it resumed from, where it started
    by its output (or that it printed no position), and how it ended."""
    parts = []
    for w in sorted(round_.workers, key=lambda w: w.rank):
        load = w.first_load()
        source = f"resumed from {relative(load.path, workdir)}" if load is not None else "loaded no checkpoint"
        where = f"{w.position.kind} {w.position.first}" if w.position is not None else "position not printed"
        parts.append(f"{w.who} {source} ({where}), {w.how_it_ended()}")
    return "; ".join(parts)


def relative(path: str, workdir: str | None) -> str:
    root = (workdir or "").rstrip("/") + "/"
    return path[len(root) :] if workdir and path.startswith(root) else path

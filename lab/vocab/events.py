"""The events of a job and of a drill: their names, the fields each carries, and their
format, one JSON object per line.

    {"t": 1774173845.1234, "event": "step", "pid": 4242, "rank": 0, "step": 120, ...}

`t` (unix time) and `event` (a name below) are on every line. The training script's and the
launcher's events also carry who emitted them (IDENTITY_FIELDS, from torchrun's environment);
the rest are the event's own fields (FIELDS). The training script (lab.runtime) and the
launcher write them; the drill, the local target and the cluster drill read them back, from a
file or from a pod's log, where other lines are skipped.

Names and values are what earlier runs recorded: a report reads the files of old runs too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from lab.vocab.job import ENV_K8S_NODE, ENV_NODE


class Event(StrEnum):
    """Every event name. A StrEnum: equal to its text, written as its text."""

    # The training script, on every worker (rank 0 only where FIELDS says so).
    START = "start"  # a worker started: its process group is up
    MODEL_BUILT = "model_built"  # its data, model (sharded or not) and optimizer are built
    FRESH = "fresh"  # no checkpoint: training starts at step 0
    RESUME = "resume"  # training resumes from a checkpoint
    CHECKPOINT_LOADED = "checkpoint_loaded"
    CHECKPOINT_SAVED = "checkpoint_saved"
    CHECKPOINT_INTERVAL = "checkpoint_interval"  # a derived interval: the next save, and what it came from
    STEP = "step"  # an optimizer step completed (rank 0; per-step mode: each group's rank 0)
    SAMPLES = "samples"  # the sample indices of a step (--log-samples)
    COLLECTIVE_FAILED = "collective_failed"  # a peer vanished mid-step
    EXIT = "exit"  # the worker leaves: done, or on a notice
    REPLICA_GROUP = "replica_group"  # per-step mode: where a group serves its peers
    STEP_DISCARDED = "step_discarded"  # per-step mode: a step its quorum did not commit
    HEALED = "healed"  # per-step mode: a group copied the state from a live peer
    # A user's script, watched by the worker that runs it (lab.runtime.script_watch), on every worker.
    SCRIPT_STARTED = "script_started"
    SCRIPT_LOADED = "script_loaded"  # it loaded a checkpoint file (torch.load, torch.distributed.checkpoint)
    SCRIPT_SAVED = "script_saved"  # it saved one
    SCRIPT_GROUP = "script_group"  # it started its process group (init_process_group)
    SCRIPT_TRAINED = "script_trained"  # its first optimizer step since it started or last saved
    SCRIPT_ENDED = "script_ended"  # the script returned, exited, or raised
    # The launcher (lab.runtime.launch), on every agent.
    RDZV_UNREACHABLE = "rdzv_unreachable"
    RDZV_REACHABLE = "rdzv_reachable"
    RDZV_MEMBER_LOST = "rdzv_member_lost"
    RDZV_GAVE_UP = "rdzv_gave_up"
    RDZV_ROUND_ABANDONED = "rdzv_round_abandoned"  # its rank 0 left before it shared its address
    RDZV_LEFT = "rdzv_left"  # stopped by a signal, its workers gone: it took its node out of the round
    WORKERS_CRASH_LOOP = "workers_crash_loop"  # its workers failed the same way in a row: it gives up
    # Its pod's containers were killed without a word in a row on one node (OOMKilled): it gives up.
    CONTAINERS_KILL_LOOP = "containers_kill_loop"
    # The local target (lab.local). Its start keeps the name earlier runs recorded.
    CLUSTER_STARTED = "cluster_started"  # the rendezvous server (or lighthouse) is up
    NODE_ADDED = "node_added"
    EVICT = "evict"
    SCALE = "scale"  # the job asked to run at another number of nodes (a scale-out or scale-in)
    # A replayed trace's capacity: its start, each slot lost or given back, its end.
    CAPACITY = "capacity"
    NOTICE_EXPIRED = "notice_expired"  # a node given a notice was killed when it ran out
    VANISHED_KILLED = "vanished_killed"  # a silently evicted node's processes were killed
    RDZV_DOWN = "rdzv_down"
    RDZV_UP = "rdzv_up"
    # The cluster drill (lab.cluster.drill).
    K8S_SUBMITTED = "k8s_submitted"
    K8S_JOB = "k8s_job"  # a condition of the PyTorchJob
    K8S_POD = "k8s_pod"  # a worker pod changed phase or node
    K8S_NODE_READY = "k8s_node_ready"
    K8S_NODE_GONE = "k8s_node_gone"
    LOG_LOST = "log_lost"  # a pod's log could no longer be followed


class Source(StrEnum):
    """Who recorded an event that the training script did not (its `source` field)."""

    AGENT = "agent"  # a launcher's agent
    DRILL = "drill"  # the cluster drill
    LOCAL_TARGET = "cluster"  # the local target (the value earlier runs recorded)


# Who emitted a training-script or launcher event: torchrun's environment variable -> field.
IDENTITY_FIELDS = {
    "RANK": "rank",
    "WORLD_SIZE": "world_size",
    "GROUP_RANK": "group_rank",
    "TORCHELASTIC_RESTART_COUNT": "restart_count",
    ENV_NODE: "node",  # the local target's node, a cluster's worker pod
    ENV_K8S_NODE: "k8s_node",  # a cluster's node (the machine)
    "MASTER_PORT": "round",  # torchrun picks a new master port for every rendezvous round
}

# Every field an event may carry besides `t`, `event`, `pid`, `source` and the identity
# fields; the per-step mode adds `replica` (its group) to most of the training script's.
FIELDS: Mapping[Event, frozenset[str]] = {
    # deterministic: torch's deterministic algorithms are on (torch.use_deterministic_algorithms).
    Event.START: frozenset({"world_size", "restarts", "backend", "device", "deterministic", "replica"}),
    Event.FRESH: frozenset({"step", "world_size", "lr", "restarts", "rng", "replica"}),
    Event.RESUME: frozenset({"step", "world_size", "lr", "restarts", "rng", "replica"}),
    Event.MODEL_BUILT: frozenset({"model", "parameters", "parallel", "seconds", "replica"}),
    # world_size_saved: the world size of a sharded checkpoint, resharded to this one. Where node
    # memory is kept (lab.runtime.memory_tier), the bytes every rank together read from its own
    # memory, from other ranks' memory and from storage, and the memory slots refused and why;
    # `split`: a sharded load's seconds by part on rank 0 (lab.runtime.sharded_checkpoint).
    Event.CHECKPOINT_LOADED: frozenset(
        {
            "step",
            "epoch",
            "position",
            "seconds",
            "path",
            "skipped",
            "world_size_saved",
            "replica",
            "from_memory",
            "from_peers",
            "from_storage",
            "memory_refused",
            "split",
        }
    ),
    # sharded: every rank wrote its shards (bytes: rank 0's); else one rank wrote the whole state.
    Event.CHECKPOINT_SAVED: frozenset(
        {"step", "reason", "seconds", "blocking_s", "bytes", "path", "already", "replica", "sharded"}
    ),
    # steps to the next save (`next_step`) from a step of `step_s`, a save costing `cost_s` and a mean
    # time between evictions `mtbf_s` (`source`: "band", "given" (the job's known rate), or "observed"
    # from `evictions` in `trained_s`).
    Event.CHECKPOINT_INTERVAL: frozenset(
        {"step", "steps", "next_step", "step_s", "cost_s", "mtbf_s", "source", "evictions", "trained_s"}
    ),
    Event.STEP: frozenset(
        {
            "step",
            "loss",
            "loss_hex",  # the loss exactly (float.hex): runs compared bit for bit
            "world_size",
            "samples",
            "micro_batches",
            "epoch",
            "position",
            "seconds",
            "phases",  # {phase: seconds} of the step: where its time went
            "participants",
            "participating",
            "replica",
            "quorum",
        }
    ),
    # quorum: per-step mode, the quorum the group trained the step in (logged before its reduction).
    Event.SAMPLES: frozenset({"step", "epoch", "indices", "replica", "quorum"}),
    Event.COLLECTIVE_FAILED: frozenset({"step", "error", "message"}),
    # saved: false when a notice found no step boundary in time (the last checkpoint stands).
    # weights: per-step mode, a digest of the parameters the worker holds at the end (equal on the
    # workers of one rank in every group). trained_on_s: the seconds a notice that said when the
    # node goes was trained through before the notice's save.
    Event.EXIT: frozenset(
        {"reason", "step", "notice_to_exit_s", "trained_on_s", "rng", "replica", "saved", "peak_rss_mb", "weights"}
    ),
    Event.REPLICA_GROUP: frozenset({"replica", "manager", "weights"}),
    Event.STEP_DISCARDED: frozenset({"step", "participants", "replica", "quorum", "error"}),
    # seconds: the quorum that healed, the copy of bytes (this worker's part) included.
    Event.HEALED: frozenset({"step", "seconds", "bytes", "replica"}),
    # logs: the folder torchrun writes this worker's output and error file to (its round's).
    Event.SCRIPT_STARTED: frozenset({"logs"}),
    # api: the function called; bytes and mtime: the file's (a folder's: its files' total, the newest).
    # at: the script's file:line that called it.
    Event.SCRIPT_LOADED: frozenset({"path", "api", "bytes", "mtime", "at"}),
    Event.SCRIPT_SAVED: frozenset({"path", "api", "bytes", "mtime", "at"}),
    # timeout_s: what init_process_group was given (none: torch's default).
    Event.SCRIPT_GROUP: frozenset({"backend", "timeout_s", "at"}),
    Event.SCRIPT_ENDED: frozenset({"code", "error"}),
    # at: the script's file:line that called the optimizer's step.
    Event.SCRIPT_TRAINED: frozenset({"at"}),
    Event.RDZV_UNREACHABLE: frozenset({"error"}),
    Event.RDZV_REACHABLE: frozenset({"down_s"}),
    Event.RDZV_MEMBER_LOST: frozenset({"nodes", "round"}),
    Event.RDZV_GAVE_UP: frozenset({"down_s"}),
    Event.RDZV_ROUND_ABANDONED: frozenset({"round", "waited_s"}),
    Event.RDZV_LEFT: frozenset({"round", "signal", "seconds"}),
    Event.WORKERS_CRASH_LOOP: frozenset({"error", "attempts", "rank"}),
    Event.CONTAINERS_KILL_LOOP: frozenset({"pod", "k8s_node", "kills"}),
    Event.CLUSTER_STARTED: frozenset({"backend", "endpoint", "rdzv_id", "fault_tolerance"}),
    # rank, capacity: the GPU capacity rank it came from, where the drill says (a fallback rank);
    # part: of a job with borrowed nodes, "core" (the team's own) or "burst" (borrowed).
    Event.NODE_ADDED: frozenset({"node", "k8s_node", "rank", "capacity", "part"}),
    # On a cluster `t` is the first sign of the disruption the drill saw, and `requested_t` when it asked the
    # cloud (`backend`) for it: `lead_s` apart (lab.cluster.disruption).
    Event.EVICT: frozenset(
        {"node", "kind", "notice_s", "k8s_node", "detail", "backend", "requested_t", "lead_s", "first_sign", "cause"}
    ),
    Event.SCALE: frozenset({"nodes", "from_nodes"}),
    # alive: the slots with a node now, of `slots`; change: start, lost, back or end; window_t:
    # the trace's own seconds (before compression) of this moment.
    Event.CAPACITY: frozenset({"alive", "slots", "slot", "change", "notice_s", "window_t"}),
    Event.NOTICE_EXPIRED: frozenset({"node"}),
    Event.VANISHED_KILLED: frozenset({"node"}),
    Event.RDZV_DOWN: frozenset({"backend"}),
    Event.RDZV_UP: frozenset({"backend", "kept_data"}),
    Event.K8S_SUBMITTED: frozenset({"objects"}),
    Event.K8S_JOB: frozenset({"condition", "reason", "message"}),
    Event.K8S_POD: frozenset({"pod", "phase", "k8s_node", "uid"}),
    Event.K8S_NODE_READY: frozenset({"k8s_node", "rank", "capacity"}),
    Event.K8S_NODE_GONE: frozenset({"k8s_node"}),
    Event.LOG_LOST: frozenset({"pod", "error"}),
}

# The exit reasons of Event.EXIT and the save reasons of Event.CHECKPOINT_SAVED.
EXIT_DONE, EXIT_NOTICE = "done", "notice"
SAVE_INTERVAL, SAVE_NOTICE, SAVE_FAILURE, SAVE_FINAL = "interval", "notice", "failure", "final"
# Why an Event.EVICT took a node when no cloud took it back: the job was made smaller, or the
# team that owns a borrowed node's capacity took it back.
CAUSE_SCALE_IN, CAUSE_RECLAIM = "scale-in", "reclaim"

ALWAYS = frozenset({"t", "event", "pid", "source"})


def unknown_fields(record: Mapping[str, Any]) -> set[str]:
    """Fields of `record` that its event does not carry (all of them for an unknown event)."""
    try:
        allowed = FIELDS[Event(record["event"])]
    except (KeyError, ValueError):
        return set(record) - {"t", "event"}
    return set(record) - ALWAYS - set(IDENTITY_FIELDS.values()) - allowed


# ------------------------------------------------------------------ the format
def to_line(record: Mapping[str, Any]) -> bytes:
    """One event as the line that records it."""
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


def parse_line(line: str) -> dict[str, Any] | None:
    """The event on one line (a file's, or a pod log's), or None for any other line."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(record, dict) and "event" in record and "t" in record:
        return record
    return None


def iter_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """The well-formed events of a file in file order; a torn last line is skipped."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return
    for line in text.splitlines():
        record = parse_line(line)
        if record is not None:
            yield record


def read(path: str | Path) -> list[dict[str, Any]]:
    """All well-formed events of a file, in time order."""
    return sorted(iter_events(path), key=lambda e: e["t"])


class Tail:
    """Reads the events appended to a file since the last call (for live progress)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._offset = 0
        self._partial = b""

    def poll(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for the next poll
        out = []
        for line in lines:
            record = parse_line(line.decode(errors="replace"))
            if record is not None:
                out.append(record)
        return out

"""What a worker's failure says: the worker's own crash, or a consequence of a peer that failed
or vanished; and a crash loop, the same crash attempt after attempt, which the agent gives up on
instead of using up max_restarts. The agent's monitor (lab.runtime.agent_hooks) applies these;
the drill reads a failure with the same words (lab.drill.diagnosis)."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import weakref
from collections.abc import Mapping
from typing import Any

from lab.runtime import events, torch_seam
from lab.vocab.events import Event
from lab.vocab.job import EXIT_PEER_LOST, LAUNCH_MODULE

log = logging.getLogger(LAUNCH_MODULE)  # the launcher's one log

# Attempts that end with the same exception, in a row, before the agent gives up: a script that
# fails deterministically (a bad path, a missing module, a shape error at step 1000 of every
# resume) would otherwise be restarted max_restarts times inside its pod, seen by no one.
CRASH_LOOP_ATTEMPTS = 3
# What a worker sees when a peer fails or vanishes: a consequence elsewhere, never a crash loop
# of its own (an eviction must not use up this budget).
_PEER_FAILURE = re.compile(
    r"DistBackendError|DistNetworkError|DistStoreError|Connection closed by peer|Connection reset by peer"
    r"|[Bb]roken pipe|NCCL|[Gg]loo|timed out|Timeout|ProcessGroup|watchdog|Socket Timeout"
)


# A worker's store could not bind its port (torch's TCPStore server: "failed to listen ...
# EADDRINUSE").
_PORT_TAKEN = re.compile(r"EADDRINUSE|[Aa]ddress already in use|failed to listen on any local network address")


# How long torch waits for workers to leave on SIGTERM before it SIGKILLs them (torch.multiprocessing's
# ProcessContext.join and elastic's PContext.close, 30 s each): a worker found killed by SIGKILL
# within a monitor tick shorter than this was killed by someone else than its agent.
TORCH_KILL_GRACE_S = 30


def killed_on_its_own(pcontext: Any, worker_group: Any, poll_s: float) -> dict[int, Any]:
    """{global rank: failure} of a worker of this node that ended by SIGKILL that its agent did not
    send (the poll that found the failure, `poll_s` long, was shorter than torch's grace before
    its own SIGKILL): the kernel's OOM killer, as a rule, which kills the worker alone where the
    container's cgroup is not killed as a whole (cgroup v1, or the kubelet's singleProcessOOMKill),
    and the biggest process on a node out of memory. Empty when none was."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    if poll_s >= TORCH_KILL_GRACE_S:
        return {}
    for local_rank, pid, code in torch_seam.worker_exit_codes(pcontext):
        if code == -signal.SIGKILL:
            error_file = pcontext.error_files.get(local_rank, "")  # none: killed before it could write one
            failure = ProcessFailure(local_rank=local_rank, pid=pid, exitcode=code, error_file=error_file)
            return {worker_group.workers[local_rank].global_rank: failure}
    return {}


@dataclasses.dataclass
class CrashStreak:
    """The exception the agent's last counted failures ended with, and how many in a row."""

    error: str | None = None
    attempts: int = 0


def a_peer_failed(failures: Mapping[int, Any]) -> bool:
    """Whether a worker failed because a peer went: our trainers' exit code for it, or a
    script's exception that says so (a collective on a closed connection)."""
    return any(f.exitcode == EXIT_PEER_LOST for f in failures.values()) or (
        bool(failures) and failure_signature(failures) is None
    )


def failure_signature(failures: Mapping[int, Any]) -> tuple[str, int] | None:
    """(what the first worker to fail died of, its global rank), or None when that was the
    consequence of a peer's failure. The exception's message comes from the worker's error
    file; a worker killed by a signal, or one that exited without one, is named by that."""
    if not failures:
        return None
    rank, first = min(failures.items(), key=lambda item: (item[1].timestamp, item[0]))
    # torch keeps the error file's structured message as it is, a dict with the text inside.
    text = first.message.get("message") if isinstance(first.message, dict) else first.message
    message = str(text or "").strip()
    if first.exitcode == EXIT_PEER_LOST:
        return None
    if not message or not os.path.isfile(first.error_file):
        # No error file: torch's own words name the worker's PID, a new one each attempt.
        signal = first.exitcode < 0
        message = f"Signal {-first.exitcode} ({first.signal_name()})" if signal else f"exit code {first.exitcode}"
    if caused_by_a_peer(message):
        return None
    return message.splitlines()[0][:300], rank


def caused_by_a_peer(message: str) -> bool:
    """Whether a worker's exception says a peer failed or vanished (a consequence elsewhere).
    A port another process took between its choice and the worker's bind (a DistNetworkError
    too) is the worker's own failure: nothing happened elsewhere, and a restart picks again."""
    return bool(_PEER_FAILURE.search(message)) and not _PORT_TAKEN.search(message)


# The crash streak of each agent (torch's, or a test's stand-in), kept beside it.
_STREAKS: weakref.WeakKeyDictionary[Any, CrashStreak] = weakref.WeakKeyDictionary()


def crash_streak(agent: Any) -> CrashStreak:
    """The exception `agent`'s last counted failures ended with, and how many in a row."""
    return _STREAKS.get(agent) or CrashStreak()


def forget_crash_streak(agent: Any) -> None:
    """A membership change: `agent`'s next failure starts a new count."""
    _STREAKS.pop(agent, None)


def count_towards_a_crash_loop(agent: Any, result: Any) -> None:
    """A failure torch counts against max_restarts: after CRASH_LOOP_ATTEMPTS in a row with the
    same exception, none is left, so the agent stops and torchrun exits 1 (the PyTorchJob
    fails, where exit codes >= 128 would have its pod recreated for ever); the log's last lines,
    which Kubernetes keeps as the pod's termination message, say why."""
    streak = crash_streak(agent)
    signature = failure_signature(result.failures)
    if signature is None:
        forget_crash_streak(agent)
        return
    error, rank = signature
    streak = CrashStreak(error, streak.attempts + 1 if streak.error == error else 1)
    _STREAKS[agent] = streak
    if streak.attempts < CRASH_LOOP_ATTEMPTS or torch_seam.restarts_left(agent) <= 0:
        return
    torch_seam.end_restart_budget(agent)
    events.emit(Event.WORKERS_CRASH_LOOP, error=error, attempts=streak.attempts, rank=rank, source="agent")
    log.error(
        "workers crash loop: rank %d failed %d times in a row with %s; giving up (torchrun exits 1, "
        "the job fails) instead of using the rest of max_restarts on the same failure%s",
        rank,
        streak.attempts,
        error,
        " (a worker killed by SIGKILL that its agent did not send: the kernel's OOM killer, most likely; "
        "`elastic-lab status` shows the workers' memory limit)"
        if error.startswith(f"Signal {int(signal.SIGKILL)} ")
        else "",
    )

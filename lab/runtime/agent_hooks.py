"""What the launcher changes in torch's elastic agent, through lab.runtime.torch_seam: its look
at its workers (a failure of a round that lost a node is a membership change; a worker killed
by SIGKILL is its node's own failure; a crash loop ends the restarts), its stop (a SIGTERM
swallowed on its way up is raised again), and its exit barrier (the job's success recorded
first)."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from lab.runtime import torch_seam
from lab.runtime.worker_failures import (
    a_peer_failed,
    count_towards_a_crash_loop,
    failure_signature,
    forget_crash_streak,
    killed_on_its_own,
)
from lab.vocab.job import LAUNCH_MODULE

log = logging.getLogger(LAUNCH_MODULE)  # the launcher's one log

# The signal that told this agent to stop (SIGTERM: a spot notice, a scale-in, its pod
# deleted), once torch's handler has seen it; None before.
_STOP: signal.Signals | None = None


def install() -> None:
    """Every change to torch's agent, each once."""
    remember_the_agents_stop()
    forgive_failures_of_a_lost_round()
    record_success_before_the_exit_barrier()
    torch_seam.take_exit_zero_as_done()


def remember_the_agents_stop() -> None:
    """torch's SIGTERM handler remembers the signal (`_remember_the_stop`) before it raises."""
    torch_seam.remember_terminate_signal(_remember_the_stop)


def forgive_failures_of_a_lost_round() -> None:
    """torch's agent looks at its workers through `monitor_workers`."""
    torch_seam.wrap_agent_monitor(monitor_workers)


def record_success_before_the_exit_barrier() -> None:
    """torch's agent records its workers' success (`record_success`) before its exit barrier."""
    torch_seam.run_before_exit_barrier(record_success)


def _remember_the_stop(sig: signal.Signals) -> None:
    """torch's agent stops on a SignalException its signal handler raises wherever the main
    thread is, and code of any library on the way may catch it as any other error (a rendezvous
    request's handling, an etcd client's): the agent then trains on, in a job it was told to
    leave. The handler also remembers the signal here, and the agent's next look at its workers
    raises it again (`raise_a_swallowed_stop`)."""
    global _STOP
    _STOP = sig


def raise_a_swallowed_stop() -> None:
    """The stop torch's handler raised, again: it never reached the agent's loop."""
    if _STOP is None:
        return
    from torch.distributed.elastic.multiprocessing.api import SignalException

    log.warning("this agent's %s was lost on its way up; stopping now", _STOP.name)
    raise SignalException(f"Process {os.getpid()} got signal: {_STOP}", sigval=_STOP)


def record_success(agent: Any) -> None:
    """torch's agent enters its exit barrier only when its workers succeeded, and closes the
    rendezvous after it: record the success first, for agents that find it closed."""
    handler = torch_seam.agent_rendezvous_handler(agent)
    if hasattr(handler, "mark_succeeded"):
        handler.mark_succeeded()


def monitor_workers(agent: Any, worker_group: Any, torchs_monitor: Callable[[Any], Any]) -> Any:
    """torch's look at the workers (`torchs_monitor(worker_group)`), but for a failure that is a
    membership change. torch's agent counts any failed worker against max_restarts, and checks
    for a membership change only while its workers are healthy. When a node vanishes, the first
    survivor to notice stops its workers, and the other survivors' collectives fail at once: a
    race decides whether they see a failure or the change. A join races the same way: the first
    agent to see the new node waiting stops its workers for the next round, and the others'
    workers fail on the closed connections before their agents look. Here a failure seen while
    this agent's round has lost a participant, or one caused by a peer while a node waits to
    join, is reported healthy, so the agent takes the membership-change path (restart without
    counting) on the same tick."""
    from torch.distributed.elastic.agent.server.api import RunResult, WorkerState

    raise_a_swallowed_stop()
    polled = time.monotonic()
    result = torchs_monitor(worker_group)
    if result.state != WorkerState.FAILED:
        return result
    result = _the_nodes_own_kill(agent, worker_group, result, time.monotonic() - polled)
    handler = worker_group.spec.rdzv_handler
    lost = hasattr(handler, "lost_members") and handler.lost_members()
    by_a_peer = a_peer_failed(result.failures)
    # torch restarts the group for a waiting node on the same tick once this is healthy.
    joining = not lost and by_a_peer and handler.num_nodes_waiting() > 0
    # A round of this node alone (a per-step replica group's) has no peer to look for: the
    # search would wait out the whole keep-alive window before the agent restarts its workers.
    alone = getattr(worker_group, "group_world_size", None) == 1
    if not lost and not joining and by_a_peer and not alone and hasattr(handler, "find_the_lost_peer"):
        lost = handler.find_the_lost_peer()
    if lost or joining:
        log.warning(
            "workers of a round that %s exited (%s); a membership change, not a failure",
            "lost a participant" if lost else "a node waits to join",
            ", ".join(f"rank {r}: {f.exitcode}" for r, f in sorted(result.failures.items())),
        )
        forget_crash_streak(agent)
        return RunResult(state=WorkerState.HEALTHY)
    count_towards_a_crash_loop(agent, result)
    return result


def _the_nodes_own_kill(agent: Any, worker_group: Any, result: Any, poll_s: float) -> Any:
    """`result`, or the failure of a worker of this node killed by SIGKILL that its agent did not
    send: torch reports the first worker its poll found dead, often a peer of the killed one,
    whose collective broke on it. The kill is this node's own failure."""
    from torch.distributed.elastic.agent.server.api import RunResult, WorkerState

    killed = killed_on_its_own(torch_seam.agent_workers(agent), worker_group, poll_s)
    if not killed or failure_signature(killed) == failure_signature(result.failures):
        return result
    log.warning("a worker of this node was killed (SIGKILL): that is its failure, not its peers' errors")
    return RunResult(state=WorkerState.FAILED, failures=killed)

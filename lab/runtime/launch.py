"""torchrun, with a rendezvous that notices a lost node in about a second and a half and
survives its server restarting.

Usage is torchrun's: `python -m lab.runtime.launch [torchrun flags] -m lab.runtime.train [script args]`;
flags can come from torchrun's PET_* environment as well (what the training operator sets).

Why:
- torch's dynamic rendezvous (c10d and etcd-v2 backends) reads its timeouts as whole
  seconds and polls the shared state once a second. A node that vanishes is only dropped
  after keep_alive_interval x keep_alive_max_attempt, so at best 3 s, and every round change
  costs up to another second of polling. This launcher registers the same two backends with
  a handler that accepts fractional seconds (`keep_alive_interval=0.5`,
  `last_call_timeout=0.2`) and an extra `poll_interval` key (default 1, torch's own).
- torch's agent asks the rendezvous server whether nodes are waiting on every monitor tick;
  one failed request (etcd restarting on an upgrade, its node drained) raises out of the
  agent and torchrun exits 1, which the training operator treats as a permanent failure.
  Here workers keep training while the server is unreachable, for up to `server_outage`
  seconds (rdzv-conf key, default 60); past that, or when a join times out, the launcher
  exits with a retryable code (>= 128, see EXIT_*) and leaves the rendezvous open, so the
  restarted pod joins the same job again. torch closes the rendezvous for good in both cases.
- A node that vanishes (a spot VM taken back without a word: its sockets stay open) stops
  heartbeating, and torch's agents see it dropped from the rendezvous within
  keep_alive_interval x keep_alive_max_attempt, but act on it only when their workers' next
  collective times out (the process-group timeout). Here an agent whose round lost a
  participant restarts its workers at once (SIGTERM: they save the last completed step), as
  it does when a new node is waiting, and the survivors rendezvous without it. Workers
  that fail because a peer of that lost round went away (the first survivor to act stops
  its workers, and the others' collectives break) count as that membership change, not as
  a failure: the job's restart budget is kept for real failures.
- A round's rank 0 shares its workers' address through the rendezvous store, and torch's other
  agents wait for it for the store's whole timeout (300 s): a node evicted right after a round
  completed holds its peers for five minutes. Here that wait ends once the rendezvous drops
  rank 0 (its heartbeats stopped), and the others join the next round (lab.runtime.round_store).
- torch's agents record structured events (worker starts with the round's world size and
  restart count, the agents' success or failure) to a named handler that torchrun's
  `--event-log-handler` picks and nothing registers by default. With `LAB_AGENT_EVENTS=<file>`
  this launcher registers one that writes them to that file as JSON lines, so a drill can
  time the rounds of a script that emits no events of its own.
- A node that joins as the job ends: torch's agents restart their workers for it even when
  another agent's workers already finished, and that agent, in its exit barrier, holds the
  round for 300 s (the barrier's timeout) while the others wait for the next one; an agent that
  did restart and finds the rendezvous closed exits 1 (on a cluster: a failed pod, which fails
  the PyTorchJob). Here agents whose workers succeeded say so in the rendezvous store before
  their exit barrier: the others then let their workers finish instead of restarting them for
  a joining node, an agent that finds the rendezvous closed exits 0, and one that restarted its
  workers a moment before the success was recorded stops waiting for a round at its next poll
  and exits 0. An agent that leaves so, or gives up on workers that failed with no restart
  left, counts itself in to its last round's exit barrier, where the agents whose workers
  finished would otherwise wait its 300 s for it.
- Workers' checkpoint shards outlive them: the agent owns memory that each worker fills at a
  checkpoint and reads back after a restart (lab.runtime.node_memory), so that a survivor of a
  membership change loads from memory, not from storage.
- Workers start warm: from a forkserver that imported torch once (lab.runtime.warm), not as new
  Pythons that import it on every restart. `LAB_WARM_WORKERS=0` turns it off; a
  `--no-python` entrypoint always runs as torchrun runs it.
Without these keys it behaves like torchrun, but for those exits, that restart and the
warm start.

Where: this module is the command (`main`) and how the agent exits; the rendezvous handler is
lab.runtime.rendezvous_handler, built by lab.runtime.rendezvous_backends; what the agent makes
of its workers' failures is lab.runtime.worker_failures and lab.runtime.agent_hooks; the count
of a pod's killed containers lab.runtime.container_ledger. Every change to torch's own code or
state goes through lab.runtime.torch_seam.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

from lab.runtime import torch_seam
from lab.runtime.agent_exits import (
    EXIT_RENDEZVOUS_TIMEOUT,
    EXIT_RENDEZVOUS_UNREACHABLE,
    JobAlreadyDone,
    run_torchrun,
)
from lab.runtime.container_ledger import ContainerEntry, ContainerKillLoop, ContainerLedger
from lab.runtime.node_memory import agent_memory
from lab.runtime.process_title import set_title, where
from lab.runtime.thread_dumps import dump_threads_on_request
from lab.runtime.worker_failures import (
    CRASH_LOOP_ATTEMPTS,
    a_peer_failed,
    caused_by_a_peer,
    failure_signature,
)
from lab.vocab.job import ENV_AGENT_EVENTS, EXIT_PEER_LOST, LAUNCH_MODULE
from lab.vocab.thread_dumps import AGENT

# What other modules and tests import from here, wherever it is defined.
__all__ = [
    "CRASH_LOOP_ATTEMPTS",
    "ENV_WARM_WORKERS",
    "EVENT_LOG_HANDLER",
    "EXIT_PEER_LOST",
    "EXIT_RENDEZVOUS_TIMEOUT",
    "EXIT_RENDEZVOUS_UNREACHABLE",
    "ContainerEntry",
    "ContainerKillLoop",
    "ContainerLedger",
    "JobAlreadyDone",
    "a_peer_failed",
    "caused_by_a_peer",
    "failure_signature",
    "install",
    "main",
    "record_agent_events",
    "with_event_log_handler",
]

log = logging.getLogger(LAUNCH_MODULE)

ENV_WARM_WORKERS = "LAB_WARM_WORKERS"
# The name torchrun's --event-log-handler (PET_EVENT_LOG_HANDLER) selects our handler by.
EVENT_LOG_HANDLER = "lab-jsonl"


def install() -> None:
    """Every change the launcher makes to torch (lab.runtime.torch_seam): its rendezvous
    backends, its agent's monitor, stop and exit barrier, and its log formatter."""
    from lab.runtime import agent_hooks, rendezvous_backends

    rendezvous_backends.install()
    agent_hooks.install()
    torch_seam.format_exceptions_without_dynamo()


class _TorchEventLines(logging.Formatter):
    """One JSON object per line: when the event was recorded and torch's event as it
    serialized it."""

    def format(self, record: logging.LogRecord) -> str:
        try:
            event = json.loads(record.getMessage())
        except ValueError:
            event = {"message": record.getMessage()}
        return json.dumps({"t": record.created, "pid": record.process, "torch": event})


def record_agent_events(path: str) -> None:
    """Write torch's elastic events to `path`: register a handler under EVENT_LOG_HANDLER in
    torch's handler table (the names --event-log-handler accepts). `with_event_log_handler`
    selects it on the command line."""

    def to_the_file() -> logging.Handler:
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(_TorchEventLines())
        return handler

    try:
        torch_seam.register_event_log_handler(EVENT_LOG_HANDLER, to_the_file)
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}: unset {ENV_AGENT_EVENTS}") from None


def with_event_log_handler(argv: list[str]) -> list[str]:
    """torchrun's arguments with our event handler selected, unless the command line or
    PET_EVENT_LOG_HANDLER (torchrun reads it as the flag's default) chose another."""
    chosen = any(a.split("=", 1)[0] in ("--event-log-handler", "--event_log_handler") for a in argv)
    if chosen or os.environ.get("PET_EVENT_LOG_HANDLER"):
        return argv
    return ["--event-log-handler", EVENT_LOG_HANDLER, *argv]


def start_warm_workers() -> None:
    """Start python entrypoints' workers from lab.runtime.warm's forkserver, started now as a
    fork of this agent (which has imported torch): every worker start, first and restarts
    alike, is a fork of it."""
    from torch.distributed.launcher.api import elastic_launch

    from lab.runtime.warm import run_script, start_forkserver, wait_until_warm

    def launch(config: Any, entrypoint: Any) -> Any:
        if entrypoint != sys.executable:  # --no-python: a program of its own
            return elastic_launch(config=config, entrypoint=entrypoint)
        config.start_method = "forkserver"
        return elastic_launch(config=config, entrypoint=run_script)

    start_forkserver()  # before the agent starts threads or connects to the rendezvous
    torch_seam.replace_elastic_launch(launch)
    # Joining a running job restarts every node's workers, and they wait for this node's: its
    # forkserver's imports happen before it joins, while the others still train.
    waited = wait_until_warm()
    log.info("workers ready to fork after %.2f s", waited)


def main(argv: list[str] | None = None) -> int:
    warm = os.environ.get(ENV_WARM_WORKERS, "1") != "0"
    from torch.distributed import run

    from lab.runtime import container_ledger
    from lab.runtime.rendezvous_backends import HANDLERS

    install()
    dump_threads_on_request(AGENT)
    args = list(sys.argv[1:] if argv is None else argv)
    set_title(f"agent{where()} " + " ".join(args))
    if os.environ.get(ENV_AGENT_EVENTS):
        record_agent_events(os.environ[ENV_AGENT_EVENTS])
        args = with_event_log_handler(args)
    with agent_memory(args):
        if warm:
            start_warm_workers()
        try:
            return run_torchrun(run.main, args, HANDLERS)
        finally:
            container_ledger.check_out(HANDLERS)


if __name__ == "__main__":
    sys.exit(main())

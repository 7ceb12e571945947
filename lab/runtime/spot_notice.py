"""SIGTERM while training: a spot notice, or the agent stopping its workers for a restart."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab.runtime import torch_seam
from lab.runtime.pod_deadline import pod_deletion_deadline
from lab.vocab.job import ENV_NOTICE_DEADLINE_FILE

EXIT_ON_NOTICE = 128 + signal.SIGTERM  # the conventional code for "stopped by SIGTERM"

log = logging.getLogger(__name__)

# What a worker that trains on through a notice keeps, past two steps and two saves, between its
# leaving and the node's end: its agent leaves the rendezvous then (a node killed before that is
# found lost only when its heartbeats expire, which stalls its peers).
LEAVE_RESERVE_S = 0.5


def notice_deadline(signalled_at: float | None = None) -> float | None:
    """When this node goes (Unix time), if its notice said so: the local target's notice file
    (`ENV_NOTICE_DEADLINE_FILE`), or on a cluster the end of the grace period Kubernetes gave
    the worker's pod (`signalled_at`: when its SIGTERM came)."""
    path = os.environ.get(ENV_NOTICE_DEADLINE_FILE)
    if not path:
        return pod_deletion_deadline(signalled_at=signalled_at)
    try:
        return float(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def write_notice_deadline(path: Path, deadline: float) -> None:
    """The notifier's side: when the node goes, written whole before the SIGTERM."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{deadline:.3f}\n")
    tmp.replace(path)


def peers_lost_marker(run_id: str, master_addr: str, master_port: int | str) -> Path:
    """The file an agent writes, before it stops its workers, when a participant of its
    round is lost (its heartbeats stopped, or it left). A round is the job's run id and the
    workers' master endpoint (torchrun picks a new port for every round), which both the
    agent and its workers know."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", f"{run_id}-{master_addr}-{master_port}")
    return Path(tempfile.gettempdir()) / "lab-peers-lost" / name


def mark_peers_lost(marker: Path) -> None:
    with contextlib.suppress(OSError):
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()


def _peers_lost() -> bool:
    """This worker's round lost a participant (its agent said so): a SIGTERM now is the agent
    restarting the workers, and no step boundary will come to save with the peers."""
    run_id, addr, port = (os.environ.get(k) for k in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT"))
    return bool(run_id and addr and port) and peers_lost_marker(str(run_id), str(addr), str(port)).exists()


class SpotNotice:
    """A Python signal handler runs only between bytecodes of the main thread, and a collective
    waiting on a vanished peer holds the main thread in C++ until the process-group timeout:
    SIGTERM would wait that long. So SIGTERM is blocked in every thread and taken by a
    thread of its own (`sigwait`). Create it before anything starts threads (the mask is
    inherited). What that thread does depends on who can save the state:

    - a rank that holds the whole state (DDP): it calls `on_notice` at once; the training loop
      holds `consistent` from the optimizer's update to the step counter's, so `on_notice`
      takes it and sees the model, optimizer and step of the last completed step, whatever the
      main thread is waiting on. Until training sets `on_notice` there is nothing newer than
      the checkpoint to save, and the process exits at once.
    - ranks that each hold a shard (FSDP, after `cooperate`): no rank can save alone, so it sets
      `requested` and waits for the training loop, which agrees with every rank at its next
      step boundary (`acknowledge`), saves with all of them, then calls `handled`. If no step
      boundary comes within `boundary_s` (the main thread is stuck on a vanished peer, or the
      agent is restarting the workers after one), or the save does not end within the notice,
      `on_timeout` runs and the process exits with what the last checkpoint holds. When the
      agent marked the round as having lost a peer (`peers_lost_marker`), the SIGTERM is its
      restart of the workers: `on_timeout` runs at once, without waiting for a boundary.

    A notice that says when the node goes (`notice_deadline`) is trained through: a rank that
    holds the whole state saves the last completed step at once (`save_now`: safe whatever
    comes), then every rank trains on with its peers until two steps, two saves and
    `LEAVE_RESERVE_S` before the end (or the agent's shutdown timeout, whichever is first), and
    only then takes the notice as above. A node that leaves at its notice gives up the
    notice's length of capacity: AWS's is two minutes.
    """

    def __init__(self) -> None:
        self.received_at: float | None = None
        self.ends_at: float | None = None  # when the node goes, as its notice said (Unix time)
        self.consistent = threading.Lock()
        self.on_notice: Callable[[], None] | None = None
        self.save_now: Callable[[], None] | None = None  # whole state: a save before training on
        self.step_s = 0.0  # the last step's seconds (the training loop updates it)
        self.save_s = 0.0  # the longest save's seconds this process has seen
        self.trained_on_s = 0.0  # how long after the notice this process trained on
        self.requested = threading.Event()
        self._acknowledged = threading.Event()
        self._handled = threading.Event()
        self._finished = threading.Event()  # training ended, its last step saved
        self._deadline_s: float | None = None
        self.boundary_s = 5.0  # how long a step boundary may take to come (the loop updates it)
        self._on_timeout: Callable[[], None] | None = None
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        self._thread = threading.Thread(target=self._wait, name="spot-notice", daemon=True)
        self._thread.start()
        if threading.current_thread() is threading.main_thread():
            # A thread started before this one (`import torch` starts one) does not block
            # SIGTERM, and the kernel hands a process the signal through any thread that does
            # not block it: its default action would end the process at once, unsaved. A handler
            # takes that case instead and passes the signal on to the notice thread (it runs in
            # the main thread, at its next bytecode: a training loop reaches one within a step).
            signal.signal(signal.SIGTERM, self._pass_on)

    def _pass_on(self, signum: int, frame: Any) -> None:
        if self._thread.ident is not None and self._thread.is_alive():
            signal.pthread_kill(self._thread.ident, signal.SIGTERM)

    def cooperate(self, deadline_s: float, on_timeout: Callable[[], None] | None = None) -> None:
        """From now on a notice is saved by the training loop (see the class docstring)."""
        self._deadline_s, self._on_timeout = deadline_s, on_timeout

    def acknowledge(self) -> None:
        """The training loop saw the notice at a step boundary and saves now."""
        self._acknowledged.set()

    def handled(self) -> None:
        """The training loop saved for the notice: the process may end."""
        self._handled.set()

    def finish(self) -> None:
        """Training ended and its last step is saved: a notice, when it is taken, saves nothing
        and says nothing, and ends the process with 0 (a worker that finished waits for its
        agent to read its result, and a noticed node's agent, shutting down, never does).
        Taken under `consistent`: a notice's save of the whole state, begun first, ends first."""
        with self.consistent:
            self._finished.set()

    def _leave_finished(self) -> None:
        log.info("spot notice after the last step was saved: nothing to save")
        logging.shutdown()
        os._exit(0)

    def saved(self, seconds: float) -> None:
        """A save took `seconds`: training on through a notice keeps time for two such."""
        self.save_s = max(self.save_s, seconds)

    def _train_on_s(self) -> float:
        """How long this rank may go on training after its notice: none when the notice did
        not say when the node goes."""
        if self.ends_at is None or self.received_at is None:
            return 0.0
        end = min(self.ends_at, self.received_at + torch_seam.agent_shutdown_timeout_s())
        return max(end - time.time() - (2 * self.step_s + 2 * self.save_s + LEAVE_RESERVE_S), 0.0)

    def _train_on(self) -> None:
        """Through a notice that says when the node goes: save first where one rank can, then
        let the training loop go on until the notice must be taken."""
        if self._train_on_s() <= 0 or _peers_lost():
            return
        if self._deadline_s is None and self.save_now is not None:
            started = time.monotonic()
            with self.consistent:
                self.save_now()
            self.saved(time.monotonic() - started)
        hold = self._train_on_s()
        log.warning("spot notice: training on for %.2f s before leaving", hold)
        time.sleep(hold)
        self.trained_on_s = round(time.time() - self.received_at, 4) if self.received_at else 0.0

    def _wait(self) -> None:
        signal.sigwait({signal.SIGTERM})
        came = time.time()
        if not _peers_lost():  # the agent restarting the workers: no notice to read
            self.ends_at = notice_deadline(came)
        self.received_at = came  # published once the notice's end is known
        self._train_on()
        if self._finished.is_set():
            self._leave_finished()
        if self._deadline_s is not None:
            self.requested.set()
            started = time.monotonic()
            if _peers_lost():
                log.warning("stopped by the agent after a peer was lost: no peer can save with this rank")
                saved = False
            else:
                saved = self._acknowledged.wait(min(self.boundary_s, self._deadline_s)) and self._handled.wait(
                    max(self._deadline_s - (time.monotonic() - started), 0.0)
                )
            if self._finished.is_set():  # training ended instead of taking the notice
                self._leave_finished()
            if not saved and self._on_timeout is not None:
                log.warning("spot notice: not saved in time; leaving with the newest checkpoint")
                self._on_timeout()
            logging.shutdown()
            os._exit(EXIT_ON_NOTICE)
        with self.consistent:
            if self._finished.is_set():
                self._leave_finished()
            if self.on_notice is not None:
                self.on_notice()
            logging.shutdown()
            os._exit(EXIT_ON_NOTICE)

    def seconds_since(self) -> float:
        """Seconds since the notice came (0 before it)."""
        return time.time() - self.received_at if self.received_at is not None else 0.0

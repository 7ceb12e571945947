"""SIGTERM while training: a spot notice, or the agent stopping its workers for a restart."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

EXIT_ON_NOTICE = 128 + signal.SIGTERM  # the conventional code for "stopped by SIGTERM"


class SpotNotice:
    """A Python signal handler runs only between bytecodes of the main thread, and a collective
    waiting on a vanished peer holds the main thread in C++ until the process-group timeout:
    SIGTERM would wait that long. So SIGTERM is blocked in every thread and taken by a
    thread of its own (`sigwait`). It calls `on_notice` at once; the training loop holds
    `consistent` from the optimizer's update to the step counter's, so `on_notice` takes it
    and sees the model, optimizer and step of the last completed step, whatever the main
    thread is waiting on. Until training sets `on_notice` there is nothing newer than the
    checkpoint to save, and the process exits at once. Create it before anything starts
    threads (the mask is inherited).
    """

    def __init__(self) -> None:
        self.received_at: float | None = None
        self.consistent = threading.Lock()
        self.on_notice: Callable[[], None] | None = None
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        threading.Thread(target=self._wait, name="spot-notice", daemon=True).start()

    def _wait(self) -> None:
        signal.sigwait({signal.SIGTERM})
        self.received_at = time.time()
        with self.consistent:
            if self.on_notice is not None:
                self.on_notice()
            logging.shutdown()
            os._exit(EXIT_ON_NOTICE)

    def seconds_since(self) -> float:
        """Seconds since the notice came (0 before it)."""
        return time.time() - self.received_at if self.received_at is not None else 0.0

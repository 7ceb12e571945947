"""TorchFT as the per-step trainer (lab.runtime.train_per_step) uses it: its servers bound to
one address, its HTTP checkpoint transport advertising a name other pods can reach, its gloo
group with a timeout per step, and the timeouts of a heal and of a step's collective."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from datetime import timedelta
from http.server import ThreadingHTTPServer
from typing import Any


def listen_on(host: str, checkpoint_port: int) -> None:
    """Make TorchFT's servers listen on `host` only, not on every address: its manager
    server binds "[::]:port" and its checkpoint server ("", 0), both hard-coded. The
    checkpoint server takes `checkpoint_port` (0: any free port)."""
    import torchft.checkpointing.http_transport as http_transport
    import torchft.manager as manager_module

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bind_host = f"[{host}]" if family == socket.AF_INET6 else host
    server_class = manager_module.ManagerServer

    def manager_server(*args: Any, bind: str, **kwargs: Any) -> Any:
        port = bind.rpartition(":")[2]
        return server_class(*args, bind=f"{bind_host}:{port}", **kwargs)

    class HostHTTPServer(ThreadingHTTPServer):
        address_family = family
        request_queue_size = 1024

        def __init__(self, server_address: tuple[str, int], handler: Any) -> None:
            super().__init__((host, checkpoint_port or server_address[1]), handler)

    manager_module.ManagerServer = manager_server
    http_transport._IPv6HTTPServer = HostHTTPServer


# Parallel streams of a heal's HTTP transfer (TorchFT's default, 0, sends one stream).
HEAL_CHUNKS = 4
# What a heal's timeout assumes of the network between groups (a worst case: a pod network
# on TCP, through the weights' HTTP server), and the time it adds for everything else.
HEAL_BYTES_PER_S = 50e6
HEAL_BASE_S = 10.0


def heal_timeout(state_bytes: int, collective_timeout_s: float, configured_s: float = 0.0) -> timedelta:
    """How long a heal may take: the job's setting, or the state's size at a worst-case rate."""
    if configured_s > 0:
        return timedelta(seconds=configured_s)
    return timedelta(seconds=max(collective_timeout_s, HEAL_BASE_S + state_bytes / HEAL_BYTES_PER_S))


def heal_transport(host: str, timeout: timedelta) -> Any:
    """TorchFT's HTTP checkpoint transport, advertising `host` (it would advertise the
    machine's hostname, which other pods cannot resolve), and letting go of the state it served
    once the step that healed from it is over: TorchFT's keeps that copy (the whole state, taken
    for the heal) until the next heal it serves, so every group that once healed another holds
    one more copy of its state for the rest of the job (1.36 GB at gpt-100m)."""
    from torchft.checkpointing.http_transport import HTTPTransport

    class Transport(HTTPTransport):  # type: ignore[misc]  # torchft ships no type information (py.typed)
        def address(self) -> str:
            port = self._server.socket.getsockname()[1]
            shown = f"[{host}]" if ":" in host else host
            return f"http://{shown}:{port}/checkpoint/"

        def disallow_checkpoint(self) -> None:
            # TorchFT calls this as the step commits: its write lock, held until the next
            # allow_checkpoint, waits for a transfer in flight and holds back any later request
            # (which then fails, as without this), so nothing reads the copy again.
            super().disallow_checkpoint()
            self._state_dict = None
            self._chunks = None

    return Transport(timeout=timeout, num_chunks=HEAL_CHUNKS)


# A step's cross-group collective, when the job leaves its timeout to be derived: this many
# times the slowest of the last `COLLECTIVE_SAMPLES` measured, and never under the floor. A
# collective's time includes waiting for the slowest group to finish its compute, so a busy
# machine or a slow network raises the timeout with it.
COLLECTIVE_TIMEOUT_FACTOR = 10
COLLECTIVE_TIMEOUT_FLOOR_S = 0.5
COLLECTIVE_SAMPLES = 32


def derived_collective_timeout(recent_s: Sequence[float], heal: timedelta) -> timedelta:
    """The timeout of a step's cross-group collective from the durations of recent ones
    (seconds); before any was measured, the heal's (a bound on moving the whole state)."""
    if not recent_s:
        return heal
    return timedelta(seconds=max(COLLECTIVE_TIMEOUT_FLOOR_S, COLLECTIVE_TIMEOUT_FACTOR * max(recent_s)))


def step_timeout_gloo(collective_timeout: timedelta) -> Any:
    """TorchFT's reconfigurable gloo group, whose collectives take `step_timeout` when it is
    set (every step sets it: the heal's, the job's or one derived from the recent collectives)
    and `collective_timeout` otherwise."""
    from torchft.process_group import ProcessGroupGloo

    class StepTimeoutGloo(ProcessGroupGloo):  # type: ignore[misc]  # torchft ships no type information
        step_timeout: timedelta | None = None

        def _opts_hook(self, opts: Any) -> Any:
            if self.step_timeout is not None and hasattr(opts, "timeout"):
                opts.timeout = self.step_timeout
            return opts

    return StepTimeoutGloo(timeout=collective_timeout)


def quorum_id(manager: Any) -> int:
    """The id of the manager's current quorum (TorchFT keeps it private; -1 if it moves)."""
    return int(getattr(manager, "_quorum_id", -1))

"""The seam to torch: every write the runtime makes into torch's internals (and into the
standard library's), and every read of a private name of torch, in one module.

The launcher (lab.runtime.launch and the modules it calls) and the warm workers
(lab.runtime.warm) change torch's behaviour only through the functions here, each named for
what it replaces; its docstring says which torch function or attribute that is, why, and the
torch version it was checked against (`CHECKED_AGAINST`). docs/architecture.md ("The seam to
torch") lists them with the tests that pin them (tests/runtime/test_torch_seam.py): each fails
if torch no longer has what the entry relies on, or if the entry no longer changes it.

Module attributes replaced here are listed in `REPLACED`, tables written into in
`WRITTEN_TABLES`: the tests put them back after each test. torch is imported inside each
function, never at this module's import (the drill imports the launcher's failure rules
without torch).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

# The torch release every entry below was read against (torch/distributed/elastic, as installed).
CHECKED_AGAINST = "2.13.0"
# What marks a replacement made here: a second install finds it and does nothing.
MARK = "lab_seam"
# (module, attribute path): what the functions below replace, for the tests to restore.
REPLACED = (
    ("torch.distributed.elastic.rendezvous.dynamic_rendezvous", "_delay"),
    ("torch.distributed.elastic.rendezvous.dynamic_rendezvous", "get_method_name"),
    ("torch.distributed.elastic.agent.server.local_elastic_agent", "LocalElasticAgent._monitor_workers"),
    ("torch.distributed.elastic.agent.server.api", "SimpleElasticAgent._exit_barrier"),
    ("torch.distributed.elastic.multiprocessing.api", "_terminate_process_handler"),
    ("torch.distributed.elastic.multiprocessing.api", "MultiprocessContext._poll"),
    ("torch._logging._internal", "TorchLogsFormatter.format"),
    ("torch.distributed.run", "elastic_launch"),
    ("torch.distributed.distributed_c10d", "destroy_process_group"),
    ("torch.distributed", "destroy_process_group"),
)
# (module, attribute path) of torch's dicts that entries are written into.
WRITTEN_TABLES = (
    ("torch.distributed.elastic.rendezvous", "rendezvous_handler_registry._registry"),
    ("torch.distributed.elastic.events.handlers", "_log_handlers"),
)
# The seconds torch's rendezvous op loop passes `_delay` between two polls of the shared state
# (dynamic_rendezvous._DistributedRendezvousOpExecutor.run: `_delay(seconds=1)`).
TORCH_POLL_DELAY_S = 1
# The jitter torch's DynamicRendezvousHandler.next_rendezvous passes `_delay` before it joins
# while the state's round is 0 (`_delay(seconds=(0, 0.3))`).
TORCH_FIRST_JOIN_JITTER_S = (0, 0.3)


def agent_shutdown_timeout_s() -> float:
    """How long torchrun's agent, told to stop, lets its workers run after it signals them
    before it kills them (LaunchConfig.shutdown_timeout: TORCH_ELASTIC_SHUTDOWN_TIMEOUT, 30 s
    unset; the agent's `_shutdown` passes it to `PContext.close`)."""
    try:
        return float(os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "30"))
    except ValueError:
        return 30.0


def is_replaced(function: object) -> bool:
    """Whether `function` is a replacement made here."""
    return bool(getattr(function, MARK, False))


def _replace(owner: Any, name: str, replacement: Any) -> None:
    setattr(replacement, MARK, True)
    setattr(owner, name, replacement)


# ------------------------------------------------------------------ the agent's command and logs
def replace_rendezvous_backends(creators: Mapping[str, Callable[[Any], Any]]) -> None:
    """Replaces the creators of built-in backends in torch's rendezvous handler registry
    (`rendezvous_handler_registry._registry`, backend name -> creator; torch 2.13.0).
    Why: the registry's public `register` refuses a backend already registered with another
    creator, and `c10d` and `etcd-v2` are registered when torch is imported, so the launcher's
    handlers (fractional seconds, riding out the server) can only be routed there by writing
    the table. A torch with another layout fails here, loudly, rather than running slow."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry as registry

    table = getattr(registry, "_registry", None)
    if not isinstance(table, dict) or not set(creators) <= set(table):
        raise RuntimeError(
            "this torch's rendezvous registry has an unknown layout: run plain torchrun with "
            "whole-second rdzv-conf values instead"
        )
    table.update(creators)


def register_event_log_handler(name: str, make_handler: Callable[[], Any]) -> None:
    """Adds the handler `make_handler()` makes to torch's table of elastic event handlers
    (`events.handlers._log_handlers`, name -> logging.Handler; torch 2.13.0), the names
    torchrun's `--event-log-handler` accepts; made only once the table is found. Why: torch has
    no public way to add one, and the drill reads the agents' events from a file."""
    from torch.distributed.elastic.events import handlers

    table = getattr(handlers, "_log_handlers", None)
    if not isinstance(table, dict):
        raise RuntimeError("this torch's elastic event handlers have an unknown layout")
    table[name] = make_handler()


def replace_elastic_launch(launch: Callable[[Any, Any], Any]) -> None:
    """Replaces `torch.distributed.run.elastic_launch`, which torchrun's `run` calls with the
    parsed config and entrypoint (torch 2.13.0). Why: warm workers are started by a function
    (`start_method="forkserver"`), where torchrun would start a new Python per worker."""
    from torch.distributed import run

    _replace(run, "elastic_launch", launch)


def format_exceptions_without_dynamo() -> None:
    """Replaces `torch._logging._internal.TorchLogsFormatter.format` (torch 2.13.0). Why: it
    imports torch._dynamo (for `config.verbose`) to format any record that carries an
    exception, and the agent logs one when its workers fail: 1.2-3.4 s of an eviction's
    recovery on the survivors. While dynamo is not loaded, the exception goes into the record
    as text (`exc_text`), which the formatter prints the same way."""
    from torch._logging._internal import TorchLogsFormatter

    original: Callable[[Any, Any], str] = TorchLogsFormatter.format
    if is_replaced(original):
        return

    @functools.wraps(original)
    def format(self: Any, record: Any) -> str:
        if record.exc_info and "torch._dynamo" not in sys.modules:
            if not record.exc_text:
                record.exc_text = self.formatException(record.exc_info)
            record.exc_info = None
        return str(original(self, record))

    _replace(TorchLogsFormatter, "format", format)


# ------------------------------------------------------------------ the agent's loop
def wrap_agent_monitor(monitor: Callable[[Any, Any, Callable[[Any], Any]], Any]) -> None:
    """Replaces `LocalElasticAgent._monitor_workers(self, worker_group) -> RunResult` (torch
    2.13.0) with `monitor(agent, worker_group, torchs_monitor)`. Why: torch counts any failed
    worker against max_restarts and checks for a membership change only while its workers are
    healthy; the launcher decides a failure of a round that lost a node is that change."""
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    original = LocalElasticAgent._monitor_workers
    if is_replaced(original):
        return

    @functools.wraps(original)
    def _monitor_workers(self: Any, worker_group: Any) -> Any:
        return monitor(self, worker_group, functools.partial(original, self))

    _replace(LocalElasticAgent, "_monitor_workers", _monitor_workers)


def run_before_exit_barrier(before: Callable[[Any], None]) -> None:
    """Replaces `SimpleElasticAgent._exit_barrier(self)` (torch 2.13.0), which the agent enters
    only when its workers succeeded and after which it closes the rendezvous, with `before(agent)`
    then torch's barrier. Why: the launcher records the success first, for agents that find the
    rendezvous closed."""
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent

    original = SimpleElasticAgent._exit_barrier
    if is_replaced(original):
        return

    @functools.wraps(original)
    def _exit_barrier(self: Any) -> None:
        before(self)
        original(self)  # type: ignore[no-untyped-call]  # torch leaves it untyped

    _replace(SimpleElasticAgent, "_exit_barrier", _exit_barrier)


def remember_terminate_signal(remember: Callable[[signal.Signals], None]) -> None:
    """Replaces `torch.distributed.elastic.multiprocessing.api._terminate_process_handler(signum,
    frame)`, which raises SignalException in the main thread and which torch registers by this
    module-level name each time it starts workers (torch 2.13.0), with one that first calls
    `remember(signal)`. Why: code on the way up (an etcd client's error handling) may catch the
    exception as any other error; the agent would then train on in a job it was told to leave."""
    from torch.distributed.elastic.multiprocessing import api

    original = api._terminate_process_handler
    if is_replaced(original):
        return

    @functools.wraps(original)
    def _terminate_process_handler(signum: int, frame: Any) -> None:
        remember(signal.Signals(signum))
        original(signum, frame)

    _replace(api, "_terminate_process_handler", _terminate_process_handler)


def take_exit_zero_as_done() -> None:
    """Replaces `MultiprocessContext._poll(self) -> RunProcsResult | None` (torch 2.13.0) with one
    that counts a worker whose process ended with exit code 0 before its function returned (a
    script that ends with `os._exit(0)`) as done, with None for its return value, once every
    other worker is done or ended likewise. Why: torch's poll waits for a return value from
    every worker of a function-started group (the launcher's warm workers are one), so such a
    script's job never ends, and a worker that did return waits on torch's event for the others
    forever; plain torchrun, which starts `python script.py` as a subprocess, takes its exit code."""
    from torch.distributed.elastic.multiprocessing.api import MultiprocessContext

    original = MultiprocessContext._poll
    if is_replaced(original):
        return

    @functools.wraps(original)
    def _poll(self: Any) -> Any:
        result = original(self)
        if result is not None or self._pc is None:
            return result
        returned = self._return_values
        codes = [p.exitcode for p in self._pc.processes]
        ended = [rank for rank, code in enumerate(codes) if code == 0 and rank not in returned]
        if ended and all(code == 0 or rank in returned for rank, code in enumerate(codes)):
            returned.update(dict.fromkeys(ended))
            return original(self)
        return None

    _replace(MultiprocessContext, "_poll", _poll)


def restarts_left(agent: Any) -> int:
    """The agent's `_remaining_restarts` (SimpleElasticAgent, torch 2.13.0): what is left of
    max_restarts."""
    return int(agent._remaining_restarts)


def end_restart_budget(agent: Any) -> None:
    """Sets the agent's `_remaining_restarts` to 0 (SimpleElasticAgent, torch 2.13.0): its next
    failure ends torchrun (exit 1). Why: a crash loop, where torch would restart it max_restarts
    times."""
    agent._remaining_restarts = 0


def agent_rendezvous_handler(agent: Any) -> Any:
    """The rendezvous handler of the agent's `_worker_group` (SimpleElasticAgent, torch 2.13.0)."""
    return agent._worker_group.spec.rdzv_handler


def agent_workers(agent: Any) -> Any:
    """The agent's `_pcontext` (LocalElasticAgent, torch 2.13.0): its workers' processes, or None."""
    return getattr(agent, "_pcontext", None)


def worker_exit_codes(pcontext: Any) -> list[tuple[int, int, int | None]]:
    """[(local rank, pid, exit code or None)] of the workers of `pcontext`: a
    MultiprocessContext's `_pc.processes` (warm workers) or a SubprocessContext's
    `subprocess_handlers` (torch 2.13.0); empty for another kind, or before any start."""
    from torch.distributed.elastic.multiprocessing.api import MultiprocessContext, SubprocessContext

    if isinstance(pcontext, MultiprocessContext) and pcontext._pc is not None:
        return [(rank, p.pid, p.exitcode) for rank, p in enumerate(pcontext._pc.processes)]
    if isinstance(pcontext, SubprocessContext):
        return [(rank, h.proc.pid, h.proc.poll()) for rank, h in pcontext.subprocess_handlers.items()]
    return []


def check_in_to_exit_barrier(store: Any, world_size: int) -> None:
    """Counts this agent in to its round's exit barrier without waiting: torch's
    `utils.store._barrier_nonblocking(store, world_size, _TERMINAL_STATE_SYNC_ID)`, the first
    half of the barrier SimpleElasticAgent._exit_barrier waits in (torch 2.13.0). Why: an agent
    that leaves without its workers finishing would hold the others there for 300 s."""
    from torch.distributed.elastic.agent.server.api import _TERMINAL_STATE_SYNC_ID
    from torch.distributed.elastic.utils.store import _barrier_nonblocking

    _barrier_nonblocking(store, world_size, _TERMINAL_STATE_SYNC_ID)


# ------------------------------------------------------------------ the dynamic rendezvous
def replace_rendezvous_poll_delay(poll_s: float, on_poll: Callable[[], None], rejoining: Callable[[], bool]) -> None:
    """Replaces `dynamic_rendezvous._delay`, which the rendezvous op loop calls as
    `_delay(seconds=1)` between polls of the shared state (torch 2.13.0; imported there from
    `rendezvous.utils`), with one that calls `on_poll()` and sleeps `poll_s` instead of that
    second, and that skips the jitter before a join (`_delay(seconds=(0, 0.3))`) when
    `rejoining()`. Other delays are torch's. Why: torch's poll is a whole second, a round
    change's cost; `on_poll` lets a waiting agent stop once the job is done. torch jitters
    "if this is our first run" to spread the nodes' first joins, but tests the state's round
    (0), which stays 0 until the first round ends: every agent that leaves the job's first
    round for an eviction's recovery waits up to 0.3 s more, and the round forms when the
    last of them joins."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous, utils

    original = utils._delay

    def _delay(seconds: float | tuple[float, float]) -> None:
        if seconds == TORCH_POLL_DELAY_S:
            on_poll()
            seconds = poll_s
        elif seconds == TORCH_FIRST_JOIN_JITTER_S and rejoining():
            return
        original(seconds=seconds)

    _replace(dynamic_rendezvous, "_delay", _delay)


def name_rendezvous_events_from_frames() -> None:
    """Replaces `dynamic_rendezvous.get_method_name(depth=2)` (torch 2.13.0), which names each
    rendezvous event after a caller with `inspect.stack()`, twice per event: that reads the
    source lines of every frame, milliseconds on a deep stack, at each step of a rendezvous
    operation. On a loaded node the closing agent's compare-and-set then lost to the others'
    heartbeats until its close timed out (4 closes of 10 s in a row). The frame's name is all
    the event needs."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    if is_replaced(dynamic_rendezvous.get_method_name):
        return

    def get_method_name(depth: int = 2) -> str:
        try:
            # depth counts from this function's frame, as inspect.stack()[depth] does.
            return sys._getframe(depth).f_code.co_name
        except ValueError:  # a stack shallower than depth
            return "no_method_name"

    _replace(dynamic_rendezvous, "get_method_name", get_method_name)


def rendezvous_state(handler: Any) -> Any:
    """The rendezvous state a DynamicRendezvousHandler last read (`_state_holder.state`: its
    round, participants, wait list; torch 2.13.0)."""
    return handler._state_holder.state


def this_node(handler: Any) -> Any:
    """The handler's own node descriptor (`_this_node`, torch 2.13.0)."""
    return handler._this_node


def rendezvous_store(handler: Any) -> Any:
    """The store a DynamicRendezvousHandler hands its rounds (`_store`, torch 2.13.0)."""
    return handler._store


def replace_rendezvous_store(handler: Any, store: Any) -> None:
    """Sets the handler's `_store`, the store `next_rendezvous` hands each round (torch 2.13.0).
    Why: a round's waits must end when its rank 0 is gone (lab.runtime.round_store), and after
    a server restart the store must be a new connection."""
    handler._store = store


def cache_rendezvous_state_for(handler: Any, seconds: float) -> None:
    """Sets the state holder's `_cache_duration` (`_BackendRendezvousStateHolder`, 1 s by default,
    torch 2.13.0): how long a read is answered from its cache. Why: with a shorter poll, a node
    waiting to join would otherwise be seen up to a second late."""
    handler._state_holder._cache_duration = seconds


def keep_etcd_rendezvous_state_for(backend: Any, seconds: int) -> None:
    """Sets an `EtcdRendezvousBackend`'s `_ttl` (torch 2.13.0: 7200 s, `_DEFAULT_TTL`, and
    `create_backend` passes no other): the TTL every write of the rendezvous state gives its etcd
    key. Why: with no agent left to write it (every node of the job evicted), etcd drops the state
    after that long, and the next round is numbered 0 again over the stale keys of the first."""
    backend._ttl = seconds


def rendezvous_backend(handler: Any) -> Any:
    """The backend the state holder reads and writes (`_state_holder._backend`, torch 2.13.0)."""
    return handler._state_holder._backend


def replace_rendezvous_backend(handler: Any, backend: Any) -> None:
    """Sets the state holder's `_backend` (torch 2.13.0): the launcher's wrapper that writes the
    round back to a server that came back empty, or a new client after a server restart."""
    handler._state_holder._backend = backend


def forget_rendezvous_state_version(handler: Any) -> None:
    """Sets the state holder's `_token` (the state's version, torch 2.13.0) to None. Why: a
    server that restarted has no such version, and writes made against it would fail for good;
    without one the next write re-reads the state."""
    handler._state_holder._token = None


def read_rendezvous_state_now(handler: Any) -> bool:
    """The state holder's `sync()` with its cache bypassed (`_last_sync_time = -inf`, torch
    2.13.0): the server's state now. Whether the holder wrote."""
    holder = handler._state_holder
    holder._last_sync_time = -math.inf
    return bool(holder.sync())


def drop_participants_silent_for(handler: Any, keep_alive_intervals: float) -> None:
    """Reads the server's state, dropping the participants silent for `keep_alive_intervals`
    keep-alive intervals, and writes the drop back: the state holder's `sync()` with its
    `_settings` swapped for a keep-alive window that short, and its `_dead_nodes` read (torch
    2.13.0 drops a participant whose heartbeat is older than keep_alive_interval x
    keep_alive_max_attempt). Why: a peer that vanished is found before its heartbeats fully
    expire. A lost race of the write re-reads; the caller's next try writes again."""
    holder = handler._state_holder
    normal = holder._settings
    holder._settings = dataclasses.replace(
        normal, keep_alive_interval=normal.keep_alive_interval * keep_alive_intervals, keep_alive_max_attempt=1
    )
    try:
        read_rendezvous_state_now(handler)
        if holder._dead_nodes:  # dropped here by the short window: write that back
            holder.mark_dirty()
            holder.sync()
    finally:
        holder._settings = normal


def end_last_call(handler: Any) -> None:
    """Sets the last call of the round in the handler's view of the state (the state holder's
    `state.deadline`, which torch sets to last_call_timeout after min_nodes joined) to now, and
    marks the view for writing (`mark_dirty`; torch 2.13.0): the rendezvous op loop writes it at
    its next step, and a participant then marks the round complete (`_RendezvousJoinOp`: enough
    participants and the deadline passed). A lost race of the write re-reads the state, and
    the caller's next poll tries again. Why: a round in which every expected node has joined
    completes without waiting for stragglers that are not coming."""
    holder = handler._state_holder
    holder.state.deadline = datetime.now(UTC)
    holder.mark_dirty()


def stop_heartbeats(handler: Any) -> None:
    """The handler's `_stop_heartbeats()` (torch 2.13.0), which `shutdown` calls before it
    closes the rendezvous: here without closing it."""
    handler._stop_heartbeats()


def leave_rendezvous(handler: Any, deadline: float) -> None:
    """Takes the handler's node out of the rendezvous, by `deadline` (time.monotonic): its
    heartbeats stop and its op executor runs torch's `_RendezvousExitOp` (torch 2.13.0), what
    torch runs only at the end of a job. Why: an agent stopped by a signal leaves its round
    at once, and the others re-form without waiting out its heartbeats."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _RendezvousExitOp

    stop_heartbeats(handler)
    handler._op_executor.run(_RendezvousExitOp(), deadline)


# ------------------------------------------------------------------ the standard library
def start_forkserver_by_fork(preload: list[str], in_the_child: Callable[[], None]) -> None:
    """Starts multiprocessing's forkserver as a fork of this process, preloading `preload`, and
    records it in `multiprocessing.forkserver._forkserver`'s private state (`_lock`,
    `_forkserver_pid`, `_forkserver_address`, `_forkserver_alive_fd`, `_preload_modules`;
    Python 3.11) so that its `ensure_running` finds it running; a no-op when it runs already.
    Why: `ForkServer.ensure_running` starts a new Python, which imports torch again; a fork of
    an agent that imported it does not. `in_the_child()` runs first in the forkserver."""
    from multiprocessing import connection, forkserver, resource_tracker, util

    server: Any = forkserver._forkserver  # its state is private: typeshed does not describe it
    with server._lock:
        if server._forkserver_pid is not None:
            return
        resource_tracker.ensure_running()  # what ensure_running starts first, for its children
        address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
        check_unix_socket_path(address)
        with _listening(address, util.is_abstract_socket_namespace(address)) as listener:
            # Every client holds the write end of the "alive" pipe; the server ends when it sees EOF.
            alive_r, alive_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                _serve_forks(listener, alive_r, alive_w, preload, in_the_child)
            os.close(alive_r)
        server._forkserver_address = address
        server._forkserver_alive_fd = alive_w
        server._forkserver_pid = pid
        server._preload_modules = list(preload)


UNIX_PATH_MAX = 108  # a Unix socket's path, its terminating NUL included (Linux's sun_path)


def check_unix_socket_path(address: str) -> None:
    """OSError naming TMPDIR when `address` is too long for a Unix socket."""
    if (length := len(os.fsencode(address))) >= UNIX_PATH_MAX:
        raise OSError(
            f"TMPDIR={os.environ.get('TMPDIR', '')!r} is too long for the worker forkserver's Unix "
            f"socket ({address!r} is {length} bytes, at most {UNIX_PATH_MAX - 1}): "
            "set TMPDIR to a directory of a shorter path"
        )


@contextmanager
def _listening(address: str, abstract: bool) -> Iterator[socket.socket]:
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(address)
        if not abstract:
            os.chmod(address, 0o600)
        listener.listen()
        yield listener
    finally:
        listener.close()


def _serve_forks(
    listener: socket.socket, alive_r: int, alive_w: int, preload: list[str], in_the_child: Callable[[], None]
) -> None:
    """The forkserver's life: multiprocessing's own server loop; never returns."""
    from multiprocessing import forkserver

    code = 1
    try:
        in_the_child()
        os.close(alive_w)
        forkserver.main(listener.fileno(), alive_r, preload)
        code = 0
    except SystemExit as exc:
        code = 0 if exc.code in (None, 0) else 1
    finally:
        os._exit(code)


# ------------------------------------------------------------------ a warm worker
def drain_gloo_after_destroy(pause_s: float) -> None:
    """Replaces `torch.distributed.destroy_process_group` and
    `torch.distributed.distributed_c10d.destroy_process_group` (the same function, exported by
    both, torch 2.13.0) with one that pauses `pause_s` without the GIL after it. Why: a DDP
    script that destroys its group before its model leaves the group's last reference to DDP's
    reducer; freeing the model then joins gloo's threads while holding the GIL, and a gloo
    thread still finishing the last allreduce needs the GIL to free what it captured: a
    deadlock (seen: a worker stuck in ProcessGroupGloo's destructor). Only in a warm worker."""
    import torch.distributed
    from torch.distributed import distributed_c10d

    original = distributed_c10d.destroy_process_group
    if is_replaced(original):
        return

    @functools.wraps(original)
    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        finally:
            time.sleep(pause_s)

    _replace(distributed_c10d, "destroy_process_group", destroy_process_group)
    _replace(torch.distributed, "destroy_process_group", destroy_process_group)

"""lab.runtime.torch_seam: each entry pinned. A test here fails when torch (or multiprocessing) no
longer has what an entry relies on, with the signature and behaviour it was written against, or
when the entry no longer changes what it replaces; and the runtime writes into torch nowhere
else."""

from __future__ import annotations

import ast
import inspect
import pickle
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import torch
from torch.distributed import HashStore
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
    DynamicRendezvousHandler,
    _NodeDesc,
    _RendezvousState,
)

import lab.runtime
from lab.runtime import launch, torch_seam, warm
from tests.conftest import TORCH_TABLES
from tests.patience import within
from tests.runtime.conftest import owner_of


def _parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def _calls_in(function, text: str) -> bool:
    return text in inspect.getsource(function)


def test_the_seam_was_checked_against_the_installed_torch():
    """Every entry's docstring names the version it was read against: a new torch needs them read
    again (and this constant raised)."""
    assert torch.__version__.split("+")[0] == torch_seam.CHECKED_AGAINST


# ------------------------------------------------------------------ what the seam replaces, all of it
def _everything_replaced() -> None:
    launch.install()
    torch_seam.replace_elastic_launch(lambda config, entrypoint: None)
    torch_seam.drain_gloo_after_destroy(0.0)
    torch_seam.replace_rendezvous_poll_delay(1.0, lambda: None, lambda: False)
    torch_seam.register_event_log_handler("test", lambda: None)


def test_every_attribute_listed_as_replaced_is_replaced_and_no_other(restored_torch):
    before = {entry: getattr(*owner_of(*entry)) for entry in torch_seam.REPLACED}
    tables = {entry: dict(getattr(*owner_of(*entry))) for entry in torch_seam.WRITTEN_TABLES}
    tracked = {(module, path) for module, paths in TORCH_TABLES.items() for path in paths}
    _everything_replaced()
    for entry, original in before.items():
        now = getattr(*owner_of(*entry))
        assert now is not original and torch_seam.is_replaced(now), entry
    for entry, original in tables.items():
        assert dict(getattr(*owner_of(*entry))) != original, entry
    # Each test's process-state check (tests/conftest.py) watches every one of them.
    assert set(torch_seam.REPLACED) | set(torch_seam.WRITTEN_TABLES) <= tracked


def test_installing_twice_wraps_nothing_twice(restored_torch):
    _everything_replaced()
    once = {entry: getattr(*owner_of(*entry)) for entry in torch_seam.REPLACED}
    launch.install()
    torch_seam.drain_gloo_after_destroy(0.0)
    for entry in torch_seam.REPLACED:
        if entry[1] not in ("_delay", "elastic_launch"):  # replaced anew by design: the latest settings
            assert getattr(*owner_of(*entry)) is once[entry], entry


# Modules of the runtime that use torch's elastic agent or multiprocessing: none may write into
# them, nor reach a private name of theirs, but through the seam.
CALLERS = (
    "launch",
    "agent_exits",
    "agent_hooks",
    "container_ledger",
    "rendezvous_backends",
    "rendezvous_handler",
    "worker_failures",
    "warm",
    "warm_server",
)


def _writes_and_private_reads(path: Path) -> list[str]:
    """`setattr` calls, assignments to an attribute of an imported module or class, and private
    names read off anything but `self` or imported from elsewhere, in the module at `path`."""
    tree = ast.parse(path.read_text())
    imported = {
        alias.asname or alias.name.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for alias in n.names
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("lab."):
            found += [f"imports {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            found.append(f"setattr at line {node.lineno}")
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AugAssign | ast.AnnAssign)
            else []
        )
        for target in targets:
            root = target
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(target, ast.Attribute) and isinstance(root, ast.Name) and root.id in imported:
                found.append(f"assigns {ast.unparse(target)} at line {node.lineno}")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                found.append(f"reads {ast.unparse(node)} at line {node.lineno}")
    return found


@pytest.mark.parametrize("module", CALLERS)
def test_the_runtime_touches_torchs_internals_only_through_the_seam(module):
    path = Path(lab.runtime.__file__).parent / f"{module}.py"
    allowed = {
        "reads os._exit at line",  # the standard way out of a forked child
        "assigns sys.argv at line",  # a warm worker's script sees its arguments, as `python script args`
    }
    found = [f for f in _writes_and_private_reads(path) if not any(f.startswith(a) for a in allowed)]
    assert found == [], f"lab/runtime/{module}.py: {found}"


# ------------------------------------------------------------------ the agent's command and logs
def test_the_rendezvous_registry_refuses_a_second_creator_so_the_table_is_written(restored_torch):
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry as registry

    from lab.runtime import rendezvous_backends

    assert {"c10d", "etcd-v2"} <= set(registry._registry)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("c10d", rendezvous_backends.c10d)
    launch.install()
    assert registry._registry["c10d"] is rendezvous_backends.c10d
    assert registry._registry["etcd-v2"] is rendezvous_backends.etcd_v2


def test_a_registry_of_another_layout_is_refused_loudly(restored_torch, monkeypatch):
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry as registry

    monkeypatch.setattr(registry, "_registry", {"c10d": None})
    with pytest.raises(RuntimeError, match="unknown layout"):
        torch_seam.replace_rendezvous_backends({"c10d": None, "etcd-v2": None})


def test_an_event_log_handler_registered_is_the_one_torch_records_to(restored_torch):
    import logging

    from torch.distributed.elastic.events import handlers

    handler = logging.NullHandler()
    torch_seam.register_event_log_handler("lab-test", lambda: handler)
    assert handlers.get_logging_handler("lab-test") is handler


def test_torchrun_starts_its_agents_through_the_module_level_elastic_launch(restored_torch):
    import textwrap

    from torch.distributed import run

    # torchrun calls it with these two keywords (ours takes no more), and calls what it returns.
    calls = [
        node
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(run.run))))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "elastic_launch"
    ]
    assert [sorted(k.arg for k in call.keywords) for call in calls] == [["config", "entrypoint"]]
    seen = []
    torch_seam.replace_elastic_launch(lambda config, entrypoint: seen.append(entrypoint) or (lambda *a: None))
    run.elastic_launch(config=None, entrypoint="python")
    assert seen == ["python"]


def test_torchs_log_formatter_imports_dynamo_for_an_exception_and_ours_does_not(restored_torch, monkeypatch):
    import logging
    import sys

    from torch._logging._internal import TorchLogsFormatter

    assert _calls_in(TorchLogsFormatter.format, "from torch._dynamo import config")
    try:
        raise RuntimeError("workers failed")
    except RuntimeError:
        record = logging.LogRecord("torch", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    monkeypatch.delitem(sys.modules, "torch._dynamo", raising=False)  # as in an agent
    torch_seam.format_exceptions_without_dynamo()
    text = TorchLogsFormatter().format(record)
    assert "RuntimeError: workers failed" in text and "torch._dynamo" not in sys.modules


# ------------------------------------------------------------------ the agent's loop
def _agent():
    from torch.distributed.elastic.agent.server.api import WorkerSpec
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs

    store = HashStore()
    handler = DynamicRendezvousHandler.from_backend("t-seam", store, C10dRendezvousBackend(store, "t-seam"), 1, 2)
    spec = WorkerSpec(role="t", local_world_size=1, rdzv_handler=handler, entrypoint="x", args=(), max_restarts=5)
    return LocalElasticAgent(spec, logs_specs=DefaultLogsSpecs()), handler


def test_an_agents_private_state_is_where_the_seam_reads_and_writes_it():
    agent, handler = _agent()
    assert torch_seam.restarts_left(agent) == 5
    assert torch_seam.agent_rendezvous_handler(agent) is handler
    assert torch_seam.agent_workers(agent) is None  # no workers started yet
    assert torch_seam.worker_exit_codes(None) == []
    torch_seam.end_restart_budget(agent)
    assert torch_seam.restarts_left(agent) == 0
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent

    # torch counts its restarts down in that attribute, and enters its exit barrier on success.
    assert _calls_in(SimpleElasticAgent._invoke_run, "self._remaining_restarts -= 1")
    assert _calls_in(SimpleElasticAgent._invoke_run, "self._exit_barrier()")


def test_the_agents_monitor_is_wrapped_with_torchs_own_passed_in(restored_torch, monkeypatch):
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    assert _parameters(LocalElasticAgent._monitor_workers) == ["self", "worker_group"]
    monkeypatch.setattr(LocalElasticAgent, "_monitor_workers", lambda self, group: ("torch", group))
    torch_seam.wrap_agent_monitor(lambda agent, group, torchs: ("ours", torchs(group)))
    assert LocalElasticAgent._monitor_workers(object(), "g") == ("ours", ("torch", "g"))


def test_the_exit_barrier_runs_after_what_comes_before_it(restored_torch, monkeypatch):
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent

    assert _parameters(SimpleElasticAgent._exit_barrier) == ["self"]
    order = []
    monkeypatch.setattr(SimpleElasticAgent, "_exit_barrier", lambda self: order.append("barrier"))
    torch_seam.run_before_exit_barrier(lambda agent: order.append("before"))
    SimpleElasticAgent._exit_barrier(object())
    assert order == ["before", "barrier"]


def test_the_terminate_handler_torch_registers_by_name_remembers_the_signal(restored_torch):
    from torch.distributed.elastic.multiprocessing import api

    # torch looks the handler up by this name each time it starts workers.
    assert _calls_in(api.PContext.start, "_terminate_process_handler")
    assert _parameters(api._terminate_process_handler) == ["signum", "frame"]
    seen = []
    torch_seam.remember_terminate_signal(seen.append)
    with pytest.raises(api.SignalException):
        api._terminate_process_handler(signal.SIGTERM, None)
    assert seen == [signal.SIGTERM]


def test_a_check_in_lets_a_waiting_exit_barrier_pass():
    from torch.distributed.elastic.agent.server.api import _TERMINAL_STATE_SYNC_ID
    from torch.distributed.elastic.utils import store as store_util

    store = HashStore()
    torch_seam.check_in_to_exit_barrier(store, 2)  # the agent that leaves
    store_util.barrier(store, 2, _TERMINAL_STATE_SYNC_ID, barrier_timeout=30)  # the one that waits: passes


# ------------------------------------------------------------------ the dynamic rendezvous
@pytest.mark.parametrize("rejoining", [False, True], ids=["first-join", "rejoining"])
def test_the_rendezvous_poll_delay_is_replaced_and_other_delays_are_torchs(restored_torch, monkeypatch, rejoining):
    """The op loop's poll sleeps the job's interval; torch's jitter before a join while the
    state's round is 0 is kept for an agent's first join and left out when it rejoins."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous, utils

    assert dynamic_rendezvous._delay is utils._delay
    assert _calls_in(dynamic_rendezvous._DistributedRendezvousOpExecutor.run, "_delay(seconds=1)")
    jitter = f"_delay(seconds={torch_seam.TORCH_FIRST_JOIN_JITTER_S})"
    assert _calls_in(DynamicRendezvousHandler.next_rendezvous, jitter)
    slept, polls = [], []
    monkeypatch.setattr(utils.time, "sleep", slept.append)
    monkeypatch.setattr(utils.random, "uniform", lambda low, high: high)
    torch_seam.replace_rendezvous_poll_delay(0.05, lambda: polls.append(1), lambda: rejoining)
    dynamic_rendezvous._delay(seconds=1)
    dynamic_rendezvous._delay(seconds=(0, 0.3))
    dynamic_rendezvous._delay(seconds=(0.3, 0.6))
    assert slept == ([0.05, 0.6] if rejoining else [0.05, 0.3, 0.6]) and polls == [1]


def test_torch_names_rendezvous_events_from_the_whole_stack():
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    assert _parameters(dynamic_rendezvous.get_method_name) == ["depth"]
    assert _calls_in(dynamic_rendezvous.get_method_name, "inspect.stack()")


def _handler_in_a_round(ages_s: dict[str, float], keep_alive_s: float = 0.5):
    """A handler (node "a") of a completed round 7 written in a store, its participants'
    heartbeats the given seconds old; keep-alive `keep_alive_s` x 3."""
    store = HashStore()
    backend = C10dRendezvousBackend(store, "t-seam")
    handler = DynamicRendezvousHandler.from_backend(
        "t-seam", store, backend, 1, 3, "127.0.0.1", keep_alive_interval=keep_alive_s, keep_alive_max_attempt=3
    )
    state = _RendezvousState()
    state.round, state.complete = 7, True
    for rank, (name, age) in enumerate(ages_s.items()):
        node = _NodeDesc(name, 1, 0)
        state.participants[node] = rank
        state.last_heartbeats[node] = datetime.now(UTC) - timedelta(seconds=age)
    backend.set_state(pickle.dumps(state))
    return handler, backend


def _on_server(backend) -> list[str]:
    return sorted(n.addr for n in pickle.loads(backend.get_state()[0]).participants)


def test_a_participant_silent_past_the_short_window_is_dropped_on_the_server_too():
    handler, backend = _handler_in_a_round({"a": 0.0, "b": 0.0, "c": 0.9})
    torch_seam.read_rendezvous_state_now(handler)
    assert _on_server(backend) == ["a", "b", "c"]  # torch's own window (1.5 s): c is alive
    torch_seam.drop_participants_silent_for(handler, 1.5)  # 0.75 s
    assert sorted(n.addr for n in torch_seam.rendezvous_state(handler).participants) == ["a", "b"]
    assert _on_server(backend) == ["a", "b"]
    assert handler.settings.keep_alive_interval == timedelta(seconds=0.5)  # torch's settings are back


def test_a_last_call_ended_in_the_view_lets_a_participant_complete_the_round():
    """Round 8 is forming: a (this handler) and b joined (min_nodes 2), and torch set its last
    call 600 s ahead. Ended in a's view, torch's own join completes the round at once."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _RendezvousJoinOp

    # A keep-alive window of minutes: this is no test of heartbeats, and on a loaded machine
    # seconds pass between the round written and the join, past a 1.5 s window.
    handler, backend = _handler_in_a_round({"b": 0.0}, keep_alive_s=60.0)
    state = pickle.loads(backend.get_state()[0])
    state.round, state.complete = 8, False
    state.participants = {torch_seam.this_node(handler): 0, **state.participants}
    # Both heartbeats fresh as the round is written (a round of one never completes).
    state.last_heartbeats = {node: datetime.now(UTC) for node in state.participants}
    state.deadline = datetime.now(UTC) + timedelta(seconds=600)
    backend.set_state(pickle.dumps(state), backend.get_state()[1])
    torch_seam.read_rendezvous_state_now(handler)
    torch_seam.end_last_call(handler)
    handler._op_executor.run(
        _RendezvousJoinOp(), time.monotonic() + within(5)
    )  # torch's join, as next_rendezvous runs it
    written = pickle.loads(backend.get_state()[0])
    assert (written.round, written.complete, len(written.participants)) == (8, True, 2)


def test_the_state_holders_cache_backend_and_version_are_where_the_seam_sets_them():
    handler, backend = _handler_in_a_round({"a": 0.0})
    torch_seam.read_rendezvous_state_now(handler)
    assert torch_seam.rendezvous_state(handler).round == 7
    assert torch_seam.rendezvous_backend(handler) is backend
    torch_seam.cache_rendezvous_state_for(handler, 0.05)
    torch_seam.forget_rendezvous_state_version(handler)
    holder = handler._state_holder
    assert (holder._cache_duration, holder._token) == (0.05, None)
    torch_seam.replace_rendezvous_backend(handler, "other")
    assert holder._backend == "other"
    torch_seam.replace_rendezvous_store(handler, "store")
    assert torch_seam.rendezvous_store(handler) == "store"
    assert torch_seam.this_node(handler).addr  # this handler's own node descriptor


def test_a_node_that_leaves_is_out_of_the_round_on_the_server():
    handler, backend = _handler_in_a_round({"b": 0.0})
    state = pickle.loads(backend.get_state()[0])
    state.participants[torch_seam.this_node(handler)] = 1
    state.last_heartbeats[torch_seam.this_node(handler)] = datetime.now(UTC)
    backend.set_state(pickle.dumps(state), backend.get_state()[1])
    import time

    torch_seam.leave_rendezvous(handler, time.monotonic() + 10)
    assert _on_server(backend) == ["b"]


# ------------------------------------------------------------------ the standard library
def test_multiprocessings_forkserver_keeps_the_state_the_seam_writes():
    from multiprocessing import forkserver

    fresh = vars(forkserver.ForkServer())
    assert {"_lock", "_forkserver_pid", "_forkserver_address", "_forkserver_alive_fd", "_preload_modules"} <= set(fresh)
    assert _calls_in(forkserver.ForkServer.ensure_running, "self._forkserver_pid")


# ------------------------------------------------------------------ a warm worker
def test_destroy_process_group_is_replaced_under_both_its_names(restored_torch, monkeypatch):
    from torch.distributed import distributed_c10d

    assert torch.distributed.destroy_process_group is distributed_c10d.destroy_process_group
    destroyed, paused = [], []
    monkeypatch.setattr(distributed_c10d, "destroy_process_group", lambda group=None: destroyed.append(group))
    monkeypatch.setattr(torch_seam.time, "sleep", paused.append)
    torch_seam.drain_gloo_after_destroy(warm.GLOO_DRAIN_S)
    torch.distributed.destroy_process_group("g")
    assert torch.distributed.destroy_process_group is distributed_c10d.destroy_process_group
    assert destroyed == ["g"] and paused == [warm.GLOO_DRAIN_S]


def test_the_public_methods_the_launchers_handler_overrides_keep_their_signatures():
    """lab.runtime.rendezvous_handler overrides these three of torch's public handler, and calls
    torch's own through super()."""
    from lab.runtime.rendezvous_handler import ResilientRendezvousHandler

    for name in ("num_nodes_waiting", "next_rendezvous", "shutdown"):
        assert _parameters(getattr(DynamicRendezvousHandler, name)) == ["self"], name
        assert getattr(ResilientRendezvousHandler, name) is not getattr(DynamicRendezvousHandler, name), name


def _returns_or_exits(how: str) -> int:
    if how == "exit":
        import os

        os._exit(0)  # ends the process before the function returns: torch gets no return value
    return 7


def test_a_worker_that_ends_its_process_with_exit_code_0_counts_as_done(restored_torch, tmp_path):
    """A function-started group (the warm workers') with one worker that returns and one that
    ends itself with os._exit(0): torch's poll alone waits for the second's return value
    forever, and the first waits on torch's event for it."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, start_processes
    from torch.distributed.elastic.multiprocessing.api import MultiprocessContext

    assert _parameters(MultiprocessContext._poll) == ["self"]
    assert _calls_in(MultiprocessContext._poll, "self._return_values[local_rank] = return_queue.get()")
    torch_seam.take_exit_zero_as_done()
    # torch's start installs its own handlers of these signals in the calling process.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)}
    group = start_processes(
        name="seam",
        entrypoint=_returns_or_exits,
        args={0: ("return",), 1: ("exit",)},
        envs={0: {}, 1: {}},
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path)),
        start_method="fork",
    )
    try:
        result = group.wait(timeout=within(60), period=0.05)
    finally:
        group.close()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert result is not None and not result.is_failed()
    assert result.return_values == {0: 7, 1: None}


def test_the_etcd_backends_state_ttl_is_where_the_seam_sets_it():
    """torch's EtcdRendezvousBackend writes the state with `self._ttl` (2 hours unless its
    constructor is given another, which create_backend never does)."""
    from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import EtcdRendezvousBackend

    assert EtcdRendezvousBackend._DEFAULT_TTL == 7200
    assert "self._ttl" in inspect.getsource(EtcdRendezvousBackend.set_state)
    backend = EtcdRendezvousBackend.__new__(EtcdRendezvousBackend)
    torch_seam.keep_etcd_rendezvous_state_for(backend, 2592000)
    assert backend._ttl == 2592000

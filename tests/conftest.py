"""Fixtures of every test: a check that each test leaves the process as it found it (its
environment, working directory, signal handlers and mask, logging, torch's handler tables);
real processes and a check that none survives a test; the PyTorchJob CRD schema."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from lab.k8s.schemas import CrdSchemaMissing, crd_path
from lab.local import procs
from tests.patience import within

# Tables of torch's that the launcher writes (lab.runtime.launch): module -> attribute paths.
TORCH_TABLES = {
    "torch.distributed.elastic.rendezvous": ("rendezvous_handler_registry._registry",),
    "torch.distributed.elastic.rendezvous.dynamic_rendezvous": ("_delay", "get_method_name"),
    "torch.distributed.elastic.events.handlers": ("_log_handlers",),
    "torch.distributed.elastic.agent.server.local_elastic_agent": ("LocalElasticAgent._monitor_workers",),
    "torch.distributed.elastic.agent.server.api": ("SimpleElasticAgent._exit_barrier",),
    "torch.distributed.elastic.multiprocessing.api": ("_terminate_process_handler", "MultiprocessContext._poll"),
    "torch.distributed.run": ("elastic_launch",),
    "torch._logging._internal": ("TorchLogsFormatter.format",),
    "torch.distributed": ("destroy_process_group",),
    "torch.distributed.distributed_c10d": ("destroy_process_group",),
}
# SIGALRM is pytest-timeout's own (it arms and disarms it around each test).
CATCHABLE = sorted(set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP, signal.SIGALRM})


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a real-time signal
        return f"signal {number}"


def _attribute(obj: Any, path: str) -> Any:
    for name in path.split("."):
        obj = getattr(obj, name)
    return dict(obj) if isinstance(obj, dict) else obj


def process_state() -> dict[str, Any]:
    """What a test may change in the process that runs it and must give back."""
    root = logging.getLogger()
    state: dict[str, Any] = {
        "environment": {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"},  # pytest's own
        "working directory": os.getcwd(),
        "signal handlers": {_signal_name(s): signal.getsignal(s) for s in CATCHABLE},
        "blocked signals": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "child subreaper": procs.is_subreaper(),
        "root logger": (root.level, [h for h in root.handlers if type(h).__name__ != "LogCaptureHandler"]),
    }
    for module, paths in TORCH_TABLES.items():
        if module in sys.modules:  # a table that was never imported cannot have changed
            for path in paths:
                state[f"{module}.{path}"] = _attribute(sys.modules[module], path)
    return state


def _differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out = []
    for key in sorted(set(before) & set(after)):
        if before[key] == after[key]:
            continue
        if isinstance(before[key], dict) and isinstance(after[key], dict):
            changed = sorted(k for k in set(before[key]) | set(after[key]) if before[key].get(k) != after[key].get(k))
            out.append(f"{key}: {', '.join(map(str, changed))}")
        else:
            out.append(f"{key}: {before[key]!r} -> {after[key]!r}")
    return out


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that starts a process of its own carries the `processes` mark (`make
    test-fast` leaves them out): those with a work directory to watch for survivors (`workdir`)
    or a Python to run (`python`), and those marked by hand."""
    for item in items:
        if {"workdir", "python"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.processes)
    items[:] = long_tests_first_in_each_share(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def long_tests_first_in_each_share(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The same tests in pytest-randomly's order, but for the `long` ones: each worker's share
    starts with some of them. `--dist worksteal` hands worker i the i-th share (the remaining
    tests split evenly among the workers left) and moves queued tests by count, not by cost:
    a long test late in a share ran last, the other workers long done."""
    long = [item for item in items if item.get_closest_marker("long")]
    if workers < 2 or not long:
        return items
    rest = iter([item for item in items if not item.get_closest_marker("long")])
    buckets = [long[k::workers] for k in range(workers)]
    ordered: list[pytest.Item] = []
    left = len(items)
    for k in range(workers):
        size = left // (workers - k)  # what xdist's work stealing sends each idle worker first
        share = buckets[k] + list(itertools.islice(rest, max(0, size - len(buckets[k]))))
        ordered += share
        left -= size
    return ordered + list(rest)  # none, unless a share is smaller than its long tests


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    """Each test's time limit (its `timeout` mark, else the ini's) stretched to the machine's
    load as the test starts (tests/patience.py), ahead of pytest-timeout, which reads the
    closest mark when it arms its timer."""
    mark = item.get_closest_marker("timeout")
    limit = (mark.args[0] if mark.args else mark.kwargs.get("timeout")) if mark else None
    if limit is None:
        limit = item.config.getini("timeout")
    if limit:
        kwargs = {k: v for k, v in (mark.kwargs if mark else {}).items() if k != "timeout"}
        item.add_marker(pytest.mark.timeout(within(float(limit)), **kwargs), append=False)
    yield


@pytest.fixture(autouse=True)
def no_current_stack(tmp_path_factory, monkeypatch):
    """No test sees the stack a developer chose (`elastic-lab stack select`, $ELASTIC_LAB_STACK)."""
    from lab.vocab import current_stack

    monkeypatch.delenv(current_stack.ENV_STACK, raising=False)
    monkeypatch.setattr(current_stack, "SELECTED_STACK_FILE", tmp_path_factory.mktemp("selected") / "stack")


@pytest.fixture(autouse=True)
def leaves_the_process_as_it_found_it():
    before = process_state()
    yield
    changed = _differences(before, process_state())
    assert not changed, "the test changed the process that ran it: " + "; ".join(changed)


def _ours(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "environ"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            env = p.info["environ"] or {}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if p.pid != os.getpid() and (marker in cmd or any(marker in v for v in env.values())):
            found.append(p)
    return found


def node_log_tails(work_root: Path, lines: int = 20) -> str:
    """The last lines of every node log under `work_root` (a drill's or a notebook's): what
    the agents and workers were doing when a test failed (a CI run keeps nothing else)."""
    if not work_root.is_absolute() or not work_root.is_dir():
        return ""
    parts = []
    for log in sorted(work_root.rglob("nodes/*.log")):
        # grpc's fork notices say nothing about the job.
        text = [line for line in log.read_text(errors="replace").splitlines() if "fork_posix.cc" not in line]
        tail = text[-lines:]
        parts.append(f"----- {log.relative_to(work_root)} (last {len(tail)} lines)")
        parts.extend(line[:240] for line in tail)
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """A failed test that ran nodes in its `workdir` reports their logs' last lines."""
    outcome = yield
    report = outcome.get_result()
    workdir = getattr(item, "funcargs", {}).get("workdir")
    failed_here = report.when == "call" and report.failed and isinstance(workdir, Path)
    if failed_here and (tails := node_log_tails(workdir)):
        report.sections.append(("node logs", tails))


@pytest.fixture
def workdir(tmp_path):
    """A work directory; after the test, no process that mentions it may be alive."""
    yield tmp_path
    assert_nothing_survives(tmp_path)


def assert_nothing_survives(path: Path) -> None:
    """No process that mentions `path` (in its command line or environment) is alive, and no
    child of the test runner either; what is, is killed and named."""
    deadline = time.monotonic() + within(10)
    while time.monotonic() < deadline and _ours(str(path)):
        time.sleep(0.2)
    left = _ours(str(path))
    for p in left:
        p.kill()
    assert not left, f"processes survived the test: {[(p.pid, p.name()) for p in left]}"
    # A stopped agent's forkserver and resource tracker see it go and exit on their own; on a
    # loaded machine that takes a moment. What is still there after 10 s (stretched) survived.
    deadline = time.monotonic() + within(10)
    while time.monotonic() < deadline and _live_children():
        time.sleep(0.2)
    survivors = _live_children()
    for p in survivors:
        p.kill()
    assert not survivors, (
        f"child processes of the test runner survived: {[(p.pid, p.cmdline()[:4]) for p in survivors]}"
    )


def _live_children() -> list[psutil.Process]:
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                out.append(child)
        except psutil.NoSuchProcess:
            continue
    return out


@pytest.fixture
def python():
    return sys.executable


@pytest.fixture(scope="session")
def crd():
    try:
        return crd_path()
    except CrdSchemaMissing as exc:
        pytest.skip(f"PyTorchJob CRD schema absent, CRD validation not tested: {exc}")

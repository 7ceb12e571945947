"""Teardown of a local run: every process it started for a work directory, then the directory."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from lab.cluster.eviction import ApiCall
from lab.local.workdir import EVENTS_FILE, NODES_DIR
from lab.vocab import events
from lab.vocab.job import ENV_EVENTS_FILE, ENV_NODE

if TYPE_CHECKING:
    pass


from lab.cluster.teardown.base import (
    Leftover,
    Recorded,
    TeardownError,
    _planned,
)
from lab.vocab.events import Event

# ====================================================================== the local target

PROCESS = "process"
DIRECTORY = "directory"
# How lab.local.LocalTarget lays out a work directory (EVENTS_FILE, NODES_DIR: lab.local.workdir)
# and records what it starts.
TMP_DIR = "tmp"  # the nodes' TMPDIR, when its path is short enough
TMP_PREFIX = "elastic-lab-"  # else tempfile.mkdtemp(prefix=...) in the system's temp dir
ETCD_DATA_DIR = "etcd-data"
STORE_LOG = "c10d-store.log"
NODE_ADDED = Event.NODE_ADDED  # recorded with the node agent's pid
WATCHDOG_MODULE = "lab.local.watchdog"
STORE_MODULE = "lab.runtime.store"
# psutil's create_time and the events' time.time() come from different clocks and
# resolutions; a recorded pid is the same process when it started no later than this after
# the record (a reused pid belongs to a process started after it).
CLOCK_SLACK_S = 1.0


def _real(path: str | os.PathLike[str] | None) -> str | None:
    return os.path.realpath(path) if path else None


class LocalTeardown(Recorded):
    """The processes a local run started for `workdir`, then the directory (a `Sweep`).

    A process is the run's when it is a node agent recorded in the workdir's events file
    (`node_added`, with a pid whose process is not younger than the record), when its
    environment names the workdir's events file (`$LAB_EVENTS_FILE`: every node and all it
    started), when it is the workdir's etcd (`--data-dir <workdir>/etcd-data`), its c10d
    store (`-m lab.runtime.store` writing to `<workdir>/c10d-store.log`) or its watchdog
    (`-m lab.local.watchdog <the nodes' temp dir>`), or a descendant of one of those. This
    process and its ancestors are never touched, and neither is the launcher recorded by
    `cluster_started` (the drill, or whatever ran LocalTarget): when it still runs it is in
    `kept`, since stopping it is its user's call.

    `delete` freezes the processes (SIGSTOP, so that none starts a child unseen), sends
    SIGTERM and SIGCONT, and SIGKILLs those left after `term_timeout_s`; then it removes the
    workdir and the nodes' temp dir. A directory that does not look like a local run's work
    directory is refused rather than removed."""

    name = "local"
    ORDER = (PROCESS, DIRECTORY)

    def __init__(self, workdir: str | os.PathLike[str], *, term_timeout_s: float = 5.0, kill_timeout_s: float = 5.0):
        self.workdir = Path(workdir).absolute()
        self.term_timeout_s = term_timeout_s
        self.kill_timeout_s = kill_timeout_s
        super().__init__()
        self._processes: dict[int, psutil.Process] = {}
        self._dirs: set[str] = set()

    # ------------------------------------------------------------------ the Sweep protocol
    def _look(self) -> list[Leftover]:
        found: list[Leftover] = []
        where = str(self.workdir)
        processes, tmp_dirs = self._scan()
        self._processes = {pid: proc for pid, (proc, _) in processes.items()}
        for pid, (_, reason) in sorted(processes.items()):
            found.append(Leftover(PROCESS, str(pid), where, reason))
        self._dirs = set()
        if self.workdir.exists():
            self._check_workdir()
            self._dirs.add(str(self.workdir))
            found.append(Leftover(DIRECTORY, str(self.workdir), "local", "the local run's work directory"))
        system_tmp = _real(tempfile.gettempdir())
        for tmp in sorted(tmp_dirs):
            path = Path(tmp)
            if str(path.parent) == system_tmp and path.name.startswith(TMP_PREFIX) and path.is_dir():
                self._dirs.add(tmp)
                found.append(Leftover(DIRECTORY, tmp, "local", "the nodes' temporary directory (their $TMPDIR)"))
        return found

    def delete(self, items: Sequence[Leftover]) -> list[str]:
        if self._found is None:
            self.find()  # to know which pids and directories are this run's
        unknown = sorted({i.kind for i in items} - set(self.ORDER))
        if unknown:
            raise TeardownError(f"the local teardown stops processes and removes directories, not {', '.join(unknown)}")
        wanted = [int(i.id) for i in items if i.kind == PROCESS]
        strangers = [pid for pid in wanted if pid not in self._processes]
        if strangers:
            raise TeardownError(f"processes {strangers} are not this run's (find() did not find them): not stopped")
        done, failed = self._stop([self._processes[pid] for pid in wanted])
        for item in (i for i in items if i.kind == DIRECTORY):
            if item.id not in self._dirs:
                failed.append(f"directory {item.id}: not this run's (find() did not find it): not removed")
                continue
            if not os.path.exists(item.id):
                done.append(f"directory {item.id} (already gone)")
                continue
            try:
                shutil.rmtree(item.id)
            except OSError as e:
                failed.append(f"directory {item.id}: {e.strerror or e}")
                continue
            done.append(f"directory {item.id}")
        if failed:
            raise TeardownError(
                f"the local teardown of {self.workdir} could not finish:\n  - " + "\n  - ".join(failed), done
            )
        self._found = None
        return done

    def calls(self) -> list[ApiCall]:
        """The signals and removals delete() would make (for a dry run)."""
        out = []
        for item in _planned(self._found, PROCESS, "<each process found>"):
            out.append(ApiCall("os", "kill", {"pid": item.id, "signal": "SIGTERM, then SIGKILL"}))
        for item in _planned(self._found, DIRECTORY, str(self.workdir)):
            out.append(ApiCall("shutil", "rmtree", {"path": item.id}))
        return out

    # ------------------------------------------------------------------ finding
    def _check_workdir(self) -> None:
        """Refuse a directory that is not a local run's: LocalTarget makes `nodes/` in it
        and records its events in `events.jsonl`."""
        if not self.workdir.is_dir() or not (
            (self.workdir / EVENTS_FILE).is_file() or (self.workdir / NODES_DIR).is_dir()
        ):
            raise TeardownError(
                f"{self.workdir} is not a local run's work directory (it has neither {EVENTS_FILE} nor {NODES_DIR}/): "
                "refusing to remove it"
            )

    def _recorded(self) -> tuple[dict[int, tuple[float, str]], dict[int, float]]:
        """The node agents' pids ({pid: (recorded at, node)}) and the launcher's, from the events file."""
        nodes: dict[int, tuple[float, str]] = {}
        launchers: dict[int, float] = {}
        for record in events.iter_events(self.workdir / EVENTS_FILE):
            pid = record.get("pid")
            if not isinstance(pid, int):
                continue
            if record["event"] == NODE_ADDED:
                nodes[pid] = (float(record["t"]), str(record.get("node", "?")))
            elif record["event"] == Event.CLUSTER_STARTED:  # recorded by the launcher, with its own pid
                launchers[pid] = float(record["t"])
        return nodes, launchers

    def _scan(self) -> tuple[dict[int, tuple[psutil.Process, str]], set[str]]:
        """{pid: (process, why it is the run's)} and the nodes' temp dirs."""
        me = psutil.Process()
        spared = {me.pid, *(p.pid for p in me.parents())}
        tmp_dirs = {str(_real(self.workdir / TMP_DIR))}
        nodes, launchers = self._recorded()
        table = _living_processes()
        started = {p.pid: p.info["create_time"] for p in table}
        roots = self._run_processes(table, nodes, started, tmp_dirs)
        roots.update(self._run_helpers(table, roots, tmp_dirs))
        found = _with_descendants(roots)
        self._keep_running_launchers(launchers, started, spared | set(found))
        return {pid: v for pid, v in found.items() if pid not in spared}, tmp_dirs

    def _run_processes(
        self,
        table: list[psutil.Process],
        nodes: dict[int, tuple[float, str]],
        started: dict[int, float | None],
        tmp_dirs: set[str],
    ) -> dict[int, tuple[psutil.Process, str]]:
        """The run's own processes: those whose environment names its events file (their
        TMPDIR is added to `tmp_dirs`), the node agents its events record, and its etcd."""
        events_file = _real(self.workdir / EVENTS_FILE)
        etcd_data = _real(self.workdir / ETCD_DATA_DIR)
        roots: dict[int, tuple[psutil.Process, str]] = {}
        for proc in table:
            env = proc.info["environ"] or {}
            recorded = proc.pid in nodes and _recorded_then(started, proc.pid, nodes[proc.pid][0])
            if events_file and _real(env.get(ENV_EVENTS_FILE)) == events_file:
                # A node forked by the node forker shows the environment the nodes share: its
                # name is in the events.
                node = env.get(ENV_NODE) or (nodes[proc.pid][1] if recorded else None)
                roots[proc.pid] = (
                    proc,
                    f"runs for this work directory (${ENV_EVENTS_FILE}){f', node {node}' if node else ''}",
                )
                if env.get("TMPDIR"):
                    tmp_dirs.add(str(_real(env["TMPDIR"])))
            elif recorded:
                roots[proc.pid] = (proc, f"node {nodes[proc.pid][1]}'s agent, recorded in {EVENTS_FILE}")
            elif _argument(proc.info["cmdline"] or [], "--data-dir") == etcd_data:
                roots[proc.pid] = (proc, f"the rendezvous server (etcd, --data-dir {etcd_data})")
        return roots

    def _run_helpers(
        self, table: list[psutil.Process], roots: dict[int, tuple[psutil.Process, str]], tmp_dirs: set[str]
    ) -> dict[int, tuple[psutil.Process, str]]:
        """The run's helpers not found among its own processes: its watchdog (given one of the
        run's temp dirs) and its c10d store (logging to the work directory's store log)."""
        store_log = _real(self.workdir / STORE_LOG)
        helpers: dict[int, tuple[psutil.Process, str]] = {}
        for proc in table:
            argv = proc.info["cmdline"] or []
            if proc.pid in roots:
                continue
            if WATCHDOG_MODULE in argv and any(_real(a) in tmp_dirs for a in argv[argv.index(WATCHDOG_MODULE) + 1 :]):
                helpers[proc.pid] = (proc, "the run's watchdog")
            elif STORE_MODULE in argv and _stdout(proc) == store_log:
                helpers[proc.pid] = (proc, f"the rendezvous server (c10d store, logging to {STORE_LOG})")
        return helpers

    def _keep_running_launchers(
        self, launchers: dict[int, float], started: dict[int, float | None], skipped: set[int]
    ) -> None:
        """A launcher that ran this local cluster and still runs is kept (listed, not stopped)."""
        for pid, at in launchers.items():
            if pid in skipped or not _recorded_then(started, pid, at):
                continue
            self.kept.append(
                Leftover(
                    PROCESS,
                    str(pid),
                    str(self.workdir),
                    "the launcher that ran this local cluster still runs: stop it yourself (Ctrl-C stops what it "
                    "started); not stopped here",
                )
            )

    # ------------------------------------------------------------------ stopping
    def _stop(self, targets: list[psutil.Process]) -> tuple[list[str], list[str]]:
        """SIGSTOP, SIGTERM + SIGCONT, then SIGKILL after term_timeout_s; (done, failed)."""
        failed: list[str] = []
        frozen: list[psutil.Process] = []
        gone: list[psutil.Process] = []
        for proc in targets:
            if self._signal(proc, signal.SIGSTOP, failed):
                frozen.append(proc)
            elif not proc.is_running():
                gone.append(proc)
        # The descendants again, now that nothing runs: a child started meanwhile is seen too.
        known = {p.pid for p in frozen}
        for proc in list(frozen):
            try:
                children = proc.children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                if child.pid not in known and self._signal(child, signal.SIGSTOP, failed):
                    known.add(child.pid)
                    frozen.append(child)
        for proc in frozen:
            self._signal(proc, signal.SIGTERM, failed)
            self._signal(proc, signal.SIGCONT, failed)
        left = self._wait(frozen, self.term_timeout_s)
        for proc in left:
            self._signal(proc, signal.SIGKILL, failed)
        still = self._wait(left, self.kill_timeout_s)
        failed += [f"process {p.pid}: still running after SIGKILL" for p in still]
        killed = {p.pid for p in left}
        done = [f"process {p.pid} ({'SIGKILL' if p.pid in killed else 'SIGTERM'})" for p in frozen if p not in still]
        done += [f"process {p.pid} (already gone)" for p in gone]
        return done, failed

    @staticmethod
    def _signal(proc: psutil.Process, sig: int, failed: list[str]) -> bool:
        """Send `sig`; False when the process is gone (psutil also refuses a reused pid)."""
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            return False
        except psutil.AccessDenied:
            failed.append(f"process {proc.pid}: not allowed to send it {signal.Signals(sig).name}")
            return False
        return True

    @staticmethod
    def _wait(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
        """Wait until every process has exited (a zombie counts: it runs nothing; one of our
        children is reaped); the ones still running after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            left = [p for p in procs if not _exited(p)]
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.02)


def _living_processes() -> list[psutil.Process]:
    """Every process but zombies, with what the scan reads of each in `info`."""
    attrs = ["pid", "cmdline", "environ", "create_time", "status"]
    return [p for p in psutil.process_iter(attrs, ad_value=None) if p.info["status"] != psutil.STATUS_ZOMBIE]


def _recorded_then(started: dict[int, float | None], pid: int, at: float) -> bool:
    """Whether the process `pid` now is the one recorded at `at`: it started no later than that
    (a reused pid belongs to a process started after it)."""
    created = started.get(pid)
    return created is not None and created <= at + CLOCK_SLACK_S


def _with_descendants(roots: dict[int, tuple[psutil.Process, str]]) -> dict[int, tuple[psutil.Process, str]]:
    """`roots` and every process they started, each with why it is the run's."""
    found = dict(roots)
    for pid, (proc, _) in roots.items():
        try:
            descendants = proc.children(recursive=True)
        except psutil.Error:
            continue
        for child in descendants:
            found.setdefault(child.pid, (child, f"started by process {pid}"))
    return found


def _exited(proc: psutil.Process) -> bool:
    try:
        if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
            return False
    except psutil.NoSuchProcess:
        return True
    try:
        os.waitpid(proc.pid, os.WNOHANG)  # reap it when it is our child
    except ChildProcessError:
        pass
    return True


def _argument(argv: Sequence[str], option: str) -> str | None:
    """The real path an option is given (`--opt value` or `--opt=value`), None when absent."""
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            return _real(argv[i + 1])
        if arg.startswith(option + "="):
            return _real(arg.split("=", 1)[1])
    return None


def _stdout(proc: psutil.Process) -> str | None:
    """The file a process's standard output goes to (None: not a file, or not readable)."""
    try:
        return next((_real(f.path) for f in proc.open_files() if f.fd == 1), None)
    except psutil.Error:
        return None

"""LocalTarget: a rendezvous server plus torchrun agents ("nodes"), each its own process
tree, that can be added and evicted while the job runs. Everything it starts is stopped on
exit, on Ctrl-C and on failure.

In per-step mode (JobSpec.fault_tolerance) the rendezvous server is TorchFT's lighthouse and
each node is a replica group of its own, named after the node."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.local import procs
from lab.local.etcd import EtcdServer, find_etcd
from lab.local.lighthouse import Lighthouse, find_lighthouse
from lab.local.node_forker import ForkedAgent, ForkerError, NodeForker
from lab.local.procs import ServerError
from lab.local.thread_dumps import ThreadDump, ask_for_thread_dumps
from lab.local.workdir import EVENTS_FILE, NODES_DIR, WorkdirLock
from lab.runtime.events import emit
from lab.runtime.spot_notice import write_notice_deadline
from lab.vocab import events
from lab.vocab.errors import Refused
from lab.vocab.events import Event, Source
from lab.vocab.job import (
    ENV_AGENT_EVENTS,
    ENV_EVENTS_FILE,
    ENV_NODE,
    ENV_NOTICE_DEADLINE_FILE,
    ENV_WATCH_SCRIPT,
    ROUND_LOGS_SPECS,
    JobSpec,
    RdzvBackend,
)
from lab.vocab.per_step import ENV_ADVERTISE, ENV_REPLICA_GROUP
from lab.vocab.thread_dumps import ENV_THREAD_DUMPS

log = logging.getLogger(__name__)

# A silently evicted node's processes are killed this long after they stopped (a vanished
# VM never comes back; by then its peers have long moved on).
SILENT_KILL_S = 30.0
# Under each node's directory: torchrun's --log-dir (its workers' error files among them).
TORCHELASTIC_LOGS = "torchelastic"
# Under each node's directory: torch's structured agent events, as JSON lines (lab.runtime.launch).
AGENT_EVENTS = "agent-events.jsonl"
# Under each node's directory: where its agent and workers write their thread dumps when asked.
THREAD_DUMPS_DIR = "thread-dumps"
# Under each node's directory: when a notice that says when the node goes ends (Unix time).
NOTICE_DEADLINE = "notice-deadline"
# The longest temp dir path under which multiprocessing's sockets still fit.
MAX_TMP_PATH = 60
# Under the nodes' directory: what the node forker (lab.local.node_forker) printed.
FORKER_LOG = "forker.log"


class Stopped(SystemExit):
    """SIGTERM reached the process running a local target (a CI timeout, `kill`): raised where
    it was, so that close() stops everything; the process then exits 128 + the signal, as a
    process killed by it would."""


def _raise_on_sigterm(signum: int, frame: object) -> None:
    raise Stopped(128 + signum)


class LocalTargetError(Refused, RuntimeError):
    """Bad input or a failed start; raised before anything is left running."""


@dataclass
class Agent:
    """A torchrun agent (and its workers) standing in for a spot node on this machine: what the
    drill starts, evicts and adds back as a "node" (a Kubernetes node is lab.cluster's `Node`)."""

    name: str
    proc: ForkedAgent
    log_path: Path
    started_at: float
    eviction: str | None = None  # "notice" | "hard" | "silent"
    _killer: threading.Timer | None = field(default=None, repr=False)

    @property
    def running(self) -> bool:
        """Its agent's process exists (a silently evicted node's, stopped, still does)."""
        return self.proc.poll() is None

    @property
    def alive(self) -> bool:
        """Running and taking part: a silently evicted node is gone for everyone else."""
        return self.running and self.eviction != "silent"

    @property
    def exit_code(self) -> int | None:
        return self.proc.poll()


class LocalTarget:
    """Use as a context manager:

    with LocalTarget(spec, workdir) as target:
        target.add_node(); target.add_node()
        ...
        target.evict(node, notice_s=30)
    """

    def __init__(
        self, spec: JobSpec, workdir: str | Path, *, etcd_binary: str | None = None, env: dict[str, str] | None = None
    ):
        self.workdir = Path(workdir)
        self.spec = spec
        self.extra_env = dict(env or {})
        self.nodes: list[Agent] = []
        self.events_file = self.workdir / EVENTS_FILE
        self._etcd: EtcdServer | None = None
        self._lighthouse: Lighthouse | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._forker: NodeForker | None = None
        self.tmp_dir: Path | None = None
        self._rdzv_stopped = False
        self._store: subprocess.Popen[bytes] | None = None
        self._store_port = 0
        self._next_id = 0
        self._closed = False
        self._started = False
        # Validate everything before starting anything; the work directory is held from here
        # until close() (another run on it is refused), and let go if a later check fails.
        self._check_workdir()
        self._workdir_lock = WorkdirLock(self.workdir)
        self._workdir_lock.acquire()
        try:
            self._check_inputs(spec, etcd_binary)
        except BaseException:
            self._workdir_lock.release()
            raise

    def _check_inputs(self, spec: JobSpec, etcd_binary: str | None) -> None:
        self._check_checkpoint_dir(Path(spec.checkpoint_dir))
        if spec.script and not Path(spec.script).is_file():
            raise LocalTargetError(f"script={spec.script!r} does not exist: expected a Python file to run on each node")
        # Nodes run in directories of their own: paths given relative to here must not move.
        self.spec = spec = spec.replace(
            checkpoint_dir=str(Path(spec.checkpoint_dir).absolute()),
            script=str(Path(spec.script).absolute()) if spec.script else spec.script,
        )
        if spec.per_step_mode:
            try:
                find_lighthouse()
            except ServerError as exc:
                raise LocalTargetError(str(exc)) from None
        elif spec.rdzv_backend is RdzvBackend.ETCD_V2:
            try:
                self._etcd_binary = find_etcd(etcd_binary)
            except ServerError as exc:
                raise LocalTargetError(str(exc)) from None

    # ---------------------------------------------------------------- validation
    def _check_workdir(self) -> None:
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            (self.workdir / NODES_DIR).mkdir(exist_ok=True)
        except OSError as exc:
            raise LocalTargetError(
                f"workdir={str(self.workdir)!r} cannot be created ({exc.strerror}): expected a writable directory"
            ) from None

    @staticmethod
    def _check_checkpoint_dir(path: Path) -> None:
        probe = path / f".write-probe-{os.getpid()}"
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as exc:
            raise LocalTargetError(
                f"checkpoint_dir={str(path)!r} is not writable ({exc.strerror}): "
                "expected a directory the nodes can write"
            ) from None

    # ----------------------------------------------------------------- lifecycle
    def __enter__(self) -> LocalTarget:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._started = True
        # While it runs, the caller adopts what its nodes orphan; close() gives that back.
        self._was_subreaper = procs.is_subreaper()
        procs.set_subreaper(True)
        self.tmp_dir = self._make_tmp_dir()
        self._start_watchdog()
        # The nodes' forker imports torch while the rendezvous server starts.
        self._forker = NodeForker(self._shared_env(), self.tmp_dir, self.workdir / NODES_DIR / FORKER_LOG)
        self._forker.start()
        self._guard(self._forker.proc)
        # SIGTERM to the launcher (a CI timeout, `kill`) must stop everything it started,
        # as Ctrl-C does: turn it into an exception so close() runs.
        if threading.current_thread() is threading.main_thread():
            self._old_sigterm = signal.signal(signal.SIGTERM, _raise_on_sigterm)
        try:
            if self.spec.per_step_mode:
                self._lighthouse = Lighthouse(self.workdir, self.spec.per_step, self.spec.min_nodes).start()
                self._guard(self._lighthouse.proc)
                endpoint = self._lighthouse.endpoint
            elif self.spec.rdzv_backend is RdzvBackend.ETCD_V2:
                self._etcd = EtcdServer(self.workdir, self._etcd_binary).start()
                self._guard(self._etcd.proc)
                endpoint = self._etcd.endpoint
            else:
                endpoint = self._start_store()
        except ServerError as exc:
            self.close()
            raise LocalTargetError(str(exc)) from None
        except BaseException:
            self.close()
            raise
        if self._lighthouse:
            self.spec = self.spec.replace(lighthouse_endpoint=endpoint)
        else:
            self.spec = self.spec.replace(rdzv_endpoint=endpoint)
        self.record(
            Event.CLUSTER_STARTED,
            backend=self.backend,
            endpoint=endpoint,
            rdzv_id=self.spec.rdzv_id,
            fault_tolerance=self.spec.fault_tolerance.value,
        )

    @property
    def backend(self) -> str:
        """What runs the rendezvous: the lighthouse in per-step mode, else the rendezvous backend."""
        return "lighthouse" if self.spec.per_step_mode else self.spec.rdzv_backend.value

    def _start_store(self) -> str:
        """Start the c10d store on a free port (another, when another process took it first),
        or on the port it had before; its endpoint."""
        fresh = not self._store_port
        log_path = self.workdir / "c10d-store.log"
        for _ in range(procs.PORT_TRIES if fresh else 1):
            if fresh:
                self._store_port = procs.free_port()
            since = procs.log_size(log_path)
            store, ready = self._start_store_once(log_path)
            if ready and store.poll() is None:
                return f"127.0.0.1:{self._store_port}"
            if not (fresh and store.poll() is not None and procs.lost_the_port(log_path, since)):
                break
        raise LocalTargetError(f"the c10d store did not start (log: {log_path})")

    def _start_store_once(self, log_path: Path) -> tuple[subprocess.Popen[bytes], bool]:
        """The store on the port chosen, and whether it said it listens within 30 s."""
        self._store = store = procs.start_server(
            [sys.executable, "-m", "lab.runtime.store", "--port", str(self._store_port)], log_path
        )
        self._guard(store)
        started = log_path.read_text().count("listening")
        ready = procs.wait_until(
            lambda: store.poll() is not None or log_path.read_text().count("listening") > started, 30
        )
        return store, ready

    def close(self) -> None:
        """Stop every node tree, the rendezvous server, and any straggler we adopted. A
        second Ctrl-C (or SIGTERM) while this runs is ignored: cut short, it would leave
        processes behind."""
        if self._closed:
            return
        self._closed = True
        if not self._started:  # nothing runs: only the work directory to let go
            self._workdir_lock.release()
            return
        in_main = threading.current_thread() is threading.main_thread()
        held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
        try:
            self._stop_everything()
        finally:
            self._workdir_lock.release()
            for sig, handler in held.items():
                signal.signal(sig, handler)
            if getattr(self, "_old_sigterm", None) is not None:
                signal.signal(signal.SIGTERM, self._old_sigterm)
            if not getattr(self, "_was_subreaper", True):
                procs.set_subreaper(False)

    def _stop_everything(self) -> None:
        for node in self.nodes:
            if node._killer:
                node._killer.cancel()
            if node.running:
                procs.signal_tree(node.proc.pid, signal.SIGKILL)
        for node in self.nodes:
            try:
                node.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        if self._forker:
            self._forker.close()
        if self._etcd:
            self._etcd.stop()
        if self._lighthouse:
            self._lighthouse.stop()
        procs.stop(self._store)
        procs.kill_descendants(timeout=3, spare=self._watchdog)
        if self.tmp_dir is not None:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
        if self._watchdog is not None and self._watchdog.stdin is not None:
            try:
                self._watchdog.stdin.write(b"done\n")
                self._watchdog.stdin.close()
            except OSError:
                pass
            procs.stop(self._watchdog)

    # ------------------------------------------------------------------ watchdog
    def _make_tmp_dir(self) -> Path:
        """The nodes' TMPDIR: under the work directory, unless its path is too long for the
        Unix sockets made there (108 bytes in all; multiprocessing adds about 40), then in the
        system's temp dir. Removed on close, and by the watchdog if this process is killed."""
        inside = self.workdir / "tmp"
        if len(str(inside.absolute())) <= MAX_TMP_PATH:
            inside.mkdir(exist_ok=True)
            return inside
        return Path(tempfile.mkdtemp(prefix="elastic-lab-"))

    def _start_watchdog(self) -> None:
        """lab.local.watchdog kills every process group this target started if this process
        dies without closing it (SIGKILL, a crash): each node, the rendezvous server; then it
        removes the nodes' temp dir. It runs in a session of its own, so a Ctrl-C to the
        drill does not reach it."""
        self._watchdog = subprocess.Popen(
            [sys.executable, "-m", "lab.local.watchdog", str(self.tmp_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _guard(self, proc: subprocess.Popen[bytes] | ForkedAgent | None) -> None:
        """Hand a process-group leader we started (start_new_session) to the watchdog."""
        if proc is None or self._watchdog is None or self._watchdog.stdin is None:
            return
        try:
            self._watchdog.stdin.write(f"{proc.pid}\n".encode())
            self._watchdog.stdin.flush()
        except OSError:
            log.warning("the watchdog is gone: processes may outlive a killed drill")

    # ---------------------------------------------------------- rendezvous server
    @property
    def rendezvous_server(self) -> subprocess.Popen[bytes] | None:
        """The rendezvous server's process (etcd, the c10d store or the lighthouse)."""
        if self._lighthouse:
            return self._lighthouse.proc
        return self._etcd.proc if self._etcd else self._store

    def rendezvous_died(self) -> str | None:
        """What happened, when the rendezvous server exited without being stopped."""
        proc = self.rendezvous_server
        if self._closed or self._rdzv_stopped or proc is None or proc.poll() is None:
            return None
        what = "etcd" if self._etcd else "the lighthouse" if self._lighthouse else "the c10d store"
        if self._lighthouse:
            log_path = self._lighthouse.log_path
        else:
            log_path = self._etcd.log_path if self._etcd else self.workdir / "c10d-store.log"
        return f"the rendezvous server ({what}) exited with code {proc.returncode} (log: {log_path})"

    def stop_rendezvous(self) -> None:
        """Stop the rendezvous server (SIGTERM, as a pod being drained or upgraded), leaving
        its data: the nodes keep running and find it unreachable."""
        if self._closed:
            raise LocalTargetError("the local target is closed")
        self.record(Event.RDZV_DOWN, backend=self.backend)
        self._rdzv_stopped = True
        if self._etcd:
            self._etcd.stop()
        elif self._lighthouse:
            self._lighthouse.stop()
        else:
            procs.stop(self._store)

    def start_rendezvous(self, *, keep_data: bool = True) -> None:
        """Start the rendezvous server again at the same address. etcd keeps its data, or,
        with `keep_data=False`, starts empty as a new cluster (an etcd pod moved to another
        node loses its emptyDir); a restarted c10d store always starts empty."""
        if self._closed:
            raise LocalTargetError("the local target is closed")
        try:
            if self._etcd:
                if not keep_data:
                    shutil.rmtree(self._etcd.data_dir, ignore_errors=True)
                self._etcd.start()
                self._guard(self._etcd.proc)
            elif self._lighthouse:
                self._lighthouse.start()
                self._guard(self._lighthouse.proc)
            else:
                self._start_store()
        except ServerError as exc:
            raise LocalTargetError(str(exc)) from None
        self._rdzv_stopped = False
        self.record(Event.RDZV_UP, backend=self.backend, kept_data=keep_data and self._etcd is not None)

    # --------------------------------------------------------------------- nodes
    def node_dir(self, name: str) -> Path:
        """Where node `name` runs (its working directory)."""
        return self.workdir / NODES_DIR / name

    @property
    def alive_nodes(self) -> list[Agent]:
        return [n for n in self.nodes if n.alive]

    def _threads(self) -> dict[str, str]:
        """The nodes share this machine's cores, which a machine of each would not: each
        worker gets its share of the threads (OMP_NUM_THREADS, torch's intra-op pool), unless
        the caller's environment sets it. Workers whose thread pools overlap spin for cores
        they do not get, and training slows several-fold under its own load."""
        if "OMP_NUM_THREADS" in os.environ:
            return {}
        workers = self.spec.max_nodes * self.spec.nproc_per_node
        return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // workers))}

    def _shared_env(self) -> dict[str, str]:
        """The environment every node shares (each adds its name and event log)."""
        return {
            **os.environ,
            **self._threads(),
            **self.spec.worker_env(),
            **self.extra_env,
            ENV_EVENTS_FILE: str(self.events_file),
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": str(self.tmp_dir),
        }

    def ready_to_add(self, timeout: float) -> bool:
        """Wait until a node added now starts at once (the nodes' forker has imported torch,
        seconds after the target started); False when `timeout` ran out first."""
        return self._forker is not None and self._forker.wait_until_ready(timeout)

    def add_node(self, *, rank: int | None = None, capacity: str | None = None, part: str | None = None) -> Agent:
        """A node more; `rank` and `capacity` say which GPU capacity it stands for (a fallback
        rank's, in a capacity drill), `part` which part of a job with borrowed nodes it is
        ("core" or "burst"), recorded with it."""
        if self._closed:
            raise LocalTargetError("the local target is closed")
        if len(self.alive_nodes) >= self.spec.max_nodes:
            raise LocalTargetError(
                f"nodes={len(self.alive_nodes) + 1} is invalid: expected at most max_nodes={self.spec.max_nodes}"
            )
        name = f"node-{self._next_id}"
        self._next_id += 1
        log_path = self.workdir / NODES_DIR / f"{name}.log"
        # The node's own directory, as a machine of its own would have: the script's relative
        # paths and torchelastic's error files land there, never in the caller's directory;
        # temporary files in the target's temp dir, removed when it closes.
        home = self.node_dir(name)
        home.mkdir(parents=True, exist_ok=True)
        env = {
            **self._shared_env(),
            ENV_NODE: name,
            **({ENV_REPLICA_GROUP: name, ENV_ADVERTISE: "127.0.0.1"} if self.spec.per_step_mode else {}),
            ENV_AGENT_EVENTS: str(home / AGENT_EVENTS),
            ENV_WATCH_SCRIPT: "1",  # what the script does with checkpoints, for the drill (lab.runtime.script_watch)
            ENV_THREAD_DUMPS: str(home / THREAD_DUMPS_DIR),
            ENV_NOTICE_DEADLINE_FILE: str(home / NOTICE_DEADLINE),
        }
        cmd = [
            *self.spec.launcher(sys.executable),
            *self.spec.torchrun_args(local_addr="127.0.0.1"),
            f"--log-dir={home / TORCHELASTIC_LOGS}",
            # Each worker's stdout and stderr to files as well, a folder per round (lab.runtime.round_logs):
            # what a script printed in every round, for the drill to read (lab.drill.script_progress).
            f"--logs-specs={ROUND_LOGS_SPECS}",
            "--tee=3",
            *self.spec.entrypoint(),
        ]
        # A fork of the forker, in a session of its own: it dies with the forker, which dies
        # with this process, even when this process is SIGKILLed (its forkserver and workers
        # die with it in turn, see lab.runtime.warm).
        if self._forker is None:
            raise LocalTargetError("the local target was not started: expected start() or `with` first")
        try:
            proc = self._forker.fork(cmd, env, home, log_path)
        except ForkerError as exc:
            raise LocalTargetError(f"{name} did not start: {exc}") from None
        node = Agent(name, proc, log_path, time.time())
        self._guard(proc)
        self.nodes.append(node)
        where = {k: v for k, v in (("rank", rank), ("capacity", capacity), ("part", part)) if v is not None}
        self.record(Event.NODE_ADDED, node=name, pid=proc.pid, **where)
        return node

    def evict(
        self,
        node: Agent,
        notice_s: float | None = None,
        *,
        silent: bool = False,
        cause: str | None = None,
        says_when: bool = False,
    ) -> None:
        """Evict a node like a spot reclaim: with a notice (SIGTERM to its whole tree, then
        SIGKILL when the notice runs out; `says_when`: the notice says when, as AWS's and
        Azure's do, in the node's NOTICE_DEADLINE file, and the job may train on through it),
        hard (SIGKILL, no warning: on loopback its sockets close at once, so peers learn of it
        in milliseconds) or silent (SIGSTOP of the whole tree, as a VM that vanishes: its
        sockets stay open and nothing more is said; the tree is killed SILENT_KILL_S later, or
        when the target closes). `cause` says why, when not a spot reclaim ("scale-in": the
        job was made smaller, as a pod deleted with its grace period)."""
        if not node.alive:
            raise LocalTargetError(f"node={node.name!r} is not running: expected a live node to evict")
        if silent and notice_s is not None:
            raise LocalTargetError(f"notice_s={notice_s!r} is invalid: expected none for a silent eviction")
        node.eviction = "silent" if silent else "hard" if notice_s is None else "notice"
        self.record(
            Event.EVICT, node=node.name, kind=node.eviction, notice_s=notice_s, **({"cause": cause} if cause else {})
        )
        if node.eviction == "hard":
            procs.signal_tree(node.proc.pid, signal.SIGKILL)
            return
        if node.eviction == "silent":
            procs.signal_tree(node.proc.pid, signal.SIGSTOP)
            self._kill_later(node, SILENT_KILL_S, Event.VANISHED_KILLED)
            return
        if says_when:
            write_notice_deadline(self.node_dir(node.name) / NOTICE_DEADLINE, time.time() + (notice_s or 0.0))
        procs.signal_tree(node.proc.pid, signal.SIGTERM)
        self._kill_later(node, notice_s or 0.0, Event.NOTICE_EXPIRED)

    def _kill_later(self, node: Agent, seconds: float, event: Event) -> None:
        def kill() -> None:
            if node.running:
                self.record(event, node=node.name)
                procs.signal_tree(node.proc.pid, signal.SIGKILL)

        node._killer = threading.Timer(seconds, kill)
        node._killer.daemon = True
        node._killer.start()

    def thread_dumps(self, wait_s: float = 2.0) -> list[ThreadDump]:
        """Where every running node's agent and workers are: each writes its threads' Python
        stacks when asked (a silently evicted node's processes, stopped, cannot)."""
        return [
            dump
            for node in self.nodes
            if node.alive
            for dump in ask_for_thread_dumps(
                node.name, node.proc.pid, self.node_dir(node.name) / THREAD_DUMPS_DIR, wait_s
            )
        ]

    def wait(self, timeout: float, poll: float = 0.2, on_tick: Callable[[], None] | None = None) -> bool:
        """Wait until no node is running; False when the timeout ran out first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if on_tick:
                on_tick()
            if not self.alive_nodes:
                procs.reap()
                return True
            time.sleep(poll)
        return False

    def record(self, event: Event, **fields: object) -> None:
        emit(event, sink=self.events_file, source=Source.LOCAL_TARGET, **fields)

    def events(self) -> list[dict[str, Any]]:
        return events.read(self.events_file)

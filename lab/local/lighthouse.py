"""TorchFT's lighthouse on this machine: the per-step mode's rendezvous service.

It listens on loopback only (its own default is every address), and comes back on the same
port when restarted, as a lighthouse pod does behind its Service. It keeps nothing: a
restarted lighthouse learns the groups again from their next heartbeats and quorum requests.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from lab.local import procs
from lab.local.procs import ServerError
from lab.vocab.per_step import PerStepSettings

BINARY = "torchft_lighthouse"


def find_lighthouse() -> str:
    """The `torchft_lighthouse` command of this Python's environment (pip installs it beside
    the interpreter), else the one on PATH."""
    beside = Path(sys.executable).parent / BINARY
    if beside.is_file():
        return str(beside)
    found = shutil.which(BINARY)
    if found:
        return found
    raise ServerError(
        f"{BINARY} was not found beside {sys.executable} or on PATH: expected the torchft package "
        "(pip install torchft==0.2.0) for fault_tolerance=per-step"
    )


LIGHTHOUSE_LOG = "lighthouse.log"  # in the local target's directory


class Lighthouse:
    """Start with `start()`, stop with `stop()`; its log is `workdir/lighthouse.log`."""

    def __init__(self, workdir: Path, settings: PerStepSettings, min_replicas: int, host: str = "127.0.0.1"):
        self.binary = find_lighthouse()
        self.workdir, self.settings, self.min_replicas, self.host = Path(workdir), settings, min_replicas, host
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / LIGHTHOUSE_LOG

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> Lighthouse:
        """Start on a free loopback port (another, when another process took it first), or on
        the port it had before."""
        proc = procs.start_on_free_ports(not self.port, self._pick_port, lambda: self._start(timeout), self.log_path)
        if proc.poll() is None:
            return self
        raise ServerError(f"the lighthouse exited with code {proc.returncode} (log: {self.log_path})")

    def _pick_port(self) -> None:
        self.port = procs.free_port(self.host)

    def _start(self, timeout: float) -> subprocess.Popen[bytes]:
        """Start on the port chosen; the process, running (answering) or exited."""
        cmd = [self.binary, *self.settings.lighthouse_args(self.min_replicas, bind=self.endpoint)]
        self.proc = proc = procs.start_server(cmd, self.log_path)
        if not procs.wait_until(lambda: proc.poll() is not None or self.ready(), timeout):
            self.stop()
            raise ServerError(f"the lighthouse did not answer within {timeout:g} s (log: {self.log_path})")
        return proc

    def ready(self) -> bool:
        """Its status page answers."""
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/", timeout=1) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        procs.stop(self.proc)

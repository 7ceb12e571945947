"""A spot notice must leave the node's container with a retryable exit code."""

import signal
import subprocess
import sys
import time

from lab.local.etcd import EtcdServer
from lab.vocab import events
from lab.vocab.job import JobSpec


def test_sigterm_to_the_launcher_exits_143(workdir):
    etcd = EtcdServer(workdir).start()
    try:
        spec = JobSpec(
            min_nodes=1,
            max_nodes=1,
            rdzv_endpoint=etcd.endpoint,
            checkpoint_dir=str(workdir / "ckpt"),
            script_args=("--steps", "100000", "--step-time", "0.05"),
        )
        env = {**__import__("os").environ, **spec.worker_env(), "LAB_EVENTS_FILE": str(workdir / "events.jsonl")}
        proc = subprocess.Popen(
            [*spec.launcher(sys.executable), *spec.torchrun_args(local_addr="127.0.0.1"), *spec.entrypoint()],
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
            e["event"] == "step" for e in events.read(workdir / "events.jsonl")
        ):
            time.sleep(0.2)
        import os

        os.killpg(proc.pid, signal.SIGTERM)  # the node's whole process group, as a drain does
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
        ev = events.read(workdir / "events.jsonl")
        assert any(e["event"] == "checkpoint_saved" and e["reason"] == "notice" for e in ev)
    finally:
        etcd.stop()

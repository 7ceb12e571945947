"""How a node's launcher exits: a spot notice leaves its container with a retryable exit code,
a deterministic crash with a failing one after a few attempts."""

import os
import signal
import subprocess
import sys
import time

from lab.local.etcd import EtcdServer
from lab.vocab import events
from lab.vocab.job import JobSpec


def _node(spec: JobSpec, workdir) -> subprocess.Popen:
    """One node's launcher for `spec`, in a session of its own, its events in workdir/events.jsonl."""
    env = {**os.environ, **spec.worker_env(), "LAB_EVENTS_FILE": str(workdir / "events.jsonl")}
    return subprocess.Popen(
        [*spec.launcher(sys.executable), *spec.torchrun_args(local_addr="127.0.0.1"), *spec.entrypoint()],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


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
        proc = _node(spec, workdir)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
            e["event"] == "step" for e in events.read(workdir / "events.jsonl")
        ):
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGTERM)  # the node's whole process group, as a drain does
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
        ev = events.read(workdir / "events.jsonl")
        assert any(e["event"] == "checkpoint_saved" and e["reason"] == "notice" for e in ev)
    finally:
        etcd.stop()


def test_a_script_that_fails_the_same_way_ends_the_agent_after_a_few_attempts(workdir):
    """A deterministic crash is restarted CRASH_LOOP_ATTEMPTS times, not max_restarts (100)
    times inside the pod: torchrun then exits 1, which fails the PyTorchJob, and its last
    lines (the pod's termination message on a cluster) name the exception."""
    from lab.runtime.launch import CRASH_LOOP_ATTEMPTS

    script = workdir / "broken.py"
    script.write_text("raise FileNotFoundError(2, 'No such file or directory', '/data/train.bin')\n")
    etcd = EtcdServer(workdir).start()
    try:
        spec = JobSpec(
            min_nodes=1,
            max_nodes=1,
            module=None,
            script=str(script),
            rdzv_endpoint=etcd.endpoint,
            checkpoint_dir=str(workdir / "ckpt"),
        )
        assert spec.max_restarts > CRASH_LOOP_ATTEMPTS
        proc = _node(spec, workdir)
        try:
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:  # it hung: nothing of it may outlive the test
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 1, err[-2000:]
        (loop,) = [e for e in events.read(workdir / "events.jsonl") if e["event"] == "workers_crash_loop"]
        assert loop["attempts"] == CRASH_LOOP_ATTEMPTS and "/data/train.bin" in loop["error"]
        tail = "\n".join(err.splitlines()[-40:])
        assert "crash loop" in err and "FileNotFoundError" in tail
    finally:
        etcd.stop()

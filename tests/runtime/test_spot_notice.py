"""The SIGTERM a sharded worker gets: a notice (wait for a step boundary to save with every
rank) or its agent restarting the workers after a peer was lost (leave at once)."""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lab.runtime.spot_notice import EXIT_ON_NOTICE, mark_peers_lost, peers_lost_marker, write_notice_deadline
from lab.vocab.job import ENV_NODE, ENV_NOTICE_DEADLINE_FILE, ENV_POD_NAMESPACE
from tests.patience import within

# A worker that cooperates on notices, never reaches a step boundary (its main thread is
# stuck, as on a vanished peer), and says when it gave up waiting.
WORKER = textwrap.dedent(
    """
    import os, signal, sys, time
    from lab.runtime.spot_notice import SpotNotice

    notice = SpotNotice()
    notice.boundary_s = 5.0
    notice.cooperate(30.0, on_timeout=lambda: print("gave up", flush=True))
    print("ready", flush=True)
    time.sleep(60)
    """
)


def _stop(env: dict[str, str]) -> tuple[int, str, str]:
    """SIGTERM to a ready WORKER: its exit code, stdout and stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "PATH": "/usr/bin:/bin"},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.terminate()
        out, err = proc.communicate(timeout=within(30))
        return proc.returncode, out, err
    finally:
        proc.kill()
        proc.wait()


LEFT_AT_ONCE = "stopped by the agent after a peer was lost"
READ_TRIED = "deletion time cannot be read"


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_worker_stopped_after_a_lost_peer_leaves_without_waiting_for_a_step_boundary(tmp_path, monkeypatch):
    import os

    round_env = {"TORCHELASTIC_RUN_ID": f"t-{tmp_path.name}", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}
    # A cluster's worker (its pod named), where no API server answers: a notice tries to read
    # the pod's end and says it could not; the agent's restart does not try.
    pod_env = {ENV_NODE: "worker-pod", ENV_POD_NAMESPACE: "training"}
    env = {**os.environ, **round_env, **pod_env, "TMPDIR": str(tmp_path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    # A notice: the worker waits its boundary time for the step boundary, then leaves.
    code, out, err = _stop(env)
    assert code == EXIT_ON_NOTICE and "gave up" in out and LEFT_AT_ONCE not in err, err
    assert READ_TRIED in err, err
    # Its agent marked the round (in the workers' temporary directory) before stopping it.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR here, as the worker does
    marker = peers_lost_marker(round_env["TORCHELASTIC_RUN_ID"], "127.0.0.1", 29555)
    assert marker.is_relative_to(tmp_path)
    mark_peers_lost(marker)
    code, out, err = _stop(env)
    assert code == EXIT_ON_NOTICE and "gave up" in out and LEFT_AT_ONCE in err, err
    assert READ_TRIED not in err, err
    # Another round (torchrun's new master port) has a mark of its own.
    assert peers_lost_marker(round_env["TORCHELASTIC_RUN_ID"], "127.0.0.1", 29556) != marker


# A worker with a thread older than its notice (as `import torch` starts one): that thread does
# not block SIGTERM, so the kernel may deliver the signal through it.
EARLY_THREAD_WORKER = textwrap.dedent(
    """
    import threading, time
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    from lab.runtime.spot_notice import SpotNotice

    notice = SpotNotice()
    notice.on_notice = lambda: print("saved", flush=True)
    print("ready", flush=True)
    while True:  # a training loop: back in Python between its steps
        time.sleep(0.05)
    """
)


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_notice_reaches_a_worker_with_threads_older_than_the_notice():
    proc = subprocess.Popen([sys.executable, "-c", EARLY_THREAD_WORKER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.terminate()
        out, _ = proc.communicate(timeout=within(30))
    finally:
        proc.kill()
        proc.wait()
    assert (proc.returncode, out.strip()) == (EXIT_ON_NOTICE, "saved")


# A worker whose training loop goes on after a notice only if the notice lets it: it says each
# step it trains after the notice came, and what the notice made it save. Cooperating (sharded
# state), it takes the notice when `requested` is set, as the loop's step boundary does.
TRAINING_WORKER = textwrap.dedent(
    """
    import os, sys, time
    from lab.runtime import pod_deadline
    from lab.runtime.spot_notice import SpotNotice

    # A test's stand-ins for the service account's token and the cluster's CA, mounted in a pod.
    pod_deadline.SERVICE_TOKEN_FILE = os.environ.get("TEST_TOKEN_FILE", pod_deadline.SERVICE_TOKEN_FILE)
    pod_deadline.SERVICE_CA_FILE = os.environ.get("TEST_CA_FILE", pod_deadline.SERVICE_CA_FILE)
    notice = SpotNotice()
    if sys.argv[1] == "sharded":
        notice.cooperate(30.0)
    else:
        notice.save_now = lambda: print("saved at once", flush=True)
        notice.on_notice = lambda: print("saved at the end", flush=True)
    notice.step_s = 0.05
    print("ready", flush=True)
    while True:
        time.sleep(0.05)
        if notice.requested.is_set():
            print("saved at the end", flush=True)
            notice.acknowledge()
            notice.handled()
            time.sleep(60)
        if notice.received_at is not None:
            print("step after the notice", flush=True)
    """
)


def _notice(
    kind: str, env: dict[str, str], deadline_in_s: float | None, tell: Callable[[float], None]
) -> tuple[int, list[str]]:
    """SIGTERM to a ready TRAINING_WORKER whose notice ends `deadline_in_s` later (None: it does
    not say; `tell` says it before the signal): its exit code and what it printed after `ready`."""
    proc = subprocess.Popen([sys.executable, "-c", TRAINING_WORKER, kind], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        if deadline_in_s is not None:
            tell(deadline_in_s)
        proc.terminate()
        out, _ = proc.communicate(timeout=within(30))
        return proc.returncode, out.split("\n")
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.processes
@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", ["whole", "sharded"])
@pytest.mark.parametrize("target", ["local", "cluster"])
def test_a_notice_that_says_when_the_node_goes_is_trained_through(kind, target, tmp_path):
    """Locally the notifier writes the node's end to a file; on a cluster the worker reads it
    from its own pod, which the eviction marked with the end of its grace period."""
    import os

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    with contextlib.ExitStack() as stack:
        if target == "local":
            deadline_file = tmp_path / "notice-deadline"
            env[ENV_NOTICE_DEADLINE_FILE] = str(deadline_file)

            def tell(in_s: float) -> None:
                write_notice_deadline(deadline_file, time.time() + in_s)
        else:
            env.pop(ENV_NOTICE_DEADLINE_FILE, None)
            tell = _pod_evicted_with_grace(stack, tmp_path, env)
        _trained_through(kind, env, tell)


def _trained_through(kind: str, env: dict[str, str], tell: Callable[[float], None]) -> None:
    # Without a deadline the notice is taken at once: no step after it.
    code, lines = _notice(kind, env, None, tell)
    assert code == EXIT_ON_NOTICE and "step after the notice" not in lines, lines
    # With one, the loop trains on, and the notice's last save comes after those steps; a rank
    # that holds the whole state saved first.
    code, lines = _notice(kind, env, 4.0, tell)
    assert code == EXIT_ON_NOTICE, lines
    trained_on = [i for i, line in enumerate(lines) if line == "step after the notice"]
    assert trained_on and lines.index("saved at the end") > trained_on[-1], lines
    if kind == "whole":
        assert lines.index("saved at once") < trained_on[0], lines
    # A deadline already past (a notice that came late) is taken at once.
    code, lines = _notice(kind, env, -1.0, tell)
    assert code == EXIT_ON_NOTICE and "step after the notice" not in lines, lines


def _pod_evicted_with_grace(
    stack: contextlib.ExitStack, tmp_path: Path, env: dict[str, str]
) -> Callable[[float], None]:
    """An HTTPS API server holding the worker's pod, `env` made the pod's (its name and
    namespace, the service's address, a mounted token and CA), and a `tell` that evicts the pod
    with a grace period ending then, as a drain does before the kubelet's SIGTERM."""
    from kubernetes import client

    from tests.cluster.fake_kube import FakeKube, loopback_tls, node, pod

    tls, ca = loopback_tls(tmp_path)
    kube = stack.enter_context(FakeKube(tls=tls))
    kube.graceful_evictions = True
    kube.put(node("gpu-0", {}))
    token = tmp_path / "token"
    token.write_text("trainer-token")
    env.update(
        {
            ENV_NODE: "worker",
            ENV_POD_NAMESPACE: "training",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": kube.url.rpartition(":")[2],
            "TEST_TOKEN_FILE": str(token),
            "TEST_CA_FILE": str(ca),
        }
    )
    kube.put(pod("worker", "training", {}, node_name="gpu-0"))  # running: its worker is told nothing
    configuration = client.Configuration()
    configuration.host, configuration.ssl_ca_cert = kube.url, str(ca)
    core = client.CoreV1Api(stack.enter_context(client.ApiClient(configuration)))

    def tell(in_s: float) -> None:
        # The API server keeps whole seconds: a grace of ceil(in_s) ends at most a second later.
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name="worker", namespace="training"),
            delete_options=client.V1DeleteOptions(grace_period_seconds=max(0, math.ceil(in_s))),
        )
        kube.put(pod("worker", "training", {}, node_name="gpu-0"))  # each run's pod anew
        core.create_namespaced_pod_eviction("worker", "training", body)
        if in_s < 0:  # a notice that came late: the pod's end already past
            kube.get("Pod", "worker", "training")["metadata"]["deletionTimestamp"] = "2020-01-01T00:00:00Z"

    return tell


# A worker whose training ends 0.5 s into a notice it trains through: it finishes (its last step
# saved), then waits, as a finished worker waits for its agent to read its result (a noticed
# node's agent, shutting down, never does).
FINISHING_WORKER = textwrap.dedent(
    """
    import sys, time
    from lab.runtime.spot_notice import SpotNotice

    notice = SpotNotice()
    if sys.argv[1] == "sharded":
        notice.cooperate(30.0, on_timeout=lambda: print("gave up", flush=True))
        notice.boundary_s = 1.0
    else:
        notice.save_now = lambda: print("saved at once", flush=True)
        notice.on_notice = lambda: print("saved at the end", flush=True)
    notice.step_s = 0.05
    print("ready", flush=True)
    while notice.received_at is None:
        time.sleep(0.05)
    time.sleep(0.5)
    notice.finish()
    print("finished", flush=True)
    time.sleep(60)
    print("never ended", flush=True)
    """
)


@pytest.mark.processes
@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["whole", "sharded"])
def test_a_job_that_ends_within_the_notice_saves_and_says_nothing_more(kind, tmp_path):
    """The notice gave 8 s and the job's last step came 0.5 s into it: no save at the deadline (the
    last step is saved), no exit on the notice's behalf; the process still ends at the notice, with 0."""
    import os

    deadline_file = tmp_path / "notice-deadline"
    env = {**os.environ, "TMPDIR": str(tmp_path), ENV_NOTICE_DEADLINE_FILE: str(deadline_file)}
    proc = subprocess.Popen([sys.executable, "-c", FINISHING_WORKER, kind], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        write_notice_deadline(deadline_file, time.time() + 8.0)
        proc.terminate()
        out, _ = proc.communicate(timeout=within(30))
    finally:
        proc.kill()
        proc.wait()
    lines = out.split("\n")
    assert proc.returncode == 0, lines
    assert lines == [*(["saved at once"] if kind == "whole" else []), "finished", ""], lines

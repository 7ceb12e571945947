"""`python -m lab.runtime.notice` as a process: bad flags exit 2 before polling; a good run cordons
and evicts through a kubeconfig, logs JSON lines without the token, and stops on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from lab.runtime.notice.cli import main
from tests.patience import within
from tests.runtime.notice.conftest import NODE, VM, node_pods
from tests.runtime.notice.fakes import FakeImds, FakeKube, event, wait_for

TOKEN = "s3cr3t-service-account-token"


def _kubeconfig(path, server: str) -> str:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server}}],
                "users": [{"name": "handler", "user": {"token": TOKEN}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "handler"}}],
                "current-context": "fake",
            }
        )
    )
    return str(path)


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lab.runtime.notice", *args], capture_output=True, text=True, timeout=30, env=env
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--poll-interval", "0"], "--poll-interval='0' is invalid: expected seconds between 0.1 and 60"),
        (["--poll-interval", "soon"], "--poll-interval='soon' is invalid: expected seconds"),
        (["--imds-timeout", "-1"], "--imds-timeout='-1' is invalid: expected seconds between 0.1 and 30"),
        (["--act-on", "Preempt,Evict"], "--act-on='Preempt,Evict' is invalid: expected a comma-separated list of"),
        (["--act-on", ""], "--act-on='' is invalid"),
        (["--grace-margin", "40"], "--grace-margin='40' is invalid: expected seconds between 0 and 25"),
        (["--drain-timeout", "nan"], "--drain-timeout='nan' is invalid"),
        (["--node", "Node_1"], "--node='Node_1' is invalid: expected a Kubernetes node name"),
        (["--node", ""], "--node='' is invalid: expected this node's name, from --node or $NODE_NAME"),
        (["--imds-url", "169.254.169.254"], "--imds-url='169.254.169.254' is invalid: expected an http:// base URL"),
        (
            ["--kubeconfig", "/nonexistent/config"],
            "--kubeconfig='/nonexistent/config' is invalid: expected an existing",
        ),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else None,
)
def test_a_bad_flag_exits_2_naming_it_before_polling(args, message, capsys):
    with FakeImds(VM) as imds:
        argv = ["--node", NODE, "--imds-url", imds.url, *args] if args[0] != "--imds-url" else ["--node", NODE, *args]
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert message in err
        assert out == ""
        assert imds.requests == []


@pytest.mark.processes
def test_every_bad_flag_is_reported_at_once():
    result = _run("--node", "", "--poll-interval", "0", "--act-on", "Nope", env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    assert "3 problem(s)" in result.stderr
    for flag in ("--node=", "--poll-interval=", "--act-on="):
        assert flag in result.stderr


@pytest.mark.processes
def test_no_in_cluster_config_outside_a_pod_exits_2():
    result = _run("--node", NODE, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    assert "in-cluster config cannot be used" in result.stderr and "--kubeconfig" in result.stderr


@pytest.mark.processes
def test_the_handler_process_drains_on_preempt_and_stops_on_sigterm(workdir):
    with FakeImds(VM) as imds, FakeKube(node_pods()) as kube:
        config = _kubeconfig(workdir / "kubeconfig", kube.url)
        proc = subprocess.Popen(
            [sys.executable, "-m", "lab.runtime.notice", "--imds-url", imds.url, "--kubeconfig", config],
            env={"PATH": "/usr/bin:/bin", "NODE_NAME": NODE},  # the downward API's variable
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert wait_for(lambda: imds.polls() >= 1, timeout=within(15)), "no poll"
            published = imds.publish(event("e-1", VM, "Preempt", time.time() + 30))
            assert wait_for(lambda: len(kube.evictions()) == 2, timeout=within(30))
            latency = max(c["t"] for c in kube.evictions()) - published
            print(f"process, default 1 s polls: event -> last eviction asked: {latency * 1000:.0f} ms")
            # Drained on the first poll that saw the event (the next waits for the drain).
            assert imds.answered_with_current(before=kube.of("PATCH")[0]["t"]) == 1
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=within(10))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err
    assert {c["authorization"] for c in kube.calls} == {f"Bearer {TOKEN}"}
    assert TOKEN not in out + err
    lines = [json.loads(line) for line in out.splitlines()]
    assert all({"time", "t", "event"} <= line.keys() for line in lines)
    events = [line["event"] for line in lines]
    assert events[:2] == ["started", "vm"] and events[-1] == "stopped"
    assert {"event_seen", "cordoned", "eviction_asked", "drained"} <= set(events)
    asked = {line["pod"]: line["grace_s"] for line in lines if line["event"] == "eviction_asked"}
    assert asked.keys() == {"training/train-0", "training/train-1"} and asked["training/train-1"] == 10

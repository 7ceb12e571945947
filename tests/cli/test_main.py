"""`elastic-lab` itself: what the command line says of itself."""

from __future__ import annotations

import pytest

from lab.cli import main


def test_the_command_line_says_its_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"elastic-lab {version('elastic-spot-lab')}"


def test_the_program_finds_the_idle_event_loops_a_command_left_in_its_threads():
    """Pulumi's mocks leave an event loop in each thread of their pool; the program closes the
    idle ones before the interpreter's shutdown would (and print noise), never a running one.
    Only this test's loops are closed here: the process's own stay as they were."""
    import asyncio
    import threading

    from lab.cli.main import idle_event_loops

    left: list[asyncio.AbstractEventLoop] = []

    def a_pool_thread() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        left.append(loop)

    worker = threading.Thread(target=a_pool_thread)
    worker.start()
    worker.join()
    busy = asyncio.new_event_loop()
    runner = threading.Thread(target=busy.run_forever)
    runner.start()
    try:
        while not busy.is_running():
            threading.Event().wait(0.01)
        found = idle_event_loops()
        assert any(loop is left[0] for loop in found) and not any(loop is busy for loop in found)
    finally:
        left[0].close()
        busy.call_soon_threadsafe(busy.stop)
        runner.join()
        busy.close()
    assert not any(loop is left[0] for loop in idle_event_loops())


def test_a_command_that_ran_the_program_offline_ends_with_its_own_last_line():
    """`status` on the byo stack, whose example kubeconfig names a loopback port nothing listens
    on: the stack's facts come from its program run offline, then the one line that says why
    the cluster is out of reach; nothing after it, run after run (a loop left open printed an
    ignored ValueError at exit in about one run of four)."""
    import socket
    import subprocess
    import sys

    from lab.vocab.layout import ROOT

    with socket.socket() as probe:
        probe.settimeout(0.5)
        if probe.connect_ex(("127.0.0.1", 6443)) == 0:
            pytest.skip("something listens on 127.0.0.1:6443: the byo example would reach a real cluster")
    for _ in range(6):
        done = subprocess.run(
            [sys.executable, "-m", "lab.cli", "status", "--stack", "byo", "nothing"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0 and "no Kubernetes API server reachable" in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1, done.stderr

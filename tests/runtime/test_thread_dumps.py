"""lab.runtime.thread_dumps, in processes of their own (registering a signal handler here would
change the test runner)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from lab.local import procs
from lab.vocab.thread_dumps import DUMP_SIGNAL, ENV_THREAD_DUMPS, WORKER, dump_file_name
from tests.patience import within

SLEEPER = textwrap.dedent("""
    import time
    from lab.runtime.thread_dumps import dump_threads_on_request

    def napping_in_place(registered):
        print(registered, flush=True)
        time.sleep(60)

    napping_in_place(dump_threads_on_request("worker"))
""")


def _start(workdir, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", SLEEPER], env=env, cwd=workdir, stdout=subprocess.PIPE, text=True)


def test_a_process_asked_writes_every_threads_stack_to_its_own_file(workdir):
    dumps = workdir / "thread-dumps"
    env = {**os.environ, ENV_THREAD_DUMPS: str(dumps)}
    proc = _start(workdir, env)
    try:
        said = proc.stdout.readline().split()
        path = dumps / dump_file_name(WORKER, proc.pid)
        assert said[0] == str(path) and path.read_text() == ""
        proc.send_signal(DUMP_SIGNAL)
        assert procs.wait_until(lambda: "napping_in_place" in path.read_text(), 10), path.read_text()
        assert proc.poll() is None  # dumping does not end it
    finally:
        proc.kill()
        proc.wait()


def test_without_a_directory_nothing_is_registered(workdir):
    env = {k: v for k, v in os.environ.items() if k != ENV_THREAD_DUMPS}
    proc = _start(workdir, env)
    try:
        assert proc.stdout.readline().split() == ["None"]
        assert not (workdir / "thread-dumps").exists()
        # no handler: the signal's default action ends the process (faulthandler's is invisible
        # to signal.getsignal, so the process itself is the check)
        proc.send_signal(DUMP_SIGNAL)
        assert proc.wait(within(10)) == -DUMP_SIGNAL
    finally:
        proc.kill()
        proc.wait()

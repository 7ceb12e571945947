"""lab.drill.thread_dumps: faulthandler's dumps read into frames and said in a line."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import textwrap

from lab.drill.thread_dumps import Frame, is_library, main_thread, threads, where

# A real dump, as the drill gets one from a hung worker: its main thread waits in a library
# (threading's), called from the script's `main`; a thread of its own sleeps in `helper`.
DUMPING = textwrap.dedent("""
    import faulthandler, sys, threading, time

    def helper():
        time.sleep(60)

    def main():
        threading.Event().wait(5)

    threading.Thread(target=helper, daemon=True).start()
    faulthandler.dump_traceback_later(0.5, file=sys.stdout, exit=True)
    main()
""")


def _real_dump(workdir) -> tuple[str, str]:
    script = workdir / "dumping.py"
    script.write_text(DUMPING)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    return out.stdout, str(script)


def test_a_real_dump_reads_into_threads_and_its_main_thread(workdir):
    text, script = _real_dump(workdir)
    stacks = threads(text)
    assert len(stacks) == 2, text
    main = main_thread(stacks)
    assert main is not None and [f.function for f in main] == ["wait", "wait", "main", "<module>"], text
    assert main[2] == Frame(script, 8, "main") and main[0].path.endswith("/threading.py")
    (other,) = [s for s in stacks if s is not main]
    assert other[0].function == "helper" and other[-1].function == "_bootstrap"


def test_where_names_the_innermost_frames_then_the_scripts_own_line(workdir):
    text, _ = _real_dump(workdir)
    lines = [f.line for f in main_thread(threads(text)) or ()]
    assert (
        where(text)
        == f"wait (threading.py:{lines[0]}) < wait (threading.py:{lines[1]}), called from dumping.py:8 in main"
    )


def test_a_stack_deep_in_libraries_names_the_scripts_line_too():
    stdlib = sysconfig.get_paths()["stdlib"]
    text = "\n".join(
        [
            "Current thread 0x00007f0000000001 (most recent call first):",
            '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 5356 in barrier',
            '  File "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper',
            f'  File "{stdlib}/contextlib.py", line 81 in inner',
            '  File "/home/me/train.py", line 14 in main',
            '  File "/home/me/train.py", line 20 in <module>',
        ]
    )
    assert where(text) == (
        "barrier (torch/distributed/distributed_c10d.py:5356) < wrapper (torch/distributed/c10d_logger.py:83),"
        " called from train.py:14 in main"
    )


def test_frames_of_packages_and_the_standard_library_are_not_the_scripts():
    stdlib = sysconfig.get_paths()["stdlib"]
    assert is_library(Frame("/x/lib/python3.11/site-packages/torch/nn/module.py", 1, "f"))
    assert is_library(Frame(f"{stdlib}/threading.py", 1, "wait"))
    assert not is_library(Frame("/home/me/train.py", 1, "main"))


def test_a_dump_without_frames_says_nothing():
    assert where("") is None
    assert where("Current thread 0x00007f0000000001 (most recent call first):\n  <no Python frame>\n") is None

"""The local target's watchdog: a process of its own that kills every process group the
target started when the target's process dies, however it dies (SIGKILL included, when no
clean-up of its own can run).

Protocol, on standard input: one process-group id per line as the target starts them;
`done` when the target has stopped them itself (the watchdog then exits and kills nothing).
End of input without `done` means the target's process is gone: every group is killed,
stopped ones included (SIGKILL reaches a stopped process), and the directories given as
arguments (the nodes' temp dir) are removed.

Run as `python -m lab.local.watchdog [DIR ...]`; lab.local.target starts it.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time

DONE = "done"


def main() -> int:
    groups: list[int] = []
    for line in sys.stdin:
        word = line.strip()
        if word == DONE:
            return 0
        if word.isdigit():
            groups.append(int(word))
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    time.sleep(0.5)  # the killed may still be closing files in them
    for path in sys.argv[1:]:
        shutil.rmtree(path, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

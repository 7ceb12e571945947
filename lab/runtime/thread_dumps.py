"""This process writes every thread's Python stack to its own file when the drill asks
(lab.vocab.thread_dumps), if its environment names a directory for them."""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from lab.vocab.thread_dumps import DUMP_SIGNAL, ENV_THREAD_DUMPS, dump_file_name

# The open dump file: faulthandler writes to its descriptor from the signal handler, so it must
# outlive the call that registered it.
_dump_file: IO[str] | None = None


def dump_threads_on_request(role: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """Register this process's dump file for `role`; its path, or None when the environment
    asks for none. A process forked after this call inherits the handler, writing to the
    parent's file, until it registers its own."""
    global _dump_file
    env = os.environ if environ is None else environ
    where = env.get(ENV_THREAD_DUMPS)
    if not where:
        return None
    path = Path(where) / dump_file_name(role, os.getpid())
    path.parent.mkdir(parents=True, exist_ok=True)
    dump_file = path.open("w", encoding="utf-8")
    faulthandler.register(DUMP_SIGNAL, file=dump_file, all_threads=True, chain=False)
    if _dump_file is not None:
        _dump_file.close()
    _dump_file = dump_file
    return path

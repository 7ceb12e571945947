"""A standalone c10d rendezvous store: a TCPStore in a process of its own, as the cluster
runs it on the on-demand CPU pool. Agents connect with `is_host=false`, so evicting any
node (even the first) never takes the store down.

Run: python -m lab.runtime.store --host 127.0.0.1 --port 29400
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from datetime import timedelta


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    # torch imports TCPStore into torch.distributed without re-exporting it (no `as`, no __all__).
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    # The handlers first: the store accepts connections as soon as it is built, and a stop
    # that came before them would kill the process instead of ending it cleanly.
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    store = TCPStore(
        args.host, args.port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60), multi_tenant=True
    )
    print(f"c10d store listening on {args.host}:{store.port}", flush=True)
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

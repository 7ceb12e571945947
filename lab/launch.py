"""torchrun, with a rendezvous that notices a lost node in about a second and a half.

Usage is torchrun's: `python -m lab.launch [torchrun flags] -m lab.train [script args]`;
flags can come from torchrun's PET_* environment as well (what the training operator sets).

Why: torch's dynamic rendezvous (c10d and etcd-v2 backends) reads its timeouts as whole
seconds and polls the shared state once a second. A node that vanishes is only dropped after
keep_alive_interval x keep_alive_max_attempt, so at best 3 s, and every round change costs
up to another second of polling. This launcher registers the same two backends with a
handler that accepts fractional seconds (`keep_alive_interval=0.5`, `last_call_timeout=0.5`)
and an extra `poll_interval` key (default 1, torch's own). Without those keys it behaves
exactly like torchrun.
"""

from __future__ import annotations

import sys
from datetime import timedelta

# rdzv-conf keys read here; torch's own create_handler would reject fractions in them.
FRACTIONAL_KEYS = ("join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout", "keep_alive_interval")
POLL_KEY = "poll_interval"


def _seconds(params, key: str) -> timedelta | None:
    value = params.get(key)
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"rdzv-conf {key}={value!r} is invalid: expected seconds (a number > 0)") from None
    if seconds <= 0:
        raise ValueError(f"rdzv-conf {key}={value!r} is invalid: expected seconds > 0")
    return timedelta(seconds=seconds)


def _create_handler(create_backend, params):
    """torch's dynamic-rendezvous handler, built from fractional-second settings."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler, RendezvousTimeout

    backend, store = create_backend(params)
    timeout = RendezvousTimeout(
        *(_seconds(params, k) for k in ("join_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout"))
    )
    keep_alive = _seconds(params, "keep_alive_interval") or timedelta(seconds=5)
    attempts = params.get_as_int("keep_alive_max_attempt", 3)
    handler = DynamicRendezvousHandler.from_backend(
        params.run_id,
        store,
        backend,
        params.min_nodes,
        params.max_nodes,
        params.local_addr,
        timeout,
        keep_alive_interval=keep_alive.total_seconds(),
        keep_alive_max_attempt=attempts,
    )
    poll = _seconds(params, POLL_KEY)
    if poll is not None:
        _set_poll_interval(poll.total_seconds())
    return handler


def _set_poll_interval(poll: float) -> None:
    """The rendezvous op loop sleeps `_delay(seconds=1)` between polls of the shared state;
    make that sleep `poll` seconds. Other delays (jittered retries) are left as they are."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous, utils

    original = utils._delay

    def delay(seconds: float | tuple[float, float]) -> None:
        original(seconds=poll if seconds == 1 else seconds)

    dynamic_rendezvous._delay = delay


def _etcd_v2(params):
    from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import create_backend

    return _create_handler(create_backend, params)


def _c10d(params):
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend

    return _create_handler(create_backend, params)


def install() -> None:
    """Route the c10d and etcd-v2 backends through our handler. The registry has no public
    way to replace a built-in backend, so this writes its table; a torch without it fails
    loudly here instead of silently running with slow settings."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry as registry

    table = getattr(registry, "_registry", None)
    if not isinstance(table, dict) or "c10d" not in table or "etcd-v2" not in table:
        raise RuntimeError(
            "this torch's rendezvous registry has an unknown layout: run plain torchrun with "
            "whole-second rdzv-conf values instead"
        )
    table["etcd-v2"] = _etcd_v2
    table["c10d"] = _c10d


def main(argv: list[str] | None = None) -> int:
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.api import SignalException

    install()
    try:
        run.main(argv if argv is not None else sys.argv[1:])
    except SignalException as exc:
        # torchrun exits 1 on SIGTERM; a spot notice must look retryable to the training
        # operator (restartPolicy: ExitCode retries 128-255), so exit 128 + signal.
        print(f"lab.launch: stopped by signal {exc.sigval.name}", file=sys.stderr)
        return 128 + int(exc.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())

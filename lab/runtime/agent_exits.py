"""How the launcher's agent exits: torchrun's main, with the exit codes the training operator
retries (restartPolicy: ExitCode retries a pod only for 128-255; torchrun's 1 ends the job) and
the exceptions that pick them."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from lab.runtime.container_ledger import ContainerKillLoop
from lab.vocab.job import LAUNCH_MODULE

# Exit codes. A signal exits 128 + its number, as a shell does.
EXIT_RENDEZVOUS_UNREACHABLE = 170  # the rendezvous server stayed unreachable past server_outage
EXIT_RENDEZVOUS_TIMEOUT = 171  # fewer than min_nodes joined within join_timeout
PROG = LAUNCH_MODULE


class JobAlreadyDone(Exception):
    """The rendezvous closed after other agents' workers finished the job: this agent, which was
    rejoining, has nothing left to do."""


def run_torchrun(torchrun: Callable[[list[str]], None], args: list[str], handlers: Sequence[Any]) -> int:
    """torchrun's main, with the exits it leaves to us; `handlers`: the rendezvous handlers
    this agent made (lab.runtime.rendezvous_backends)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError, RendezvousTimeoutError

    try:
        torchrun(args)
    except SignalException as exc:
        # The agent stopped its workers (they saved on the notice) and left the rendezvous
        # as it was: take this node out of the round for the others. Their workers may have
        # finished the job meanwhile (a notice that said when, trained through to the job's
        # end): their agents wait in the round's exit barrier for this one, so count it in.
        for handler in handlers:
            handler.leave_round(exc.sigval.name)
            handler.check_in_to_the_exit_barrier()
        # torchrun exits 1 on SIGTERM; a spot notice must look retryable to the training
        # operator (restartPolicy: ExitCode retries 128-255), so exit 128 + signal.
        print(f"{PROG}: stopped by signal {exc.sigval.name}", file=sys.stderr)
        return 128 + int(exc.sigval)
    except RendezvousTimeoutError as exc:
        print(
            f"{PROG}: rendezvous timed out ({exc}); exiting {EXIT_RENDEZVOUS_TIMEOUT} to be retried",
            file=sys.stderr,
        )
        return EXIT_RENDEZVOUS_TIMEOUT
    except RendezvousConnectionError as exc:
        print(
            f"{PROG}: rendezvous server unreachable ({exc}); exiting {EXIT_RENDEZVOUS_UNREACHABLE} to be retried",
            file=sys.stderr,
        )
        return EXIT_RENDEZVOUS_UNREACHABLE
    except JobAlreadyDone as exc:
        print(f"{PROG}: {exc}; nothing left to do", file=sys.stderr)
        return 0
    except ContainerKillLoop as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except ChildFailedError:
        # Its workers failed with no restart left (a crash loop given up on): torch enters the
        # exit barrier only when they succeed, and the agents of its last round whose workers
        # did wait there for this one until the barrier's timeout (300 s). Count it in.
        for handler in handlers:
            handler.check_in_to_the_exit_barrier()
        raise
    return 0

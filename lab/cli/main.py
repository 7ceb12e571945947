"""`elastic-lab`: one command line for the lab.

Each noun's commands live in a module of lab/cli that exposes `register(subparsers)` and sets
`func` on each parser. Those modules import only argparse and the vocabulary at the top; each
command imports what it needs when it runs, so that `elastic-lab drill` does not pay for
importing Pulumi, and `elastic-lab plan` does not import torch. A command reports a failure by
raising a LabError; `main` is the one place where it becomes a message and an exit status.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lab.cli import drill, job, plan, stack, submit, teardown
from lab.cli.common import attempt
from lab.vocab.command_flags import with_exit_status
from lab.vocab.current_stack import STACK_REQUIRED, current_stack
from lab.vocab.errors import LabError
from lab.vocab.names import PROJECT

SUBCOMMANDS = (stack, plan, submit, job, drill, teardown)
# What an exit status means for a command, besides what it means for all (command_flags.EXIT_STATUS).
EXIT_STATUS_OF = {
    "drill": "1 also: the drill failed (the job did not recover, did not finish, lost more than a checkpoint "
    "interval, or trained a sample twice or never); 143 stopped by SIGTERM; every process it started is stopped "
    "in every case",
    "check": "1: something required is missing (a warning alone is 0)",
    "submit": "2 also: a job that cannot run on the stack's pools, refused before anything is created",
    "teardown": "1 also: something could not be deleted (it is named, with what to do)",
}


def _version() -> str:
    """The installed package's version (a checkout run without installing says so)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PROJECT)
    except PackageNotFoundError:
        return "(not installed: run `make setup`)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="elastic-lab", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.register(sub)
    for name, command in sub.choices.items():
        with_exit_status(command, EXIT_STATUS_OF.get(name, ""))  # the command's parser
    return parser


def _use_current_stack(args: argparse.Namespace) -> str | None:
    """Fill a command's --stack from the current stack where it was not given; why not, when a
    command that needs a stack has none."""
    wants = getattr(args, "stack_default", None)
    if not wants or getattr(args, "stack", None) or getattr(args, "all_stacks", False):
        return None
    from lab.program.stack_files import StackNotFound, list_stacks, stack_file

    found = current_stack()
    if found is not None:
        try:
            stack_file(found.name, source=found.source)  # a stale choice is named with where it was made
        except StackNotFound as exc:
            return f"elastic-lab {args.command}: {exc}"
        args.stack = found.name
        return None
    if wants != STACK_REQUIRED:
        return None

    return (
        f"elastic-lab {args.command}: no stack: give -s STACK, or choose one for every command with "
        f"`elastic-lab stack select STACK` (stacks here: {', '.join(list_stacks()) or 'none'})"
    )


def run() -> None:
    """The `elastic-lab` program: `main`, then the exit. Commands that run the Pulumi program
    offline leave asyncio event loops open (Pulumi's mocks make one in each thread of its pool
    and never close them); left to the interpreter's shutdown, a loop's close may find its
    self-pipe already gone and print an ignored ValueError after the command's own last line.
    The program closes them first: its process, its loops."""
    code = main()
    for loop in idle_event_loops():
        loop.close()
    sys.exit(code)


def idle_event_loops() -> list[Any]:
    """Every asyncio event loop of the process neither running nor closed."""
    if "asyncio" not in sys.modules:
        return []  # nothing made one
    import asyncio
    import gc

    return [
        o for o in gc.get_objects() if isinstance(o, asyncio.BaseEventLoop) and not o.is_running() and not o.is_closed()
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    missing = _use_current_stack(args)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    outcome = attempt(lambda: args.func(args))
    if isinstance(outcome, LabError):
        print(f"elastic-lab {args.command}: {outcome}", file=sys.stderr)
        return outcome.exit_code
    return int(outcome or 0)

"""`elastic-lab stack`: the project's stacks and the current one (the stack a command uses when
it is given no --stack); `stack select STACK` chooses it, `stack unselect` forgets it.

Only argparse and the vocabulary are imported here; the stack files are read when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys

from lab.vocab.command_flags import add_output
from lab.vocab.current_stack import ENV_STACK, current_stack, select_stack, unselect_stack


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "stack",
        help="the project's stacks and the current one; `stack select STACK` chooses it",
        description=f"The stacks (stacks/Pulumi.<stack>.yaml) with their cloud, the current one marked *. "
        f"Commands given no --stack use the current stack: ${ENV_STACK} if set, else the one chosen with "
        "`elastic-lab stack select STACK` (kept in this checkout, .elastic-lab/stack). `drill` and `teardown` "
        "never use it: they name their target every time.",
    )
    p.add_argument("action", nargs="?", choices=("list", "select", "unselect"), default="list", help="[list]")
    p.add_argument("name", nargs="?", metavar="STACK", help="the stack to select")
    add_output(p, "the list")
    p.set_defaults(func=stack_main)


def stack_main(args: argparse.Namespace) -> int:
    from lab.program.stack_files import list_stacks, stack_file
    from lab.stacks.automation import configured_cloud
    from lab.vocab.errors import LabError

    try:
        if args.action == "select":
            if not args.name:
                print("elastic-lab stack select: give the stack's name, e.g. `elastic-lab stack select aks-dev`")
                return 2
            stack_file(args.name)  # an unknown stack is refused, naming those there are
            select_stack(args.name)
            shadowed = current_stack()
            note = (
                f" (${ENV_STACK}={shadowed.name} wins while it is set)"
                if shadowed and shadowed.name != args.name
                else ""
            )
            print(f"current stack: {args.name}{note}")
            return 0
        if args.name:
            print(f"elastic-lab stack {args.action}: takes no stack name (did you mean `stack select {args.name}`?)")
            return 2
        if args.action == "unselect":
            print("no stack selected now" if unselect_stack() else "no stack was selected")
            return 0
        current = current_stack()
        rows = [
            {"stack": s, "cloud": configured_cloud(s), "current": bool(current and current.name == s)}
            for s in list_stacks()
        ]
        if args.output == "json":
            print(json.dumps({"current": current.name if current else None, "stacks": rows}, indent=2))
            return 0
        for row in rows:
            print(f"{'*' if row['current'] else ' '} {row['stack']:<20} {row['cloud']}")
        if current is None:
            print("no current stack: `elastic-lab stack select STACK` chooses one")
        elif not any(row["current"] for row in rows):
            print(f"the current stack {current.name!r} (from {current.source}) has no stack file")
        else:
            print(f"current: {current.name} (from {current.source})")
        return 0
    except LabError as exc:
        print(f"elastic-lab stack: {exc}", file=sys.stderr)
        return exc.exit_code

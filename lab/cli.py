"""`elastic-lab`: one command line for the lab.

Each subcommand lives in its own module that exposes `register(subparsers)`; the module
sets `func` on its parser. Modules are imported lazily so that `elastic-lab drill` does
not pay for importing Pulumi, and `elastic-lab plan` does not import torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module that registers it
SUBCOMMANDS = {
    "drill": "lab.drill.cli",
    "plan": "lab.plan.cli",
    "submit": "lab.submit.cli",
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="elastic-lab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = [a for a in argv if a in SUBCOMMANDS][:1] or list(SUBCOMMANDS)
    for name in wanted:
        importlib.import_module(SUBCOMMANDS[name]).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

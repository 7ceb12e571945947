"""The flags every command spells the same way, as kubectl and Pulumi users expect them:
`-o text|json` (with `--json` for `-o json`), `-y/--yes`, `-n/--namespace`, `--team`, and the exit
statuses each command's `--help` ends with."""

from __future__ import annotations

import argparse

from lab.vocab.errors import EXIT_FAILED, EXIT_REFUSED

OUTPUTS = ("text", "json")
# What every command's exit status means (lab.vocab.errors), and what some add.
EXIT_STATUS = (
    f"exit status: 0 done; {EXIT_FAILED} the operation failed, or a check it makes did; {EXIT_REFUSED} the "
    "input was refused before anything started (nothing was created or changed); 130 interrupted (Ctrl-C)"
)


def add_output(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str = "it") -> None:
    """`-o/--output text|json`, and `--json` for `-o json`."""
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text", help=f"how to print {what} [text]")
    parser.add_argument("--json", action="store_const", dest="output", const="json", help="the same as -o json")


def add_yes(parser: argparse.ArgumentParser | argparse._ArgumentGroup, help: str) -> None:
    parser.add_argument("-y", "--yes", action="store_true", help=help)


def add_namespace(parser: argparse.ArgumentParser | argparse._ArgumentGroup, help: str) -> None:
    parser.add_argument("-n", "--namespace", help=help)


def with_exit_status(parser: argparse.ArgumentParser, specific: str = "") -> None:
    """End the command's --help with what its exit statuses mean (`specific`: what they also
    mean for it), unless its description already says them."""
    if "exit status" in (parser.description or "").lower():
        return
    parser.epilog = f"{EXIT_STATUS}; {specific.rstrip('.')}." if specific else f"{EXIT_STATUS}."


def add_team(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--team",
        metavar="NAME",
        help="a team of the stack (its platform.teams): the job's namespace, quotas and checkpoint folder are the "
        "team's [none: the platform's own namespace]",
    )

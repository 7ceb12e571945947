"""The command-line reference, docs/cli.md, written from the parsers themselves so that it
cannot drift from them: `python -m lab.cli.reference > docs/cli.md` (`make docs`); a test
checks that the committed file is what this prints.

Each command's section is its `--help`, formatted at a fixed width (not the terminal's).
"""

from __future__ import annotations

import argparse
import sys

from lab.cli import build_parser

WIDTH = 100

HEADER = """# Command-line reference

Every `elastic-lab` command's `--help`, written from the parsers by `make docs` (do not edit by
hand: a test compares this file with what the parsers print). Options that take a stack default
to the current stack (`elastic-lab stack select STACK`, or `$ELASTIC_LAB_STACK`); `drill` and
`teardown` name their target every time. Every command spells the common flags as kubectl does:
`-o text|json` (`--json` is `-o json`), `-y/--yes`, `-n/--namespace`; every `--help` ends with
what its exit statuses mean (0 done, 1 failed, 2 refused before anything started).
"""


def _help(parser: argparse.ArgumentParser) -> str:
    formatter_class = parser.formatter_class

    def fixed_width() -> argparse.HelpFormatter:
        return formatter_class(prog=parser.prog, width=WIDTH)  # type: ignore[call-arg]

    parser._get_formatter = fixed_width  # type: ignore[method-assign]  # this parser only, built here
    return parser.format_help().rstrip() + "\n"


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def reference() -> str:
    parser = build_parser()
    commands = _commands(parser)
    parts = [HEADER, "| command | what it does |", "|---|---|"]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    parts += [f"| [`{name}`](#elastic-lab-{name}) | {helps.get(name, '')} |" for name in commands]
    parts += ["", "## elastic-lab", "", "```text", _help(parser) + "```"]
    for name, command in commands.items():
        parts += ["", f"## elastic-lab {name}", "", "```text", _help(command) + "```"]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())

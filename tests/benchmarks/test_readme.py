"""benchmarks/README.md's table of today's figures: every row names a command that runs as
written (the script is there and its own parser accepts the flags; `elastic-lab` and `make`
commands likewise), every benchmark script has a row, and the history it links to is there."""

from __future__ import annotations

import importlib
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from lab.cli import build_parser
from tests import test_docs

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
README = BENCHMARKS / "README.md"
HISTORY = BENCHMARKS / "HISTORY.md"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))
COLUMNS = ["metric", "today's figure", "goal", "command", "date", "machine"]
SCRIPT_COMMAND = re.compile(r"(?:\.venv/bin/)?python (benchmarks/[\w-]+\.py)\b(.*)")


def front_table(text: str) -> list[dict[str, str]]:
    """The rows of the table under "## Today's figures", by column name."""
    section = re.search(r"^## Today's figures\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, "benchmarks/README.md has no section `## Today's figures`"
    lines = [line for line in section.group(1).splitlines() if line.startswith("|")]
    assert lines, "the section `## Today's figures` has no table"
    header, _rule, *rows = ([cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines)
    assert header == COLUMNS, f"the table's columns are {header}, expected {COLUMNS}"
    return [dict(zip(header, row, strict=True)) for row in rows]


def commands(cell: str) -> list[str]:
    """The commands a cell names in backquotes: a benchmark script, `elastic-lab` or `make`;
    not a flag quoted alone (`--seed 2`), which completes the command before it."""
    quoted = re.findall(r"`([^`]+)`", cell)
    return [c for c in quoted if SCRIPT_COMMAND.fullmatch(c) or c.split()[0] in ("elastic-lab", "make")]


ROWS = front_table(README.read_text())


@pytest.fixture(scope="module")
def scripts() -> Iterator[dict[str, ModuleType]]:
    """Each benchmark script imported as its own process would (its folder first on the path,
    where accelerator.py finds real_size.py); the path and the modules put back afterwards."""
    saved_path, before = list(sys.path), set(sys.modules)
    sys.path.insert(0, str(BENCHMARKS))
    try:
        loaded = {}
        for script in SCRIPTS:
            module = importlib.import_module(script.stem)
            assert Path(module.__file__ or "") == script, f"{script.stem} is another module: {module.__file__}"
            loaded[f"benchmarks/{script.name}"] = module
        yield loaded
    finally:
        sys.path[:] = saved_path
        for name in {s.stem for s in SCRIPTS} - before:
            sys.modules.pop(name, None)


def refusal(parse: Callable[[list[str]], object], argv: list[str], capsys: pytest.CaptureFixture[str]) -> str | None:
    """What argparse said when it refused `argv` (None: accepted)."""
    try:
        parse(argv)
    except SystemExit as exit_:
        return f"exit {exit_.code}: {capsys.readouterr().err.strip()}"
    return None


def test_the_table_has_rows_and_each_names_a_command():
    assert ROWS
    without = [row["metric"] for row in ROWS if not commands(row["command"])]
    assert not without, f"rows without a command: {without}"


def test_every_metric_links_to_where_it_was_measured():
    """The link itself is checked by tests/test_docs.py, as every page's are."""
    unlinked = [row["metric"] for row in ROWS if not re.fullmatch(r"\[[^\]]+\]\([^)\s]+#[^)\s]+\)", row["metric"])]
    assert not unlinked, f"metrics without a link to their section: {unlinked}"


@pytest.mark.parametrize("row", ROWS, ids=lambda row: re.sub(r"\]\(.*", "", row["metric"]).lstrip("["))
def test_each_command_runs_as_written(row, scripts, capsys):
    refused = []
    for command in commands(row["command"]):
        script = SCRIPT_COMMAND.fullmatch(command)
        if script:
            path, flags = script.groups()
            if path not in scripts:
                refused.append(f"{command}: no {path}")
                continue
            said = refusal(scripts[path].arguments, shlex.split(flags), capsys)
        elif command.startswith("elastic-lab "):
            said = refusal(build_parser().parse_args, shlex.split(command)[1:], capsys)
        else:
            target = command.split()[1]
            has_target = re.search(rf"^{re.escape(target)}:", (ROOT / "Makefile").read_text(), re.M)
            said = None if has_target else "no such target in the Makefile"
        if said:
            refused.append(f"{command}: {said}")
    assert not refused, "\n".join(refused)


def test_every_benchmark_script_has_a_row():
    named = {m.group(1) for row in ROWS for c in commands(row["command"]) if (m := SCRIPT_COMMAND.fullmatch(c))}
    missing = [f"benchmarks/{s.name}" for s in SCRIPTS if f"benchmarks/{s.name}" not in named]
    assert not missing, f"scripts no row of the table runs: {missing}"


def test_every_link_of_the_history_leads_somewhere():
    test_docs.test_every_link_between_the_pages_leads_somewhere(HISTORY)

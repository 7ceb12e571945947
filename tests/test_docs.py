"""The documentation: the README is a front page that runs as written, the command-line
reference is the parsers' own help, every option says its default one way, and every link
between the project's pages leads somewhere."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from lab.cli import build_parser
from lab.cli.reference import reference

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("*/README.md"))]
README_MAX_BYTES = 10 * 1024


def test_the_readme_is_a_front_page():
    assert len(README.read_bytes()) <= README_MAX_BYTES


def test_the_command_line_reference_is_the_parsers_help():
    committed = (ROOT / "docs" / "cli.md").read_text()
    assert committed == reference(), "docs/cli.md is stale: run `make docs`"


def _options(parser: argparse.ArgumentParser, prog: str = "elastic-lab"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{prog} {name}")
        elif action.option_strings and action.help not in (None, argparse.SUPPRESS):
            yield prog, action


def test_every_option_says_its_default_one_way():
    """`[the default]` at the end of the help, never "(default ...)"; an option with a value of
    its own (not a flag, not None) shows it."""
    wrong = []
    for prog, action in _options(build_parser()):
        name = f"{prog} {action.option_strings[-1]}"
        if re.search(r"\(default\b|\bdefault:", action.help):
            wrong.append(f"{name}: {action.help!r}")
        has_value = action.nargs != 0 and action.default not in (None, [], argparse.SUPPRESS)
        if has_value and not action.help.rstrip().endswith("]"):
            wrong.append(f"{name} (default {action.default!r}): {action.help!r}")
    assert not wrong, "\n".join(wrong)


def test_options_with_a_closed_set_of_values_show_it():
    for prog, action in _options(build_parser()):
        if action.option_strings[-1] in ("--fault-tolerance", "--backend", "--model", "--eviction", "--output"):
            shown = action.metavar or ("{" + ",".join(map(str, action.choices)) + "}" if action.choices else "")
            assert shown.startswith("{"), f"{prog} {action.option_strings[-1]} hides its values"


ANCHORED = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but - and _ dropped, spaces to -."""
    slugs = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        slugs.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return slugs


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_between_the_pages_leads_somewhere(page):
    broken = []
    for target in ANCHORED.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ...: not ours to check offline
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def _quick_start() -> list[str]:
    text = README.read_text()
    block = re.search(r"## Quick start.*?```bash\n(.*?)```", text, re.S)
    assert block, "the README has a Quick start with a bash block"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.split("#")[0].strip()]


def test_ci_runs_the_readmes_test_command():
    commands = _quick_start()
    assert commands == ["make drill", "make test"]
    assert "\nmake test\n" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.processes
@pytest.mark.timeout(400)
@pytest.mark.long
def test_the_readmes_drill_runs_as_written(tmp_path):
    """`make drill`, as make would run it here (set up already), from another directory so
    its run directory lands there."""
    planned = subprocess.run(["make", "-s", "-n", "drill"], cwd=ROOT, capture_output=True, text=True, check=True)
    commands = [line for line in planned.stdout.splitlines() if line.strip()]
    assert commands == [".venv/bin/elastic-lab drill"], "set-up is not done, or `make drill` changed"
    binary, *args = commands[0].split()
    done = subprocess.run([str(ROOT / binary), *args], cwd=tmp_path, capture_output=True, text=True, timeout=380)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Drill PASSED" in done.stdout
    assert list((tmp_path / "runs").glob("drill-*/timeline.png"))

"""Every command spells its common flags one way (lab/vocab/command_flags.py) and says in its
--help what its exit statuses mean."""

from __future__ import annotations

import argparse

import pytest

from lab.cli import build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


COMMANDS = _commands()


def _options(command: argparse.ArgumentParser) -> dict[str, list[str]]:
    return {a.dest: a.option_strings for a in command._actions if a.option_strings}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_says_what_its_exit_statuses_mean(name):
    said = COMMANDS[name].format_help().lower()
    assert "exit status" in said and "2 " in said and "refused" in said, said[-400:]


@pytest.mark.parametrize("name", COMMANDS)
def test_output_yes_and_namespace_are_spelt_as_kubectl_spells_them(name):
    command = COMMANDS[name]
    flags = [flag for action in command._actions for flag in action.option_strings]
    if "--output" in flags or "--json" in flags:
        assert {"-o", "--output", "--json"} <= set(flags), flags
        assert command.parse_args(["--json"]).output == "json"
    if "--yes" in flags:
        assert "-y" in flags
    if "--namespace" in flags:
        assert "-n" in flags


def test_the_drill_prints_json_with_the_same_flag_as_every_command():
    drill = COMMANDS["drill"]
    assert drill.parse_args(["-o", "json"]).output == drill.parse_args(["--json"]).output == "json"
    assert drill.parse_args([]).output == "text"


def test_kubectl_short_flags_reach_the_same_options():
    status, up = COMMANDS["status"], COMMANDS["up"]
    assert status.parse_args(["-n", "team-a", "demo"]).namespace == "team-a"
    assert up.parse_args(["-y"]).yes is True

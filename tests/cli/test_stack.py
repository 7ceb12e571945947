"""`elastic-lab stack` and the current stack as the default of every --stack."""

from __future__ import annotations

import json

import pytest

from lab.cli import main
from lab.vocab import current_stack as cs


def test_select_lists_and_unselect(capsys):
    assert main(["stack", "select", "eks-dev"]) == 0
    assert capsys.readouterr().out == "current stack: eks-dev\n"
    assert main(["stack", "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["current"] == "eks-dev"
    assert {"stack": "eks-dev", "cloud": "eks", "current": True} in listed["stacks"]
    assert {"stack": "aks-dev", "cloud": "aks", "current": False} in listed["stacks"]
    assert main(["stack"]) == 0
    assert "* eks-dev" in capsys.readouterr().out
    assert main(["stack", "unselect"]) == 0
    assert cs.current_stack() is None


def test_an_unknown_stack_is_refused_naming_those_there_are(capsys):
    assert main(["stack", "select", "nope"]) == 2
    assert "stacks here: aks-dev, byo, eks-dev" in capsys.readouterr().err
    assert cs.current_stack() is None


def test_the_environment_shadows_a_selection_and_says_so(capsys, monkeypatch):
    monkeypatch.setenv(cs.ENV_STACK, "byo")
    assert main(["stack", "select", "aks-dev"]) == 0
    assert "$ELASTIC_LAB_STACK=byo wins while it is set" in capsys.readouterr().out


@pytest.mark.parametrize("command", [["plan"], ["up"], ["preview"], ["destroy"], ["image"], ["submit", "--dry-run"]])
def test_a_command_that_needs_a_stack_without_one_exits_2_saying_how_to_choose(command, capsys):
    assert main(command) == 2
    err = capsys.readouterr().err
    assert f"elastic-lab {command[0]}: no stack: give -s STACK" in err and "elastic-lab stack select STACK" in err


def test_commands_use_the_current_stack(capsys, monkeypatch):
    monkeypatch.setenv(cs.ENV_STACK, "byo")
    assert main(["plan", "--json", "--check", "platform:trainer-image"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["stack"] == "byo"
    assert main(["submit", "--dry-run", "--image", "registry.example.com/trainer:1"]) == 0
    assert "kind: PyTorchJob" in capsys.readouterr().out
    # --stack still wins
    assert main(["plan", "-s", "eks-dev", "--json", "--check", "platform:trainer-image"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["stack"] == "eks-dev"


def test_the_local_drill_never_becomes_a_cluster_drill(monkeypatch):
    """`drill` names its cluster every time: a current stack does not turn it into one."""
    from lab.cli import build_parser

    monkeypatch.setenv(cs.ENV_STACK, "aks-dev")
    args = build_parser().parse_args(["drill"])
    assert getattr(args, "stack_default", None) is None and args.stack is None

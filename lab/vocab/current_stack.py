"""The current stack: the one a command uses when it is given no --stack, as `pulumi stack
select` and kubectl's current context work. `ELASTIC_LAB_STACK` (one shell, one script) wins
over the stack chosen with `elastic-lab stack select`, which is kept in the checkout
(`.elastic-lab/stack`, ignored by git)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lab.vocab.layout import ROOT

ENV_STACK = "ELASTIC_LAB_STACK"
SELECTED_STACK_FILE = ROOT / ".elastic-lab" / "stack"
# How a stack option says its default, the same on every command that takes one.
STACK_DEFAULT = "[the current stack: `elastic-lab stack`]"
# What a command's parser sets as `stack_default`: whether it runs without any stack.
STACK_REQUIRED = "required"
STACK_OPTIONAL = "optional"


@dataclass(frozen=True)
class CurrentStack:
    name: str
    source: str  # where it was chosen, for people


def current_stack(selected: Path | None = None) -> CurrentStack | None:
    """The current stack, or None when none is chosen."""
    selected = selected or SELECTED_STACK_FILE
    name = os.environ.get(ENV_STACK, "").strip()
    if name:
        return CurrentStack(name, f"${ENV_STACK}")
    try:
        name = selected.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return CurrentStack(name, f"elastic-lab stack select ({selected})") if name else None


def select_stack(name: str, selected: Path | None = None) -> None:
    selected = selected or SELECTED_STACK_FILE
    selected.parent.mkdir(parents=True, exist_ok=True)
    selected.write_text(name + "\n", encoding="utf-8")


def unselect_stack(selected: Path | None = None) -> bool:
    """Forget the chosen stack; whether there was one."""
    selected = selected or SELECTED_STACK_FILE
    try:
        selected.unlink()
    except FileNotFoundError:
        return False
    return True

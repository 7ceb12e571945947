"""One checked prerequisite of the cloud path (`elastic-lab check`), and how an SDK error is said."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Prerequisite:
    """One checked prerequisite: what it is, whether it holds, what was found, and (when it
    does not hold) what to do. `required` False: only some commands need it (a warning).
    `checked` False: it could not be checked until another prerequisite holds (`found` names
    which); never a problem of its own, since that other one already is."""

    name: str
    ok: bool
    found: str
    fix: str = ""
    required: bool = True
    checked: bool = True

    def line(self) -> str:
        mark = "✓" if self.ok else ("?" if not self.checked else "✗" if self.required else "!")
        text = f"{mark} {self.name}: {self.found}"
        return text if self.ok or not self.fix else f"{text}\n    fix: {self.fix}"


def not_checked(names: Iterable[str], until: str) -> list[Prerequisite]:
    """The prerequisites that cannot be checked until `until` holds, said as such."""
    return [Prerequisite(name, False, f"not checked until {until} works", checked=False) for name in names]


def said(exc: BaseException, *, last: bool = True) -> str:
    """The line of an exception's message that says what went wrong: SDK errors end with it,
    azure-identity's start with it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[-1] if last else lines[0]) if lines else type(exc).__name__

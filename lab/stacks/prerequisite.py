"""One checked prerequisite of the cloud path (`elastic-lab check`), and how an SDK error is said."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prerequisite:
    """One checked prerequisite: what it is, whether it holds, what was found, and (when it
    does not hold) what to do. `required` False: only some commands need it (a warning)."""

    name: str
    ok: bool
    found: str
    fix: str = ""
    required: bool = True

    def line(self) -> str:
        mark = "✓" if self.ok else ("✗" if self.required else "!")
        text = f"{mark} {self.name}: {self.found}"
        return text if self.ok or not self.fix else f"{text}\n    fix: {self.fix}"


def said(exc: BaseException, *, last: bool = True) -> str:
    """The line of an exception's message that says what went wrong: SDK errors end with it,
    azure-identity's start with it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[-1] if last else lines[0]) if lines else type(exc).__name__

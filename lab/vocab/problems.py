"""Invalid input, reported whole.

Every check of the project's inputs (stack config, cluster arguments, platform settings, a
job's launch parameters, command-line flags) collects a `Problem` per bad value and raises
one `InvalidInput` carrying all of them, before anything is started or declared. Each
problem names the input (`key`), the value it had and what fits instead, and reads

    elastic-spot-lab:gpuVmSize='Standard_D4s_v5' is invalid: expected an NVIDIA GPU VM size ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from lab.vocab.errors import Refused


@dataclass(frozen=True)
class Problem:
    """One invalid value: which input (`key`), its value, and what is expected instead."""

    key: str
    value: Any
    expected: str

    def __str__(self) -> str:
        return f"{self.key}={self.value!r} is invalid: expected {self.expected}"

    def under(self, prefix: str) -> Problem:
        """The same problem with its key inside `prefix` (`platform.` + `etcd.tag`)."""
        return Problem(prefix + self.key, self.value, self.expected)


class InvalidInput(Refused, ValueError):
    """One or more inputs are invalid. `problems` lists each (key, value, expected) once;
    `source` says what was read (`stack config in stack 'aks-dev'`), when known.

    The message is the problem itself when there is one and no source; otherwise a header
    and one line per problem."""

    def __init__(self, problems: Iterable[Problem], source: str = "") -> None:
        self.problems: list[Problem] = _once(problems)
        self.source = source
        super().__init__(self._message())

    def _message(self) -> str:
        if len(self.problems) == 1 and not self.source:
            return str(self.problems[0])
        lines = "\n".join(f"  - {p}" for p in self.problems)
        return f"invalid {self.source or 'input'} ({len(self.problems)} problem(s)):\n{lines}"


def _once(problems: Iterable[Problem]) -> list[Problem]:
    """Each problem once, in order (values may be unhashable lists and mappings)."""
    seen: set[str] = set()
    out = []
    for p in problems:
        if (text := f"{p.key}\0{p.value!r}\0{p.expected}") not in seen:
            seen.add(text)
            out.append(p)
    return out


class Problems:
    """A collector: checks add problems as they find them; `raise_if_any` raises them all."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, key: str, value: Any, expected: str) -> None:
        self.items.append(Problem(key, value, expected))

    def extend(self, problems: Iterable[Problem]) -> None:
        self.items.extend(problems)

    def absorb(self, error: InvalidInput, prefix: str = "") -> None:
        """Keep the problems of an error raised by a nested check, keys under `prefix`."""
        self.items.extend(p.under(prefix) for p in error.problems)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.items)

    def raise_if_any(self, source: str = "") -> None:
        if self.items:
            raise InvalidInput(self.items, source)


def seconds_problems(settings: Any, prefix: str, zero_means: Mapping[str, str] | None = None) -> list[Problem]:
    """A problem per field of the dataclass `settings` that is not a number of seconds > 0, keys
    under `prefix`; a field of `zero_means` may also be 0, which derives it as its value says."""
    found = Problems()
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        number = not isinstance(value, bool) and isinstance(value, (int, float))
        if zero_means and f.name in zero_means:
            if not number or value < 0:
                found.add(prefix + f.name, value, f"a number of seconds >= 0 (0: derived {zero_means[f.name]})")
        elif not number or value <= 0:
            found.add(prefix + f.name, value, "a number of seconds > 0")
    return found.items

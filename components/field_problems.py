"""What the clusters' args share: the stack-config key each field is read from (`meta`), the
collector of problems that each name a field (`FieldProblems`), the checks that run in order
(`check_fields`) and those both clouds make (the Kubernetes version)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from typing import Any

from lab.vocab.problems import Problem, Problems
from lab.vocab.versions import NEWEST_KUBERNETES_MINOR


def meta(key: str, kind: str, doc: str) -> dict[str, str]:
    """A field's metadata: its stack-config key, its kind and what it is."""
    return {"key": key, "kind": kind, "doc": doc}


def settable_fields(args_class: type) -> list[dataclasses.Field[Any]]:
    """The args fields that stack config can set (all of them), with their key metadata."""
    return [f for f in dataclasses.fields(args_class) if "key" in f.metadata]


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def string_list(value: Any) -> list[str] | None:
    """`value` when it is a list of strings, else None."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return value


class FieldProblems(Problems):
    """The problems of one cluster's args, each naming a field and carrying its value (or, for a
    list, the bad item). A field is read once through `text` or `strings`, which report a value
    of another type."""

    def __init__(self, args: Any) -> None:
        super().__init__()
        self.args = args

    def bad(self, name: str, expected: str, value: Any = None) -> None:
        self.add(name, getattr(self.args, name) if value is None else value, expected)

    def text(self, name: str) -> str | None:
        """The field's value when it is a string; otherwise None, and a problem."""
        value = getattr(self.args, name)
        if not isinstance(value, str):
            self.bad(name, "a string")
            return None
        return value

    def strings(self, name: str) -> list[str]:
        """The field's value when it is a list of strings; otherwise empty, and a problem."""
        value = string_list(getattr(self.args, name))
        if value is None:
            self.bad(name, "a list of strings")
            return []
        return value

    def one_of(self, name: str, allowed: tuple[str, ...], note: str = "") -> None:
        if (value := self.text(name)) is not None and value not in allowed:
            self.bad(name, "one of " + ", ".join(allowed) + note)


def check_fields(args: Any, checks: Iterable[Callable[[Any, FieldProblems], None]]) -> list[Problem]:
    """Every problem the checks find, run in order, each adding what it finds to one collector."""
    found = FieldProblems(args)
    for check in checks:
        check(args, found)
    return found.items


def kubernetes_version(found: FieldProblems, pattern: re.Pattern[str], minimum: int, form: str, why: str) -> None:
    """The `kubernetes_version` field: `form` (what the cloud takes) matching `pattern`, whose
    first group is the minor; no older than 1.<minimum> (`why` not), no newer than the newest
    minor whose schemas the offline checks carry."""
    if (ver := found.text("kubernetes_version")) is None:
        return
    m = pattern.match(ver)
    if not m:
        found.bad("kubernetes_version", form)
    elif int(m.group(1)) < minimum:
        found.bad("kubernetes_version", f"1.{minimum} or newer ({why})")
    elif int(m.group(1)) > NEWEST_KUBERNETES_MINOR:
        found.bad(
            "kubernetes_version",
            f"1.{minimum} to 1.{NEWEST_KUBERNETES_MINOR}: 1.{NEWEST_KUBERNETES_MINOR} is the newest minor whose "
            "schemas the offline checks carry",
        )

"""The keys of a stack-config mapping that its reader does not know, each a problem naming it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.vocab.problems import Problem


def unknown_keys(prefix: str, value: Mapping[str, Any], allowed: set[str]) -> list[Problem]:
    """A problem for each key of `value` not in `allowed`, named `<prefix><key>`."""
    return [
        Problem(prefix + key, value[key], "a known key: " + ", ".join(sorted(allowed)))
        for key in sorted(set(value) - allowed)
    ]

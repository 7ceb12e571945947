"""Placeholders: the values a dry run cannot know where it runs (an id the cloud assigns at
`up`, a node found when the drill runs), written in angle brackets wherever a value would be,
so that no reader takes one for the real thing."""

from __future__ import annotations


def placeholder(what: str) -> str:
    """`<what>`: the value described, not known here."""
    return f"<{what}>"


def is_placeholder(value: object) -> bool:
    """Whether `value` is a placeholder (a string in angle brackets) rather than a value."""
    return isinstance(value, str) and len(value) > 2 and value.startswith("<") and value.endswith(">")

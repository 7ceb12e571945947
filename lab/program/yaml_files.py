"""Reading the project's YAML inputs (stack files, price tables) as mappings, or refusing them.

A file that is missing, unreadable, not text, not YAML, or whose top level is not a mapping is
refused with an `InvalidInput` naming the file, what is wrong (with the line and column YAML
reports) and what is expected: exit 2, before anything starts, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lab.vocab.problems import InvalidInput, Problem


def read_mapping(path: Path, what: str, expected: str) -> dict[str, Any]:
    """The YAML mapping in `path` (empty for an empty file). `what` names the input (e.g.
    "--prices"), `expected` says what the file should hold."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput([Problem(what, str(path), f"an existing file: {expected}")]) from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            [Problem(what, str(path), f"UTF-8 text ({exc.reason} at byte {exc.start}): {expected}")]
        ) from None
    except OSError as exc:
        raise InvalidInput([Problem(what, str(path), f"a readable file ({exc.strerror}): {expected}")]) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        if isinstance(exc, yaml.reader.ReaderError):  # not text YAML can read: a NUL, binary
            where = f" at character {exc.position}"
        reason = getattr(exc, "problem", None) or getattr(exc, "reason", None) or type(exc).__name__
        raise InvalidInput([Problem(what, str(path), f"YAML ({reason}{where}): {expected}")]) from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise InvalidInput(
            [Problem(what, str(path), f"a YAML mapping at the top level, not a {type(doc).__name__}: {expected}")]
        )
    return doc

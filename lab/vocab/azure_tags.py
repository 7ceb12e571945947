"""Azure's rules for resource tags, checked before anything is declared.

ARM refuses a request whose tags break them (`InvalidTagNameCharacters`, `InvalidTagName`,
`InvalidTagNameLength`, `InvalidTagValueLength`, `InvalidTagCount`), and it refuses it at the
first resource that carries them, after the resources before it were created:
- names cannot contain `< > % & \\ ? /`, nor start with `microsoft`, `azure` or `windows`
  (any case): those prefixes are Azure's;
- names up to 512 characters (128 on storage accounts), values up to 256;
- at most 50 tags per resource; names are case-insensitive, so two names that differ
  only in case are one tag.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.vocab.names import PROJECT
from lab.vocab.problems import Problem, Problems

FORBIDDEN_NAME_CHARACTERS = "<>%&\\?/"
RESERVED_NAME_PREFIXES = ("microsoft", "azure", "windows")
MAX_TAGS = 50
MAX_NAME_LENGTH = 512
MAX_STORAGE_ACCOUNT_NAME_LENGTH = 128
MAX_VALUE_LENGTH = 256

# The tag the AKS stack puts on every resource it creates, naming the cluster they belong to.
CLUSTER_TAG = f"{PROJECT}-cluster"


def tag_name_problem(name: object, *, storage_account: bool = False) -> str | None:
    """What is wrong with one tag name (None when Azure accepts it)."""
    limit = MAX_STORAGE_ACCOUNT_NAME_LENGTH if storage_account else MAX_NAME_LENGTH
    if not isinstance(name, str) or not name.strip():
        return "a non-empty tag name"
    if bad := sorted({c for c in name if c in FORBIDDEN_NAME_CHARACTERS}):
        return f"a tag name without {' '.join(bad)} (Azure refuses {' '.join(FORBIDDEN_NAME_CHARACTERS)} in tag names)"
    if name.lower().startswith(RESERVED_NAME_PREFIXES):
        return f"a tag name that does not start with {', '.join(RESERVED_NAME_PREFIXES)} (Azure reserves them)"
    if len(name) > limit:
        where = " on a storage account" if storage_account else ""
        return f"a tag name of at most {limit} characters{where} (it has {len(name)})"
    return None


def tag_problems(tags: Any, key: str = "tags", *, storage_account: bool = False, reserved: int = 0) -> list[Problem]:
    """Every problem of a tag mapping, keyed `key[<name>]`; `reserved` tags are added by us
    and count against Azure's 50."""
    found = Problems()
    if not isinstance(tags, Mapping):
        found.add(key, tags, "a mapping of tag names to string values")
        return found.items
    seen: dict[str, str] = {}
    for name, value in tags.items():
        if expected := tag_name_problem(name, storage_account=storage_account):
            found.add(f"{key}[{name!r}]", name, expected)
        if not isinstance(value, str) or len(value) > MAX_VALUE_LENGTH:
            found.add(f"{key}[{name!r}]", value, f"a string of at most {MAX_VALUE_LENGTH} characters")
        if isinstance(name, str):
            if (other := seen.get(name.lower())) is not None:
                found.add(f"{key}[{name!r}]", name, f"a name that differs from {other!r} in more than case")
            seen[name.lower()] = name
    if len(tags) + reserved > MAX_TAGS:
        found.add(
            key, f"{len(tags)} tags", f"at most {MAX_TAGS - reserved} (Azure allows {MAX_TAGS}, {reserved} are ours)"
        )
    return found.items

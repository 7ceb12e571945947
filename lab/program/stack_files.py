"""The project's stack files, `stacks/Pulumi.<stack>.yaml`, read as Pulumi hands their config
to a program: full keys, string values (JSON for structures)."""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any

from lab.program.recording import SECRET_PLACEHOLDER
from lab.program.yaml_files import read_mapping
from lab.vocab.errors import Refused
from lab.vocab.layout import ROOT
from lab.vocab.names import PROJECT
from lab.vocab.problems import InvalidInput, Problem


class StackNotFound(Refused, FileNotFoundError):
    """No stack file for the stack name given; the message lists the stacks there are."""


def stack_file(stack: str, root: Path = ROOT, *, source: str = "") -> Path:
    """The stack's file, `stacks/Pulumi.<stack>.yaml`. StackNotFound says what is there
    instead (nothing, a folder, a link to nothing), the stacks there are, the nearest name, and
    where the name came from (`source`: e.g. `$ELASTIC_LAB_STACK`) when it was not typed."""
    path = root / "stacks" / f"Pulumi.{stack}.yaml"
    if path.is_file():
        return path
    if path.is_dir():
        what = f": {path} is a folder, not a stack file"
    elif path.is_symlink():
        what = f": {path} is a link to {os.readlink(path)}, which does not exist"
    else:
        what = f" has no config file {path}"
    have = list_stacks(root)
    near = difflib.get_close_matches(stack, have, n=1)
    said = [f"stacks here: {', '.join(have) or 'none'}", *([f"did you mean {near[0]!r}?"] if near else [])]
    named = f" (from {source})" if source else ""
    raise StackNotFound(f"stack {stack!r}{named}{what} ({'; '.join(said)})")


def list_stacks(root: Path = ROOT) -> list[str]:
    """The stacks with a stack file (a folder or a link to nothing named like one is none)."""
    found = (p for p in (root / "stacks").glob("Pulumi.*.yaml") if p.is_file())
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in found)


def config_string(value: Any) -> str:
    """A stack-file value as Pulumi hands it to programs: strings, JSON for structures."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if value is None:
        return ""
    return str(value)


def read_stack_config(stack: str, root: Path = ROOT) -> tuple[dict[str, str], list[str]]:
    """(config with full keys as strings, secret keys) from stacks/Pulumi.<stack>.yaml.

    `secure:` values cannot be decrypted offline; they become SECRET_PLACEHOLDER, secret."""
    path = stack_file(stack, root)
    expected = "a Pulumi stack file, `config:` and a mapping of keys under it"
    doc = read_mapping(path, f"stack {stack!r}", expected)
    raw = doc.get("config") or {}
    if not isinstance(raw, dict):
        raise InvalidInput([Problem(f"stack {stack!r}", str(path), f"`config:` as a mapping: {expected}")])
    config: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in raw.items():
        key = str(key) if ":" in str(key) else f"{PROJECT}:{key}"
        if isinstance(value, dict) and set(value) == {"secure"}:
            config[key] = SECRET_PLACEHOLDER
            secret_keys.append(key)
        else:
            config[key] = config_string(value)
    return config, secret_keys

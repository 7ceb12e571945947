"""Pulumi's wire format back to plain Python: protobuf Structs whose numbers are all doubles,
secrets and resource references marked by signature keys, unknowns as a sentinel."""

from __future__ import annotations

from typing import Any

# Wire-format signatures (pulumi/sdk/go/common/resource/sig).
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
_SIG_KEY = "4dabf18193072939515e22adb298388d"
_UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def decode(value: Any, path: str, secrets: list[str]) -> Any:
    """Struct-as-dict from the wire -> plain Python; records secret paths; resource refs
    become {"$ref": urn, "id": id}."""
    if isinstance(value, dict):
        sig = value.get(_SIG_KEY)
        if sig == _SECRET_SIG:
            secrets.append(path)
            return decode(value.get("value"), path, secrets)
        if sig == _RESOURCE_SIG:
            return {"$ref": value.get("urn"), "id": value.get("id")}
        # Sorted: a Struct is a map, and its order on the wire changes from run to run.
        return {k: decode(v, f"{path}.{k}" if path else k, secrets) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [decode(v, f"{path}.{i}" if path else str(i), secrets) for i, v in enumerate(value)]
    if isinstance(value, float):
        return _whole(value)
    if value == _UNKNOWN:
        return "<unknown>"
    return value


def struct(msg: Any) -> tuple[dict[str, Any], list[str]]:
    from google.protobuf import json_format

    raw = json_format.MessageToDict(msg) if msg is not None else {}
    secrets: list[str] = []
    return decode(raw, "", secrets), secrets


def _whole(value: float) -> float | int:
    """A protobuf Struct carries every number as a double: a whole one is an int again."""
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def numbers_back(value: Any) -> Any:
    """Numbers come back from the Pulumi wire as doubles: whole ones become ints again."""
    if isinstance(value, float):
        return _whole(value)
    if isinstance(value, dict):
        return {k: numbers_back(v) for k, v in value.items()}
    if isinstance(value, list):
        return [numbers_back(v) for v in value]
    return value

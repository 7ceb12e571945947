"""guardrail:no-plain-secrets: no kubeconfig, key, token or connection string in a plain
(non-secret) stack output, component output or provider input, whatever the cloud."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from lab.plan.findings import Finding

SENSITIVE_KEY = re.compile(
    r"(?i)(kube_?config|password|passwd|secret|token$|connection_?string|credentials?$|"
    r"(access|account|primary|secondary|private|storage|shared|admin|client|api)_?keys?$|sas_?(token|url|uri)$)"
)
# A bare `key` / `value` is only a secret when it looks like key material (a taint's `key` is not).
KEY_MATERIAL = re.compile(r"^[A-Za-z0-9+/]{40,}={0,2}$")
SENSITIVE_VALUE = [
    (re.compile(r"(?s)apiVersion:\s*v1.*kind:\s*Config|kind:\s*Config.*apiVersion:\s*v1"), "a kubeconfig"),
    (re.compile(r"AccountKey=|SharedAccessSignature=|[?&]sig=[A-Za-z0-9%]{20,}"), "a storage key or SAS"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
]


def _sensitive(key: str, value: Any) -> str | None:
    if isinstance(value, str):
        for pattern, what in SENSITIVE_VALUE:
            if pattern.search(value):
                return what
    last = key.rsplit(".", 1)[-1]
    if SENSITIVE_KEY.search(last) and value not in (None, "", [], {}):
        return f"a value named like a secret ({last!r})"
    if last.lower() in ("key", "keys", "value") and isinstance(value, str) and KEY_MATERIAL.match(value):
        return f"key material under {last!r}"
    return None


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}.{i}")


def _covered(path: str, secret_paths: Iterable[str]) -> bool:
    return any(path == s or path.startswith(s + ".") or s == "" for s in secret_paths)


def no_plain_secrets(plan: Any) -> Iterator[Finding]:
    """No kubeconfig, key, token or connection string in a plain (non-secret) output or provider input."""
    name = "guardrail:no-plain-secrets"
    for key, value in plan.outputs.items():
        if key in plan.secret_outputs:
            continue
        for path, v in _walk(value, key):
            what = _sensitive(path, v)
            if what:
                yield Finding.error(
                    name,
                    f"stack output {key!r}",
                    path,
                    "<redacted>",
                    f"a secret output (this is {what}; wrap it in pulumi.Output.secret)",
                )
                break
    for r in plan.resources:
        if r.outputs:
            for path, v in _walk(r.outputs, ""):
                if path and not _covered(path, r.secret_outputs):
                    what = _sensitive(path, v)
                    if what:
                        yield Finding.error(name, r, f"outputs.{path}", "<redacted>", f"a secret (this is {what})")
        if r.type.startswith("pulumi:providers:"):
            for path, v in _walk(r.inputs, ""):
                if path and not _covered(path, r.secret_inputs):
                    what = _sensitive(path, v)
                    if what:
                        yield Finding.error(
                            name,
                            r,
                            f"inputs.{path}",
                            "<redacted>",
                            f"a secret (this is {what}; provider inputs are stored in state)",
                        )

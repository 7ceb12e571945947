"""The IAM JSON policy grammar, as aws-api-conformance holds every policy document input to it
(a trust policy names a Principal and no Resource, an identity policy the reverse)."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator
from typing import Any

from lab.plan.aws_request import Issue, indexed, is_unknown, join_path
from lab.plan.findings import ERROR, WARNING

_POLICY_SOURCE = "IAM JSON policy grammar"
_POLICY_VERSIONS = ("2012-10-17", "2008-10-17")
_POLICY_KEYS = ("Version", "Id", "Statement")
_STATEMENT_KEYS = (
    "Sid",
    "Effect",
    "Principal",
    "NotPrincipal",
    "Action",
    "NotAction",
    "Resource",
    "NotResource",
    "Condition",
)
_PRINCIPAL_KEYS = ("AWS", "Service", "Federated", "CanonicalUser")
_ACTION = re.compile(r"\*|[A-Za-z0-9-]+:[A-Za-z0-9*?]+")


def _policy_issue(path: str, value: Any, expected: str, severity: str = ERROR) -> Issue:
    return Issue(path, value, expected, _POLICY_SOURCE, severity)


def policy_issues(value: Any, path: str, trust: bool) -> Iterator[Issue]:
    """An IAM policy document (a JSON string, or an object) against IAM's grammar; a trust
    (assume-role) policy names a Principal and no Resource, an identity policy the reverse."""
    if is_unknown(value):
        return
    doc = value
    if isinstance(value, str):
        try:
            doc = json.loads(value)
        except ValueError as e:
            yield _policy_issue(path, value, f"a JSON policy document ({e})")
            return
    if not isinstance(doc, dict):
        yield _policy_issue(path, doc, "a JSON object with Version and Statement")
        return
    yield from _unknown_keys(doc, _POLICY_KEYS, path)
    version = doc.get("Version")
    if version is None:
        yield _policy_issue(
            join_path(path, "Version"),
            None,
            "Version 2012-10-17 (without it IAM reads the document as 2008-10-17, without policy variables)",
            WARNING,
        )
    elif version not in _POLICY_VERSIONS:
        yield _policy_issue(join_path(path, "Version"), version, f"one of {', '.join(_POLICY_VERSIONS)}")
    statements = doc.get("Statement")
    if isinstance(statements, dict):
        yield from _statement_issues(statements, join_path(path, "Statement"), trust)
    elif isinstance(statements, list) and statements:
        sids = [s.get("Sid") for s in statements if isinstance(s, dict) and s.get("Sid")]
        for sid in sorted({s for s in sids if sids.count(s) > 1}, key=str):
            yield _policy_issue(join_path(path, "Statement"), sid, "Sid values unique within the document")
        for where, statement in indexed(statements, join_path(path, "Statement")):
            yield from _statement_issues(statement, where, trust)
    else:
        yield _policy_issue(join_path(path, "Statement"), statements, "a non-empty Statement (an object or a list)")


def _unknown_keys(value: dict[str, Any], known: tuple[str, ...], path: str) -> Iterator[Issue]:
    for key in value:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            yield _policy_issue(join_path(path, key), value[key], f"one of {', '.join(known)}{hint} (unknown element)")


def _statement_issues(statement: Any, path: str, trust: bool) -> Iterator[Issue]:
    """One statement: its elements, Effect, Sid, Action, Resource and Principal."""
    if not isinstance(statement, dict):
        yield _policy_issue(path, statement, "a statement object")
        return
    yield from _unknown_keys(statement, _STATEMENT_KEYS, path)
    effect = statement.get("Effect")
    if effect not in ("Allow", "Deny"):
        yield _policy_issue(join_path(path, "Effect"), effect, "Allow or Deny (case-sensitive)")
    sid = statement.get("Sid")
    if sid is not None and not (isinstance(sid, str) and re.fullmatch(r"[A-Za-z0-9]*", sid)):
        yield _policy_issue(join_path(path, "Sid"), sid, "a Sid of ASCII letters and digits only")
    yield from _one_of(statement, ("Action", "NotAction"), path, required=True)
    for key in ("Action", "NotAction"):
        yield from _strings(
            statement.get(key), join_path(path, key), _ACTION, "an action service:Action (wildcards * ?) or *"
        )
    yield from _principal_issues(statement, path, trust)
    if trust:
        for key in ("Resource", "NotResource"):
            if key in statement:
                yield _policy_issue(
                    join_path(path, key), statement[key], f"no {key} in a trust policy (IAM refuses it)"
                )
        return
    yield from _one_of(statement, ("Resource", "NotResource"), path, required=True)
    for key in ("Resource", "NotResource"):
        yield from _strings(statement.get(key), join_path(path, key), re.compile(r"\*|arn:.+"), "an ARN (arn:...) or *")


def _one_of(statement: dict[str, Any], keys: tuple[str, str], path: str, required: bool) -> Iterator[Issue]:
    """Exactly one of two elements (Action/NotAction, Resource/NotResource)."""
    given = [k for k in keys if k in statement]
    if len(given) == 2:
        yield _policy_issue(join_path(path, keys[1]), statement[keys[1]], f"{keys[0]} or {keys[1]}, not both")
    elif not given and required:
        yield _policy_issue(join_path(path, keys[0]), None, f"a value: {keys[0]} or {keys[1]} is required")


def _strings(value: Any, path: str, shape: re.Pattern[str], expected: str) -> Iterator[Issue]:
    """A string or a non-empty list of strings, each matching `shape`."""
    if value is None or is_unknown(value):
        return
    items = list(indexed(value, path)) if isinstance(value, list) else [(path, value)]
    if not items:
        yield _policy_issue(path, value, f"{expected} (a string or a non-empty list)")
    for where, item in items:
        if not is_unknown(item) and not (isinstance(item, str) and shape.fullmatch(item)):
            yield _policy_issue(where, item, expected)


def _principal_issues(statement: dict[str, Any], path: str, trust: bool) -> Iterator[Issue]:
    """A trust policy says who may assume the role; an identity policy must not name anyone."""
    given = [k for k in ("Principal", "NotPrincipal") if k in statement]
    if not trust:
        for key in given:
            yield _policy_issue(
                join_path(path, key), statement[key], f"no {key} in an identity policy (IAM refuses it)"
            )
        return
    if not given:
        yield _policy_issue(join_path(path, "Principal"), None, "a Principal: who may assume the role (trust policy)")
    for key in given:
        principal = statement[key]
        if principal == "*" or is_unknown(principal):
            continue
        if not isinstance(principal, dict) or not principal:
            yield _policy_issue(join_path(path, key), principal, f"* or an object with {', '.join(_PRINCIPAL_KEYS)}")
            continue
        for kind, ids in principal.items():
            where = join_path(join_path(path, key), kind)
            if kind not in _PRINCIPAL_KEYS:
                yield _policy_issue(where, ids, f"a principal type: one of {', '.join(_PRINCIPAL_KEYS)}")
            else:
                yield from _strings(ids, where, re.compile(r"\S+"), "a principal id (a string or a list of strings)")

"""What the clusters' args share: problems that name a field, checks run in order, the
Kubernetes version rule."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from components.field_problems import FieldProblems, check_fields, kubernetes_version, meta, settable_fields
from lab.vocab.problems import Problem
from lab.vocab.versions import NEWEST_KUBERNETES_MINOR


@dataclass(frozen=True)
class _Args:
    name: Any = field(default="ok", metadata=meta("name", "str", "a name"))
    zones: Any = field(default_factory=list, metadata=meta("zones", "list", "zones"))
    kubernetes_version: Any = field(default="1.31", metadata=meta("kubernetesVersion", "str", "version"))
    internal: int = 0


def test_a_field_read_as_the_wrong_type_is_a_problem_naming_it():
    found = FieldProblems(_Args(name=3, zones=["1", 2]))
    assert found.text("name") is None
    assert found.strings("zones") == []
    assert found.items == [Problem("name", 3, "a string"), Problem("zones", ["1", 2], "a list of strings")]


def test_bad_names_the_item_of_a_list_and_one_of_lists_what_is_allowed():
    found = FieldProblems(_Args(name="c"))
    found.bad("zones", "a zone", "9")
    found.one_of("name", ("a", "b"), " (letters)")
    assert found.items == [Problem("zones", "9", "a zone"), Problem("name", "c", "one of a, b (letters)")]


def test_checks_run_in_order_into_one_collector():
    def first(args: _Args, found: FieldProblems) -> None:
        found.bad("name", "first")

    def second(args: _Args, found: FieldProblems) -> None:
        found.bad("name", f"second after {len(found.items)}")

    assert [p.expected for p in check_fields(_Args(), (first, second))] == ["first", "second after 1"]


def test_settable_fields_are_those_with_a_config_key():
    assert [f.name for f in settable_fields(_Args)] == ["name", "zones", "kubernetes_version"]


@pytest.mark.parametrize(
    "version,says",
    [
        ("1.31", None),
        ("131", "the form"),
        ("1.29", "1.30 or newer (the reason)"),
        (f"1.{NEWEST_KUBERNETES_MINOR + 1}", f"1.{NEWEST_KUBERNETES_MINOR} is the newest minor"),
    ],
)
def test_the_kubernetes_version_rule(version, says):
    found = FieldProblems(_Args(kubernetes_version=version))
    kubernetes_version(found, re.compile(r"^1\.(\d+)$"), 30, "the form", "the reason")
    assert [p.key for p in found] == ([] if says is None else ["kubernetes_version"])
    if says is not None:
        assert says in found.items[0].expected

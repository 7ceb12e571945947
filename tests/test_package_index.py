"""Every package's index (its __init__ docstring) names each of its modules and sub-packages, so
that a reader who opens a folder finds what each file holds without opening them all."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from lab.vocab.layout import ROOT

PACKAGES = sorted(p.parent for top in ("lab", "components") for p in (ROOT / top).rglob("__init__.py"))


def _unnamed(package: Path) -> list[str]:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    named = set(re.findall(r"[\w.]+", doc))
    members = [p.name for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    members += [f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()]
    # `a.py, b.py` or `a/`, or the module by its dotted name (lab.x.a) or its bare name (`a`).
    return sorted(m for m in members if not ({m, m.rstrip("/"), m.removesuffix(".py")} & named or m in doc))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_index_names_every_module(package):
    assert _unnamed(package) == [], f"{package.relative_to(ROOT)}/__init__.py does not name these"

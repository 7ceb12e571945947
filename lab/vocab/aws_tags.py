"""AWS's tag rules, shared by the EKS stack's config check and the plan's API conformance.

AWS (Tagging AWS resources, "Tag naming limits and requirements"): at most 50 user tags per
resource; keys 1-128 and values 0-256 Unicode characters; letters, digits, spaces and
`_ . : / = + - @`; the `aws:` prefix is reserved for AWS's own tags.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

from lab.vocab.problems import Problem

MAX_TAGS = 50
MAX_KEY = 128
MAX_VALUE = 256
_PUNCTUATION = frozenset("_.:/=+-@")
# Tags EKS puts on the EC2 instances of a managed node group, and the FIS action that sends
# one of them a spot interruption (the stack's template and the drill's one-off ones use it).
EKS_CLUSTER_NAME_TAG = "eks:cluster-name"
EKS_NODEGROUP_TAG = "eks:nodegroup-name"
FIS_SPOT_INTERRUPTION = "aws:ec2:send-spot-instance-interruptions"
# The tag our EKS stack puts on everything it creates (teardown and cost reports find them by it).
CLUSTER_TAG = "elastic-spot-lab-cluster"


def _allowed(text: str) -> bool:
    """Letters and digits of any script, space separators and `_ . : / = + - @` (no tabs or newlines)."""
    return all(ch.isalnum() or ch in _PUNCTUATION or unicodedata.category(ch) == "Zs" for ch in text)


def tag_problems(tags: Any, key: str = "tags", *, reserved: int = 0) -> list[Problem]:
    """Every tag AWS would refuse in `tags` (given as `key`); `reserved` tags are added by us."""
    if not isinstance(tags, Mapping):
        return [Problem(key, tags, "a mapping of tag name to value")]
    out: list[Problem] = []
    if len(tags) + reserved > MAX_TAGS:
        out.append(
            Problem(key, len(tags), f"at most {MAX_TAGS - reserved} tags (AWS allows {MAX_TAGS}, we add {reserved})")
        )
    for name, value in tags.items():
        where = f"{key}[{name!r}]"
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_KEY or not _allowed(name):
            out.append(Problem(where, name, f"a tag name of 1-{MAX_KEY} letters, digits, spaces and _ . : / = + - @"))
        elif name.lower().startswith("aws:"):
            out.append(Problem(where, name, "a tag name not starting with 'aws:' (reserved for AWS)"))
        if not isinstance(value, str):
            out.append(Problem(where, value, "a string tag value (quote numbers and booleans)"))
        elif len(value) > MAX_VALUE or not _allowed(value):
            out.append(
                Problem(where, value, f"a tag value of 0-{MAX_VALUE} letters, digits, spaces and _ . : / = + - @")
            )
    return out

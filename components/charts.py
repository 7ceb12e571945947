"""The project's own Helm charts as the components hand them to Helm: where they are, their
default values, and map values that replace a default instead of merging into it."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from lab.vocab.layout import ROOT


@functools.cache
def chart_defaults(chart_dir: str) -> dict[str, Any]:
    """A chart's values.yaml."""
    return yaml.safe_load((Path(chart_dir) / "values.yaml").read_text()) or {}


def chart_default(chart: Path, *path: str) -> Mapping[str, Any] | None:
    """The chart's default map at `path` (None when there is no map there)."""
    node: Any = chart_defaults(str(chart))
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def exactly(desired: Mapping[str, Any], default: Mapping[str, Any] | None) -> dict[str, Any]:
    """A map value that replaces the chart's default map instead of merging into it: Helm
    merges maps key by key, and deletes a key given as null."""
    out: dict[str, Any] = {k: None for k in (default or {}) if k not in desired}
    out.update(desired)
    return out


def project_relative(chart: Path) -> str:
    """The chart's path relative to the project directory, where Pulumi runs the program:
    the same in every clone, so it does not show as a change between machines."""
    return chart.relative_to(ROOT).as_posix()

"""Render our Helm charts offline with the Helm v4 library (helm-python-sdk)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lab.vocab.errors import Refused


class ChartRenderError(Refused, ValueError):
    """A chart refused its values: schema violation or a template check. The message names
    the chart, the value and what is expected."""


def _render(
    chart_dir: str | os.PathLike[str], values: Mapping[str, Any] | None, release: str, namespace: str
) -> dict[str, str]:
    """Every rendered template of `chart_dir` by name (values.schema.json and the templates'
    own `fail` checks enforced)."""
    import helm_python as helm

    path = Path(chart_dir)
    try:
        with helm.Chart.load(path) as chart:
            return dict(chart.render(dict(values or {}), name=release, namespace=namespace, is_install=True))
    except helm.HelmValuesError as exc:
        raise ChartRenderError(f"chart {path.name}: invalid values: {_clean(exc)}") from None
    except helm.HelmRenderError as exc:
        raise ChartRenderError(f"chart {path.name}: {_clean(exc)}") from None
    except helm.HelmChartLoadError as exc:
        raise ChartRenderError(f"chart {path}: cannot be loaded: {_clean(exc)}") from None


@dataclass(frozen=True)
class Release:
    """What `helm install` of a chart would create and print: its Kubernetes objects in
    template order, and its NOTES.txt ("" without one)."""

    objects: list[dict[str, Any]]
    notes: str


def render_release(
    chart_dir: str | os.PathLike[str], values: Mapping[str, Any] | None, *, release: str, namespace: str
) -> Release:
    """Render `chart_dir` with `values` once: its objects and its notes."""
    rendered = _render(chart_dir, values, release, namespace)
    objects: list[dict[str, Any]] = []
    for template in sorted(rendered):
        if not template.endswith((".yaml", ".yml")):
            continue  # NOTES.txt
        for doc in yaml.safe_load_all(rendered[template]):
            if doc:
                objects.append(doc)
    notes = next((text.strip() for name, text in rendered.items() if name.endswith("NOTES.txt")), "")
    return Release(objects, notes)


def render_chart(
    chart_dir: str | os.PathLike[str],
    values: Mapping[str, Any] | None,
    *,
    release: str,
    namespace: str,
) -> list[dict[str, Any]]:
    """Render `chart_dir` with `values`; return its Kubernetes objects in template order."""
    return render_release(chart_dir, values, release=release, namespace=namespace).objects


def _clean(exc: Exception) -> str:
    """Helm's message without its template-position prefix, on one line per problem."""
    text = str(exc).strip()
    marker = "execution error at ("
    if marker in text:
        # "execution error at (chart/templates/x.yaml:1:4): <message>"
        text = text.split("): ", 1)[-1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("values don't meet") and not line.endswith(":")]
    return "; ".join(line.lstrip("- ") for line in lines) or text


def to_yaml(objects: list[Mapping[str, Any]]) -> str:
    text: str = yaml.safe_dump_all([dict(o) for o in objects], sort_keys=False, default_flow_style=False)
    return text

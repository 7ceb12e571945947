"""Kubernetes resource quantities (lab/vocab/quantity.py), as apimachinery's resource.Quantity reads them."""

from __future__ import annotations

from fractions import Fraction

import pytest

from lab.vocab.quantity import cpu_text, memory_text, parse_quantity


@pytest.mark.parametrize(
    "text,value",
    [
        ("4", 4),
        ("3500m", Fraction(7, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("16Gi", 16 * 2**30),
        ("512Mi", 512 * 2**20),
        ("1k", 1000),
        ("2M", 2_000_000),
        ("1e3", 1000),
        ("16", 16),  # memory without a unit: bytes
    ],
)
def test_quantities_read_as_kubernetes_reads_them(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "four", "12XB", "-1", "1 Gi", "Gi", "1gi", "1.2.3", None, 4])
def test_what_is_no_quantity(text):
    assert parse_quantity(text) is None


def test_quantities_are_written_as_kubernetes_writes_them():
    assert (cpu_text(Fraction(386, 100)), cpu_text(4)) == ("3860m", "4")
    assert (memory_text(16 * 2**30), memory_text(23522 * 2**20)) == ("16Gi", "23522Mi")

"""Kubernetes resource quantities, as a pod's requests and limits take them.

The grammar is apimachinery's `resource.Quantity` (k8s.io/apimachinery/pkg/api/resource,
quantity.go): a number, then a binary suffix (Ki, Mi, Gi, Ti, Pi, Ei), a decimal one (m, k,
M, G, T, P, E) or an exponent (e3, E-2). A number alone is whole units: cores for CPU, bytes
for memory. Signs are left out: a request is never negative.
"""

from __future__ import annotations

import re
from fractions import Fraction

QUANTITY = re.compile(
    r"^(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?$"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"m": -1, "": 0, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
MIB = 2**20
GIB = 2**30


def parse_quantity(text: object) -> Fraction | None:
    """The value of a quantity in whole units (cores, bytes), exactly; None when `text` is not one."""
    m = QUANTITY.match(text) if isinstance(text, str) else None
    if m is None:
        return None
    number, suffix = Fraction(m["number"]), m["suffix"] or ""
    if suffix in _BINARY:
        return number * (1 << (10 * _BINARY[suffix]))
    scale = Fraction(1000) ** _DECIMAL[suffix] if suffix in _DECIMAL else Fraction(10) ** int(suffix[1:])
    return number * Fraction(scale)


def cpu_text(cores: Fraction | float) -> str:
    """CPUs as Kubernetes writes them: whole cores, else millicores (3.86 -> 3860m)."""
    millis = int(Fraction(cores) * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def memory_text(size: Fraction | int) -> str:
    """Bytes in the largest binary unit that keeps a whole number of MiB (23.5 GiB -> 24064Mi)."""
    mib = int(Fraction(size) / MIB)
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"

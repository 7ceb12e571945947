"""What the clusters' args share: the stack-config key each field is read from (`meta`), the
collector of problems that each name a field (`FieldProblems`), the checks that run in order
(`check_fields`), those both clouds make (the Kubernetes version, a group's node bounds, the
training identity, the adopted checkpoint storage) and the methods of both args classes
(`ClusterArgs`: a copy with changes, every problem, refusal of invalid args)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Self

from lab.vocab.checkpoint_location import adoption_problems
from lab.vocab.names import DNS_LABEL
from lab.vocab.problems import InvalidInput, Problem, Problems
from lab.vocab.versions import NEWEST_KUBERNETES_MINOR


def meta(key: str, kind: str, doc: str) -> dict[str, str]:
    """A field's metadata: its stack-config key, its kind and what it is."""
    return {"key": key, "kind": kind, "doc": doc}


def settable_fields(args_class: type) -> list[dataclasses.Field[Any]]:
    """The args fields that stack config can set (all of them), with their key metadata."""
    return [f for f in dataclasses.fields(args_class) if "key" in f.metadata]


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def string_list(value: Any) -> list[str] | None:
    """`value` when it is a list of strings, else None."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return value


class FieldProblems(Problems):
    """The problems of one cluster's args, each naming a field and carrying its value (or, for a
    list, the bad item). A field is read once through `text` or `strings`, which report a value
    of another type."""

    def __init__(self, args: Any) -> None:
        super().__init__()
        self.args = args

    def bad(self, name: str, expected: str, value: Any = None) -> None:
        self.add(name, getattr(self.args, name) if value is None else value, expected)

    def text(self, name: str) -> str | None:
        """The field's value when it is a string; otherwise None, and a problem."""
        value = getattr(self.args, name)
        if not isinstance(value, str):
            self.bad(name, "a string")
            return None
        return value

    def strings(self, name: str) -> list[str]:
        """The field's value when it is a list of strings; otherwise empty, and a problem."""
        value = string_list(getattr(self.args, name))
        if value is None:
            self.bad(name, "a list of strings")
            return []
        return value

    def one_of(self, name: str, allowed: tuple[str, ...], note: str = "") -> None:
        if (value := self.text(name)) is not None and value not in allowed:
            self.bad(name, "one of " + ", ".join(allowed) + note)


# A check of a cluster's args: it adds the problems of a few fields to the collector.
Check = Callable[[Any, FieldProblems], None]


def check_fields(args: Any, checks: Iterable[Check]) -> list[Problem]:
    """Every problem the checks find, run in order, each adding what it finds to one collector."""
    found = FieldProblems(args)
    for check in checks:
        check(args, found)
    return found.items


def kubernetes_version(found: FieldProblems, pattern: re.Pattern[str], minimum: int, form: str, why: str) -> None:
    """The `kubernetes_version` field: `form` (what the cloud takes) matching `pattern`, whose
    first group is the minor; no older than 1.<minimum> (`why` not), no newer than the newest
    minor whose schemas the offline checks carry."""
    if (ver := found.text("kubernetes_version")) is None:
        return
    m = pattern.match(ver)
    if not m:
        found.bad("kubernetes_version", form)
    elif int(m.group(1)) < minimum:
        found.bad("kubernetes_version", f"1.{minimum} or newer ({why})")
    elif int(m.group(1)) > NEWEST_KUBERNETES_MINOR:
        found.bad(
            "kubernetes_version",
            f"1.{minimum} to 1.{NEWEST_KUBERNETES_MINOR}: 1.{NEWEST_KUBERNETES_MINOR} is the newest minor whose "
            "schemas the offline checks carry",
        )


def node_bounds(
    args: Any, found: FieldProblems, lo: str, hi: str, *, most: int, floor: int, why: str, zero_note: str = ""
) -> None:
    """An autoscaled pool's (node group's) maximum `hi` (1..`most`; `zero_note` said of a 0),
    then its minimum `lo` (`floor`..maximum; `why` that floor)."""
    vlo, vhi = getattr(args, lo), getattr(args, hi)
    ok_hi = is_int(vhi) and 1 <= vhi <= most
    if not ok_hi:
        reason = zero_note if vhi == 0 and is_int(vhi) else ""
        found.bad(hi, f"a whole number in 1..{most}{reason}")
    if not is_int(vlo) or vlo < floor:
        found.bad(lo, f"a whole number >= {floor} ({why})")
    elif ok_hi and vlo > vhi:
        found.bad(lo, f"<= {hi} ({vhi})")


def training_identity(args: Any, found: FieldProblems) -> None:
    """The training pods' namespace and service account: DNS-1123 labels."""
    for n in ("training_namespace", "training_service_account"):
        if (v := found.text(n)) is not None and not DNS_LABEL.match(v):
            found.bad(n, "a DNS-1123 label: 1-63 lower-case letters, digits and '-'")


def adopted_checkpoints(kept: tuple[str, ...]) -> Check:
    """The check of `adopt_checkpoints`: each role one of `kept` (what a destroy keeps on this
    cloud), each id a non-empty string."""

    def adopted(args: Any, found: FieldProblems) -> None:
        for key, value, expected in adoption_problems(args.adopt_checkpoints, kept, "adopt_checkpoints"):
            found.add(key, value, expected)

    return adopted


class ClusterArgs:
    """What both clusters' args classes (frozen dataclasses deriving from this) do alike. A
    subclass names itself in `described_as` and lists its checks, in order, in `checks`."""

    described_as: ClassVar[str]  # what an InvalidInput says the problems are of
    checkpoints_on_destroy: str

    def checks(self) -> Sequence[Check]:
        raise NotImplementedError

    @property
    def keeps_checkpoints(self) -> bool:
        """`pulumi destroy` leaves the checkpoint storage in the cloud."""
        return self.checkpoints_on_destroy == "keep"

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def problems(self) -> list[Problem]:
        """Every invalid value, as (field, value, expected); empty when all is well. The checks
        run in their order, each adding what it finds to the same collector."""
        return check_fields(self, self.checks())

    def validate(self) -> Self:
        if problems := self.problems():
            raise InvalidInput(problems, self.described_as)
        return self

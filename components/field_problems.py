"""What the clusters' args share: the stack-config key each field is read from (`meta`), the
collector of problems that each name a field (`FieldProblems`), the checks that run in order
(`check_fields`), those both clouds make (the Kubernetes version, a group's node bounds, the
training identity, the adopted checkpoint storage) and the methods of both args classes
(`ClusterArgs`: a copy with changes, every problem, refusal of invalid args, the fallback GPU
ranks), with the fields both declare alike and the rules of a cloud's fallback ranks
(`RankRules`)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from lab.vocab.capacity import GpuRank, default_rank_name, fallback_problems, rank_from_entry, rank_list_problems
from lab.vocab.checkpoint_location import adoption_problems
from lab.vocab.machine_shapes import Shape
from lab.vocab.names import DNS_LABEL
from lab.vocab.problems import InvalidInput, Problem, Problems
from lab.vocab.versions import NEWEST_KUBERNETES_MINOR


def meta(key: str, kind: str, doc: str) -> dict[str, str]:
    """A field's metadata: its stack-config key, its kind and what it is."""
    return {"key": key, "kind": kind, "doc": doc}


def training_namespace_field() -> str:
    return field(default="training", metadata=meta("trainingNamespace", "str", "namespace of the training pods"))


def training_service_account_field() -> str:
    return field(
        default="trainer", metadata=meta("trainingServiceAccount", "str", "service account of the training pods")
    )


def adopt_checkpoints_field() -> dict[str, str]:
    return field(
        default_factory=dict,
        metadata=meta(
            "adoptCheckpoints",
            "map",
            "kept checkpoint storage to take back, role -> cloud id (written by `elastic-lab destroy`)",
        ),
    )


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


@dataclass(frozen=True)
class RankRules:
    """A cloud's rules for the fallback GPU ranks (`gpu_fallback`, lab/vocab/capacity.py): the
    key of a rank's sizes, the problems of one rank's sizes (value, key), what a rank's name
    should be instead (None: fine), the zones a rank may name (None: no `zones`), the machine
    shapes, and how a rank without a name is named after the GPU spot pool's (`limit`
    characters at most, `separator` before the rank)."""

    sizes_key: str
    size_problems: Callable[[Any, str], list[Problem]]
    name_problem: Callable[[Any], str | None]
    zones_allowed: tuple[str, ...] | None
    shapes: Mapping[str, Shape]
    limit: int
    separator: str = ""


def gpu_fallback(args: ClusterArgs, found: FieldProblems, *, other_pools: tuple[str, ...], names_ok: bool) -> bool:
    """Each `gpu_fallback` rank; then, when each is valid and `names_ok` (the cloud's own test
    that the pools' names can be compared), all of `args.gpu_ranks()` together: sizes rank 1
    allows, names that differ from each other and from `other_pools`. Whether they were."""
    rules = args.rank_rules
    ranks_found = fallback_problems(
        args.gpu_fallback,
        "gpu_fallback",
        sizes_key=rules.sizes_key,
        size_problems=rules.size_problems,
        name_problem=rules.name_problem,
        zones_allowed=rules.zones_allowed,
    )
    found.extend(ranks_found)
    if ranks_found or not names_ok:
        return False
    found.extend(
        rank_list_problems(
            args.gpu_ranks(), rules.shapes, key="gpu_fallback", sizes_key=rules.sizes_key, other_pools=set(other_pools)
        )
    )
    return True


class ClusterArgs:
    """What both clusters' args classes (frozen dataclasses deriving from this) do alike. A
    subclass names itself in `described_as`, gives its cloud's `rank_rules` and GPU spot pool
    (`first_rank`), and lists its checks, in order, in `checks`."""

    described_as: ClassVar[str]  # what an InvalidInput says the problems are of
    rank_rules: ClassVar[RankRules]
    checkpoints_on_destroy: str
    gpu_fallback: list[dict[str, Any]]

    def checks(self) -> Sequence[Check]:
        raise NotImplementedError

    @property
    def keeps_checkpoints(self) -> bool:
        """`pulumi destroy` leaves the checkpoint storage in the cloud."""
        return self.checkpoints_on_destroy == "keep"

    @classmethod
    def config_fields(cls) -> list[dataclasses.Field[Any]]:
        """The args fields that stack config can set (all of them), with their key metadata."""
        return settable_fields(cls)

    def first_rank(self) -> GpuRank:
        """Rank 1 of the GPU capacity: the GPU spot pool (group)."""
        raise NotImplementedError

    def gpu_ranks(self) -> tuple[GpuRank, ...]:
        """The GPU capacity in the order the autoscaler tries it: the GPU spot pool (group), then
        the fallback ranks (valid args only); a spot rank without a name is named after rank 1."""
        first = self.first_rank()
        rules = self.rank_rules
        return (
            first,
            *(
                rank_from_entry(
                    i,
                    entry,
                    sizes_key=rules.sizes_key,
                    default_name=default_rank_name(
                        first.name,
                        i,
                        entry.get("capacity", "spot") == "spot",
                        limit=rules.limit,
                        separator=rules.separator,
                    ),
                )
                for i, entry in enumerate(self.gpu_fallback, start=2)
            ),
        )

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

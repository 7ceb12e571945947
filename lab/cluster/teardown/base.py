"""What every teardown sweep shares: the leftover record, the sweep protocol, one error type, and
the constants and helpers of the sweeps."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from lab.cluster.eviction import ApiCall
from lab.vocab.errors import LabError

if TYPE_CHECKING:
    pass


class TeardownError(LabError):
    """A sweep cannot look or could not delete; the message says which call and what to do.
    `deleted` lists what the failing `delete` did delete before it gave up."""

    def __init__(self, message: str, deleted: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.deleted = list(deleted)


@dataclass(frozen=True)
class Leftover:
    """One thing a sweep found: its kind, its id (an ARM id, an ARN, an AWS id, a Kubernetes
    name, a pid or a path), where it is, and why it counts as the stack's."""

    kind: str
    id: str
    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.where}): {self.reason}"


class Sweep(Protocol):
    name: str
    kept: list[Leftover]  # what the last find() left alone on purpose, with the reason

    def find(self) -> list[Leftover]: ...

    def delete(self, items: Sequence[Leftover]) -> list[str]: ...

    def calls(self) -> list[ApiCall]: ...


class Recorded:
    """What every sweep keeps of its last find(): what it left alone on purpose (`kept`, with
    the reason), notes on what it did not look for, and what it found (None until find() ran,
    so that calls() lists placeholders for it). A sweep says what to look for in `_look()`."""

    def __init__(self) -> None:
        self.kept: list[Leftover] = []
        self.notes: list[str] = []
        self._found: list[Leftover] | None = None

    def find(self) -> list[Leftover]:
        self.kept, self.notes = [], []
        self._found = self._look()
        return self._found

    def _look(self) -> list[Leftover]:
        raise NotImplementedError


def _delete_all(
    sweep: str, items: Sequence[Leftover], order: Sequence[str], delete_one: Callable[[Leftover], bool]
) -> list[str]:
    """Delete `items` kind by kind in `order` (each kind's deletion may need the one before
    it); `delete_one` returns True when the item was already gone. Every item is tried; the
    failures are raised together afterwards, with what was deleted."""
    unknown = sorted({i.kind for i in items} - set(order))
    if unknown:
        raise TeardownError(f"the {sweep} sweep deletes {', '.join(order)}, not {', '.join(unknown)}")
    done: list[str] = []
    failed: list[str] = []
    for item in sorted(items, key=lambda i: order.index(i.kind)):
        try:
            gone = delete_one(item)
        except TeardownError as e:
            failed.append(f"{item.kind} {item.id}: {e}")
            continue
        done.append(f"{item.kind} {item.id}" + (" (already gone)" if gone else ""))
    if failed:
        raise TeardownError(
            f"the {sweep} sweep could not delete {len(failed)} of {len(items)}:\n  - " + "\n  - ".join(failed), done
        )
    return done


def _planned(found: list[Leftover] | None, kind: str, placeholder: str) -> list[Leftover]:
    """The items of `kind` that deletion would touch: those found, or one placeholder when
    find() has not run (a dry run lists the request with `<each ... found>`)."""
    if found is None:
        return [Leftover(kind, placeholder, "", "")]
    return [i for i in found if i.kind == kind]


# ====================================================================== Kubernetes

PYTORCHJOB = "PyTorchJob"
SERVICE = "Service"
PVC = "PersistentVolumeClaim"
KUBERNETES_API = "kubernetes"
_JOBS = {"group": "kubeflow.org", "version": "v1", "plural": "pytorchjobs"}


class _Gone:
    """What a request answered with 404 returns: the thing is not there (any more)."""


GONE = _Gone()

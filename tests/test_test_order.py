"""The suite's order on several workers: each worker's first share starts with long tests, and
no test is lost or repeated (tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass

from tests.conftest import long_tests_first_in_each_share


@dataclass(frozen=True)
class _Item:
    name: str
    long: bool = False

    def get_closest_marker(self, name: str) -> object:
        return True if name == "long" and self.long else None


def _shares(items: list[_Item], workers: int) -> list[list[_Item]]:
    """What xdist's work stealing sends each idle worker first: the rest split evenly."""
    shares, left, at = [], len(items), 0
    for k in range(workers):
        size = left // (workers - k)
        shares.append(items[at : at + size])
        at, left = at + size, left - size
    return shares


def test_each_share_starts_with_long_tests_and_keeps_the_rest_in_order():
    items = [_Item(f"t{i}", long=i % 9 == 5) for i in range(103)]
    ordered = long_tests_first_in_each_share(items, 4)  # type: ignore[arg-type]
    assert sorted(i.name for i in ordered) == sorted(i.name for i in items)
    shares = _shares(ordered, 4)  # type: ignore[arg-type]
    long = [i for i in items if i.long]
    assert [s[: len(long[k::4])] for k, s in enumerate(shares)] == [long[k::4] for k in range(4)]
    rest = [i for i in ordered if not i.long]
    assert rest == [i for i in items if not i.long]


def test_one_worker_or_no_long_test_keeps_the_order():
    items = [_Item(f"t{i}", long=i == 3) for i in range(10)]
    assert long_tests_first_in_each_share(items, 1) == items  # type: ignore[arg-type]
    plain = [_Item(f"t{i}") for i in range(10)]
    assert long_tests_first_in_each_share(plain, 4) == plain  # type: ignore[arg-type]


def test_more_long_tests_than_a_share_holds_loses_none():
    items = [_Item(f"t{i}", long=i < 6) for i in range(8)]
    ordered = long_tests_first_in_each_share(items, 4)  # type: ignore[arg-type]
    assert sorted(i.name for i in ordered) == sorted(i.name for i in items)


def test_only_long_tests_on_fewer_workers_lose_none():
    """Every test of a run long (one file of drills on two workers): the shares still hold them all."""
    items = [_Item(f"t{i}", long=True) for i in range(11)]
    ordered = long_tests_first_in_each_share(items, 2)  # type: ignore[arg-type]
    assert sorted(i.name for i in ordered) == sorted(i.name for i in items)

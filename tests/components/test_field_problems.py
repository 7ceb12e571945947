"""What the clusters' args share: problems that name a field, checks run in order, the
Kubernetes version rule, a group's node bounds, the training identity, the adopted checkpoint
storage, the fallback GPU ranks, and the `ClusterArgs` base."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from components.aks.args import AksClusterArgs
from components.field_problems import (
    ClusterArgs,
    FieldProblems,
    adopt_checkpoints_field,
    adopted_checkpoints,
    check_fields,
    gpu_fallback,
    kubernetes_version,
    meta,
    node_bounds,
    settable_fields,
    training_identity,
    training_namespace_field,
    training_service_account_field,
)
from lab.vocab.capacity import GpuRank
from lab.vocab.problems import InvalidInput, Problem
from lab.vocab.versions import NEWEST_KUBERNETES_MINOR


@dataclass(frozen=True)
class _Args:
    name: Any = field(default="ok", metadata=meta("name", "str", "a name"))
    zones: Any = field(default_factory=list, metadata=meta("zones", "list", "zones"))
    kubernetes_version: Any = field(default="1.31", metadata=meta("kubernetesVersion", "str", "version"))
    internal: int = 0


def test_a_field_read_as_the_wrong_type_is_a_problem_naming_it():
    found = FieldProblems(_Args(name=3, zones=["1", 2]))
    assert found.text("name") is None
    assert found.strings("zones") == []
    assert found.items == [Problem("name", 3, "a string"), Problem("zones", ["1", 2], "a list of strings")]


def test_bad_names_the_item_of_a_list_and_one_of_lists_what_is_allowed():
    found = FieldProblems(_Args(name="c"))
    found.bad("zones", "a zone", "9")
    found.one_of("name", ("a", "b"), " (letters)")
    assert found.items == [Problem("zones", "9", "a zone"), Problem("name", "c", "one of a, b (letters)")]


def test_checks_run_in_order_into_one_collector():
    def first(args: _Args, found: FieldProblems) -> None:
        found.bad("name", "first")

    def second(args: _Args, found: FieldProblems) -> None:
        found.bad("name", f"second after {len(found.items)}")

    assert [p.expected for p in check_fields(_Args(), (first, second))] == ["first", "second after 1"]


def test_settable_fields_are_those_with_a_config_key():
    assert [f.name for f in settable_fields(_Args)] == ["name", "zones", "kubernetes_version"]


@pytest.mark.parametrize(
    "version,says",
    [
        ("1.31", None),
        ("131", "the form"),
        ("1.29", "1.30 or newer (the reason)"),
        (f"1.{NEWEST_KUBERNETES_MINOR + 1}", f"1.{NEWEST_KUBERNETES_MINOR} is the newest minor"),
    ],
)
def test_the_kubernetes_version_rule(version, says):
    found = FieldProblems(_Args(kubernetes_version=version))
    kubernetes_version(found, re.compile(r"^1\.(\d+)$"), 30, "the form", "the reason")
    assert [p.key for p in found] == ([] if says is None else ["kubernetes_version"])
    if says is not None:
        assert says in found.items[0].expected


@dataclass(frozen=True)
class _Bounds:
    lo: Any = 1
    hi: Any = 3


@pytest.mark.parametrize(
    "lo,hi,expected",
    [
        (1, 3, []),
        (0, 3, [Problem("lo", 0, "a whole number >= 1 (why)")]),
        (3, 2, [Problem("lo", 3, "<= hi (2)")]),
        (1, 0, [Problem("hi", 0, "a whole number in 1..10 (zero)")]),
        (1, 11, [Problem("hi", 11, "a whole number in 1..10")]),
        (True, "3", [Problem("hi", "3", "a whole number in 1..10"), Problem("lo", True, "a whole number >= 1 (why)")]),
    ],
)
def test_node_bounds_check_the_maximum_then_the_minimum(lo, hi, expected):
    found = FieldProblems(_Bounds(lo, hi))
    node_bounds(found.args, found, "lo", "hi", most=10, floor=1, why="why", zero_note=" (zero)")
    assert found.items == expected


@dataclass(frozen=True)
class _Training:
    training_namespace: str = training_namespace_field()
    training_service_account: str = training_service_account_field()
    adopt_checkpoints: dict[str, str] = adopt_checkpoints_field()  # noqa: RUF009 - a Field, a new dict each


def test_the_shared_fields_carry_their_config_keys_and_defaults():
    assert [(f.name, f.metadata["key"]) for f in settable_fields(_Training)] == [
        ("training_namespace", "trainingNamespace"),
        ("training_service_account", "trainingServiceAccount"),
        ("adopt_checkpoints", "adoptCheckpoints"),
    ]
    first, second = _Training(), _Training()
    assert (first.training_namespace, first.training_service_account, first.adopt_checkpoints) == (
        "training",
        "trainer",
        {},
    )
    assert first.adopt_checkpoints is not second.adopt_checkpoints


def test_the_training_identity_is_two_dns_labels():
    found = FieldProblems(_Training(training_namespace="Training", training_service_account=3))
    training_identity(found.args, found)
    assert [(p.key, p.value) for p in found] == [("training_namespace", "Training"), ("training_service_account", 3)]
    assert "DNS-1123" in found.items[0].expected


def test_adopted_checkpoints_name_a_kept_role_and_a_cloud_id():
    found = FieldProblems(_Training(adopt_checkpoints={"bucket": "b", "account": " ", "other": "x"}))
    adopted_checkpoints(("bucket", "account"))(found.args, found)
    assert [(p.key, p.value) for p in found] == [("adopt_checkpoints.account", " "), ("adopt_checkpoints.other", "x")]


# AKS's rules for a rank, with shorter default names that say where the rank number goes.
_RULES = dataclasses.replace(AksClusterArgs.rank_rules, limit=8, separator="-")


@dataclass(frozen=True)
class _Cluster(ClusterArgs):
    described_as = "test cluster arguments"  # class attributes: not annotated, so no fields
    rank_rules = _RULES

    pool: Any = field(default="gpuspot", metadata=meta("pool", "str", "the GPU spot pool"))
    other: Any = field(default="cpu", metadata=meta("other", "str", "the other pool"))
    gpu_fallback: Any = field(default_factory=list, metadata=meta("gpuFallback", "list", "ranks"))
    checkpoints_on_destroy: Any = field(default="keep", metadata=meta("checkpointsOnDestroy", "str", "keep"))

    def first_rank(self) -> GpuRank:
        return GpuRank(1, self.pool, (_A100,), True)

    def checks(self):
        return (_pool_name, _fallback)


def _pool_name(args: _Cluster, found: FieldProblems) -> None:
    found.text("pool")


def _fallback(args: _Cluster, found: FieldProblems) -> None:
    gpu_fallback(args, found, other_pools=(args.other,), names_ok=isinstance(args.pool, str))


_T4 = "Standard_NC4as_T4_v3"
_A100 = "Standard_NC24ads_A100_v4"  # rank 1's size


def test_cluster_args_copy_check_and_refuse():
    args = _Cluster()
    assert args.validate() is args and args.problems() == []
    changed = args.replace(pool=3, checkpoints_on_destroy="delete")
    assert type(changed) is _Cluster and args.pool == "gpuspot"
    assert changed.problems() == [Problem("pool", 3, "a string")] and not changed.keeps_checkpoints
    with pytest.raises(InvalidInput) as refused:
        changed.validate()
    assert refused.value.problems == [Problem("pool", 3, "a string")]
    assert refused.value.source == "test cluster arguments"
    assert [f.name for f in _Cluster.config_fields()] == ["pool", "other", "gpu_fallback", "checkpoints_on_destroy"]


def test_fallback_ranks_follow_rank_one_named_after_it_unless_named():
    args = _Cluster(
        gpu_fallback=[
            {"vmSize": _T4, "capacity": "spot"},
            {"vmSize": _T4, "capacity": "spot", "name": "mine"},
            {"vmSize": _T4, "capacity": "on-demand"},
        ]
    )
    assert [(r.rank, r.name, r.sizes, r.spot) for r in args.gpu_ranks()] == [
        (1, "gpuspot", (_A100,), True),
        (2, "gpuspo-2", (_T4,), True),
        (3, "mine", (_T4,), True),
        (4, "gpu-on-demand", (_T4,), False),
    ]


def test_a_bad_rank_is_said_alone_and_ranks_are_compared_only_when_each_is_good():
    bad = _Cluster(gpu_fallback=[{"vmSize": "Standard_X", "name": "cpu"}])
    assert [p.key for p in bad.problems()] == ["gpu_fallback[0].vmSize"]
    clash = _Cluster(gpu_fallback=[{"vmSize": _A100, "capacity": "spot", "name": "cpu"}])
    assert [p.key for p in clash.problems()] == ["gpu_fallback"]
    assert "cpu repeats" in clash.problems()[0].expected
    unnamed_pool = clash.replace(pool=["x"])
    found = FieldProblems(unnamed_pool)
    assert gpu_fallback(unnamed_pool, found, other_pools=(unnamed_pool.other,), names_ok=False) is False
    assert found.items == []
    found = FieldProblems(clash)
    assert gpu_fallback(clash, found, other_pools=("elsewhere",), names_ok=True) is True
    assert found.items == []

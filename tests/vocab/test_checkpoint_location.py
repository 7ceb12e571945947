"""Checkpoint locations: a directory, or an object-store URL taken apart and checked."""

from __future__ import annotations

import pytest

from lab.vocab import checkpoint_location as loc
from lab.vocab.job import JobSpec
from lab.vocab.problems import InvalidInput


@pytest.mark.parametrize(
    "location,parts",
    [
        ("s3://bucket", loc.ObjectStoreLocation("s3://", "", "bucket", "")),
        ("s3://bucket/jobs/big/", loc.ObjectStoreLocation("s3://", "", "bucket", "jobs/big")),
        ("az://acct/ckpt", loc.ObjectStoreLocation("az://", "acct", "ckpt", "")),
        ("az://acct/ckpt/big", loc.ObjectStoreLocation("az://", "acct", "ckpt", "big")),
        ("/checkpoints", None),
        ("s3://", None),
        ("az://acct", None),
        ("az://acct/", None),
    ],
)
def test_locations_are_taken_apart(location, parts):
    assert loc.parse(location) == parts


def test_a_malformed_url_is_named_with_its_expected_form():
    assert loc.problem("az://acct") == "az://account/container[/prefix]"
    assert loc.problem("s3://") == "s3://bucket[/prefix]"
    assert loc.problem("s3://bucket/x") is None and loc.problem("/checkpoints") is None
    assert loc.is_object_store("s3://b") and loc.is_object_store("az://a/c") and not loc.is_object_store("/s3://")


def test_a_job_folder_joins_under_either_kind():
    assert loc.join("s3://bucket/", "big") == "s3://bucket/big"
    assert loc.join("/checkpoints", "big") == "/checkpoints/big"


def test_a_job_with_a_malformed_url_is_refused_before_it_starts():
    with pytest.raises(InvalidInput, match=r"checkpoint_dir='az://acct' is invalid: expected az://account/container"):
        JobSpec(checkpoint_dir="az://acct")
    assert JobSpec(checkpoint_dir="s3://bucket/jobs").checkpoint_dir == "s3://bucket/jobs"


@pytest.mark.parametrize(
    "ids,expected",
    [
        ({"bucket": "esl-ckpt-1"}, []),
        ({}, []),
        ({"account": "x"}, [("k.account", "x", "one of the roles bucket")]),
        ({"bucket": ""}, [("k.bucket", "", "the resource's cloud id (a non-empty string)")]),
        ("esl-ckpt-1", [("k", "esl-ckpt-1", "a mapping of bucket to cloud ids")]),
    ],
)
def test_an_adoption_mapping_names_each_bad_entry(ids, expected):
    from lab.vocab.checkpoint_location import EKS_KEPT, adoption_problems

    assert adoption_problems(ids, EKS_KEPT, "k") == expected


def test_the_kept_roles_of_each_cloud_come_from_the_kept_types():
    from lab.vocab.checkpoint_location import AKS_KEPT, EKS_KEPT

    assert (AKS_KEPT, EKS_KEPT) == (("resourceGroup", "account", "container"), ("bucket",))

"""Kubernetes and container naming rules of the vocabulary."""

from __future__ import annotations

import pytest

from lab.vocab.names import IMAGE_REFERENCE, ImageReference


@pytest.mark.parametrize(
    "ref",
    [
        "ghcr.io/elastic-spot-lab/trainer:0.1.0",
        "myacr.azurecr.io/elastic-spot-lab/trainer@sha256:" + "a" * 64,
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:v1",
        "localhost:5000/trainer",
        "registry:5000/team/trainer:1",
        "[::1]:5000/trainer",
        "trainer",
        "my.Registry.io/team/img:tag",
        "nginx:1.27-alpine",
    ],
)
def test_image_references_runtimes_accept(ref):
    assert IMAGE_REFERENCE.match(ref)


@pytest.mark.parametrize(
    "ref", ["UPPER/Case:latest", "Trainer", "a//b", "trainer:", "trainer:-x", "trainer@sha256:abc", " trainer", ""]
)
def test_image_references_runtimes_refuse(ref):
    assert not IMAGE_REFERENCE.match(ref)


DIGEST = "sha256:" + "ab" * 32

# reference -> (repository, tag, digest, pinned)
IMAGE_PARTS = {
    "ghcr.io/elastic-spot-lab/trainer:0.1.0": ("ghcr.io/elastic-spot-lab/trainer", "0.1.0", None, True),
    f"acr.azurecr.io/elastic-spot-lab/trainer:0123abc@{DIGEST}": (
        "acr.azurecr.io/elastic-spot-lab/trainer",
        "0123abc",
        DIGEST,
        True,
    ),
    f"localhost:5000/trainer@{DIGEST}": ("localhost:5000/trainer", None, DIGEST, True),
    "localhost:5000/trainer": ("localhost:5000/trainer", None, None, False),
    "registry:5000/team/trainer:latest": ("registry:5000/team/trainer", "latest", None, False),
    f"trainer:latest@{DIGEST}": ("trainer", "latest", DIGEST, False),
}


@pytest.mark.parametrize("ref", IMAGE_PARTS)
def test_an_image_reference_splits_into_repository_tag_and_digest(ref):
    parts = ImageReference.parse(ref)
    assert parts is not None
    assert (parts.repository, parts.tag, parts.digest, parts.pinned) == IMAGE_PARTS[ref]
    assert str(parts) == ref


@pytest.mark.parametrize("ref", ["trainer@sha256:abc", "Trainer:1", "", None, 3])
def test_what_is_no_image_reference_has_no_parts(ref):
    assert ImageReference.parse(ref) is None

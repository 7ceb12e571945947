"""Kubernetes and container naming rules of the vocabulary."""

from __future__ import annotations

import pytest

from lab.vocab.names import IMAGE_REFERENCE


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

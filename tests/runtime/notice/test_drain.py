"""The eviction grace period and which pods are evicted."""

from __future__ import annotations

import pytest
from kubernetes import client

from lab.runtime.notice.drain import grace_seconds, skip_reason
from tests.runtime.notice.fakes import pod

NOW = 1_000_000.0


@pytest.mark.parametrize(
    ("pod_grace", "not_before", "margin", "expected"),
    [
        (60, NOW + 30, 5, 25),  # the notice is shorter than the pod's grace
        (10, NOW + 30, 5, 10),  # the pod's own grace fits
        (30, NOW + 30.9, 5, 25),  # whole seconds, rounded down
        (60, NOW + 3, 5, 1),  # too late for any grace: at least 1
        (60, NOW - 10, 5, 1),  # NotBefore passed
        (60, None, 5, 60),  # no NotBefore: the pod's own
        (None, None, 5, 30),  # the API's default grace
        (0, NOW + 30, 5, 1),  # 0 would be a forced delete
    ],
    ids=["notice-shorter", "own-fits", "rounded-down", "too-late", "passed", "no-time", "default", "zero"],
)
def test_grace_seconds(pod_grace, not_before, margin, expected):
    assert grace_seconds(pod_grace, not_before, NOW, margin) == expected


def _pod(**kw) -> client.V1Pod:
    data = pod("p", "n", **{k: v for k, v in kw.items() if k != "phase"})
    if "phase" in kw:
        data["status"]["phase"] = kw["phase"]
    return client.ApiClient()._ApiClient__deserialize(data, "V1Pod")


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({}, None),
        ({"owner": None}, None),
        ({"owner": "DaemonSet"}, "daemonset pod"),
        ({"owner": "Node", "mirror": True}, "mirror pod"),
        ({"terminating": True}, "terminating"),
        ({"phase": "Succeeded"}, "finished"),
        ({"phase": "Pending"}, None),
    ],
    ids=["replicaset", "bare", "daemonset", "mirror", "terminating", "finished", "pending"],
)
def test_skip_reason(kw, expected):
    assert skip_reason(_pod(**kw)) == expected

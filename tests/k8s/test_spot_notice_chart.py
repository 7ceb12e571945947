"""charts/spot-notice-handler rendered offline: every object valid for the cluster's
Kubernetes (strict), and what the handler needs to work on an AKS spot GPU node: the RBAC verbs
of its calls, NODE_NAME, the spot and GPU taints tolerated, flags its own parser accepts, a
pinned image; values.schema.json refuses what would break it."""

from __future__ import annotations

from typing import Any

import pytest

from lab.k8s.helm import ChartRenderError, render_chart
from lab.k8s.schemas import validate_objects
from lab.runtime.notice.cli import build_parser, settings
from lab.vocab.layout import NOTICE_CHART
from lab.vocab.pools import Taint
from lab.vocab.versions import DEFAULT_KUBERNETES_VERSION
from tests.k8s.helpers import the
from tests.placements import AKS_PLACEMENT, TRAINER_IMAGE

NAMESPACE = "kube-system"

# (API group, resource, verb) of each call the handler makes (lab/runtime/notice/drain.py).
CALLS = {
    ("", "nodes", "patch"),  # cordon: patch_node
    ("", "pods", "list"),  # list_pod_for_all_namespaces(field_selector=spec.nodeName=...)
    ("", "pods/eviction", "create"),  # create_namespaced_pod_eviction
}


def _render(values: dict[str, Any] | None = None, release: str = "spot-notice-handler") -> list[dict[str, Any]]:
    return render_chart(NOTICE_CHART, values, release=release, namespace=NAMESPACE)


def _pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return the(objects, "DaemonSet")["spec"]["template"]["spec"]


def _platform_values() -> dict[str, Any]:
    from components.platform.settings import PlatformSettings
    from components.platform.values import notice_handler_values

    return notice_handler_values(PlatformSettings(notice_handler_image=TRAINER_IMAGE), AKS_PLACEMENT)


def _tolerates(tolerations: list[dict[str, Any]], taint: Taint) -> bool:
    """Kubernetes' rule (k8s.io/api/core/v1 Toleration.ToleratesTaint)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.effect:
            continue
        if t.get("key") and t["key"] != taint.key:
            continue
        if not t.get("key") and t.get("operator") != "Exists":
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == taint.value:
            return True
    return False


@pytest.mark.parametrize("values", ["defaults", "platform"])
def test_every_object_is_valid_for_the_cluster(values):
    objects = _render(None if values == "defaults" else _platform_values())
    assert sorted(o["kind"] for o in objects) == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "ServiceAccount"]
    assert validate_objects(objects, DEFAULT_KUBERNETES_VERSION) == []


def test_rbac_grants_the_calls_of_the_handler_to_its_pods():
    objects = _render(release="lab")
    role = the(objects, "ClusterRole")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted >= CALLS
    # Nothing it does not use: no delete (evictions respect PDBs, deletes would not), no writes to pods.
    assert {verb for _, _, verb in granted} <= {"get", "list", "patch", "create"}
    assert {(r, v) for _, r, v in granted if v in ("patch", "create")} == {
        ("nodes", "patch"),
        ("pods/eviction", "create"),
    }

    binding, account, pod = the(objects, "ClusterRoleBinding"), the(objects, "ServiceAccount"), _pod(objects)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True  # the in-cluster config reads the token
    # Cluster-wide names carry the release: two releases do not share a role.
    assert role["metadata"]["name"] == "lab-spot-notice-handler"


def test_the_container_runs_the_handler_with_flags_it_accepts():
    for values in (None, _platform_values()):
        [container] = _pod(_render(values))["containers"]
        assert container["command"] == ["python", "-m", "lab.runtime.notice"]
        env = {e["name"]: e for e in container["env"]}
        assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
        s = settings(build_parser().parse_args(container["args"]), {"NODE_NAME": "aks-gpuspot-1-vmss000003"})
        assert s.act_on == ("Preempt", "Terminate") and s.poll_interval_s == 1.0 and s.kubeconfig is None
        assert s.imds_url == "http://169.254.169.254"


def test_it_lands_on_aks_spot_gpu_nodes():
    for values in (None, _platform_values()):
        pod = _pod(_render(values))
        for taint in AKS_PLACEMENT.gpu_taints:
            assert _tolerates(pod["tolerations"], taint), f"{taint} not tolerated"
        assert pod["nodeSelector"].items() <= AKS_PLACEMENT.gpu_labels.items()
        assert pod["nodeSelector"]["kubernetes.azure.com/scalesetpriority"] == "spot"


def test_priority_class_is_the_platforms_or_none():
    assert "priorityClassName" not in _pod(_render())
    assert _pod(_render(_platform_values()))["priorityClassName"] == "elastic-preserved"


def test_the_pod_is_locked_down_and_small():
    pod = _pod(_render())
    [container] = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {"cpu", "memory"} <= container["resources"]["requests"].keys()
    assert "memory" in container["resources"]["limits"]
    assert pod["terminationGracePeriodSeconds"] <= 10
    assert "hostNetwork" not in pod  # IMDS is reachable from the pod network on AKS


def test_the_image_is_pinned():
    [container] = _pod(_render())["containers"]
    repository, tag = container["image"].rsplit(":", 1)
    assert repository == "ghcr.io/elastic-spot-lab/trainer"
    assert tag and tag != "latest"


DIGEST = "sha256:" + "0123456789abcdef" * 4
# What `elastic-lab image` records (repo:tag@digest), and the other pins the platform takes.
PINNED_IMAGES = [
    f"{TRAINER_IMAGE}@{DIGEST}",
    f"eslacr636ed551d34ae649.azurecr.io/elastic-spot-lab/trainer@{DIGEST}",
    "registry.local:5000/elastic-spot-lab/trainer:0123abcd4567-dirty-89ab",
]


@pytest.mark.parametrize("image", PINNED_IMAGES, ids=["tag-and-digest", "digest-alone", "tag-registry-port"])
def test_the_handler_runs_exactly_the_platforms_image(image):
    from components.platform.settings import PlatformSettings
    from components.platform.values import notice_handler_values

    values = notice_handler_values(PlatformSettings(notice_handler_image=image), AKS_PLACEMENT)
    objects = _render(values)
    [container] = _pod(objects)["containers"]
    assert container["image"] == image
    assert validate_objects(objects, DEFAULT_KUBERNETES_VERSION) == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"image": {"repository": "ghcr.io/elastic-spot-lab/trainer", "tag": "latest"}}, "tag"),
        ({"image": {"repository": "ghcr.io/elastic-spot-lab/trainer", "tag": ""}}, "tag"),
        ({"image": {"repository": "ghcr.io/elastic-spot-lab/trainer", "tag": "1", "digest": "sha256:abc"}}, "digest"),
        ({"image": {"repository": "ghcr.io/elastic-spot-lab/trainer", "tag": "1", "digest": "0" * 64}}, "digest"),
        ({"image": {"repository": "ghcr.io/elastic-spot-lab/trainer", "tag": "latest", "digest": DIGEST}}, "tag"),
        ({"nodeSelecter": {"a": "b"}}, "nodeSelecter"),
        ({"nodeSelector": None}, "nodeSelector"),
        ({"nodeSelector": {"kubernetes.azure.com/scalesetpriority": True}}, "nodeSelector"),
        ({"tolerations": {"key": "x"}}, "tolerations"),
        ({"tolerations": [{"key": "x", "effect": "NoScheduled"}]}, "effect"),
        ({"priorityClassName": 5}, "priorityClassName"),
        (
            {"handler": {"pollInterval": "1", "actOn": ["Preempt"], "graceMarginSeconds": 5, "drainTimeoutSeconds": 9}},
            "pollInterval",
        ),
        (
            {"handler": {"pollInterval": 1, "actOn": ["Evict"], "graceMarginSeconds": 5, "drainTimeoutSeconds": 9}},
            "actOn",
        ),
        ({"handler": {"pollInterval": 1, "actOn": [], "graceMarginSeconds": 5, "drainTimeoutSeconds": 9}}, "actOn"),
        ({"terminationGracePeriodSeconds": "5"}, "terminationGracePeriodSeconds"),
    ],
    ids=[
        "latest",
        "empty-tag",
        "short-digest",
        "digest-without-algorithm",
        "latest-beside-a-digest",
        "unknown-key",
        "no-node-selector",
        "node-selector-not-strings",
        "tolerations-not-a-list",
        "bad-effect",
        "priority-not-a-string",
        "poll-interval-a-string",
        "unknown-event-type",
        "no-event-type",
        "grace-a-string",
    ],
)
def test_values_that_would_break_the_handler_are_refused(values, message):
    with pytest.raises(ChartRenderError, match=message):
        _render(values)

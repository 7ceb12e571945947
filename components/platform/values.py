"""Values and patches the platform hands to Helm and kustomize: pure functions, tested
without Pulumi, and re-used by the offline checks to render exactly what the component
passes."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from components.charts import chart_default, exactly
from components.platform.settings import PlatformSettings
from lab.vocab.layout import ETCD_CHART, NOTICE_CHART
from lab.vocab.pools import PoolPlacement, required_affinity

# The device plugin chart's own default tolerations (values.yaml of 0.20.0), kept.
_DEVICE_PLUGIN_BASE_TOLERATIONS = [
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
]


def etcd_values(settings: PlatformSettings, pools: PoolPlacement) -> dict[str, Any]:
    """Values for charts/etcd-rendezvous: CPU pool, preserved priority, v3.5.x, v2 API.
    Maps replace the chart's defaults (Helm would merge them)."""
    return {
        "image": {"repository": settings.etcd_image, "tag": settings.etcd_tag, "pullPolicy": "IfNotPresent"},
        "serviceName": settings.etcd_service,
        "clusterDomain": settings.cluster_domain,
        "clientPort": 2379,
        "nodeSelector": exactly(pools.cpu_labels, chart_default(ETCD_CHART, "nodeSelector")),
        "tolerations": pools.cpu_tolerations(),
        "priorityClassName": settings.priorities.preserved.name,
        "networkPolicy": {
            "clientPodLabels": exactly(
                settings.rdzv_client_labels, chart_default(ETCD_CHART, "networkPolicy", "clientPodLabels")
            ),
            # The teams' jobs rendezvous here too, from their own namespaces.
            "clientNamespaces": [team.namespace for team in settings.teams],
        },
    }


def notice_handler_values(settings: PlatformSettings, pools: PoolPlacement) -> dict[str, Any]:
    """Values for charts/spot-notice-handler: a pod on every GPU spot node (the GPU pools'
    labels and the spot labels: not on an on-demand GPU rank, which gets no notice; their taints
    tolerated), from the project's image, with the preserved priority (a handler preempted by
    inference would miss the notice it is there for). The image goes in its parts: a digest,
    when the reference has one, is what the nodes pull (`repository:tag@digest`); a reference
    pinned by its digest alone passes an empty tag, which replaces the chart's default."""
    image = settings.notice_handler_reference
    return {
        "image": {
            "repository": image.repository,
            "tag": image.tag or "",
            **({"digest": image.digest} if image.digest else {}),
        },
        "nodeSelector": exactly(pools.spot_gpu_labels, chart_default(NOTICE_CHART, "nodeSelector")),
        "tolerations": [t.toleration() for t in pools.gpu_taints],
        "priorityClassName": settings.priorities.preserved.name,
    }


def device_plugin_values(pools: PoolPlacement) -> dict[str, Any]:
    """Values for nvidia-device-plugin 0.20.0: only on GPU nodes, tolerating the spot taint
    and our GPU taint (its defaults select NFD/gpu.present labels and miss the spot taint)."""
    tolerations = copy.deepcopy(_DEVICE_PLUGIN_BASE_TOLERATIONS)
    for taint in pools.gpu_taints:
        # Exists: tolerate the taint whatever its value.
        t = {"key": taint.key, "operator": "Exists", "effect": taint.effect}
        if t not in tolerations:
            tolerations.append(t)
    return {
        "affinity": required_affinity(pools.gpu_labels),
        "tolerations": tolerations,
        "priorityClassName": "system-node-critical",
        "gfd": {"enabled": False},
    }


def operator_pod_patch(settings: PlatformSettings, pools: PoolPlacement) -> dict[str, Any]:
    """What the operator's pods get: the CPU pool and the preserved priority."""
    patch: dict[str, Any] = {
        "nodeSelector": dict(pools.cpu_labels),
        "priorityClassName": settings.priorities.preserved.name,
    }
    if pools.cpu_taints:
        patch["tolerations"] = pools.cpu_tolerations()
    return patch


# The training operator's Deployment in the v1.9.x standalone overlay (manifests/base/
# deployment.yaml of kubeflow/trainer): name, namespace, labels and container name. The
# placement check runs the operator's transforms on this skeleton (TrainingPlatform's operatorPlacement output).
OPERATOR_DEPLOYMENT = "training-operator"
OPERATOR_NAMESPACE = "kubeflow"
OPERATOR_LABELS = {"control-plane": "kubeflow-training-operator"}


def operator_skeleton() -> dict[str, Any]:
    """The operator Deployment's properties as far as placement is concerned."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": OPERATOR_DEPLOYMENT, "namespace": OPERATOR_NAMESPACE, "labels": dict(OPERATOR_LABELS)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(OPERATOR_LABELS)},
            "template": {
                "metadata": {"labels": dict(OPERATOR_LABELS)},
                "spec": {"containers": [{"name": "training-operator", "image": "kubeflow/training-operator"}]},
            },
        },
    }


def patch_workload(props: Mapping[str, Any], pod_patch: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a Deployment's properties with `pod_patch` merged into its pod spec."""
    out = copy.deepcopy(dict(props))
    spec = out.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
    for key, value in pod_patch.items():
        if key == "nodeSelector":
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **value}
        elif key == "tolerations":
            spec["tolerations"] = list(spec.get("tolerations") or []) + [
                t for t in value if t not in (spec.get("tolerations") or [])
            ]
        else:
            spec[key] = value
    return out

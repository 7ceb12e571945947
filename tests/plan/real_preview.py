"""The engine's view of a real `pulumi preview` of a recorded plan, for the tests.

Under mocks a remote component (Helm Chart v4, kustomize Directory v2) is recorded with its inputs
and nothing under it. In a real preview it is the other way round: the engine registers it
without its inputs, and each Kubernetes object it renders as a custom resource whose parent is
the component, the object its inputs. `real_preview` turns the one into the other: our own charts
rendered with real Helm from the inputs it strips, the NVIDIA device plugin's DaemonSet as its
0.20.0 chart renders it with the values passed, and the training operator's objects as the
v1.9.4 standalone overlay holds them, its Deployment patched as the platform's transforms patch
it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from components.platform.values import OPERATOR_DEPLOYMENT, OPERATOR_LABELS, OPERATOR_NAMESPACE, patch_workload
from lab.k8s.helm import render_chart
from lab.plan.platform_checks import HELM_CHART_TYPE, KUSTOMIZE_TYPE, OPERATOR_IMAGES, typed_object
from lab.program.recording import Plan, RecordedResource
from lab.vocab.layout import ROOT
from lab.vocab.names import PLATFORM_TYPE
from lab.vocab.versions import DEVICE_PLUGIN_CHART, DEVICE_PLUGIN_VERSION, OPERATOR_VERSION

Objects = list[dict[str, Any]]


# --------------------------------------------------------------------------- what each renders


def device_plugin_objects(release: str, namespace: str, values: dict[str, Any]) -> Objects:
    """What nvidia-device-plugin 0.20.0 renders for `values` that set affinity, tolerations and
    priorityClassName (gfd off): its plugin DaemonSet and service account (the chart also renders
    an MPS control daemon and RBAC objects, with the same labels and pod placement: left out)."""
    labels = {
        "app.kubernetes.io/instance": release,
        "app.kubernetes.io/managed-by": "Helm",
        "app.kubernetes.io/name": DEVICE_PLUGIN_CHART,
        "app.kubernetes.io/version": DEVICE_PLUGIN_VERSION,
        "helm.sh/chart": f"{DEVICE_PLUGIN_CHART}-{DEVICE_PLUGIN_VERSION}",
    }
    selector = {"app.kubernetes.io/instance": release, "app.kubernetes.io/name": DEVICE_PLUGIN_CHART}
    account = f"{release}-service-account"
    pod: dict[str, Any] = {
        "containers": [
            {
                "name": "nvidia-device-plugin-ctr",
                "image": f"nvcr.io/nvidia/k8s-device-plugin:v{DEVICE_PLUGIN_VERSION}",
                "imagePullPolicy": "IfNotPresent",
                "command": ["nvidia-device-plugin"],
                "env": [
                    {"name": "MPS_ROOT", "value": "/run/nvidia/mps"},
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
                ],
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [
                    {"name": "kubelet-device-plugins-dir", "mountPath": "/var/lib/kubelet/device-plugins"}
                ],
            }
        ],
        "priorityClassName": values.get("priorityClassName"),
        "securityContext": {},
        "serviceAccountName": account,
        "volumes": [
            {
                "name": "kubelet-device-plugins-dir",
                "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"},
            }
        ],
    }
    for key in ("affinity", "nodeSelector", "tolerations"):
        if values.get(key):
            pod[key] = copy.deepcopy(values[key])
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": release, "namespace": namespace, "labels": labels},
            "spec": {
                "selector": {"matchLabels": selector},
                "template": {"metadata": {"labels": dict(selector), "annotations": {}}, "spec": pod},
                "updateStrategy": {"type": "RollingUpdate"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": namespace, "labels": dict(labels)},
        },
    ]


def operator_objects(placement: dict[str, Any]) -> Objects:
    """Objects of the training operator's v1.9.4 standalone overlay (manifests/base and
    overlays/standalone of kubeflow/trainer at v1.9.4; its CRDs, RBAC and webhook left out), the
    Deployment patched with the pod spec the platform's transforms produce (`placement`, the
    platform's operatorPlacement output: those keys merged as the transform merges them)."""
    labels = dict(OPERATOR_LABELS)
    ns = OPERATOR_NAMESPACE
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": OPERATOR_DEPLOYMENT, "namespace": ns, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "replicas": 1,
            "template": {
                "metadata": {"labels": dict(labels), "annotations": {"sidecar.istio.io/inject": "false"}},
                "spec": {
                    "containers": [
                        {
                            "name": "training-operator",
                            "image": OPERATOR_IMAGES[OPERATOR_VERSION],
                            "command": ["/manager"],
                            "ports": [
                                {"containerPort": 8080},
                                {"containerPort": 9443, "name": "webhook-server", "protocol": "TCP"},
                            ],
                            "securityContext": {"allowPrivilegeEscalation": False},
                            "volumeMounts": [
                                {"mountPath": "/tmp/k8s-webhook-server/serving-certs", "name": "cert", "readOnly": True}
                            ],
                        }
                    ],
                    "serviceAccountName": "training-operator",
                    "terminationGracePeriodSeconds": 10,
                    "volumes": [
                        {"name": "cert", "secret": {"defaultMode": 420, "secretName": "training-operator-webhook-cert"}}
                    ],
                },
            },
        },
    }
    patch = {k: v for k, v in placement.items() if k != "containers"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "training-operator", "namespace": ns, "labels": {"app": "training-operator"}},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "training-operator", "namespace": ns, "labels": {"app": "training-operator"}},
            "spec": {
                "ports": [
                    {"name": "monitoring-port", "port": 8080, "targetPort": 8080},
                    {"name": "webhook-server", "port": 443, "protocol": "TCP", "targetPort": 9443},
                ],
                "selector": dict(labels),
                "type": "ClusterIP",
            },
        },
        patch_workload(deployment, patch),
    ]


def rendered(component: RecordedResource, platform: RecordedResource) -> Objects:
    """What a remote component of the platform renders, from the inputs it was recorded with."""
    inputs = component.inputs
    if component.type == KUSTOMIZE_TYPE:
        return operator_objects(dict((platform.outputs or {})["operatorPlacement"]))
    namespace = inputs.get("namespace") or "default"
    release = inputs.get("name") or component.name
    if (ROOT / str(inputs["chart"]) / "Chart.yaml").is_file():
        return render_chart(
            ROOT / str(inputs["chart"]), inputs.get("values") or {}, release=release, namespace=namespace
        )
    assert inputs["chart"] == DEVICE_PLUGIN_CHART, inputs["chart"]
    return device_plugin_objects(release, namespace, inputs.get("values") or {})


# --------------------------------------------------------------------------- the engine's view


def type_token(obj: dict[str, Any]) -> str:
    """The pulumi-kubernetes type of an object: kubernetes:<group>/<version>:<Kind> (core: "core")."""
    api = str(obj["apiVersion"])
    return f"kubernetes:{api if '/' in api else 'core/' + api}:{obj['kind']}"


def child(parent: RecordedResource, obj: dict[str, Any], provider: str | None) -> RecordedResource:
    """`obj` registered as a custom resource under `parent`, named `<parent>:<namespace>/<name>` as
    the Kubernetes provider names a component's objects."""
    meta = obj.get("metadata") or {}
    name = f"{parent.name}:{meta['namespace'] + '/' if meta.get('namespace') else ''}{meta['name']}"
    kind = type_token(obj)
    head, qualified, _ = parent.urn.rsplit("::", 2)
    return RecordedResource(
        urn=f"{head}::{qualified}${kind}::{name}",
        type=kind,
        name=name,
        parent=parent.urn,
        custom=True,
        remote=False,
        inputs=keys_sorted(obj),
        secret_inputs=[],
        state=keys_sorted(obj),
        provider=provider,
    )


def platforms(plan: Plan) -> list[RecordedResource]:
    return plan.of_type(PLATFORM_TYPE)


def remote_components(plan: Plan) -> list[RecordedResource]:
    """The platforms' Helm charts and kustomize Directories."""
    urns = {p.urn for p in platforms(plan)}
    return [r for r in plan.of_type(HELM_CHART_TYPE, KUSTOMIZE_TYPE) if r.parent in urns]


def real_preview(plan: Plan) -> Plan:
    """A copy of `plan` as the engine hands it to a policy pack in a real preview: every remote
    component without inputs (the cluster's too), the platform's with what they render as children."""
    out = copy.deepcopy(plan)
    for platform in platforms(out):
        provider = next(r.provider for r in out.children(platform.urn) if r.custom)
        for component in [r for r in remote_components(out) if r.parent == platform.urn]:
            at = out.resources.index(component) + 1
            out.resources[at:at] = [child(component, obj, provider) for obj in rendered(component, platform)]
    for r in out.resources:
        if r.remote:
            r.inputs, r.secret_inputs = {}, []
    return out


# --------------------------------------------------------------------------- breaking it


def stack_objects(plan: Plan) -> dict[int, RecordedResource]:
    """The platform's Kubernetes objects the engine hands a pack (its typed resources and what its
    charts rendered), each its resource's inputs: by the object's id(), to the resource."""
    parents = {p.urn for p in platforms(plan)} | {r.urn for r in remote_components(plan)}
    return {
        id(r.inputs): r
        for r in plan.resources
        if r.parent in parents and r.custom and r.type.startswith("kubernetes:") and typed_object(r) is not None
    }


def break_stack(plan: Plan, breakage: Callable[[Objects], None]) -> bool:
    """Apply `breakage` (one of tests/k8s's, on a list of objects) to the platform's objects in
    the stack: objects it changes change in place, one it removes is no longer registered, one it
    adds is a new resource of the platform. False (the plan untouched) where what it breaks is not
    an object of the stack (a sample job, which the check renders from the platform's facts)."""
    by_id = stack_objects(plan)
    objects = [r.inputs for r in by_id.values()]
    try:
        breakage(objects)
    except AssertionError:  # tests/k8s's `the` found no such object
        return False
    kept = {id(o) for o in objects}
    plan.resources = [r for r in plan.resources if id(r.inputs) not in by_id or id(r.inputs) in kept]
    [platform] = platforms(plan)
    provider = next(r.provider for r in plan.children(platform.urn) if r.custom)
    for obj in objects:
        if id(obj) not in by_id:
            plan.resources.append(child(platform, obj, provider))
    for r in plan.resources:
        if id(r.inputs) in kept:
            r.inputs = r.state = keys_sorted(r.inputs)
    return True


def keys_sorted(value: Any) -> Any:
    """A copy of `value` with its maps' keys in order, as the pack reads a value the engine hands it
    (lab.program.wire.decode): a finding's message shows a value as it is ordered."""
    if isinstance(value, dict):
        return {k: keys_sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [keys_sorted(v) for v in value]
    return value

"""The TrainingPlatform component under Pulumi mocks, on AKS, EKS and byo clusters."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

import platform_harness
from components.platform import (
    AzureBlobCheckpoint,
    PlatformConfigError,
    PlatformSettings,
    S3Checkpoint,
    StorageClassCheckpoint,
    TrainingPlatform,
)
from components.platform import values as platform_values
from components.platform.component import operator_transform
from components.platform.settings import CheckpointSettings
from lab.k8s.checks import check_platforms
from lab.k8s.scheduling import PoolPlacement, Taint

AKS_POOLS = PoolPlacement()
EKS_POOLS = PoolPlacement(
    gpu_labels={"elastic-spot-lab/pool": "gpu-spot", "eks.amazonaws.com/capacityType": "SPOT"},
    gpu_taints=(Taint("elastic-spot-lab/spot", "true"), Taint("nvidia.com/gpu", "present")),
    spot_labels={"eks.amazonaws.com/capacityType": "SPOT"},
)
BYO_POOLS = PoolPlacement(gpu_taints=("elastic-spot-lab/spot=true:NoSchedule",), spot_labels={"elastic-spot-lab/capacity": "spot"})


def declare(settings: PlatformSettings, checkpoint: Any, pools: PoolPlacement | None, **kw: Any) -> list[platform_harness.Rec]:
    def program() -> None:
        provider = k8s.Provider("cluster", kubeconfig=pulumi.Output.secret("kubeconfig-contents"))
        TrainingPlatform("platform", settings, provider=provider, checkpoint=checkpoint, pools=pools, **kw)

    return platform_harness.run(program)


def one(recs: list[platform_harness.Rec], type_: str, name: str | None = None) -> platform_harness.Rec:
    found = [r for r in recs if r.type == type_ and (name is None or r.name == name)]
    assert len(found) == 1, [r.name for r in found]
    return found[0]


def numbers(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {k: numbers(x) for k, x in v.items()}
    if isinstance(v, list):
        return [numbers(x) for x in v]
    return v


@pytest.fixture(scope="module")
def aks() -> list[platform_harness.Rec]:
    return declare(PlatformSettings(cloud="aks", kubernetes_version="1.35"),
                   AzureBlobCheckpoint("ckptacct", "checkpoints", "lab-rg", "11111111-2222-3333-4444-555555555555"), AKS_POOLS)


@pytest.fixture(scope="module")
def eks() -> list[platform_harness.Rec]:
    return declare(PlatformSettings(cloud="eks"), S3Checkpoint("lab-checkpoints", "us-east-2"), EKS_POOLS)


@pytest.fixture(scope="module")
def byo() -> list[platform_harness.Rec]:
    s = PlatformSettings(cloud="byo", pools=BYO_POOLS, gpus_per_node=0,
                         checkpoint=CheckpointSettings(storage_class="standard", access_mode="ReadWriteOnce", size="20Gi"))
    return declare(s, StorageClassCheckpoint(), None)


def kinds(recs: list[platform_harness.Rec]) -> list[str]:
    return sorted(r.type.rsplit(":", 1)[-1] + ("" if r.custom else "*") for r in recs if r.type.startswith("kubernetes:"))


def test_inventory(aks, eks, byo):
    common = ["Chart*", "Directory*", "Namespace", "PersistentVolumeClaim", "PriorityClass", "PriorityClass", "PriorityClass", "ServiceAccount"]
    assert kinds(aks) == sorted(common + ["Chart*", "PersistentVolume"])  # + device plugin
    assert kinds(eks) == sorted(common + ["Chart*", "PersistentVolume"])
    assert kinds(byo) == sorted(common)  # gpusPerNode 0: no device plugin; StorageClass claim
    platform = one(aks, "elastic-spot-lab:platform:TrainingPlatform")
    assert all(r.parent == platform.urn for r in aks if r.type.startswith("kubernetes:"))


@pytest.mark.parametrize("cloud", ["aks", "eks", "byo"])
def test_offline_checks_pass(cloud, request, crd):
    [report] = check_platforms(request.getfixturevalue(cloud))
    assert [str(i) for i in report.items] == []
    kinds_checked = sorted({o["kind"] for o in report.objects})
    assert {"PriorityClass", "Namespace", "ServiceAccount", "PersistentVolumeClaim", "Deployment", "Service",
            "NetworkPolicy", "PyTorchJob"} <= set(kinds_checked)
    assert report.checked["k8s:schema"] == len(report.objects)


def test_aks_schema_version(aks):
    [report] = check_platforms(aks)
    assert report.kubernetes_version == "1.35" and report.schema_note == "Kubernetes 1.35 schemas"


def test_priority_classes(aks):
    pcs = {r.inputs["metadata"]["name"]: r.inputs for r in aks if r.type.endswith("PriorityClass")}
    assert {n: (numbers(p["value"]), p["preemptionPolicy"], p["globalDefault"]) for n, p in pcs.items()} == {
        "elastic-inference": (1_000_000, "PreemptLowerPriority", False),
        "elastic-preserved": (100_000, "Never", False),
        "elastic-preemptible": (1_000, "Never", False),
    }


def test_device_plugin(aks):
    chart = one(aks, "kubernetes:helm.sh/v4:Chart", "platform-nvidia-device-plugin")
    assert chart.inputs["chart"] == "nvidia-device-plugin" and chart.inputs["version"] == "0.20.0"
    assert chart.inputs["repositoryOpts"]["repo"] == "https://nvidia.github.io/k8s-device-plugin"
    values = chart.inputs["values"]
    tolerated = {(t.get("key"), t.get("effect")) for t in values["tolerations"]}
    assert {("kubernetes.azure.com/scalesetpriority", "NoSchedule"), ("nvidia.com/gpu", "NoSchedule")} <= tolerated
    terms = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "elastic-spot-lab/pool", "operator": "In", "values": ["gpu-spot"]}]}]
    # Only keys the 0.20.0 chart knows (its values.yaml / values.schema.json).
    assert set(values) <= {"affinity", "tolerations", "priorityClassName", "gfd", "nodeSelector"}


def test_device_plugin_skipped_where_the_image_ships_one():
    recs = declare(PlatformSettings(cloud="eks"), S3Checkpoint("b"), EKS_POOLS, node_image_ships_device_plugin=True)
    assert "platform-nvidia-device-plugin" not in {r.name for r in recs}
    recs = declare(PlatformSettings(cloud="eks", device_plugin="true"), S3Checkpoint("b"), EKS_POOLS, node_image_ships_device_plugin=True)
    assert "platform-nvidia-device-plugin" in {r.name for r in recs}


def test_operator_pinned(aks):
    d = one(aks, "kubernetes:kustomize/v2:Directory")
    assert d.inputs["directory"] == "https://github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=v1.9.4"
    pcs = {r.urn for r in aks if r.type.endswith("PriorityClass")}
    assert pcs <= set(d.depends_on)


def test_operator_transform_keeps_it_on_the_cpu_pool():
    transform = operator_transform(PlatformSettings(cloud="aks"), AKS_POOLS)
    deployment = {"metadata": {"name": "training-operator", "namespace": "kubeflow"},
                  "spec": {"template": {"spec": {"containers": [{"name": "training-operator"}], "nodeSelector": {"kubernetes.io/os": "linux"}}}}}
    args = pulumi.ResourceTransformArgs(True, "kubernetes:apps/v1:Deployment", "op", deployment, pulumi.ResourceOptions())
    out = transform(args)
    spec = out.props["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "elastic-spot-lab/pool": "cpu"}
    assert spec["priorityClassName"] == "elastic-preserved"
    assert deployment["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}  # not mutated
    other = pulumi.ResourceTransformArgs(True, "kubernetes:core/v1:Service", "svc", {}, pulumi.ResourceOptions())
    assert transform(other) is None


def test_etcd_chart_inputs(aks):
    chart = one(aks, "kubernetes:helm.sh/v4:Chart", "platform-etcd")
    assert chart.inputs["chart"].endswith("charts/etcd-rendezvous")
    assert chart.inputs["namespace"] == "training"
    v = chart.inputs["values"]
    assert v["image"]["tag"] == "v3.5.20" and v["priorityClassName"] == "elastic-preserved"
    assert v["nodeSelector"] == {"elastic-spot-lab/pool": "cpu"}


def test_aks_checkpoint_is_static_blob_with_workload_identity(aks):
    pv = one(aks, "kubernetes:core/v1:PersistentVolume").inputs
    pvc = one(aks, "kubernetes:core/v1:PersistentVolumeClaim").inputs
    csi = pv["spec"]["csi"]
    assert csi["driver"] == "blob.csi.azure.com"
    assert csi["volumeHandle"] == "lab-rg#ckptacct#checkpoints"
    assert csi["volumeAttributes"] == {
        "storageaccount": "ckptacct", "containerName": "checkpoints", "resourcegroup": "lab-rg",
        "clientID": "11111111-2222-3333-4444-555555555555", "mountWithWorkloadIdentityToken": "true",
    }
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["storageClassName"] == "" == pvc["spec"]["storageClassName"]
    assert pv["spec"]["claimRef"] == {"namespace": "training", "name": "elastic-checkpoints"}
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    sa = one(aks, "kubernetes:core/v1:ServiceAccount").inputs
    assert sa["metadata"]["annotations"] == {"azure.workload.identity/client-id": "11111111-2222-3333-4444-555555555555"}


def test_eks_checkpoint_is_s3_mountpoint(eks):
    pv = one(eks, "kubernetes:core/v1:PersistentVolume").inputs
    csi = pv["spec"]["csi"]
    assert csi["driver"] == "s3.csi.aws.com"
    assert csi["volumeAttributes"] == {"bucketName": "lab-checkpoints"}
    assert csi["volumeHandle"] == "s3-lab-checkpoints"
    assert pv["spec"]["mountOptions"] == ["allow-delete", "region us-east-2"]
    platform = one(eks, "elastic-spot-lab:platform:TrainingPlatform")
    assert platform.outputs["jobFacts"]["checkpointWrites"] == "write-once"  # Mountpoint cannot rename


def test_byo_checkpoint_uses_the_storage_class(byo):
    pvc = one(byo, "kubernetes:core/v1:PersistentVolumeClaim").inputs
    assert pvc["spec"] == {"accessModes": ["ReadWriteOnce"], "storageClassName": "standard", "resources": {"requests": {"storage": "20Gi"}}}
    sa = one(byo, "kubernetes:core/v1:ServiceAccount").inputs
    assert not sa["metadata"].get("annotations")


def test_checkpoint_must_fit_the_cloud():
    with pytest.raises(ValueError, match=r"checkpoint=S3Checkpoint is invalid for cloud='aks'"):
        declare(PlatformSettings(cloud="aks"), S3Checkpoint("b"), AKS_POOLS)


# ------------------------------------------------------------------ broken platforms
def test_broken_device_plugin_values_fail_the_check(monkeypatch):
    def no_spot(pools):
        v = platform_values.device_plugin_values(pools)
        v["tolerations"] = [t for t in v["tolerations"] if "scalesetpriority" not in t["key"]]
        return v

    import components.platform.component as component

    monkeypatch.setattr(component, "device_plugin_values", no_spot)
    recs = declare(PlatformSettings(cloud="aks"), AzureBlobCheckpoint("a", "c", "rg", "id"), AKS_POOLS)
    [report] = check_platforms(recs)
    assert [i.check for i in report.items] == ["platform:device-plugin"]
    assert "scalesetpriority" in report.items[0].expected


def test_unpinned_operator_fails_the_check(monkeypatch):
    monkeypatch.setattr(PlatformSettings, "operator_directory", property(lambda self: "https://github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=master"))
    recs = declare(PlatformSettings(cloud="aks"), AzureBlobCheckpoint("a", "c", "rg", "id"), AKS_POOLS)
    [report] = check_platforms(recs)
    assert [i.check for i in report.items] == ["platform:training-operator"]


def test_broken_etcd_values_fail_at_render(monkeypatch):
    import components.platform.component as component

    def on_spot(settings, pools):
        v = platform_values.etcd_values(settings, pools)
        v["tolerations"] = [{"operator": "Exists"}]
        return v

    monkeypatch.setattr(component, "etcd_values", on_spot)
    recs = declare(PlatformSettings(cloud="aks"), AzureBlobCheckpoint("a", "c", "rg", "id"), AKS_POOLS)
    [report] = check_platforms(recs)
    assert {i.check for i in report.items} == {"guardrail:etcd-not-on-spot"}


# ------------------------------------------------------------------ settings
@pytest.mark.parametrize(
    "raw,message",
    [
        ({"namespace": "Training"}, r"platform.namespace='Training' is invalid: expected a DNS-1123 label"),
        ({"namespace": "kube-system"}, r"platform.namespace='kube-system' is invalid"),
        ({"etcd": {"tag": "latest"}}, r"platform.etcd.tag='latest' is invalid: expected a v3.5.x tag"),
        ({"etcd": {"tag": "v3.6.1"}}, r"platform.etcd.tag='v3.6.1'"),
        ({"operatorVersion": "master"}, r"platform.operatorVersion='master' is invalid: expected a v1.9.x release tag"),
        ({"operatorVersion": "v2.1.0"}, r"platform.operatorVersion='v2.1.0'"),
        ({"priorityClasses": {"preemptible": {"value": 10**7}}}, r"inference > preserved > preemptible"),
        ({"priorityClasses": {"preserved": {"name": "system-etcd"}}}, r"platform.priorityClasses.preserved.name='system-etcd'"),
        ({"priorityClasses": {"inference": {"value": 2_000_000_000}}}, r"platform.priorityClasses.inference.value=2000000000"),
        ({"gpusPerNode": -1}, r"platform.gpusPerNode=-1"),
        ({"devicePlugin": "maybe"}, r"platform.devicePlugin='maybe'"),
        ({"checkpoint": {"size": "lots"}}, r"platform.checkpoint.size='lots'"),
        ({"checkpoint": {"sise": "1Gi"}}, r"platform.checkpoint.sise='1Gi' is invalid: expected a known key"),
        ({"etcdReplicas": 3}, r"platform.etcdReplicas=3 is invalid: expected a known key"),
    ],
)
def test_settings_errors_name_key_value_expected(raw, message):
    with pytest.raises(PlatformConfigError, match=message):
        PlatformSettings.from_config(raw, cloud="aks")


def test_byo_needs_pools_and_storage_class():
    with pytest.raises(PlatformConfigError, match=r"platform.checkpoint.storageClass=''"):
        PlatformSettings.from_config({}, cloud="byo")
    with pytest.raises(PlatformConfigError, match=r"platform.pools=None"):
        PlatformSettings.from_config({"checkpoint": {"storageClass": "standard"}}, cloud="byo")
    with pytest.raises(PlatformConfigError, match=r"platform.pools.gpuSpot.taints=\[\] is invalid: expected at least one taint"):
        PlatformSettings.from_config({"checkpoint": {"storageClass": "standard"}, "pools": {"gpuSpot": {"taints": []}}}, cloud="byo")
    with pytest.raises(PlatformConfigError, match=r"platform.pools.cpu.labels=.* is invalid: expected labels no spot node carries"):
        PlatformSettings.from_config({"checkpoint": {"storageClass": "standard"},
                                      "pools": {"cpu": {"labels": {"elastic-spot-lab/capacity": "spot"}},
                                                "gpuSpot": {"spotLabels": {"elastic-spot-lab/capacity": "spot"}}}}, cloud="byo")


def test_settings_from_json_text():
    s = PlatformSettings.from_config('{"namespace": "jobs", "priorityClasses": {"inference": {"name": "serving"}}}', cloud="aks")
    assert s.namespace == "jobs" and s.priorities.inference.name == "serving"
    assert s.facts(AKS_POOLS).etcd_host == "etcd-rendezvous.jobs.svc.cluster.local"


# ------------------------------------------------------------------ from a cluster component
def test_from_cluster_info_follows_the_federated_identity():
    from components.labels import AKS_SPOT_TAINT, GPU_TAINT
    from components.platform.from_cluster import checkpoint_from_cluster, placement_from_cluster, settings_for_cluster

    storage = SimpleNamespace(kind="azure-blob", account="acct", container="c", resource_group="rg", client_id="cid",
                              namespace="train", service_account="worker", mount_with_token=False)
    info = SimpleNamespace(
        cloud="aks", storage=storage, extra={},
        pool_labels={"cpu": {"elastic-spot-lab/pool": "cpu", "elastic-spot-lab/capacity": "on-demand"},
                     "gpu-spot": {"elastic-spot-lab/pool": "gpu-spot", "elastic-spot-lab/capacity": "spot"}},
        pool_taints={"cpu": [], "gpu-spot": [GPU_TAINT, AKS_SPOT_TAINT]},
    )
    pools = placement_from_cluster(info)
    assert [str(t) for t in pools.gpu_taints] == ["nvidia.com/gpu=present:NoSchedule", "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"]
    assert pools.spot_labels == {"kubernetes.azure.com/scalesetpriority": "spot", "elastic-spot-lab/capacity": "spot"}
    s = settings_for_cluster({}, info, kubernetes_version="1.35")
    assert (s.namespace, s.service_account, s.checkpoint.workload_identity_token) == ("train", "worker", False)
    assert isinstance(checkpoint_from_cluster(info), AzureBlobCheckpoint)
    with pytest.raises(PlatformConfigError, match=r"platform.namespace='training' is invalid: expected 'train'"):
        settings_for_cluster({"namespace": "training"}, info, kubernetes_version="1.35")

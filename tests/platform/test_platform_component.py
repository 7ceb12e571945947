"""The TrainingPlatform component under Pulumi mocks, on AKS, EKS and byo clusters."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

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
from lab.k8s.checks import CRD_CHECK, check_platforms
from lab.k8s.scheduling import PoolPlacement, Taint, taint_text
from lab.plan.harness import RecordedResource, numbers_back, run_program

AKS_POOLS = PoolPlacement()
EKS_POOLS = PoolPlacement(
    gpu_labels={"elastic-spot-lab/pool": "gpu-spot", "eks.amazonaws.com/capacityType": "SPOT"},
    gpu_taints=(Taint("elastic-spot-lab/spot", "true"), Taint("nvidia.com/gpu", "present")),
    spot_labels={"eks.amazonaws.com/capacityType": "SPOT"},
)
BYO_POOLS = PoolPlacement(gpu_taints=("elastic-spot-lab/spot=true:NoSchedule",), spot_labels={"elastic-spot-lab/capacity": "spot"})


AZURE_MIN = AzureBlobCheckpoint("a", "c", "rg", "id")
AKS_BLOB = AzureBlobCheckpoint("ckptacct", "checkpoints", "lab-rg", "11111111-2222-3333-4444-555555555555")


def declare(settings: PlatformSettings, checkpoint: Any, pools: PoolPlacement | None, **kw: Any) -> list[RecordedResource]:
    """The component alone, under the plan's own mocks and recorder (lab.plan.harness)."""

    def program() -> None:
        provider = k8s.Provider("cluster", kubeconfig=pulumi.Output.secret("kubeconfig-contents"))
        TrainingPlatform("platform", settings, provider=provider, checkpoint=checkpoint, pools=pools, **kw)

    return run_program("test", program=program, config={}).resources


def one(recs: list[RecordedResource], type_: str, name: str | None = None) -> RecordedResource:
    found = [r for r in recs if r.type == type_ and (name is None or r.name == name)]
    assert len(found) == 1, [r.name for r in found]
    return found[0]


@pytest.fixture(scope="module")
def aks() -> list[RecordedResource]:
    return declare(PlatformSettings(cloud="aks", kubernetes_version="1.35"), AKS_BLOB, AKS_POOLS)


@pytest.fixture(scope="module")
def eks() -> list[RecordedResource]:
    return declare(PlatformSettings(cloud="eks"), S3Checkpoint("lab-checkpoints", "us-east-2"), EKS_POOLS)


@pytest.fixture(scope="module")
def byo() -> list[RecordedResource]:
    s = PlatformSettings(cloud="byo", pools=BYO_POOLS, gpus_per_node=0,
                         checkpoint=CheckpointSettings(storage_class="standard", access_mode="ReadWriteOnce", size="20Gi"))
    return declare(s, StorageClassCheckpoint(), None)


def kinds(recs: list[RecordedResource]) -> list[str]:
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
    jobs = [o for o in report.objects if o["kind"] == "PyTorchJob"]
    assert report.checked["k8s:schema"] == len(report.objects) - len(jobs)
    assert report.checked[CRD_CHECK] == len(jobs) == 2
    assert report.skipped == {}


def test_aks_schema_version(aks):
    [report] = check_platforms(aks)
    assert report.kubernetes_version == "1.35" and report.schema_note == "Kubernetes 1.35 schemas"


def test_priority_classes(aks):
    """preserved (etcd, operator, stores) is the highest and never preempts; inference is
    next and preempts lower priorities, i.e. only the workers; workers are the lowest."""
    pcs = {r.inputs["metadata"]["name"]: r.inputs for r in aks if r.type.endswith("PriorityClass")}
    assert {n: (numbers_back(p["value"]), p["preemptionPolicy"], p["globalDefault"]) for n, p in pcs.items()} == {
        "elastic-preserved": (1_000_000, "Never", False),
        "elastic-inference": (100_000, "PreemptLowerPriority", False),
        "elastic-preemptible": (1_000, "Never", False),
    }
    values = {n: numbers_back(p["value"]) for n, p in pcs.items()}
    assert values["elastic-preserved"] >= values["elastic-inference"] > values["elastic-preemptible"]


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


def test_operator_placement_is_a_component_output(aks):
    """The operator's pod spec after the transforms the Directory gets, as data the plan sees."""
    platform = one(aks, "elastic-spot-lab:platform:TrainingPlatform")
    placement = platform.outputs["operatorPlacement"]
    assert placement["nodeSelector"] == {"elastic-spot-lab/pool": "cpu"}
    assert placement["priorityClassName"] == "elastic-preserved"
    assert [c["name"] for c in placement["containers"]] == ["training-operator"]
    [report] = check_platforms(aks)
    operator = [o for o in report.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "training-operator"]
    assert len(operator) == 1 and operator[0]["metadata"]["namespace"] == "kubeflow"
    assert report.checked["guardrail:operator-on-cpu-pool"]


def _noop_transform(settings, pools):
    return lambda args: None


@pytest.mark.parametrize(
    "breakage,message",
    [
        pytest.param(lambda mp, c: mp.setattr(c, "operator_transform", _noop_transform), "nodeSelector=None: expected the on-demand CPU pool", id="no-transform"),
        pytest.param(lambda mp, c: mp.setattr(c, "operator_pod_patch", lambda s, p: {"nodeSelector": {"elastic-spot-lab/pool": "gpu-spot"},
                                                                                       "priorityClassName": "elastic-preserved"}),
                     "nodeSelector={'elastic-spot-lab/pool': 'gpu-spot'}", id="gpu-pool"),
        pytest.param(lambda mp, c: mp.setattr(c, "operator_pod_patch", lambda s, p: {"nodeSelector": dict(p.cpu_labels)}),
                     "priorityClassName=None: expected 'elastic-preserved'", id="no-priority"),
    ],
)
def test_operator_placement_removed_fails_the_plan_check(monkeypatch, breakage, message):
    import components.platform.component as component

    breakage(monkeypatch, component)
    recs = declare(PlatformSettings(cloud="aks"), AKS_BLOB, AKS_POOLS)
    [report] = check_platforms(recs)
    failed = [str(i) for i in report.failed("guardrail:operator-on-cpu-pool")]
    assert failed and any(message in f for f in failed), failed


def test_cpu_pool_taints_are_tolerated_by_etcd_operator_and_stores(crd):
    """A tainted CPU pool: etcd, the operator and c10d stores tolerate exactly its taint."""
    pools = PoolPlacement(cpu_taints=("dedicated=infra:NoSchedule",))
    recs = declare(PlatformSettings(cloud="aks"), AKS_BLOB, pools)
    want = [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]
    platform = one(recs, "elastic-spot-lab:platform:TrainingPlatform")
    assert platform.outputs["operatorPlacement"]["tolerations"] == want
    assert one(recs, "kubernetes:helm.sh/v4:Chart", "platform-etcd").inputs["values"]["tolerations"] == want
    [report] = check_platforms(recs)
    assert [str(i) for i in report.items] == []
    store = next(o for o in report.objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-rdzv-store"))
    assert store["spec"]["template"]["spec"]["tolerations"] == want


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
    """Key mode (the cluster's default checkpointAuth): the driver fetches the account key
    with the pods' identity, so no mountWithWorkloadIdentityToken attribute."""
    pv = one(aks, "kubernetes:core/v1:PersistentVolume").inputs
    pvc = one(aks, "kubernetes:core/v1:PersistentVolumeClaim").inputs
    csi = pv["spec"]["csi"]
    assert csi["driver"] == "blob.csi.azure.com"
    assert csi["volumeHandle"] == "lab-rg#ckptacct#checkpoints"
    assert csi["volumeAttributes"] == {
        "storageaccount": "ckptacct", "containerName": "checkpoints", "resourcegroup": "lab-rg",
        "clientID": "11111111-2222-3333-4444-555555555555",
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


@pytest.mark.parametrize("given", [None, True])
def test_aks_token_mount(given):
    """Token mode: mountWithWorkloadIdentityToken "true", whether the setting follows the
    binding (None) or says the same explicitly."""
    from dataclasses import replace

    blob = replace(AKS_BLOB, mount_with_token=True)
    recs = declare(PlatformSettings(cloud="aks", checkpoint=CheckpointSettings(workload_identity_token=given)), blob, AKS_POOLS)
    attrs = one(recs, "kubernetes:core/v1:PersistentVolume").inputs["spec"]["csi"]["volumeAttributes"]
    assert attrs["mountWithWorkloadIdentityToken"] == "true"


def test_checkpoint_token_setting_must_agree_with_the_binding():
    with pytest.raises(PlatformConfigError, match=r"platform.checkpoint.workloadIdentityToken=True is invalid: expected false"):
        declare(PlatformSettings(cloud="aks", checkpoint=CheckpointSettings(workload_identity_token=True)), AKS_BLOB, AKS_POOLS)


def test_checkpoint_must_fit_the_cloud():
    with pytest.raises(ValueError, match=r"checkpoint=S3Checkpoint is invalid for cloud='aks'"):
        declare(PlatformSettings(cloud="aks"), S3Checkpoint("b"), AKS_POOLS)


# ------------------------------------------------------------------ broken platforms
def _values_without_spot_toleration(pools):
    v = platform_values.device_plugin_values(pools)
    v["tolerations"] = [t for t in v["tolerations"] if "scalesetpriority" not in t["key"]]
    return v


def _values_on_cpu_pool(pools):
    v = platform_values.device_plugin_values(pools)
    v["affinity"] = platform_values.required_affinity(pools.cpu_labels)
    return v


@pytest.mark.parametrize(
    "attr,replacement,prop,expected",
    [
        pytest.param("device_plugin_values", _values_without_spot_toleration, "values.tolerations", "scalesetpriority", id="no-spot-toleration"),
        pytest.param("device_plugin_values", _values_on_cpu_pool, "values.affinity", "GPU pool", id="wrong-affinity"),
        pytest.param("DEVICE_PLUGIN_VERSION", "0.17.0", "version", "'0.20.0'", id="wrong-version"),
        pytest.param("DEVICE_PLUGIN_REPO", "https://charts.example.com/nvidia", "repositoryOpts.repo", "nvidia.github.io", id="wrong-repo"),
        pytest.param("DEVICE_PLUGIN_CHART", "gpu-operator", "chart", "nvidia-device-plugin", id="wrong-chart"),
    ],
)
def test_broken_device_plugin_fails_the_check(monkeypatch, attr, replacement, prop, expected):
    import components.platform.component as component

    monkeypatch.setattr(component, attr, replacement)
    recs = declare(PlatformSettings(cloud="aks"), AZURE_MIN, AKS_POOLS)
    [report] = check_platforms(recs)
    assert [(i.check, i.prop) for i in report.items] == [("platform:device-plugin", prop)]
    assert expected in report.items[0].expected


def test_unpinned_operator_fails_the_check(monkeypatch):
    monkeypatch.setattr(PlatformSettings, "operator_directory", property(lambda self: "https://github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=master"))
    recs = declare(PlatformSettings(cloud="aks"), AZURE_MIN, AKS_POOLS)
    [report] = check_platforms(recs)
    assert [(i.check, i.prop) for i in report.items] == [("platform:training-operator", "directory")]
    assert "ref=master" in str(report.items[0])


def test_broken_etcd_values_fail_at_render(monkeypatch):
    import components.platform.component as component

    def on_spot(settings, pools):
        v = platform_values.etcd_values(settings, pools)
        v["tolerations"] = [{"operator": "Exists"}]
        return v

    monkeypatch.setattr(component, "etcd_values", on_spot)
    recs = declare(PlatformSettings(cloud="aks"), AZURE_MIN, AKS_POOLS)
    [report] = check_platforms(recs)
    assert {i.check for i in report.items} == {"guardrail:etcd-not-on-spot"}
    assert all(i.prop == "tolerations" and "no toleration of the GPU spot pool's taint" in i.expected for i in report.items)


def test_missing_crd_skips_only_the_crd_check(monkeypatch, aks):
    """Without the CRD file the other objects are still validated; the report says what was
    skipped, where it looked, and how to point it elsewhere."""
    from lab.k8s import validate

    monkeypatch.setattr(validate, "schema_dirs", lambda: [validate.Path("/nonexistent/schemas")])
    [report] = check_platforms(aks)
    assert report.items == []
    assert CRD_CHECK not in report.checked and report.checked["k8s:schema"] > 0
    note = report.skipped[CRD_CHECK]
    assert "/nonexistent/schemas" in note and "ELASTIC_LAB_SCHEMAS" in note and "SKIPPED" in note


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
        ({"priorityClasses": {"preemptible": {"value": 10**7}}}, r"preserved >= inference > preemptible"),
        ({"priorityClasses": {"inference": {"value": 2_000_000}}}, r"platform.priorityClasses=\{'preserved': 1000000, 'inference': 2000000, .*preserved >= inference"),
        ({"checkpoint": {"workloadIdentityToken": "yes"}}, r"platform.checkpoint.workloadIdentityToken='yes' is invalid: expected true or false"),
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


@pytest.mark.parametrize(
    "raw,key,value",
    [
        ({"etcd": {"tag": "latest"}}, "platform.etcd.tag", "latest"),
        ({"gpusPerNode": -1}, "platform.gpusPerNode", -1),
        ({"checkpoint": {"sise": "1Gi"}}, "platform.checkpoint.sise", "1Gi"),
        ({"pools": {"gpuSpot": {"taints": ["x=y:Sometimes"]}}, "checkpoint": {"storageClass": "s"}}, "platform.pools.gpuSpot.taints", "x=y:Sometimes"),
    ],
)
def test_settings_errors_carry_key_value_expected(raw, key, value):
    with pytest.raises(PlatformConfigError) as info:
        PlatformSettings.from_config(raw, cloud="byo" if "pools" in raw else "aks")
    assert (info.value.key, info.value.value) == (key, value)
    assert info.value.expected and str(info.value) == f"{key}={value!r} is invalid: expected {info.value.expected}"


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
    assert pools.gpu_taints == (GPU_TAINT, AKS_SPOT_TAINT)  # the cluster's own Taint objects
    assert [taint_text(t) for t in pools.gpu_taints] == ["nvidia.com/gpu=present:NoSchedule", "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"]
    assert pools.spot_labels == {"kubernetes.azure.com/scalesetpriority": "spot", "elastic-spot-lab/capacity": "spot"}
    s = settings_for_cluster({}, info, kubernetes_version="1.35")
    assert (s.namespace, s.service_account, s.checkpoint.workload_identity_token) == ("train", "worker", False)
    assert isinstance(checkpoint_from_cluster(info), AzureBlobCheckpoint)
    with pytest.raises(PlatformConfigError, match=r"platform.namespace='training' is invalid: expected 'train'"):
        settings_for_cluster({"namespace": "training"}, info, kubernetes_version="1.35")


def _aks_info(mount_with_token: bool) -> SimpleNamespace:
    from components.labels import AKS_SPOT_TAINT, GPU_TAINT

    storage = SimpleNamespace(kind="azure-blob", account="acct", container="c", resource_group="rg", client_id="cid",
                              namespace="training", service_account="trainer", mount_with_token=mount_with_token)
    return SimpleNamespace(
        cloud="aks", storage=storage, extra={},
        pool_labels={"cpu": {"elastic-spot-lab/pool": "cpu"}, "gpu-spot": {"elastic-spot-lab/pool": "gpu-spot"}},
        pool_taints={"cpu": [], "gpu-spot": [GPU_TAINT, AKS_SPOT_TAINT]},
    )


@pytest.mark.parametrize("cluster_token", [False, True])
def test_checkpoint_auth_follows_the_cluster_unless_set(cluster_token):
    from components.platform.from_cluster import checkpoint_from_cluster, settings_for_cluster

    info = _aks_info(cluster_token)
    assert settings_for_cluster({}, info, kubernetes_version="1.35").checkpoint.workload_identity_token is cluster_token
    agreeing = {"checkpoint": {"workloadIdentityToken": cluster_token}}
    assert settings_for_cluster(agreeing, info, kubernetes_version="1.35").checkpoint.workload_identity_token is cluster_token
    assert checkpoint_from_cluster(info).mount_with_token is cluster_token


@pytest.mark.parametrize("cluster_token", [False, True])
def test_explicit_conflicting_checkpoint_auth_is_an_error_naming_both_keys(cluster_token):
    from components.platform.from_cluster import settings_for_cluster

    with pytest.raises(PlatformConfigError) as info:
        settings_for_cluster({"checkpoint": {"workloadIdentityToken": not cluster_token}}, _aks_info(cluster_token), kubernetes_version="1.35")
    err = info.value
    assert (err.key, err.value) == ("platform.checkpoint.workloadIdentityToken", not cluster_token)
    mode = "workload-identity-token" if cluster_token else "workload-identity-key"
    assert f"elastic-spot-lab:checkpointAuth={mode!r}" in err.expected


def test_checkpoint_auth_modes_match_the_cluster_component():
    from components.aks.args import CHECKPOINT_AUTH_MODES
    from components.platform.from_cluster import CHECKPOINT_AUTH

    assert sorted(CHECKPOINT_AUTH.values()) == sorted(CHECKPOINT_AUTH_MODES)

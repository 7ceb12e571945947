"""The TrainingPlatform component under Pulumi mocks, on what AKS, EKS-like and byo clusters
hand it (ClusterInfo), and checked as the plan checks it."""

from __future__ import annotations

from dataclasses import replace

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.cluster_info import (
    AzureBlobCheckpoint,
    CheckpointStorage,
    ClusterInfo,
    S3Checkpoint,
    StorageClassCheckpoint,
    TrainingIdentity,
)
from components.platform import PlatformSettings, TrainingPlatform
from components.platform import values as platform_values
from components.platform.component import operator_transform
from components.platform.settings import CheckpointSettings
from lab.plan.platform_checks import CRD_CHECK, check_platforms
from lab.program.harness import run_program
from lab.program.recording import RecordedResource
from lab.vocab.platform_facts import NOTICE_HANDLER_WAITS
from lab.vocab.pools import PoolPlacement
from lab.vocab.problems import InvalidInput
from tests.placements import AKS_PLACEMENT, BYO_PLACEMENT, EKS_PLACEMENT, TRAINER_IMAGE

CLIENT_ID = "11111111-2222-3333-4444-555555555555"
AZURE_MIN = AzureBlobCheckpoint("a", "c", "rg", "id")
AKS_BLOB = AzureBlobCheckpoint("ckptacct", "checkpoints", "lab-rg", CLIENT_ID)
AKS_IDENTITY = TrainingIdentity(
    "training",
    "trainer",
    {"azure.workload.identity/client-id": CLIENT_ID},
    pod_labels={"azure.workload.identity/use": "true"},
)


def declare(
    settings: PlatformSettings,
    checkpoint: CheckpointStorage,
    placement: PoolPlacement,
    *,
    identity: TrainingIdentity | None = None,
    notice_s: int = 30,
    ships_device_plugin: bool = False,
    scheduled_events: bool = False,
) -> list[RecordedResource]:
    """The component alone, on a cluster described by the arguments, under the plan's own
    mocks and recorder (lab.program.harness)."""

    def program() -> None:
        kubeconfig = pulumi.Output.secret("kubeconfig-contents")
        provider = k8s.Provider("cluster", kubeconfig=kubeconfig)
        info = ClusterInfo(
            provider,
            kubeconfig,
            placement,
            checkpoint,
            eviction_notice_s=notice_s,
            identity=identity,
            node_image_ships_device_plugin=ships_device_plugin,
            notice_from_scheduled_events=scheduled_events,
        )
        TrainingPlatform("platform", settings, info)

    return run_program("test", program=program, config={}).resources


def declare_aks(
    settings: PlatformSettings | None = None,
    checkpoint: AzureBlobCheckpoint = AKS_BLOB,
    placement: PoolPlacement = AKS_PLACEMENT,
) -> list[RecordedResource]:
    return declare(
        settings or PlatformSettings(kubernetes_version="1.35", notice_handler_image=TRAINER_IMAGE),
        checkpoint,
        placement,
        identity=AKS_IDENTITY,
        scheduled_events=True,
    )


def one(recs: list[RecordedResource], type_: str, name: str | None = None) -> RecordedResource:
    found = [r for r in recs if r.type == type_ and (name is None or r.name == name)]
    assert len(found) == 1, [r.name for r in found]
    return found[0]


@pytest.fixture(scope="module")
def aks() -> list[RecordedResource]:
    return declare_aks()


@pytest.fixture(scope="module")
def eks() -> list[RecordedResource]:
    return declare(PlatformSettings(), S3Checkpoint("lab-checkpoints", "us-east-2"), EKS_PLACEMENT, notice_s=120)


@pytest.fixture(scope="module")
def byo() -> list[RecordedResource]:
    s = PlatformSettings(gpus_per_node=0, checkpoint=CheckpointSettings(size="20Gi"))
    return declare(s, StorageClassCheckpoint("standard", "ReadWriteOnce"), BYO_PLACEMENT)


def kinds(recs: list[RecordedResource]) -> list[str]:
    return sorted(
        r.type.rsplit(":", 1)[-1] + ("" if r.custom else "*") for r in recs if r.type.startswith("kubernetes:")
    )


def test_inventory(aks, eks, byo):
    common = [
        "Chart*",
        "Directory*",
        "Namespace",
        "PersistentVolumeClaim",
        "PriorityClass",
        "PriorityClass",
        "PriorityClass",
        "PriorityClass",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    # + device plugin and the spot-notice handler (AKS: nothing else reads Scheduled Events)
    assert kinds(aks) == sorted([*common, "Chart*", "Chart*", "PersistentVolume"])
    assert kinds(eks) == sorted([*common, "Chart*", "PersistentVolume"])
    assert kinds(byo) == sorted(common)  # gpusPerNode 0: no device plugin; StorageClass claim
    platform = one(aks, "elastic-spot-lab:platform:TrainingPlatform")
    assert all(r.parent == platform.urn for r in aks if r.type.startswith("kubernetes:"))


@pytest.mark.parametrize("cloud", ["aks", "eks", "byo"])
def test_offline_checks_pass(cloud, request, crd):
    [report] = check_platforms(request.getfixturevalue(cloud))
    assert [str(i) for i in report.items] == []
    kinds_checked = sorted({o["kind"] for o in report.objects})
    assert {
        "PriorityClass",
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "PersistentVolumeClaim",
        "Deployment",
        "Service",
        "NetworkPolicy",
        "PyTorchJob",
    } <= set(kinds_checked)
    jobs = [o for o in report.objects if o["kind"] == "PyTorchJob"]
    assert report.checked["k8s:schema"] == len(report.objects) - len(jobs)
    # Sample jobs: etcd-v2, c10d, per-step, one with a burst (two PyTorchJobs), and one writing
    # with its own clients where the storage has a URL (Blob, S3; not a claim on a StorageClass).
    samples = {"sample-etcdv2", "sample-c10d", "sample-perstep", "sample-burst", "sample-burst-burst"} | (
        {"sample-client"} if cloud != "byo" else set()
    )
    assert report.checked[CRD_CHECK] == len(jobs) == len(samples)
    assert {j["metadata"]["name"] for j in jobs} == samples
    lighthouse = [o for o in report.objects if o["metadata"]["name"] == "sample-perstep-lighthouse"]
    assert sorted(o["kind"] for o in lighthouse) == ["Deployment", "NetworkPolicy", "PodDisruptionBudget", "Service"]
    assert report.skipped == {}


def test_aks_schema_version(aks):
    [report] = check_platforms(aks)
    assert report.kubernetes_version == "1.35" and report.schema_note == "Kubernetes 1.35 schemas"


def test_priority_classes(aks):
    """preserved (etcd, operator, stores) is the highest and never preempts; inference is
    next and preempts lower priorities, i.e. only the workers; borrowed workers (a job's burst)
    are the lowest, below the workers, so whatever preempts takes them first."""
    pcs = {r.inputs["metadata"]["name"]: r.inputs for r in aks if r.type.endswith("PriorityClass")}
    assert {n: (p["value"], p["preemptionPolicy"], p["globalDefault"]) for n, p in pcs.items()} == {
        "elastic-preserved": (1_000_000, "Never", False),
        "elastic-inference": (100_000, "PreemptLowerPriority", False),
        "elastic-preemptible": (1_000, "Never", False),
        "elastic-borrowed": (100, "Never", False),
    }
    values = {n: p["value"] for n, p in pcs.items()}
    assert (
        values["elastic-preserved"]
        >= values["elastic-inference"]
        > values["elastic-preemptible"]
        > values["elastic-borrowed"]
    )


def test_device_plugin(aks):
    chart = one(aks, "kubernetes:helm.sh/v4:Chart", "platform-nvidia-device-plugin")
    assert chart.inputs["chart"] == "nvidia-device-plugin" and chart.inputs["version"] == "0.20.0"
    assert chart.inputs["repositoryOpts"]["repo"] == "https://nvidia.github.io/k8s-device-plugin"
    values = chart.inputs["values"]
    tolerated = {(t.get("key"), t.get("effect")) for t in values["tolerations"]}
    assert {("kubernetes.azure.com/scalesetpriority", "NoSchedule"), ("nvidia.com/gpu", "NoSchedule")} <= tolerated
    terms = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    # Exactly the GPU spot pool's labels, as the AKS cluster declares them.
    assert terms == [
        {
            "matchExpressions": [
                {"key": "elastic-spot-lab/capacity", "operator": "In", "values": ["spot"]},
                {"key": "elastic-spot-lab/pool", "operator": "In", "values": ["gpu-spot"]},
                {"key": "kubernetes.azure.com/scalesetpriority", "operator": "In", "values": ["spot"]},
                {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
            ]
        }
    ]
    # Only keys the 0.20.0 chart knows (its values.yaml / values.schema.json).
    assert set(values) <= {"affinity", "tolerations", "priorityClassName", "gfd", "nodeSelector"}


def test_device_plugin_skipped_where_the_image_ships_one():
    recs = declare(PlatformSettings(), S3Checkpoint("b"), EKS_PLACEMENT, ships_device_plugin=True)
    assert "platform-nvidia-device-plugin" not in {r.name for r in recs}
    recs = declare(PlatformSettings(device_plugin="true"), S3Checkpoint("b"), EKS_PLACEMENT, ships_device_plugin=True)
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
    assert placement["nodeSelector"] == {"elastic-spot-lab/pool": "cpu", "elastic-spot-lab/capacity": "on-demand"}
    assert placement["priorityClassName"] == "elastic-preserved"
    assert [c["name"] for c in placement["containers"]] == ["training-operator"]
    [report] = check_platforms(aks)
    operator = [o for o in report.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "training-operator"]
    assert len(operator) == 1 and operator[0]["metadata"]["namespace"] == "kubeflow"
    assert report.checked["guardrail:operator-on-cpu-pool"]


def no_transform(monkeypatch, component):
    monkeypatch.setattr(component, "operator_transform", lambda settings, pools: lambda args: None)


def patch_to_the_gpu_pool(monkeypatch, component):
    patch = {"nodeSelector": {"elastic-spot-lab/pool": "gpu-spot"}, "priorityClassName": "elastic-preserved"}
    monkeypatch.setattr(component, "operator_pod_patch", lambda settings, pools: patch)


def patch_without_priority(monkeypatch, component):
    monkeypatch.setattr(
        component, "operator_pod_patch", lambda settings, pools: {"nodeSelector": dict(pools.cpu_labels)}
    )


OPERATOR_BREAKAGES = {
    "no-transform": (no_transform, "nodeSelector=None: expected the on-demand CPU pool"),
    "gpu-pool": (patch_to_the_gpu_pool, "nodeSelector={'elastic-spot-lab/pool': 'gpu-spot'}"),
    "no-priority": (patch_without_priority, "priorityClassName=None: expected 'elastic-preserved'"),
}


@pytest.mark.parametrize("case", OPERATOR_BREAKAGES)
def test_operator_placement_removed_fails_the_plan_check(monkeypatch, case):
    import components.platform.component as component

    breakage, message = OPERATOR_BREAKAGES[case]
    breakage(monkeypatch, component)
    recs = declare_aks()
    [report] = check_platforms(recs)
    failed = [str(i) for i in report.failed("guardrail:operator-on-cpu-pool")]
    assert failed and any(message in f for f in failed), failed


def test_cpu_pool_taints_are_tolerated_by_etcd_operator_and_stores(crd):
    """A tainted CPU pool: etcd, the operator and c10d stores tolerate exactly its taint."""
    recs = declare_aks(placement=replace(AKS_PLACEMENT, cpu_taints=("dedicated=infra:NoSchedule",)))
    want = [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]
    platform = one(recs, "elastic-spot-lab:platform:TrainingPlatform")
    assert platform.outputs["operatorPlacement"]["tolerations"] == want
    assert one(recs, "kubernetes:helm.sh/v4:Chart", "platform-etcd").inputs["values"]["tolerations"] == want
    [report] = check_platforms(recs)
    assert [str(i) for i in report.items] == []
    store = next(
        o for o in report.objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-rdzv-store")
    )
    assert store["spec"]["template"]["spec"]["tolerations"] == want


def test_operator_transform_keeps_it_on_the_cpu_pool():
    transform = operator_transform(PlatformSettings(), AKS_PLACEMENT)
    deployment = {
        "metadata": {"name": "training-operator", "namespace": "kubeflow"},
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "training-operator"}], "nodeSelector": {"kubernetes.io/os": "linux"}}
            }
        },
    }
    args = pulumi.ResourceTransformArgs(
        True, "kubernetes:apps/v1:Deployment", "op", deployment, pulumi.ResourceOptions()
    )
    out = transform(args)
    spec = out.props["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", **AKS_PLACEMENT.cpu_labels}
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
    assert v["nodeSelector"] == {"elastic-spot-lab/pool": "cpu", "elastic-spot-lab/capacity": "on-demand"}


def test_aks_checkpoint_is_static_blob_with_workload_identity(aks):
    """Key mode (the cluster's default checkpointAuth): the driver fetches the account key
    with the pods' identity, so no mountWithWorkloadIdentityToken attribute."""
    pv = one(aks, "kubernetes:core/v1:PersistentVolume").inputs
    pvc = one(aks, "kubernetes:core/v1:PersistentVolumeClaim").inputs
    csi = pv["spec"]["csi"]
    assert csi["driver"] == "blob.csi.azure.com"
    assert csi["volumeHandle"] == "lab-rg#ckptacct#checkpoints"
    assert csi["volumeAttributes"] == {
        "storageaccount": "ckptacct",
        "containerName": "checkpoints",
        "resourcegroup": "lab-rg",
        "clientID": "11111111-2222-3333-4444-555555555555",
    }
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["storageClassName"] == "" == pvc["spec"]["storageClassName"]
    assert pv["spec"]["claimRef"] == {"namespace": "training", "name": "elastic-checkpoints"}
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    sa = one(aks, "kubernetes:core/v1:ServiceAccount").inputs
    assert sa["metadata"]["annotations"] == {
        "azure.workload.identity/client-id": "11111111-2222-3333-4444-555555555555"
    }


@pytest.mark.parametrize("cloud", ["aks", "eks", "byo"])
def test_the_jobs_service_account_may_read_pods_and_nothing_else(cloud, request):
    """A worker reads its own pod's deletion time on SIGTERM (lab.runtime.pod_deadline): its
    service account gets `get` on pods in the jobs' namespace, and no other verb or resource."""
    plan = request.getfixturevalue(cloud)
    sa = one(plan, "kubernetes:core/v1:ServiceAccount").inputs["metadata"]
    role = one(plan, "kubernetes:rbac.authorization.k8s.io/v1:Role").inputs
    binding = one(plan, "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding").inputs
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == sa["namespace"] == "training"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]


def test_eks_checkpoint_is_s3_mountpoint(eks):
    pv = one(eks, "kubernetes:core/v1:PersistentVolume").inputs
    csi = pv["spec"]["csi"]
    assert csi["driver"] == "s3.csi.aws.com"
    assert csi["volumeAttributes"] == {"bucketName": "lab-checkpoints"}
    assert csi["volumeHandle"] == "s3-lab-checkpoints"
    assert pv["spec"]["mountOptions"] == ["allow-delete", "region us-east-2"]
    platform = one(eks, "elastic-spot-lab:platform:TrainingPlatform")
    assert platform.outputs["jobFacts"]["checkpointWrites"] == "write-once"  # Mountpoint cannot rename


def test_job_facts_give_the_storage_as_its_clients_reach_it(aks, eks, byo):
    """The URL a job with checkpoint access `client` writes under, what its pods carry for
    the storage's identity; none for a claim on a StorageClass."""
    facts = {
        name: one(plan, "elastic-spot-lab:platform:TrainingPlatform").outputs["jobFacts"]
        for name, plan in (("aks", aks), ("eks", eks), ("byo", byo))
    }
    assert facts["aks"]["checkpointUrl"] == "az://ckptacct/checkpoints"
    assert facts["aks"]["podLabels"] == {"azure.workload.identity/use": "true"} and facts["aks"]["podEnv"] == {}
    assert facts["eks"]["checkpointUrl"] == "s3://lab-checkpoints"
    assert facts["eks"]["podEnv"] == {"AWS_REGION": "us-east-2"}
    assert (facts["byo"]["checkpointUrl"], facts["byo"]["podLabels"], facts["byo"]["podEnv"]) == ("", {}, {})


def test_byo_checkpoint_uses_the_storage_class(byo):
    pvc = one(byo, "kubernetes:core/v1:PersistentVolumeClaim").inputs
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "standard",
        "resources": {"requests": {"storage": "20Gi"}},
    }
    sa = one(byo, "kubernetes:core/v1:ServiceAccount").inputs
    assert not sa["metadata"].get("annotations")


@pytest.mark.parametrize("given", [None, True])
def test_aks_token_mount(given):
    """Token mode: mountWithWorkloadIdentityToken "true", whether the setting follows the
    binding (None) or says the same explicitly."""
    blob = replace(AKS_BLOB, mount_with_token=True)
    recs = declare_aks(PlatformSettings(checkpoint=CheckpointSettings(workload_identity_token=given)), blob)
    attrs = one(recs, "kubernetes:core/v1:PersistentVolume").inputs["spec"]["csi"]["volumeAttributes"]
    assert attrs["mountWithWorkloadIdentityToken"] == "true"


def test_checkpoint_token_setting_must_agree_with_the_binding():
    with pytest.raises(
        InvalidInput, match=r"platform.checkpoint.workloadIdentityToken=True is invalid: expected false"
    ):
        declare_aks(PlatformSettings(checkpoint=CheckpointSettings(workload_identity_token=True)))


def test_settings_must_use_the_service_account_the_storage_trusts():
    with pytest.raises(InvalidInput, match=r"platform.namespace='jobs' is invalid: expected 'training', the one"):
        declare_aks(PlatformSettings(namespace="jobs"))


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
        pytest.param(
            "device_plugin_values",
            _values_without_spot_toleration,
            "values.tolerations",
            "scalesetpriority",
            id="no-spot-toleration",
        ),
        pytest.param("device_plugin_values", _values_on_cpu_pool, "values.affinity", "GPU pool", id="wrong-affinity"),
        pytest.param("DEVICE_PLUGIN_VERSION", "0.17.0", "version", "'0.20.0'", id="wrong-version"),
        pytest.param(
            "DEVICE_PLUGIN_REPO",
            "https://charts.example.com/nvidia",
            "repositoryOpts.repo",
            "nvidia.github.io",
            id="wrong-repo",
        ),
        pytest.param("DEVICE_PLUGIN_CHART", "gpu-operator", "chart", "nvidia-device-plugin", id="wrong-chart"),
    ],
)
def test_broken_device_plugin_fails_the_check(monkeypatch, attr, replacement, prop, expected):
    import components.platform.component as component

    monkeypatch.setattr(component, attr, replacement)
    recs = declare_aks(checkpoint=AZURE_MIN)
    [report] = check_platforms(recs)
    assert [(i.check, i.property) for i in report.items] == [("platform:device-plugin", prop)]
    assert expected in report.items[0].expected


def test_unpinned_operator_fails_the_check(monkeypatch):
    monkeypatch.setattr(
        PlatformSettings,
        "operator_directory",
        property(lambda self: "https://github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=master"),
    )
    recs = declare_aks(checkpoint=AZURE_MIN)
    [report] = check_platforms(recs)
    assert [(i.check, i.property) for i in report.items] == [("platform:training-operator", "directory")]
    assert "ref=master" in str(report.items[0])


def test_broken_etcd_values_fail_at_render(monkeypatch):
    import components.platform.component as component

    def on_spot(settings, pools):
        v = platform_values.etcd_values(settings, pools)
        v["tolerations"] = [{"operator": "Exists"}]
        return v

    monkeypatch.setattr(component, "etcd_values", on_spot)
    recs = declare_aks(checkpoint=AZURE_MIN)
    [report] = check_platforms(recs)
    assert {i.check for i in report.items} == {"guardrail:etcd-not-on-spot"}
    assert all(
        i.property == "tolerations" and "no toleration of the GPU spot pool's taint" in i.expected for i in report.items
    )


def test_missing_crd_skips_only_the_crd_check(monkeypatch, aks):
    """Without the CRD file the other objects are still validated; the report says what was
    skipped, where it looked, and how to point it elsewhere."""
    from lab.k8s import schemas

    monkeypatch.setattr(schemas, "schema_dirs", lambda: [schemas.Path("/nonexistent/schemas")])
    [report] = check_platforms(aks)
    assert report.items == []
    assert CRD_CHECK not in report.checked and report.checked["k8s:schema"] > 0
    note = report.skipped[CRD_CHECK]
    assert "/nonexistent/schemas" in note and "ELASTIC_LAB_SCHEMAS" in note and "SKIPPED" in note


# ------------------------------------------------------------------ the spot-notice handler
NOTICE_RELEASE = "platform-spot-notice-handler"


def notice_charts(recs: list[RecordedResource]) -> list[RecordedResource]:
    return [r for r in recs if r.type == "kubernetes:helm.sh/v4:Chart" and r.name == NOTICE_RELEASE]


def test_aks_gets_the_notice_handler_on_its_gpu_spot_nodes(aks):
    chart = one(aks, "kubernetes:helm.sh/v4:Chart", NOTICE_RELEASE)
    assert chart.inputs["chart"] == "charts/spot-notice-handler"
    assert chart.inputs["namespace"] == "training"
    values = chart.inputs["values"]
    assert values["nodeSelector"] == dict(AKS_PLACEMENT.gpu_labels) == AKS_PLACEMENT.spot_gpu_labels
    assert values["tolerations"] == [t.toleration() for t in AKS_PLACEMENT.gpu_taints]
    assert values["priorityClassName"] == "elastic-preserved"
    repo, tag = values["image"]["repository"], values["image"]["tag"]
    assert (repo, tag) == tuple(TRAINER_IMAGE.rsplit(":", 1)) and tag != "latest"


def test_notice_handler_replaces_the_charts_default_selector():
    """The chart's default selects AKS's spot label; on another cluster Helm would merge it
    into ours and the handler would land nowhere: the platform deletes it."""
    values = platform_values.notice_handler_values(PlatformSettings(notice_handler_image=TRAINER_IMAGE), EKS_PLACEMENT)
    assert values["nodeSelector"] == {
        **dict(EKS_PLACEMENT.gpu_labels),
        "kubernetes.azure.com/scalesetpriority": None,
    }


@pytest.mark.parametrize(
    ("setting", "scheduled_events", "installed"),
    [
        ("auto", True, True),
        ("auto", False, False),
        ("false", True, False),
        ("true", False, True),
    ],
)
def test_notice_handler_installed_where_the_cluster_needs_it(setting, scheduled_events, installed):
    settings = PlatformSettings(
        gpus_per_node=0,
        checkpoint=CheckpointSettings(size="20Gi"),
        notice_handler=setting,
        notice_handler_image=TRAINER_IMAGE,
    )
    recs = declare(
        settings, StorageClassCheckpoint("standard", "ReadWriteOnce"), BYO_PLACEMENT, scheduled_events=scheduled_events
    )
    assert len(notice_charts(recs)) == int(installed)


def test_without_a_trainer_image_the_handler_waits_and_says_so():
    """A cluster that needs the handler, before its image is pushed: no handler (never one whose
    image nothing publishes), and the platform's output says what it waits for."""
    recs = declare_aks(PlatformSettings(kubernetes_version="1.35"))
    assert notice_charts(recs) == []
    platform = one(recs, "elastic-spot-lab:platform:TrainingPlatform")
    assert platform.outputs["noticeHandler"] == NOTICE_HANDLER_WAITS


def test_byo_with_the_handler_passes_the_offline_checks(crd):
    settings = PlatformSettings(
        gpus_per_node=0,
        checkpoint=CheckpointSettings(size="20Gi"),
        notice_handler="true",
        notice_handler_image=TRAINER_IMAGE,
    )
    recs = declare(settings, StorageClassCheckpoint("standard", "ReadWriteOnce"), BYO_PLACEMENT)
    [report] = check_platforms(recs)
    assert [str(i) for i in report.items] == []
    [daemonset] = [o for o in report.objects if o["kind"] == "DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    # Exactly the byo GPU pool's labels and its spot label: the chart's AKS default is gone.
    assert pod["nodeSelector"] == {**BYO_PLACEMENT.gpu_labels, **BYO_PLACEMENT.spot_labels}


def test_handler_off_the_spot_nodes_fails_the_plan_check(monkeypatch, aks):
    def elsewhere(settings, pools):
        values = NOTICE_VALUES(settings, pools)
        values["tolerations"] = []
        return values

    monkeypatch.setattr("components.platform.component.notice_handler_values", elsewhere)
    [report] = check_platforms(declare_aks())
    assert {i.check for i in report.items} == {"guardrail:notice-handler-on-spot-nodes"}


NOTICE_VALUES = platform_values.notice_handler_values

"""Teams sharing one platform: each its namespace, the platform's service account and pod
reader there, its GPU quotas, its checkpoint claim on its own folder of the storage and the
storage identity's trust; its jobs reach the platform's etcd. Declared under mocks, on the
component alone and in the whole program of each cloud, and checked as the plan checks them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.cluster_info import S3Checkpoint, StorageClassCheckpoint
from components.platform.settings import PlatformSettings
from lab.k8s.platform_guardrails import GuardrailContext, run_guardrails
from lab.plan.check_list import findings_of, run_checks
from lab.plan.findings import errors
from lab.plan.platform_checks import check_platforms
from lab.program.harness import run_program
from lab.vocab.job import CheckpointWrites
from lab.vocab.names import PLATFORM_TYPE
from lab.vocab.platform_facts import PlatformFacts, TeamFacts
from lab.vocab.problems import InvalidInput
from tests.placements import BYO_PLACEMENT, EKS_PLACEMENT, TRAINER_IMAGE

from .test_component import declare, declare_aks, one

TEAMS = {"vision": {"namespace": "team-vision", "gpus": 8, "borrowedGpus": 16}, "speech": {}}


def _settings(**kw: Any) -> PlatformSettings:
    return PlatformSettings.from_config({"teams": TEAMS, **kw}, kubernetes_version="1.35", trainer_image=TRAINER_IMAGE)


def _objects(recs, kind: str) -> dict[tuple[str | None, str], dict]:
    """The recorded objects of `kind`, by (namespace, name)."""
    out = {}
    for r in recs:
        if r.type.rsplit(":", 1)[-1] == kind and r.custom:
            meta = r.inputs["metadata"]
            out[(meta.get("namespace"), meta["name"])] = r.inputs
    return out


@pytest.fixture(scope="module")
def aks_teams():
    return declare_aks(_settings())


def test_each_team_gets_its_namespace_account_reader_and_quotas(aks_teams):
    namespaces = _objects(aks_teams, "Namespace")
    assert set(namespaces) == {(None, "training"), (None, "team-vision"), (None, "speech")}
    assert namespaces[(None, "team-vision")]["metadata"]["labels"]["elastic-spot-lab/team"] == "vision"
    accounts = _objects(aks_teams, "ServiceAccount")
    assert set(accounts) == {("training", "trainer"), ("team-vision", "trainer"), ("speech", "trainer")}
    for account in accounts.values():  # the storage identity's, for the Blob CSI driver and the pods' clients
        assert account["metadata"]["annotations"] == {"azure.workload.identity/client-id": CLIENT_ID}
    bindings = _objects(aks_teams, "RoleBinding")
    assert bindings[("team-vision", "trainer-pod-reader")]["subjects"] == [
        {"kind": "ServiceAccount", "name": "trainer", "namespace": "team-vision"}
    ]
    quotas = _objects(aks_teams, "ResourceQuota")
    assert set(quotas) == {("team-vision", "elastic-preemptible-gpus"), ("team-vision", "elastic-borrowed-gpus")}
    assert quotas[("team-vision", "elastic-preemptible-gpus")]["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}
    assert quotas[("team-vision", "elastic-borrowed-gpus")]["spec"]["hard"] == {"requests.nvidia.com/gpu": "16"}


def test_each_teams_claim_binds_a_volume_on_its_own_folder_of_the_container(aks_teams):
    volumes = {name: v["spec"] for (_, name), v in _objects(aks_teams, "PersistentVolume").items()}
    assert set(volumes) == {
        "training-elastic-checkpoints",
        "team-vision-elastic-checkpoints",
        "speech-elastic-checkpoints",
    }
    vision = volumes["team-vision-elastic-checkpoints"]
    assert vision["claimRef"] == {"namespace": "team-vision", "name": "elastic-checkpoints"}
    assert "--subdirectory=teams/vision" in vision["mountOptions"]
    assert not any(o.startswith("--subdirectory") for o in volumes["training-elastic-checkpoints"]["mountOptions"])
    handles = {v["csi"]["volumeHandle"] for v in volumes.values()}
    assert len(handles) == 3 and all("/" not in h for h in handles)  # unique in the cluster; no '/' (Blob CSI)
    claims = _objects(aks_teams, "PersistentVolumeClaim")
    assert claims[("team-vision", "elastic-checkpoints")]["spec"]["volumeName"] == "team-vision-elastic-checkpoints"


def test_the_teams_jobs_reach_the_platforms_etcd_and_pass_every_check(aks_teams, crd):
    [report] = check_platforms(aks_teams)
    assert [str(i) for i in report.items] == []
    jobs = [o for o in report.objects if o["kind"] == "PyTorchJob" and o["metadata"]["namespace"] == "team-vision"]
    assert {j["metadata"]["name"] for j in jobs} == {"sample-vision", "sample-vision-burst"}
    policy = jobs[0]["spec"]["elasticPolicy"]
    assert policy["rdzvHost"] == "etcd-rendezvous.training.svc.cluster.local"
    [etcd_policy] = [
        o for o in report.objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "etcd-rendezvous"
    ]
    peers = etcd_policy["spec"]["ingress"][0]["from"]
    assert [p.get("namespaceSelector") for p in peers] == [
        None,
        {"matchLabels": {"kubernetes.io/metadata.name": "team-vision"}},
        {"matchLabels": {"kubernetes.io/metadata.name": "speech"}},
    ]
    assert all(p["podSelector"] == peers[0]["podSelector"] for p in peers)


def _guardrail_errors(objects: list[dict], facts: PlatformFacts) -> list[str]:
    found = run_guardrails(objects, GuardrailContext(facts=facts))
    return [f"{v.where}: {v.prop}: {v.expected}" for violations in found.values() for v in violations]


def test_a_team_the_etcd_policy_does_not_admit_or_a_namespace_that_is_no_teams_is_refused(aks_teams, crd):
    [report] = check_platforms(aks_teams)
    facts = PlatformFacts.from_dict(one(aks_teams, PLATFORM_TYPE).outputs["jobFacts"])
    assert set(facts.teams) == {"vision", "speech"}
    assert _guardrail_errors(report.objects, facts) == []

    def etcd_peers(objects: list[dict]) -> list[dict]:
        policy = next(o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "etcd-rendezvous")
        return policy["spec"]["ingress"][0]["from"]

    without_vision = copy.deepcopy(report.objects)
    del etcd_peers(without_vision)[1]
    got = _guardrail_errors(without_vision, facts)
    assert got and all("metadata.namespace" in g and "team-vision" in g for g in got)
    stranger = copy.deepcopy(report.objects)
    etcd_peers(stranger)[2]["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": "default"}}
    got = _guardrail_errors(stranger, facts)
    assert any("spec.ingress.from: only pods labelled" in g and "of etcd's namespace or a team's" in g for g in got)


def test_on_s3_a_team_mounts_its_prefix_and_on_a_storage_class_its_own_claim(crd):
    eks = declare(_settings(), S3Checkpoint("lab-checkpoints", "us-east-2"), EKS_PLACEMENT, notice_s=120)
    volumes = {name: v["spec"] for (_, name), v in _objects(eks, "PersistentVolume").items()}
    assert "prefix teams/vision/" in volumes["team-vision-elastic-checkpoints"]["mountOptions"]
    assert "prefix teams/speech/" in volumes["speech-elastic-checkpoints"]["mountOptions"]
    byo_settings = PlatformSettings.from_config(
        {"teams": TEAMS, "gpusPerNode": 8}, trainer_image=TRAINER_IMAGE, kubernetes_version="1.35"
    )
    byo = declare(byo_settings, StorageClassCheckpoint("standard", "ReadWriteMany"), BYO_PLACEMENT)
    assert _objects(byo, "PersistentVolume") == {}
    claims = _objects(byo, "PersistentVolumeClaim")
    assert claims[("team-vision", "elastic-checkpoints")]["spec"]["storageClassName"] == "standard"
    for recs in (eks, byo):
        [report] = check_platforms(recs)
        assert [str(i) for i in report.items] == []


def test_the_teams_reach_the_jobs_facts():
    facts = _settings(quota={"gpus": 4}).facts(BYO_PLACEMENT, writes=CheckpointWrites.RENAME, eviction_notice_s=30)
    assert dict(facts.teams) == {"vision": TeamFacts("team-vision", 8, 16), "speech": TeamFacts("speech")}
    assert facts.gpu_quota == 4 and facts.for_team("speech").gpu_quota is None


@pytest.mark.parametrize(
    "teams,message",
    [
        ({"Vision": {}}, r"platform.teams.Vision='Vision' is invalid: expected a team name that is a DNS-1123 label"),
        (
            {"a": {"namespace": "training"}},
            r"platform.teams.a.namespace='training' is invalid: expected a namespace of "
            r"the team's own, not the platform's",
        ),
        (
            {"a": {"namespace": "kube-a"}},
            r"platform.teams.a.namespace='kube-a' is invalid: expected a namespace of "
            r"the team's own, not default or kube-\*",
        ),
        (
            {"a": {"namespace": "shared"}, "b": {"namespace": "shared"}},
            r"platform.teams.b.namespace='shared' is "
            r"invalid: expected a namespace no other team has \(team 'a' has it\)",
        ),
        ({"a": {"gpu": 8}}, r"platform.teams.a.gpu=8 is invalid: expected a known key: borrowedGpus, gpus, namespace"),
        ({"a": {"gpus": 1}}, r"platform.teams.a.gpus=1 is invalid: expected 0 or at least gpusPerNode \(2\)"),
        ({"a": {"borrowedGpus": -2}}, r"platform.teams.a.borrowedGpus=-2 is invalid: expected a whole number"),
        (["a"], r"platform.teams=\['a'\] is invalid: expected a mapping of team name"),
        ({"a": 8}, r"platform.teams.a=8 is invalid: expected a mapping with borrowedGpus, gpus, namespace"),
    ],
)
def test_a_team_that_cannot_work_is_refused_naming_its_key(teams, message):
    with pytest.raises(InvalidInput, match=message):
        PlatformSettings.from_config({"gpusPerNode": 2, "teams": teams})


# ------------------------------------------------------------------ the whole program, per cloud
CLIENT_ID = "11111111-2222-3333-4444-555555555555"


def test_on_aks_the_training_identity_trusts_each_teams_account_one_credential_after_another():
    plan = run_program("aks-dev", {"platform": {"teams": TEAMS}})
    creds = {r.name: r for r in plan.resources if r.type == "azure-native:managedidentity:FederatedIdentityCredential"}
    assert set(creds) == {"aks-training-federation", "aks-vision-federation", "aks-speech-federation"}
    own = creds["aks-training-federation"].inputs
    for team, namespace in (("vision", "team-vision"), ("speech", "speech")):
        cred = creds[f"aks-{team}-federation"].inputs
        assert cred["subject"] == f"system:serviceaccount:{namespace}:trainer"
        assert (cred["issuer"], cred["resourceName"], cred["audiences"]) == (
            own["issuer"],
            own["resourceName"],
            own["audiences"],
        )
    # Entra ID refuses concurrent writes of one identity's credentials: one after another.
    assert creds["aks-vision-federation"].urn in creds["aks-speech-federation"].depends_on
    assert errors(findings_of(run_checks(plan))) == []


def test_on_aks_more_teams_than_an_identity_can_trust_are_refused_before_anything_is_declared():
    many = {f"team{i}": {} for i in range(20)}
    with pytest.raises(InvalidInput) as info:
        run_program("aks-dev", {"platform": {"teams": many}})
    [problem] = info.value.problems
    assert problem.key == "elastic-spot-lab:platform.teams"
    assert "at most 19 teams: the cluster's checkpoint identity trusts at most 20 service accounts" in problem.expected
    assert info.value.recorded_resources == []


def test_on_eks_each_teams_account_is_associated_with_the_jobs_role():
    plan = run_program("eks-dev", {"platform": {"teams": TEAMS}})
    associations = {
        r.name: r.inputs for r in plan.resources if r.type == "aws:eks/podIdentityAssociation:PodIdentityAssociation"
    }
    own = associations["eks-training-role-identity"]
    vision = associations["eks-training-role-vision-identity"]
    assert (vision["namespace"], vision["serviceAccount"]) == ("team-vision", "trainer")
    assert vision["roleArn"] == own["roleArn"] and vision["clusterName"] == own["clusterName"]
    assert errors(findings_of(run_checks(plan))) == []

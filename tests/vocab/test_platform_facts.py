"""PlatformFacts: what a job knows of its platform, and its wire form (the `jobFacts` output)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lab.vocab.job import CheckpointWrites
from lab.vocab.platform_facts import PlatformFacts, TeamFacts, lighthouse_name, store_name
from lab.vocab.pools import PoolPlacement


def test_facts_survive_their_wire_form():
    facts = PlatformFacts(
        namespace="jobs",
        checkpoint_writes=CheckpointWrites.WRITE_ONCE,
        eviction_notice_s=120,
        gpus_per_node=4,
        pools=PoolPlacement(cpu_taints=("dedicated=infra:NoSchedule",)),
        checkpoint_url="s3://ckpt-bucket",
        pod_labels={"azure.workload.identity/use": "true"},
        pod_env={"AWS_REGION": "us-east-1"},
    )
    assert PlatformFacts.from_dict(facts.as_dict()) == facts


def test_the_wire_form_keeps_its_keys():
    """The keys of the platform's `jobFacts` output, which deployed stacks hold in their state."""
    assert set(PlatformFacts().as_dict()) == {
        "namespace",
        "serviceAccount",
        "etcdService",
        "etcdPort",
        "clusterDomain",
        "checkpointClaim",
        "checkpointWrites",
        "checkpointUrl",
        "podLabels",
        "podEnv",
        "workerPriorityClass",
        "burstPriorityClass",
        "gpuQuota",
        "borrowedGpuQuota",
        "preservedPriorityClass",
        "gpusPerNode",
        "rdzvClientLabels",
        "terminationGraceSeconds",
        "notReadyTolerationSeconds",
        "evictionNoticeSeconds",
        "pools",
        "teams",
        "team",
        "etcdNamespace",
    }


def test_facts_written_before_teams_read_as_a_platform_without_teams():
    data = PlatformFacts().as_dict()
    for key in ("teams", "team", "etcdNamespace"):
        del data[key]
    facts = PlatformFacts.from_dict(data)
    assert (dict(facts.teams), facts.team, facts.etcd_namespace) == ({}, "", "")


SHARED = PlatformFacts(
    namespace="training",
    cluster_domain="example.local",
    gpu_quota=4,
    checkpoint_url="s3://ckpt-bucket/",
    teams={"vision": TeamFacts("team-vision", 8, 16), "speech": TeamFacts("speech")},
)


def test_a_teams_jobs_run_in_its_namespace_under_its_quotas_and_rendezvous_at_the_platforms_etcd():
    vision = SHARED.for_team("vision")
    assert (vision.namespace, vision.gpu_quota, vision.borrowed_gpu_quota, vision.team) == (
        "team-vision",
        8,
        16,
        "vision",
    )
    assert vision.etcd_host == SHARED.etcd_host == "etcd-rendezvous.training.svc.example.local"
    assert vision.store_host("demo") == "demo-rdzv-store.team-vision.svc.example.local"
    assert vision.checkpoint_url == "s3://ckpt-bucket/teams/vision"
    speech = SHARED.for_team("speech")
    assert (speech.gpu_quota, speech.borrowed_gpu_quota) == (None, None)  # no cap: not the platform's
    assert PlatformFacts.from_dict(vision.as_dict()) == vision
    assert PlatformFacts.from_dict(SHARED.as_dict()) == SHARED


def test_a_team_is_found_by_its_namespace_and_an_unknown_one_is_no_team():
    assert SHARED.team_of_namespace("team-vision") == "vision"
    assert SHARED.team_of_namespace("training") is None
    with pytest.raises(KeyError):
        SHARED.for_team("nlp")


def test_facts_written_before_the_eviction_notice_was_recorded_read_as_the_shortest_notice():
    data = PlatformFacts().as_dict()
    del data["evictionNoticeSeconds"]
    assert PlatformFacts.from_dict(data).eviction_notice_s == 30


def test_facts_written_before_the_borrowed_class_name_none():
    """A stack deployed before the platform declared a class for borrowed workers has none: a
    job with a burst is refused there (lab.k8s.job.render_job), never sent with a missing class."""
    data = PlatformFacts().as_dict()
    del data["burstPriorityClass"]
    assert PlatformFacts.from_dict(data).burst_priority_class == ""


def test_facts_written_before_client_checkpoints_read_as_a_mount_only_platform():
    data = PlatformFacts().as_dict()
    for key in ("checkpointUrl", "podLabels", "podEnv"):
        del data[key]
    facts = PlatformFacts.from_dict(data)
    assert (facts.checkpoint_url, dict(facts.pod_labels), dict(facts.pod_env)) == ("", {}, {})


def test_service_hosts():
    facts = replace(PlatformFacts(), namespace="jobs", cluster_domain="example.local")
    assert facts.etcd_host == "etcd-rendezvous.jobs.svc.example.local"
    assert (
        facts.store_host("demo")
        == f"{store_name('demo')}.jobs.svc.example.local"
        == "demo-rdzv-store.jobs.svc.example.local"
    )
    assert (
        facts.lighthouse_host("demo")
        == f"{lighthouse_name('demo')}.jobs.svc.example.local"
        == "demo-lighthouse.jobs.svc.example.local"
    )

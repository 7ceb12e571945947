"""PlatformSettings: the stack's `platform` settings, every bad value named with its key,
value and what is expected, all at once; agreement with what the cluster fixes."""

from __future__ import annotations

import pytest

from components.aks.args import CHECKPOINT_AUTH_MODES
from components.cluster_info import TrainingIdentity
from components.platform.settings import CHECKPOINT_AUTH, PlatformSettings
from lab.vocab.job import CheckpointWrites
from lab.vocab.problems import InvalidInput
from tests.placements import AKS_PLACEMENT

DIGEST = "sha256:" + "a" * 64

BAD_SETTINGS = {
    "namespace-upper-case": (
        {"namespace": "Training"},
        r"platform.namespace='Training' is invalid: expected a DNS-1123 label",
    ),
    "namespace-kube-system": ({"namespace": "kube-system"}, r"platform.namespace='kube-system' is invalid"),
    "etcd-latest": ({"etcd": {"tag": "latest"}}, r"platform.etcd.tag='latest' is invalid: expected a v3.5.x tag"),
    "etcd-3.6": ({"etcd": {"tag": "v3.6.1"}}, r"platform.etcd.tag='v3.6.1'"),
    "operator-master": (
        {"operatorVersion": "master"},
        r"platform.operatorVersion='master' is invalid: expected a v1.9.x release tag",
    ),
    "operator-v2": ({"operatorVersion": "v2.1.0"}, r"platform.operatorVersion='v2.1.0'"),
    "workers-above-preserved": (
        {"priorityClasses": {"preemptible": {"value": 10**7}}},
        r"preserved >= inference > preemptible",
    ),
    "inference-above-preserved": (
        {"priorityClasses": {"inference": {"value": 2_000_000}}},
        r"platform.priorityClasses=\{'preserved': 1000000, 'inference': 2000000, .*preserved >= inference",
    ),
    "borrowed-at-the-workers-value": (
        {"priorityClasses": {"borrowed": {"value": 1000}}},
        r"'preemptible': 1000, 'borrowed': 1000\} is invalid: expected values with preserved >= inference > "
        r"preemptible > borrowed",
    ),
    "borrowed-named-as-the-workers": (
        {"priorityClasses": {"borrowed": {"name": "elastic-preemptible"}}},
        r"platform.priorityClasses.borrowed.name='elastic-preemptible' is invalid: expected a name no other class uses",
    ),
    "token-not-a-bool": (
        {"checkpoint": {"workloadIdentityToken": "yes"}},
        r"platform.checkpoint.workloadIdentityToken='yes' is invalid: expected true or false",
    ),
    "system-priority-name": (
        {"priorityClasses": {"preserved": {"name": "system-etcd"}}},
        r"platform.priorityClasses.preserved.name='system-etcd'",
    ),
    "priority-too-high": (
        {"priorityClasses": {"inference": {"value": 2_000_000_000}}},
        r"platform.priorityClasses.inference.value=2000000000",
    ),
    "negative-gpus": ({"gpusPerNode": -1}, r"platform.gpusPerNode=-1"),
    "device-plugin-maybe": ({"devicePlugin": "maybe"}, r"platform.devicePlugin='maybe'"),
    "size-lots": ({"checkpoint": {"size": "lots"}}, r"platform.checkpoint.size='lots'"),
    "checkpoint-typo": (
        {"checkpoint": {"sise": "1Gi"}},
        r"platform.checkpoint.sise='1Gi' is invalid: expected a known key",
    ),
    "notice-handler-sometimes": (
        {"spotNoticeHandler": {"enabled": "sometimes"}},
        r"platform.spotNoticeHandler.enabled='sometimes' is invalid: expected auto, true or false",
    ),
    "notice-handler-latest": (
        {"spotNoticeHandler": {"image": "ghcr.io/me/trainer:latest"}},
        r"platform.spotNoticeHandler.image='ghcr.io/me/trainer:latest' is invalid: expected a pinned image",
    ),
    "notice-handler-latest-with-digest": (
        {"spotNoticeHandler": {"image": f"ghcr.io/me/trainer:latest@{DIGEST}"}},
        r"platform.spotNoticeHandler.image='ghcr.io/me/trainer:latest@sha256:a+' is invalid: expected a pinned",
    ),
    "notice-handler-untagged": (
        {"spotNoticeHandler": {"image": "ghcr.io/me/trainer"}},
        r"platform.spotNoticeHandler.image='ghcr.io/me/trainer'",
    ),
    "notice-handler-short-digest": (
        {"spotNoticeHandler": {"image": "ghcr.io/me/trainer:1@sha256:abc"}},
        r"platform.spotNoticeHandler.image='ghcr.io/me/trainer:1@sha256:abc' is invalid",
    ),
    "notice-handler-project-image-by-digest": (
        {"spotNoticeHandler": {"image": f"ghcr.io/elastic-spot-lab/trainer@{DIGEST}"}},
        r"which nothing publishes",
    ),
    "notice-handler-typo": (
        {"spotNoticeHandler": {"enable": True}},
        r"platform.spotNoticeHandler.enable=True is invalid: expected a known key",
    ),
    "unknown-key": ({"etcdReplicas": 3}, r"platform.etcdReplicas=3 is invalid: expected a known key"),
}


@pytest.mark.parametrize("case", BAD_SETTINGS)
def test_settings_errors_name_key_value_expected(case):
    raw, message = BAD_SETTINGS[case]
    with pytest.raises(InvalidInput, match=message):
        PlatformSettings.from_config(raw)


CARRIED = {
    "etcd-tag": ({"etcd": {"tag": "latest"}}, "platform.etcd.tag", "latest"),
    "gpus": ({"gpusPerNode": -1}, "platform.gpusPerNode", -1),
    "typo": ({"checkpoint": {"sise": "1Gi"}}, "platform.checkpoint.sise", "1Gi"),
}


@pytest.mark.parametrize("case", CARRIED)
def test_settings_errors_carry_key_value_expected(case):
    raw, key, value = CARRIED[case]
    with pytest.raises(InvalidInput) as info:
        PlatformSettings.from_config(raw)
    [problem] = info.value.problems
    assert (problem.key, problem.value) == (key, value)
    assert problem.expected and str(info.value) == f"{key}={value!r} is invalid: expected {problem.expected}"


def test_every_bad_setting_is_reported_at_once():
    raw = {
        "namespace": "Training",
        "etcd": {"tag": "latest", "imag": "x"},
        "gpusPerNode": -1,
        "etcdReplicas": 3,
        "checkpoint": {"size": "lots"},
    }
    with pytest.raises(InvalidInput) as info:
        PlatformSettings.from_config(raw)
    assert sorted(p.key for p in info.value.problems) == [
        "platform.checkpoint.size",
        "platform.etcd.imag",
        "platform.etcd.tag",
        "platform.etcdReplicas",
        "platform.gpusPerNode",
        "platform.namespace",
    ]


def test_settings_from_json_text():
    s = PlatformSettings.from_config('{"namespace": "jobs", "priorityClasses": {"inference": {"name": "serving"}}}')
    assert s.namespace == "jobs" and s.priorities.inference.name == "serving"
    facts = s.facts(AKS_PLACEMENT, writes=CheckpointWrites.RENAME, eviction_notice_s=30)
    assert facts.etcd_host == "etcd-rendezvous.jobs.svc.cluster.local"


# ------------------------------------------------------------------ what the cluster fixes
def test_unset_names_follow_the_identity_the_storage_trusts():
    identity = TrainingIdentity("train", "worker")
    s = PlatformSettings.from_config({}, identity=identity, mount_with_token=False)
    assert (s.namespace, s.service_account, s.checkpoint.workload_identity_token) == ("train", "worker", False)
    with pytest.raises(InvalidInput, match=r"platform.namespace='training' is invalid: expected 'train'"):
        PlatformSettings.from_config({"namespace": "training"}, identity=identity)


@pytest.mark.parametrize("cluster_token", [False, True])
def test_checkpoint_auth_follows_the_cluster_unless_set(cluster_token):
    assert (
        PlatformSettings.from_config({}, mount_with_token=cluster_token).checkpoint.workload_identity_token
        is cluster_token
    )
    agreeing = {"checkpoint": {"workloadIdentityToken": cluster_token}}
    assert (
        PlatformSettings.from_config(agreeing, mount_with_token=cluster_token).checkpoint.workload_identity_token
        is cluster_token
    )


@pytest.mark.parametrize("cluster_token", [False, True])
def test_explicit_conflicting_checkpoint_auth_is_an_error_naming_both_keys(cluster_token):
    with pytest.raises(InvalidInput) as info:
        PlatformSettings.from_config(
            {"checkpoint": {"workloadIdentityToken": not cluster_token}}, mount_with_token=cluster_token
        )
    [problem] = info.value.problems
    assert (problem.key, problem.value) == ("platform.checkpoint.workloadIdentityToken", not cluster_token)
    mode = "workload-identity-token" if cluster_token else "workload-identity-key"
    assert f"elastic-spot-lab:checkpointAuth={mode!r}" in problem.expected


def test_checkpoint_auth_modes_match_the_cluster_component():
    assert sorted(CHECKPOINT_AUTH.values()) == sorted(CHECKPOINT_AUTH_MODES)


# (the handler's image, its repository, tag and digest): pinned by a tag, a digest, or both.
PINNED_IMAGES = {
    "tag": ("registry.local:5000/t:1.2", ("registry.local:5000/t", "1.2", None)),
    "tag-and-digest": (
        f"acr.azurecr.io/elastic-spot-lab/trainer:0123abc-dirty@{DIGEST}",
        ("acr.azurecr.io/elastic-spot-lab/trainer", "0123abc-dirty", DIGEST),
    ),
    "digest-alone": (f"registry.local:5000/t@{DIGEST}", ("registry.local:5000/t", None, DIGEST)),
}


@pytest.mark.parametrize("case", PINNED_IMAGES)
def test_a_pinned_handler_image_is_taken_in_its_parts(case):
    image, (repository, tag, digest) = PINNED_IMAGES[case]
    for raw, trainer_image in (({"spotNoticeHandler": {"image": image}}, None), ({}, image)):
        s = PlatformSettings.from_config(raw, trainer_image=trainer_image)
        assert s.notice_handler_enabled(notice_from_scheduled_events=True)
        parts = s.notice_handler_reference
        assert (parts.repository, parts.tag, parts.digest) == (repository, tag, digest)
        assert str(parts) == image


def test_notice_handler_settings():
    s = PlatformSettings.from_config({"spotNoticeHandler": {"enabled": True, "image": "registry.local:5000/t:1.2"}})
    assert s.notice_handler_enabled(notice_from_scheduled_events=False)
    off = PlatformSettings.from_config({"spotNoticeHandler": {"enabled": False}})
    assert not off.notice_handler_enabled(notice_from_scheduled_events=True)
    # Where the cluster needs it (auto), only once the trainer image is pushed: never with an
    # image nothing publishes.
    waiting = PlatformSettings()
    assert not waiting.notice_handler_enabled(notice_from_scheduled_events=True)
    assert waiting.notice_handler_waits(notice_from_scheduled_events=True)
    assert not waiting.notice_handler_waits(notice_from_scheduled_events=False)
    pushed = PlatformSettings.from_config({}, trainer_image="acr.azurecr.io/elastic-spot-lab/trainer:1")
    assert pushed.notice_handler_enabled(notice_from_scheduled_events=True)
    with pytest.raises(InvalidInput, match=r"spotNoticeHandler.image=None is invalid: expected the trainer image"):
        PlatformSettings.from_config({"spotNoticeHandler": {"enabled": True}})
    with pytest.raises(InvalidInput, match=r"which nothing publishes"):
        PlatformSettings.from_config({"spotNoticeHandler": {"image": "ghcr.io/elastic-spot-lab/trainer:0.1.0"}})

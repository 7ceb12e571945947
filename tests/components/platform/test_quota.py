"""The team's GPU quotas in the jobs' namespace: ResourceQuotas by PriorityClass, declared by
the platform under mocks and checked against the Kubernetes schemas."""

from __future__ import annotations

import pytest

from components.platform.settings import GpuQuota, PlatformSettings
from lab.plan.platform_checks import check_platforms
from lab.vocab.platform_facts import PlatformFacts
from lab.vocab.problems import InvalidInput
from tests.placements import TRAINER_IMAGE, aks_facts

from .test_component import declare_aks


def _quotas(recs) -> dict[str, dict]:
    return {r.inputs["metadata"]["name"]: r.inputs for r in recs if r.type == "kubernetes:core/v1:ResourceQuota"}


def test_the_team_share_and_its_borrowing_are_capped_by_priority_class(crd):
    settings = PlatformSettings(kubernetes_version="1.35", notice_handler_image=TRAINER_IMAGE, quota=GpuQuota(8, 4))
    recs = declare_aks(settings)
    quotas = _quotas(recs)
    assert set(quotas) == {"elastic-preemptible-gpus", "elastic-borrowed-gpus"}
    for name, (gpus, priority_class) in {
        "elastic-preemptible-gpus": ("8", "elastic-preemptible"),
        "elastic-borrowed-gpus": ("4", "elastic-borrowed"),
    }.items():
        assert quotas[name]["metadata"]["namespace"] == "training"
        assert quotas[name]["spec"] == {
            "hard": {"requests.nvidia.com/gpu": gpus},
            "scopeSelector": {
                "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": [priority_class]}]
            },
        }
    [report] = check_platforms(recs)
    assert [str(i) for i in report.items] == []
    assert "ResourceQuota" in {o["kind"] for o in report.objects}  # schema-checked with the rest


def test_no_quota_is_declared_unless_the_stack_sets_one():
    assert _quotas(declare_aks()) == {}
    only_share = PlatformSettings(kubernetes_version="1.35", notice_handler_image=TRAINER_IMAGE, quota=GpuQuota(8))
    assert set(_quotas(declare_aks(only_share))) == {"elastic-preemptible-gpus"}


@pytest.mark.parametrize(
    "quota,message",
    [
        ({"gpus": -1}, r"platform.quota.gpus=-1 is invalid: expected a whole number of GPUs >= 0"),
        (
            {"gpus": 2, "borrowedGpus": 1},
            r"platform.quota.borrowedGpus=1 is invalid: expected 0 or at least gpusPerNode",
        ),
        ({"gpus": "8"}, r"platform.quota.gpus='8' is invalid"),
        ({"gpu": 8}, r"platform.quota.gpu=8 is invalid: expected a known key: borrowedGpus, gpus"),
    ],
)
def test_a_quota_that_could_never_admit_a_worker_is_refused_naming_its_key(quota, message):
    with pytest.raises(InvalidInput, match=message):
        PlatformSettings.from_config({"gpusPerNode": 2, "quota": quota})


def test_a_gpu_quota_on_a_platform_without_gpus_is_refused():
    with pytest.raises(InvalidInput, match=r"platform.quota.gpus=4 is invalid: expected no GPU quota on a platform"):
        PlatformSettings.from_config({"gpusPerNode": 0, "quota": {"gpus": 4}})


def test_the_quotas_reach_the_jobs_facts():
    got = aks_facts(PlatformSettings.from_config({"quota": {"gpus": 8, "borrowedGpus": 16}}))
    assert (got.gpu_quota, got.borrowed_gpu_quota) == (8, 16)
    assert PlatformFacts.from_dict(got.as_dict()) == got
    assert (aks_facts().gpu_quota, aks_facts().borrowed_gpu_quota) == (None, None)

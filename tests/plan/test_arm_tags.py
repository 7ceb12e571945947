"""ARM's tag rules in the arm-conformance check: every azure-native resource's tags, inline
ones included, with the rule of lab.vocab.azure_tags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from pulumi_azure_native import resources

from lab.plan import arm
from lab.plan.check_list import findings_of, run_checks
from lab.program.harness import run_program
from lab.vocab.azure_tags import CLUSTER_TAG

RESOURCE_GROUP = ("azure-native:resources:ResourceGroup", "aks-rg")
IDENTITY = ("azure-native:managedidentity:UserAssignedIdentity", "aks-training")
ACCOUNT = ("azure-native:storage:StorageAccount", "aks-checkpoints")
CLUSTER = ("azure-native:containerservice:ManagedCluster", "aks")
POOL = ("azure-native:containerservice:AgentPool", "aks-gpu-spot")

OLD_CLUSTER_TAG = "elastic-spot-lab/cluster"  # what ARM refused with InvalidTagNameCharacters
LONG_NAME = "n" * 129  # over a storage account's 128, within everyone else's 512


@dataclass(frozen=True)
class Tagged:
    """Tags put on a recorded resource (at `path` inside its inputs when given, else its own)
    and fragments of the one finding expected, or none when ARM accepts them."""

    target: tuple[str, str]
    tags: dict[str, Any]
    fragments: tuple[str, ...] = ()
    path: tuple[str | int, ...] = ()


def _tags(n: int) -> dict[str, str]:
    return {f"tag{i}": "x" for i in range(n)}


CASES = {
    "slash-in-name-on-resource-group": Tagged(
        RESOURCE_GROUP,
        {OLD_CLUSTER_TAG: "x"},
        (
            "ERROR [arm-conformance] azure-native:resources:ResourceGroup 'aks-rg'",
            "tags['elastic-spot-lab/cluster']='elastic-spot-lab/cluster'",
            "a tag name without /",
        ),
    ),
    "slash-in-name-on-identity": Tagged(IDENTITY, {OLD_CLUSTER_TAG: "x"}, ("UserAssignedIdentity 'aks-training'",)),
    "slash-in-name-on-pool": Tagged(POOL, {OLD_CLUSTER_TAG: "x"}, ("properties.tags['elastic-spot-lab/cluster']",)),
    "slash-in-name-inline-in-cluster": Tagged(
        CLUSTER,
        {OLD_CLUSTER_TAG: "x"},
        ("ManagedCluster 'aks'", "properties.agentPoolProfiles[0].tags['elastic-spot-lab/cluster']", "without /"),
        path=("agentPoolProfiles", 0),
    ),
    "reserved-prefix": Tagged(RESOURCE_GROUP, {"Azure-owner": "x"}, ("tags['Azure-owner']", "Azure reserves them")),
    "question-mark": Tagged(ACCOUNT, {"who?": "x"}, ("tags['who?']", "without ?")),
    "value-too-long": Tagged(IDENTITY, {"note": "v" * 257}, ("tags['note']", "at most 256 characters")),
    "value-not-text": Tagged(IDENTITY, {"count": 3}, ("tags['count']=3", "a string")),
    "too-many": Tagged(RESOURCE_GROUP, _tags(51), ("tags='51 tags'", "at most 50")),
    "same-name-in-another-case": Tagged(RESOURCE_GROUP, {"Env": "a", "env": "b"}, ("tags['env']", "more than case")),
    "129-character-name-on-storage-account": Tagged(
        ACCOUNT, {LONG_NAME: "x"}, ("StorageAccount 'aks-checkpoints'", "at most 128 characters on a storage account")
    ),
    "129-character-name-on-resource-group": Tagged(RESOURCE_GROUP, {LONG_NAME: "x"}),
    "129-character-name-inline-in-cluster": Tagged(CLUSTER, {LONG_NAME: "x"}, path=("agentPoolProfiles", 0)),
    "513-character-name-on-resource-group": Tagged(RESOURCE_GROUP, {"n" * 513: "x"}, ("at most 512 characters",)),
    "the-projects-own-tags": Tagged(RESOURCE_GROUP, {CLUSTER_TAG: "esl-aks-dev", "environment": "dev"}),
    "fifty": Tagged(ACCOUNT, _tags(50)),
}


@pytest.mark.parametrize("case", CASES)
def test_tags(broken_plan, case):
    tagged = CASES[case]
    resource = broken_plan.one(*tagged.target)
    where: Any = resource.inputs
    for part in tagged.path:
        where = where[part]
    where["tags"] = tagged.tags
    messages = [str(f) for f in arm.check_resource(resource)]
    if not tagged.fragments:
        assert messages == []
        return
    assert len(messages) == 1, "\n".join(messages)
    assert all(f in messages[0] for f in tagged.fragments), messages[0]
    assert messages[0].startswith("ERROR [arm-conformance]") and "ARM's tag rules" in messages[0]


def test_a_finding_per_bad_tag(broken_plan):
    resource = broken_plan.one(*RESOURCE_GROUP)
    resource.inputs["tags"] = {OLD_CLUSTER_TAG: "x", "microsoftThing": "y", "fine": "z"}
    assert [f.property for f in arm.check_resource(resource)] == [
        "tags['elastic-spot-lab/cluster']",
        "tags['microsoftThing']",
    ]


def test_every_azure_native_resource_is_checked(broken_plan):
    """The check covers every azure-native resource of the plan, not only the modelled types."""
    for token, name in (RESOURCE_GROUP, IDENTITY, ACCOUNT, CLUSTER, POOL):
        broken_plan.one(token, name).inputs["tags"] = {OLD_CLUSTER_TAG: "x"}
    found = {f.resource for f in findings_of(run_checks(broken_plan, [arm.CHECK]))}
    assert found == {broken_plan.one(*t).label for t in (RESOURCE_GROUP, IDENTITY, ACCOUNT, CLUSTER, POOL)}
    assert {r.type for r in arm.tagged_resources(broken_plan)} > set(arm.TARGETS)


def test_bad_tag_through_the_real_pulumi_sdk():
    """A program that tags a resource group the way ARM refuses fails the plan's check."""

    def program():
        resources.ResourceGroup("bad", location="eastus", tags={OLD_CLUSTER_TAG: "x"})
        resources.ResourceGroup("good", location="eastus", tags={CLUSTER_TAG: "x"})

    plan = run_program("aks-dev", program=program)
    runs = run_checks(plan, [arm.CHECK])
    assert all(r.applied for r in runs)
    [finding] = findings_of(runs)
    assert str(finding).startswith(
        "ERROR [arm-conformance] azure-native:resources:ResourceGroup 'bad': "
        "tags['elastic-spot-lab/cluster']='elastic-spot-lab/cluster'"
    )

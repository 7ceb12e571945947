"""ARM conformance: every stack file, and broken variants that Azure would reject."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi
import pytest
from pulumi_azure_native import containerservice

from lab.plan import arm, arm_models
from lab.plan.check_list import findings_of, run_checks
from lab.plan.findings import errors
from lab.program.harness import run_program
from lab.program.stack_files import list_stacks, read_stack_config

from .conftest import AKS_STACKS, CLUSTER_CHECKS

GPU = ("azure-native:containerservice:AgentPool", "aks-gpu-spot")


def test_there_is_an_aks_stack():
    assert "aks-dev" in AKS_STACKS


@pytest.mark.parametrize("stack", list_stacks())
def test_every_stack_plans_and_passes_its_checks(stack):
    """Every stacks/Pulumi.*.yaml: the program runs offline and none of the cluster checks
    fails. They must apply to AKS stacks; other clouds skip what does not apply. (The whole
    list, the platform's checks included, runs in test_cli.py through the command.)"""
    plan = run_program(stack)
    runs = run_checks(plan, CLUSTER_CHECKS)
    assert not errors(findings_of(runs)), "\n".join(map(str, errors(findings_of(runs))))
    applied = {r.name for r in runs if r.applied}
    cloud = read_stack_config(stack)[0].get("elastic-spot-lab:cloud")
    if cloud == "aks":
        assert set(CLUSTER_CHECKS) <= applied
        checked = arm.checked_resources(plan)
        assert {r.type for r in checked} == set(arm.TARGETS), "every mapped type is declared and checked"
    else:
        assert "arm-conformance" not in applied or arm.checked_resources(plan)


@pytest.mark.parametrize("token", sorted(arm.TARGETS))
def test_targets_match_the_sdk_operations(token):
    """The body model and path parameters of each mapping are the SDK's own PUT operation's."""
    target = arm.TARGETS[token]
    op = arm.sdk_operation(target)
    params = inspect.signature(op).parameters
    for wire in target.path_params:
        assert arm_models.snake(wire) in params, f"{wire} is not a path parameter of {target.operation}"
    model = getattr(arm.sdk_models(target.sdk), target.model)
    assert any(target.model in str(p.annotation) for p in params.values()), (
        f"{target.operation} takes no {target.model}"
    )
    assert arm_models.fields_of(model), "model has fields"
    # and the Pulumi resource really takes those path parameters as inputs
    resource = target.pulumi_resource
    assert f"{resource.__module__.split('.')[1]}:{resource.__name__}" == token.split(":", 1)[1]
    args_cls = getattr(sys.modules[resource.__module__], f"{resource.__name__}Args")
    init = inspect.signature(args_cls.__init__).parameters
    for wire in target.path_params:
        assert arm_models.snake(wire) in init or arm_models.snake(wire) + "_" in init


def test_api_versions_are_reported():
    versions = arm.api_versions()
    assert versions["azure-native:containerservice:AgentPool"]["pulumi"] == "2025-09-01"  # FACTS.md, AKS
    assert all(v["models"].split()[0] != "unknown" for v in versions.values())


@pytest.mark.parametrize("token", sorted(arm.TARGETS))
def test_models_are_at_the_api_version_pulumi_sends(token):
    """The models describe the API version Azure receives: an upgrade of pulumi-azure-native
    that moves a resource to another API version fails here until the azure-mgmt pin in
    pyproject's infra extra moves with it."""
    versions = arm.api_versions()[token]
    assert versions["pulumi"] != "unknown", f"no 'Uses Azure REST API version' in {token}'s docstring"
    assert versions["models_api"] == versions["pulumi"], (
        f"{token}: Pulumi sends API {versions['pulumi']}, the models are {versions['models']}"
    )
    assert arm.version_mismatch(token) is None


def test_models_at_another_api_version_are_reported(broken_plan, monkeypatch):
    """Were the two ever to differ, every finding says so and a warning names both versions."""
    monkeypatch.setattr(arm, "pulumi_api_version", lambda token: "2024-02-01")
    resource = broken_plan.one(*GPU)
    resource.inputs["scaleSetPriority"] = "Cheap"
    warning, error = arm.check_resource(resource)
    models_api = arm.sdk_api_version("containerservice")
    assert warning.severity == "warning" and warning.property == "<api-version>" and warning.value == "2024-02-01"
    assert f"carries {models_api}" in warning.expected and "vouched for" in warning.expected
    assert (
        error.severity == "error" and f"[API {models_api} model AgentPool; Pulumi sends 2024-02-01]" in error.expected
    )


def test_arm_body_renests_properties_and_renames_client_names(aks_plan):
    body, issues = arm.arm_body(*_inputs(aks_plan, *GPU))
    assert not issues
    assert set(body) == {"properties"} and body["properties"]["scaleSetPriority"] == "Spot"
    sa = aks_plan.one("azure-native:storage:StorageAccount")
    body, issues = arm.arm_body(sa.type, sa.inputs)
    assert not issues
    # Pulumi's enableHttpsTrafficOnly is ARM's supportsHttpsTrafficOnly (x-ms-client-name).
    assert body["properties"]["supportsHttpsTrafficOnly"] is True and "enableHttpsTrafficOnly" not in body["properties"]
    assert {"location", "sku", "kind", "properties"} <= set(body) and "accountName" not in body
    mc = aks_plan.one("azure-native:containerservice:ManagedCluster")
    body, issues = arm.arm_body(mc.type, mc.inputs)
    assert not issues
    assert body["properties"]["storageProfile"] == {"blobCSIDriver": {"enabled": True}}
    assert list(body["identity"]["userAssignedIdentities"].values()) == [{}]  # ARM's map form


def _inputs(plan, token, name):
    return token, plan.one(token, name).inputs


def _findings(resource):
    return [str(f) for f in arm.check_resource(resource)]


MC = ("azure-native:containerservice:ManagedCluster", "aks")
ACCOUNT = ("azure-native:storage:StorageAccount", "aks-checkpoints")
CONTAINER = ("azure-native:storage:BlobContainer", "aks-checkpoints-container")
MAINTENANCE = (
    "azure-native:containerservice:MaintenanceConfiguration",
    "aks-maintenance-aksManagedAutoUpgradeSchedule",
)
Change = Callable[[dict[str, Any]], None]


def setting(*path: str | int, **values: Any) -> Change:
    """Set `values` in the inputs, inside `path` (keys and list indexes) when given."""

    def change(inputs: dict[str, Any]) -> None:
        target: Any = inputs
        for part in path:
            target = target[part]
        target.update(values)

    return change


def dropping(key: str) -> Change:
    def change(inputs: dict[str, Any]) -> None:
        inputs.pop(key)

    return change


@dataclass(frozen=True)
class Rejected:
    """Inputs Azure would reject: the resource, the change, and fragments of the finding."""

    target: tuple[str, str]
    change: Change
    fragments: tuple[str, ...]


BROKEN = {
    "pool-priority-cheap": Rejected(
        GPU,
        setting(scaleSetPriority="Cheap"),
        ("AgentPool 'aks-gpu-spot'", "properties.scaleSetPriority='Cheap'", "one of Spot, Regular (ScaleSetPriority)"),
    ),
    "pool-eviction-remove": Rejected(
        GPU,
        setting(scaleSetEvictionPolicy="Remove"),
        ("properties.scaleSetEvictionPolicy='Remove'", "one of Delete, Deallocate"),
    ),
    "pool-misspelt-taints": Rejected(
        GPU,
        setting(nodeTaint=["a=b:NoSchedule"]),
        ("nodeTaint=['a=b:NoSchedule']", "unknown property", "did you mean nodeTaints"),
    ),
    "pool-count-as-text": Rejected(GPU, setting(maxCount="3"), ("properties.maxCount='3'", "an integer")),
    "pool-autoscaling-as-text": Rejected(
        GPU, setting(enableAutoScaling="true"), ("properties.enableAutoScaling='true'", "a boolean")
    ),
    "pool-labels-as-list": Rejected(GPU, setting(nodeLabels=["a"]), ("properties.nodeLabels=['a']", "an object")),
    "pool-gpu-profile-typo": Rejected(
        GPU,
        setting(gpuProfile={"driver": "Install", "drivr": "x"}),
        ("properties.gpuProfile.drivr='x'", "a property of GPUProfile"),
    ),
    "pool-gpu-driver-latest": Rejected(
        GPU, setting(gpuProfile={"driver": "Latest"}), ("properties.gpuProfile.driver='Latest'", "one of Install, None")
    ),
    "pool-surge-as-number": Rejected(
        GPU, setting(upgradeSettings={"maxSurge": 1}), ("properties.upgradeSettings.maxSurge=1", "a string")
    ),
    "cluster-pool-mode-primary": Rejected(
        MC,
        setting("agentPoolProfiles", 0, mode="Primary"),
        ("ManagedCluster 'aks'", "properties.agentPoolProfiles[0].mode='Primary'", "one of System, User"),
    ),
    "cluster-blob-driver-case": Rejected(
        MC,
        setting("storageProfile", blobCsiDriver={"enabled": True}),
        ("properties.storageProfile.blobCsiDriver", "did you mean blobCSIDriver"),
    ),
    "cluster-dataplane-ebpf": Rejected(
        MC,
        setting("networkProfile", networkDataplane="ebpf"),
        ("properties.networkProfile.networkDataplane='ebpf'", "one of azure, cilium"),
    ),
    "cluster-policy-kube-router": Rejected(
        MC,
        setting("networkProfile", networkPolicy="kube-router"),
        ("properties.networkProfile.networkPolicy='kube-router'", "cilium"),
    ),
    "cluster-without-location": Rejected(
        MC, dropping("location"), ("location=None", "location is required in ManagedCluster")
    ),
    "cluster-tier-gold": Rejected(
        MC, setting(sku={"name": "Base", "tier": "Gold"}), ("sku.tier='Gold'", "Premium, Standard, Free")
    ),
    "account-kind-v3": Rejected(
        ACCOUNT, setting(kind="StorageV3"), ("StorageAccount 'aks-checkpoints'", "kind='StorageV3'", "StorageV2")
    ),
    "account-https-only-typo": Rejected(ACCOUNT, setting(httpsOnly=True), ("httpsOnly=True", "unknown property")),
    "account-tls-dotted": Rejected(
        ACCOUNT, setting(minimumTlsVersion="TLS1.2"), ("properties.minimumTlsVersion='TLS1.2'", "TLS1_2")
    ),
    "maintenance-day-abbreviated": Rejected(
        MAINTENANCE,
        setting("maintenanceWindow", "schedule", "weekly", dayOfWeek="Sun"),
        (
            "MaintenanceConfiguration 'aks-maintenance-aksManagedAutoUpgradeSchedule'",
            "properties.maintenanceWindow.schedule.weekly.dayOfWeek='Sun'",
            "Sunday",
        ),
    ),
    "container-access-private": Rejected(
        CONTAINER,
        setting(publicAccess="Private"),
        ("properties.publicAccess='Private'", "one of Container, Blob, None"),
    ),
}


@pytest.mark.parametrize("case", BROKEN)
def test_broken_variant_fails_with_a_clear_message(broken_plan, case):
    rejected = BROKEN[case]
    resource = broken_plan.one(*rejected.target)
    rejected.change(resource.inputs)
    messages = _findings(resource)
    errs = [m for m in messages if m.startswith("ERROR")]
    assert errs, f"no error for {rejected.fragments}"
    assert any(all(f in m for f in rejected.fragments) for m in errs), "\n".join(messages)
    assert all("[arm-conformance]" in m and "expected" in m for m in errs)


def test_case_only_enum_difference_is_a_warning(broken_plan):
    resource = broken_plan.one(*GPU)
    resource.inputs["scaleSetPriority"] = "spot"
    [finding] = arm.check_resource(resource)
    assert finding.severity == "warning" and "differs in case only" in finding.expected


def test_read_only_property_is_a_warning(broken_plan):
    resource = broken_plan.one(*GPU)
    resource.inputs["provisioningState"] = "Succeeded"
    [finding] = arm.check_resource(resource)
    assert finding.severity == "warning" and finding.property == "properties.provisioningState"


def test_unmapped_resource_type_is_an_error(broken_plan):
    resource = broken_plan.one(*GPU)
    resource.type = "azure-native:containerservice:Snapshot"
    [finding] = arm.check_resource(resource)
    assert finding.severity == "error" and "TARGETS" in finding.expected


def test_wrong_enum_through_the_real_pulumi_sdk():
    """A program that passes a wrong enum through the Pulumi SDK fails the plan's check."""

    def program():
        containerservice.AgentPool(
            "bad",
            resource_group_name="rg",
            resource_name_="cluster",
            agent_pool_name="gpu",
            vm_size="Standard_NC4as_T4_v3",
            mode="User",
            scale_set_priority="Low",  # the 2019 name; ARM wants Spot
            scale_set_eviction_policy="Delete",
            count=0,
            opts=pulumi.ResourceOptions(ignore_changes=["count"]),
        )

    plan = run_program("aks-dev", program=program)
    runs = run_checks(plan, ["arm-conformance"])
    [finding] = findings_of(runs)
    assert str(finding).startswith(
        "ERROR [arm-conformance] azure-native:containerservice:AgentPool 'bad': properties.scaleSetPriority='Low'"
    )
    assert "one of Spot, Regular" in finding.expected

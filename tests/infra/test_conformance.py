"""ARM conformance: every stack file, and broken variants that Azure would reject."""

from __future__ import annotations

import inspect

import pulumi
import pytest
from pulumi_azure_native import containerservice

from lab.plan import arm
from lab.plan.checks import errors, findings_of, run_checks
from lab.plan.harness import list_stacks, read_stack_config, run_program

from .conftest import AKS_STACKS, OUR_CHECKS

GPU = ("azure-native:containerservice:AgentPool", "aks-gpu-spot")


def test_there_is_an_aks_stack():
    assert "aks-dev" in AKS_STACKS


@pytest.mark.parametrize("stack", list_stacks())
def test_every_stack_plans_and_passes_its_checks(stack):
    """Every stacks/Pulumi.*.yaml: the program runs offline and none of this issue's checks
    fails. They must apply to AKS stacks; other clouds skip what does not apply. (The whole
    registry, other issues' checks included, runs in test_plan_cli.py through the command.)"""
    plan = run_program(stack)
    runs = run_checks(plan, OUR_CHECKS)
    assert not errors(findings_of(runs)), "\n".join(map(str, errors(findings_of(runs))))
    applied = {r.name for r in runs if r.applied}
    cloud = read_stack_config(stack)[0].get("elastic-spot-lab:cloud")
    if cloud == "aks":
        assert set(OUR_CHECKS) <= applied
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
        assert arm.snake(wire) in params, f"{wire} is not a path parameter of {target.operation}"
    model = getattr(arm.sdk_models(target.sdk), target.model)
    assert any(target.model in str(p.annotation) for p in params.values()), f"{target.operation} takes no {target.model}"
    assert arm.fields_of(model), "model has fields"
    # and the Pulumi resource really takes those path parameters as inputs
    _, module, name = token.split(":")
    import importlib

    args_cls = getattr(importlib.import_module(f"pulumi_azure_native.{module}"), f"{name}Args")
    init = inspect.signature(args_cls.__init__).parameters
    for wire in target.path_params:
        assert arm.snake(wire) in init or arm.snake(wire) + "_" in init


def test_api_versions_are_reported():
    versions = arm.api_versions()
    assert versions["azure-native:containerservice:AgentPool"]["pulumi"] == "2025-09-01"  # FACTS.md, AKS
    assert all(v["models"].split()[0] != "unknown" for v in versions.values())


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


BROKEN = [
    # (resource, mutation, expected fragments)
    (GPU, lambda i: i.update(scaleSetPriority="Cheap"),
     ["AgentPool 'aks-gpu-spot'", "properties.scaleSetPriority='Cheap'", "one of Spot, Regular (ScaleSetPriority)"]),
    (GPU, lambda i: i.update(scaleSetEvictionPolicy="Remove"),
     ["properties.scaleSetEvictionPolicy='Remove'", "one of Delete, Deallocate"]),
    (GPU, lambda i: i.update(nodeTaint=["a=b:NoSchedule"]),
     ["nodeTaint=['a=b:NoSchedule']", "unknown property", "did you mean nodeTaints"]),
    (GPU, lambda i: i.update(maxCount="3"), ["properties.maxCount='3'", "an integer"]),
    (GPU, lambda i: i.update(enableAutoScaling="true"), ["properties.enableAutoScaling='true'", "a boolean"]),
    (GPU, lambda i: i.update(nodeLabels=["a"]), ["properties.nodeLabels=['a']", "an object"]),
    (GPU, lambda i: i.update(gpuProfile={"driver": "Install", "drivr": "x"}),
     ["properties.gpuProfile.drivr='x'", "a property of GPUProfile"]),
    (GPU, lambda i: i.update(gpuProfile={"driver": "Latest"}), ["properties.gpuProfile.driver='Latest'", "one of Install, None"]),
    (GPU, lambda i: i.update(upgradeSettings={"maxSurge": 1}), ["properties.upgradeSettings.maxSurge=1", "a string"]),
    (("azure-native:containerservice:ManagedCluster", "aks"),
     lambda i: i["agentPoolProfiles"][0].update(mode="Primary"),
     ["ManagedCluster 'aks'", "properties.agentPoolProfiles[0].mode='Primary'", "one of System, User"]),
    (("azure-native:containerservice:ManagedCluster", "aks"),
     lambda i: i["storageProfile"].update(blobCsiDriver={"enabled": True}),
     ["properties.storageProfile.blobCsiDriver", "did you mean blobCSIDriver"]),
    (("azure-native:containerservice:ManagedCluster", "aks"), lambda i: i["networkProfile"].update(networkDataplane="ebpf"),
     ["properties.networkProfile.networkDataplane='ebpf'", "one of azure, cilium"]),
    (("azure-native:containerservice:ManagedCluster", "aks"), lambda i: i["networkProfile"].update(networkPolicy="kube-router"),
     ["properties.networkProfile.networkPolicy='kube-router'", "cilium"]),
    (("azure-native:containerservice:ManagedCluster", "aks"), lambda i: i.pop("location"),
     ["location=None", "location is required in ManagedCluster"]),
    (("azure-native:containerservice:ManagedCluster", "aks"), lambda i: i.update(sku={"name": "Base", "tier": "Gold"}),
     ["sku.tier='Gold'", "Premium, Standard, Free"]),
    (("azure-native:storage:StorageAccount", "aks-checkpoints"), lambda i: i.update(kind="StorageV3"),
     ["StorageAccount 'aks-checkpoints'", "kind='StorageV3'", "StorageV2"]),
    (("azure-native:storage:StorageAccount", "aks-checkpoints"), lambda i: i.update(httpsOnly=True),
     ["httpsOnly=True", "unknown property"]),
    (("azure-native:storage:StorageAccount", "aks-checkpoints"), lambda i: i.update(minimumTlsVersion="TLS1.2"),
     ["properties.minimumTlsVersion='TLS1.2'", "TLS1_2"]),
    (("azure-native:storage:BlobContainer", "aks-checkpoints-container"), lambda i: i.update(publicAccess="Private"),
     ["properties.publicAccess='Private'", "one of Container, Blob, None"]),
]


@pytest.mark.parametrize("target,mutate,fragments", BROKEN, ids=[" ".join(b[2][:2]) for b in BROKEN])
def test_broken_variant_fails_with_a_clear_message(broken_plan, target, mutate, fragments):
    resource = broken_plan.one(*target)
    mutate(resource.inputs)
    messages = _findings(resource)
    errs = [m for m in messages if m.startswith("ERROR")]
    assert errs, f"no error for {fragments}"
    assert any(all(f in m for f in fragments) for m in errs), "\n".join(messages)
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
    resource.type = "azure-native:containerservice:MaintenanceConfiguration"
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
    assert str(finding).startswith("ERROR [arm-conformance] azure-native:containerservice:AgentPool 'bad': properties.scaleSetPriority='Low'")
    assert "one of Spot, Regular" in finding.expected

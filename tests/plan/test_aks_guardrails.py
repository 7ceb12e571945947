"""Our guardrails: the real plan passes; a broken variant of each fails, naming resource,
property, value and what was expected."""

from __future__ import annotations

import pulumi
import pytest

from components.aks.node_pools import AKS_SPOT_LABEL, AKS_SPOT_TAINT
from lab.plan.check_list import CHECKS, UnknownCheck, check_names, findings_of, run_checks
from lab.plan.findings import Finding, errors, single
from lab.program.harness import run_program
from lab.vocab import pools as labels

from .conftest import CLUSTER_CHECKS

MC = ("azure-native:containerservice:ManagedCluster", "aks")
GPU = ("azure-native:containerservice:AgentPool", "aks-gpu-spot")
CPU = ("azure-native:containerservice:AgentPool", "aks-cpu")
RANK2 = ("azure-native:containerservice:AgentPool", "aks-gpu-spot-rank2")
RANK3 = ("azure-native:containerservice:AgentPool", "aks-gpu-spot-rank3")
PRIORITIES = ("kubernetes:core/v1:ConfigMap", "aks-gpu-priorities")
SA = ("azure-native:storage:StorageAccount", "aks-checkpoints")


def _errors(plan, check):
    return [str(f) for f in errors(findings_of(run_checks(plan, [check])))]


def test_the_real_plan_passes_every_guardrail(aks_plan):
    runs = run_checks(aks_plan, CLUSTER_CHECKS)
    assert all(r.applied for r in runs)
    assert findings_of(runs) == []


def _set(path, value):
    def mutate(plan):
        *where, key = path
        r = plan.one(*where[:2])
        target = r.inputs
        for k in where[2:]:
            target = target[k]
        if value is _DELETE:
            target.pop(key, None)
        else:
            target[key] = value

    return mutate


_DELETE = object()


def _gpu_without(taint):
    def mutate(plan):
        r = plan.one(*GPU)
        r.inputs["nodeTaints"] = [t for t in r.inputs["nodeTaints"] if t != taint]

    return mutate


def _no_ignore(plan):
    plan.one(*CPU).ignore_changes = []


def _storage_in_node_rg(plan):
    plan.one(*SA).inputs["resourceGroupName"] = plan.one(*MC).inputs["nodeResourceGroup"]


def _plain_kubeconfig(plan):
    plan.secret_outputs = []


def _no_gpu_pool(plan):
    plan.resources = [r for r in plan.resources if not r.name.startswith("aks-gpu-spot")]


def _priorities(text):
    def mutate(plan):
        plan.one(*PRIORITIES).inputs["data"]["priorities"] = text

    return mutate


def _no_priorities(plan):
    plan.resources = [r for r in plan.resources if r.name != PRIORITIES[1]]


def _untolerated_taint_on_rank3(plan):
    plan.one(*RANK3).inputs["nodeTaints"].append("dedicated=batch:NoSchedule")


def _no_cpu_pool(plan):
    plan.resources = [r for r in plan.resources if r.name != "aks-cpu"]


def _parallel_pools(plan):
    gpu, cpu = plan.one(*GPU), plan.one(*CPU)
    gpu.depends_on = [u for u in gpu.depends_on if u != cpu.urn]
    gpu.dependencies = [u for u in gpu.dependencies if u != cpu.urn]


def _forgets(type_name):
    def mutate(plan):
        for r in plan.of_type(type_name):
            r.retain_on_delete = False

    return mutate


def _no_window(config):
    def mutate(plan):
        plan.resources = [r for r in plan.resources if r.inputs.get("configName") != config]

    return mutate


BROKEN = [
    # id, check, mutation, fragments of the error message
    (
        "pools created in parallel",
        "guardrail:pool-operations",
        _parallel_pools,
        ["AgentPool 'aks-gpu-spot'", "options.depends_on=[]", "a dependency on 'aks-cpu'", "409"],
    ),
    (
        "checkpoint account deleted on destroy",
        "guardrail:checkpoints-kept",
        _forgets("azure-native:storage:StorageAccount"),
        ["StorageAccount 'aks-checkpoints'", "options.retain_on_delete=False", "would delete the checkpoints"],
    ),
    (
        "checkpoint container deleted on destroy",
        "guardrail:checkpoints-kept",
        _forgets("azure-native:storage:BlobContainer"),
        ["BlobContainer 'aks-checkpoints-container'", "options.retain_on_delete=False"],
    ),
    (
        "checkpoint resource group deleted on destroy",
        "guardrail:checkpoints-kept",
        _forgets("azure-native:resources:ResourceGroup"),
        ["ResourceGroup 'aks-rg'", "options.retain_on_delete=False"],
    ),
    (
        "no node-image window",
        "guardrail:maintenance-window",
        _no_window("aksManagedNodeOSUpgradeSchedule"),
        [
            "ManagedCluster 'aks'",
            "autoUpgradeProfile.nodeOSUpgradeChannel='NodeImage'",
            "aksManagedNodeOSUpgradeSchedule",
        ],
    ),
    (
        "no auto-upgrade window",
        "guardrail:maintenance-window",
        _no_window("aksManagedAutoUpgradeSchedule"),
        ["autoUpgradeProfile.upgradeChannel='patch'", "drain the etcd rendezvous"],
    ),
    (
        "spot system pool",
        "guardrail:on-demand-pools",
        _set((*MC, "agentPoolProfiles", 0, "scaleSetPriority"), "Spot"),
        [
            "ManagedCluster 'aks'",
            "agentPoolProfiles[0].scaleSetPriority='Spot'",
            "'Regular' (a System pool cannot be spot",
        ],
    ),
    (
        "spot system pool is not User",
        "guardrail:spot-pool",
        _set((*MC, "agentPoolProfiles", 0, "scaleSetPriority"), "Spot"),
        ["agentPoolProfiles[0].mode='System'", "'User' (a spot pool cannot be the system pool)"],
    ),
    (
        "spot cpu pool",
        "guardrail:on-demand-pools",
        _set((*CPU, "scaleSetPriority"), "Spot"),
        ["AgentPool 'aks-cpu'", "scaleSetPriority='Spot'", "'Regular' (the cpu pool hosts etcd"],
    ),
    (
        "gpu pool on-demand",
        "guardrail:gpu-capacity-ranks",
        _set((*GPU, "scaleSetPriority"), "Regular"),
        ["AgentPool 'aks-gpu-spot'", "capacity='on-demand'", "spot: rank 1"],
    ),
    (
        "on-demand rank above a spot rank",
        "guardrail:gpu-capacity-ranks",
        _set((*RANK2, "scaleSetPriority"), "Regular"),
        ["AgentPool 'aks-gpu-spot-rank2'", "an on-demand rank goes last"],
    ),
    (
        "two pools of one rank",
        "guardrail:gpu-capacity-ranks",
        _set((*RANK3, "nodeLabels", "elastic-spot-lab/gpu-rank"), "2"),
        ["AgentPool 'aks-gpu-spot-rank3'", "a rank of its own (gpuspot2 has rank 2)"],
    ),
    (
        "ranks picked at random",
        "guardrail:gpu-capacity-ranks",
        _set((*MC, "autoScalerProfile", "expander"), "random"),
        ["ManagedCluster 'aks'", "autoScalerProfile.expander='random'", "'priority'"],
    ),
    (
        "the autoscaler waits 15 min for a node",
        "guardrail:gpu-capacity-ranks",
        _set((*MC, "autoScalerProfile", "maxNodeProvisionTime"), "15m"),
        ["autoScalerProfile.maxNodeProvisionTime='15m'", "under 15 min"],
    ),
    (
        "no priority expander ConfigMap",
        "guardrail:gpu-capacity-ranks",
        _no_priorities,
        ["ConfigMap kube-system/cluster-autoscaler-priority-expander", "ranking the GPU pools"],
    ),
    (
        "ranks out of order",
        "guardrail:gpu-capacity-ranks",
        _priorities("30:\n  - '^aks-gpuspot2-[0-9]+-vmss$'\n20:\n  - '^aks-gpuspot-[0-9]+-vmss$'\n"),
        ["ConfigMap 'aks-gpu-priorities'", "a priority for 'aks-gpuspot2-12345678-vmss' (rank 2) below rank 1's"],
    ),
    (
        "no catch-all priority",
        "guardrail:gpu-capacity-ranks",
        _priorities(
            "30:\n  - '^aks-gpuspot-[0-9]+-vmss$'\n20:\n  - '^aks-gpuspot2-[0-9]+-vmss$'\n"
            "10:\n  - '^aks-gpuondemand-[0-9]+-vmss$'\n"
        ),
        ["a catch-all pattern ('.*') below every GPU rank"],
    ),
    (
        "a rank the workers do not tolerate",
        "guardrail:gpu-capacity-ranks",
        _untolerated_taint_on_rank3,
        ["AgentPool 'aks-gpu-spot-rank3'", "dedicated=batch:NoSchedule keeps them off rank 3"],
    ),
    (
        "eviction deallocate",
        "guardrail:spot-pool",
        _set((*GPU, "scaleSetEvictionPolicy"), "Deallocate"),
        ["scaleSetEvictionPolicy='Deallocate'", "'Delete'"],
    ),
    (
        "no eviction policy",
        "guardrail:spot-pool",
        _set((*GPU, "scaleSetEvictionPolicy"), _DELETE),
        ["scaleSetEvictionPolicy=None", "'Delete'"],
    ),
    (
        "untainted spot pool",
        "guardrail:spot-pool",
        _gpu_without(AKS_SPOT_TAINT.text()),
        [
            "nodeTaints=['nvidia.com/gpu=present:NoSchedule']",
            "kubernetes.azure.com/scalesetpriority=spot:NoSchedule",
            "perpetual diff",
        ],
    ),
    (
        "spot label undeclared",
        "guardrail:spot-pool",
        _set((*GPU, "nodeLabels", AKS_SPOT_LABEL), _DELETE),
        ["nodeLabels.kubernetes.azure.com/scalesetpriority=None", "'spot'"],
    ),
    (
        "maxSurge on spot",
        "guardrail:spot-pool",
        _set((*GPU, "upgradeSettings"), {"maxSurge": "1"}),
        ["upgradeSettings.maxSurge='1'", "AKS rejects maxSurge on spot pools"],
    ),
    (
        "no max price",
        "guardrail:spot-pool",
        _set((*GPU, "spotMaxPrice"), _DELETE),
        ["spotMaxPrice=None", "-1 set explicitly"],
    ),
    (
        "gpu pool cannot reach zero",
        "guardrail:gpu-pool",
        _set((*GPU, "minCount"), 1),
        ["minCount=1", "0 (the GPU pool must be able to scale to zero)"],
    ),
    (
        "gpu pool not autoscaled",
        "guardrail:gpu-pool",
        _set((*GPU, "enableAutoScaling"), False),
        ["enableAutoScaling=False", "True"],
    ),
    (
        "gpu pool without device-plugin label",
        "guardrail:gpu-pool",
        _set((*GPU, "nodeLabels", labels.NVIDIA_GPU_PRESENT_LABEL), _DELETE),
        ["nodeLabels.nvidia.com/gpu.present=None", "NVIDIA device plugin"],
    ),
    (
        "gpu pool without gpu taint",
        "guardrail:gpu-pool",
        _gpu_without(labels.GPU_TAINT.text()),
        ["nvidia.com/gpu=present:NoSchedule", "only GPU workloads"],
    ),
    ("no gpu pool", "guardrail:gpu-pool", _no_gpu_pool, ["elastic-spot-lab/pool", "gpu-spot"]),
    (
        "no cpu pool",
        "guardrail:on-demand-pools",
        _no_cpu_pool,
        [
            "ManagedCluster 'aks'",
            "nodeLabels.elastic-spot-lab/pool=None",
            "one on-demand pool labelled elastic-spot-lab/pool=cpu (etcd, operator, launchers)",
        ],
    ),
    (
        "no network policy engine",
        "guardrail:network-policy",
        _set((*MC, "networkProfile", "networkPolicy"), _DELETE),
        ["ManagedCluster 'aks'", "networkProfile.networkPolicy=None", "a network policy engine", "enforces none"],
    ),
    (
        "network policy none",
        "guardrail:network-policy",
        _set((*MC, "networkProfile", "networkPolicy"), "none"),
        ["networkProfile.networkPolicy='none'", "a network policy engine"],
    ),
    (
        "no network profile",
        "guardrail:network-policy",
        _set((*MC, "networkProfile"), _DELETE),
        ["networkProfile.networkPolicy=None"],
    ),
    (
        "cilium policy without cilium dataplane",
        "guardrail:network-policy",
        _set((*MC, "networkProfile", "networkDataplane"), "azure"),
        [
            "networkProfile.networkDataplane='azure'",
            "'cilium' (networkPolicy 'cilium' is enforced by the Cilium dataplane",
        ],
    ),
    (
        "autoscaled count not ignored",
        "guardrail:autoscaled-count",
        _no_ignore,
        ["AgentPool 'aks-cpu'", "options.ignore_changes=[]", "to contain 'count'"],
    ),
    (
        "blob csi off",
        "guardrail:cluster-features",
        _set((*MC, "storageProfile", "blobCSIDriver", "enabled"), False),
        ["storageProfile.blobCSIDriver.enabled=False", "True (the AKS-managed Blob CSI driver"],
    ),
    (
        "no oidc issuer",
        "guardrail:cluster-features",
        _set((*MC, "oidcIssuerProfile"), _DELETE),
        ["oidcIssuerProfile.enabled=None", "OIDC issuer"],
    ),
    (
        "no workload identity",
        "guardrail:cluster-features",
        _set((*MC, "securityProfile"), {}),
        ["securityProfile.workloadIdentity.enabled=None", "workload identity"],
    ),
    (
        "storage in node resource group",
        "guardrail:storage-outside-node-rg",
        _storage_in_node_rg,
        ["StorageAccount 'aks-checkpoints'", "resourceGroupName='MC_esl-aks-dev-rg_esl-aks-dev_eastus'", "deletes it"],
    ),
    (
        "registry with an admin password",
        "guardrail:image-registry",
        _set(("azure-native:containerregistry:Registry", "aks-registry", "adminUserEnabled"), True),
        ["Registry 'aks-registry'", "adminUserEnabled=True", "no shared password"],
    ),
    (
        "kubelet cannot pull from the registry",
        "guardrail:image-registry",
        _set(("azure-native:authorization:RoleAssignment", "aks-registry-kubelet-pull", "principalId"), "someone-else"),
        ["Registry 'aks-registry'", "roleAssignments=['someone-else']", "for the cluster's kubelet identity"],
    ),
    (
        "spot price cap below the spot price",
        "cost:priced",
        _set((*GPU, "spotMaxPrice"), 0.01),
        ["AgentPool 'aks-gpu-spot'", "spotMaxPrice=0.01", "below the spot price the pool gets no node"],
    ),
    (
        "plain kubeconfig output",
        "guardrail:no-plain-secrets",
        _plain_kubeconfig,
        ["stack output 'kubeconfig'", "kubeconfig='<redacted>'", "a secret output (this is a kubeconfig"],
    ),
]


@pytest.mark.parametrize("check,mutate,fragments", [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_broken_variant_fails_with_a_clear_message(broken_plan, check, mutate, fragments):
    mutate(broken_plan)
    messages = _errors(broken_plan, check)
    assert messages, f"{check} passed a broken plan"
    assert any(all(f in m for f in fragments) for m in messages), "\n".join(messages)
    assert all(m.startswith(f"ERROR [{check}] ") and ": expected " in m for m in messages)


def test_letting_checkpoints_go_is_the_stacks_choice():
    plan = run_program("aks-dev", {"checkpointsOnDestroy": "delete"})
    assert not any(r.retain_on_delete for r in plan.resources)
    assert _errors(plan, "guardrail:checkpoints-kept") == []


def test_non_default_max_price_is_a_warning(broken_plan):
    broken_plan.one(*GPU).inputs["spotMaxPrice"] = 0.2
    [finding] = findings_of(run_checks(broken_plan, ["guardrail:spot-pool"]))
    assert finding.severity == "warning" and "never for price" in finding.expected


def test_gpu_min_from_config_fails_the_plan():
    """The same guardrail on the real program: gpuMinNodes=1 is valid config but not a lab."""
    plan = run_program("aks-dev", {"gpuMinNodes": 1})
    [message] = _errors(plan, "guardrail:gpu-pool")
    assert "AgentPool 'aks-gpu-spot': minCount=1: expected 0" in message


def test_unsecreted_kubeconfig_in_a_real_program_is_caught():
    from components.aks import AksCluster, AksClusterArgs

    def program():
        cluster = AksCluster("aks", AksClusterArgs(location="eastus", resource_group_name="rg", cluster_name="c"))
        pulumi.export("kubeconfigPlain", pulumi.Output.unsecret(cluster.kubeconfig))
        pulumi.export("storageKey", "c2VjcmV0LWtleS1tYXRlcmlhbC1mb3ItdGhlLXRlc3Qtb25seQ==")

    plan = run_program("aks-dev", program=program)
    messages = _errors(plan, "guardrail:no-plain-secrets")
    assert any("stack output 'kubeconfigPlain'" in m and "a kubeconfig" in m for m in messages), messages
    assert any("stack output 'storageKey'" in m and "named like a secret" in m for m in messages), messages
    # the secret values themselves are never printed
    assert not any("apiVersion" in m or "c2VjcmV0" in m for m in messages)


def test_taint_keys_are_not_mistaken_for_secrets(broken_plan):
    comp = broken_plan.one("elastic-spot-lab:aks:Cluster", "aks")
    comp.outputs = {"taints": [{"key": "nvidia.com/gpu", "value": "present"}]}
    comp.secret_outputs = []
    assert _errors(broken_plan, "guardrail:no-plain-secrets") == []


def _always_fails(plan):
    """Fails on the GPU pool's VM size."""
    r = plan.one(*GPU)
    yield Finding.error("test:always-fails", r, "vmSize", r.inputs["vmSize"], "something else")


def _crashes(plan):
    """Crashes."""
    raise RuntimeError("boom")


def test_checks_are_one_explicit_list_of_unique_names():
    names = check_names()
    assert len(names) == len(set(names))
    assert names[: len(CLUSTER_CHECKS)] == CLUSTER_CHECKS  # the order the plan reports them in


def test_a_check_list_runs_its_checks_and_a_crash_is_a_finding(aks_plan):
    checks = [
        *CHECKS,
        single("test:always-fails", _always_fails, lambda plan: plan.cloud == "aks"),
        single("test:crashes", _crashes, lambda plan: True),
    ]
    [run] = run_checks(aks_plan, ["test:always-fails"], checks)
    assert run.applied and str(run.findings[0]) == (
        "ERROR [test:always-fails] azure-native:containerservice:AgentPool 'aks-gpu-spot': "
        "vmSize='Standard_NC4as_T4_v3': expected something else"
    )
    [run] = run_checks(aks_plan, ["test:crashes"], checks)
    assert run.findings[0].severity == "error" and "RuntimeError: boom" in str(run.findings[0])
    with pytest.raises(
        UnknownCheck, match=r"unknown check\(s\) 'test:always-fails': expected one of arm-conformance, "
    ) as info:
        run_checks(aks_plan, ["test:always-fails", "guardrail:gpu-pool"])
    assert info.value.names == ["test:always-fails"] and "guardrail:gpu-pool" in info.value.known

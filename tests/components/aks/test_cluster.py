"""The AKS component under mocks: what it declares, how, and what it hands on."""

from __future__ import annotations

import base64
import itertools

import pulumi
import pytest
import yaml

from components.aks import AksCluster, AksClusterArgs
from components.aks.node_pools import AKS_SPOT_LABEL, AKS_SPOT_TAINT, CRITICAL_ADDONS_TAINT
from components.aks.registry import ROLE_ACR_PULL, derived_registry_name
from components.aks.storage import (
    ROLE_STORAGE_ACCOUNT_CONTRIBUTOR,
    ROLE_STORAGE_BLOB_DATA_CONTRIBUTOR,
    derived_account_name,
)
from components.cluster_info import AzureBlobCheckpoint
from lab.program.harness import run_program
from lab.program.mocks import MOCK_SUBSCRIPTION, PlanMocks
from lab.vocab import pools as labels
from lab.vocab.azure_tags import CLUSTER_TAG, tag_name_problem
from lab.vocab.capacity import PRIORITY_CONFIGMAP, PROVISION_TIMEOUT_MIN, RANK_LABEL, rank_of_group
from lab.vocab.names import AKS_CLUSTER_TYPE as COMPONENT_TYPE
from lab.vocab.problems import InvalidInput

MC = "azure-native:containerservice:ManagedCluster"
POOL = "azure-native:containerservice:AgentPool"
SA = "azure-native:storage:StorageAccount"
CONTAINER = "azure-native:storage:BlobContainer"
ROLE = "azure-native:authorization:RoleAssignment"
REGISTRY = "azure-native:containerregistry:Registry"
UAMI = "azure-native:managedidentity:UserAssignedIdentity"
FIC = "azure-native:managedidentity:FederatedIdentityCredential"
RG = "azure-native:resources:ResourceGroup"
MAINTENANCE = "azure-native:containerservice:MaintenanceConfiguration"


@pytest.fixture(scope="module")
def plan(cluster_only_plan):
    return cluster_only_plan()


def test_component_and_children(plan):
    comp = plan.one(COMPONENT_TYPE, "aks")
    kids = plan.children(comp.urn)
    assert {r.type for r in kids} == {
        "azure-native:resources:ResourceGroup",
        UAMI,
        FIC,
        MC,
        POOL,
        SA,
        CONTAINER,
        ROLE,
        MAINTENANCE,
        REGISTRY,
        "pulumi:providers:kubernetes",
        "kubernetes:core/v1:ConfigMap",  # the autoscaler's priorities over the GPU capacity ranks
    }
    # Every resource is parented to the component; nothing is left at the stack's root.
    assert all(r.parent == comp.urn for r in plan.resources if r is not comp)
    assert comp.outputs is not None and "kubeconfig" in comp.outputs
    assert "kubeconfig" in comp.secret_outputs


def test_managed_cluster(plan):
    mc = plan.one(MC)
    i = mc.inputs
    assert i["resourceName"] == "esl-aks-dev" and i["resourceGroupName"] == "esl-aks-dev-rg"
    assert i["kubernetesVersion"] == "1.35" and i["location"] == "eastus"
    assert i["storageProfile"]["blobCSIDriver"] == {"enabled": True}
    assert i["oidcIssuerProfile"] == {"enabled": True}
    assert i["securityProfile"]["workloadIdentity"] == {"enabled": True}
    assert i["nodeResourceGroup"] == "MC_esl-aks-dev-rg_esl-aks-dev_eastus"
    # Azure CNI Overlay powered by Cilium: the dataplane that enforces NetworkPolicies.
    network = {
        k: i["networkProfile"].get(k)
        for k in ("networkPlugin", "networkPluginMode", "networkDataplane", "networkPolicy")
    }
    assert network == {
        "networkPlugin": "azure",
        "networkPluginMode": "overlay",
        "networkDataplane": "cilium",
        "networkPolicy": "cilium",
    }
    control_plane = plan.one(UAMI, "aks-control-plane")
    assert i["identity"] == {"type": "UserAssigned", "userAssignedIdentities": [control_plane.id]}
    [system] = i["agentPoolProfiles"]
    assert system["mode"] == "System" and system["scaleSetPriority"] == "Regular"
    assert system["vmSize"] == "Standard_D2s_v5" and system["count"] == 1
    assert system["nodeTaints"] == [CRITICAL_ADDONS_TAINT.text()]
    assert system["nodeLabels"][labels.POOL_LABEL] == labels.POOL_SYSTEM


def test_gpu_spot_pool(plan):
    gpu = plan.one(POOL, "aks-gpu-spot")
    i = gpu.inputs
    assert (i["mode"], i["scaleSetPriority"], i["scaleSetEvictionPolicy"], i["spotMaxPrice"]) == (
        "User",
        "Spot",
        "Delete",
        -1,
    )
    assert (i["enableAutoScaling"], i["minCount"], i["maxCount"], i["count"]) == (True, 0, 3, 0)
    assert i["vmSize"] == "Standard_NC4as_T4_v3"
    assert i["nodeLabels"] == {
        labels.POOL_LABEL: labels.POOL_GPU_SPOT,
        labels.CAPACITY_LABEL: labels.CAPACITY_SPOT,
        AKS_SPOT_LABEL: "spot",
        labels.NVIDIA_GPU_PRESENT_LABEL: "true",
        RANK_LABEL: "1",
    }
    assert i["nodeTaints"] == [
        "nvidia.com/gpu=present:NoSchedule",
        "kubernetes.azure.com/scalesetpriority=spot:NoSchedule",
    ]
    assert i["gpuProfile"] == {"driver": "Install"}
    assert "upgradeSettings" not in i  # AKS rejects maxSurge on spot pools
    assert gpu.ignore_changes == ["count"]
    assert i["resourceName"] == plan.one(MC).inputs["resourceName"]


def test_cpu_pool(plan):
    cpu = plan.one(POOL, "aks-cpu")
    i = cpu.inputs
    assert (i["mode"], i["scaleSetPriority"]) == ("User", "Regular")
    assert (i["enableAutoScaling"], i["minCount"], i["maxCount"]) == (True, 1, 2)
    assert i["nodeLabels"] == {labels.POOL_LABEL: labels.POOL_CPU, labels.CAPACITY_LABEL: labels.CAPACITY_ON_DEMAND}
    assert "nodeTaints" not in i or i["nodeTaints"] == []
    assert cpu.ignore_changes == ["count"]
    # etcd's budget refuses eviction: upgrades cordon its node instead of failing.
    assert i["upgradeSettings"] == {"maxSurge": "1", "undrainableNodeBehavior": "Schedule"}


def test_checkpoint_storage_outside_node_resource_group(plan):
    sa = plan.one(SA)
    i = sa.inputs
    assert i["resourceGroupName"] == "esl-aks-dev-rg" != plan.one(MC).inputs["nodeResourceGroup"]
    assert i["accountName"] == derived_account_name(MOCK_SUBSCRIPTION, "esl-aks-dev-rg", "esl-aks-dev")
    assert 3 <= len(i["accountName"]) <= 24 and i["accountName"].isalnum() and i["accountName"].islower()
    assert (i["allowBlobPublicAccess"], i["minimumTlsVersion"], i["enableHttpsTrafficOnly"]) == (False, "TLS1_2", True)
    assert i["kind"] == "StorageV2" and i["sku"] == {"name": "Standard_LRS"}
    container = plan.one(CONTAINER)
    assert container.inputs["containerName"] == "checkpoints" and container.inputs["publicAccess"] == "None"
    assert container.inputs["accountName"] == i["accountName"]


def test_workload_identity_and_role_assignments(plan):
    training = plan.one(UAMI, "aks-training")
    fic = plan.one(FIC)
    issuer = plan.one(MC).state["oidcIssuerProfile"]["issuerURL"]
    assert fic.inputs["issuer"] == issuer
    assert fic.inputs["subject"] == "system:serviceaccount:training:trainer"
    assert fic.inputs["audiences"] == ["api://AzureADTokenExchange"]
    assert fic.inputs["resourceName"] == training.inputs["resourceName"]
    roles = {r.inputs["roleDefinitionId"].rsplit("/", 1)[-1]: r.inputs for r in _storage_roles(plan)}
    assert set(roles) == {ROLE_STORAGE_BLOB_DATA_CONTRIBUTOR, ROLE_STORAGE_ACCOUNT_CONTRIBUTOR}
    assert all(
        r["principalId"] == training.state["principalId"] and r["principalType"] == "ServicePrincipal"
        for r in roles.values()
    )
    assert roles[ROLE_STORAGE_BLOB_DATA_CONTRIBUTOR]["scope"] == plan.one(CONTAINER).id
    assert roles[ROLE_STORAGE_ACCOUNT_CONTRIBUTOR]["scope"] == plan.one(SA).id
    assert all(
        r["roleDefinitionId"].startswith(f"/subscriptions/{MOCK_SUBSCRIPTION}/providers/Microsoft.Authorization/")
        for r in roles.values()
    )


def test_token_mode_needs_no_shared_keys(cluster_only_plan):
    plan = cluster_only_plan(checkpointAuth="workload-identity-token", storageAccountName="mycheckpoints01")
    assert plan.one(SA).inputs["allowSharedKeyAccess"] is False
    assert plan.one(SA).inputs["accountName"] == "mycheckpoints01"
    [role] = _storage_roles(plan)
    assert role.inputs["roleDefinitionId"].endswith(ROLE_STORAGE_BLOB_DATA_CONTRIBUTOR)


def _storage_roles(plan):
    """The role assignments on the checkpoint storage (the registry's pull role aside)."""
    return [r for r in plan.of_type(ROLE) if r.inputs["scope"] != plan.one(REGISTRY).id]


def test_the_registry_is_pulled_from_with_the_kubelet_identity(plan):
    """The nodes pull the training image with the kubelet identity (AcrPull on the registry, as
    `az aks update --attach-acr` grants); no admin password exists; the login server is exported."""
    registry = plan.one(REGISTRY)
    assert registry.inputs["adminUserEnabled"] is False and registry.inputs["sku"] == {"name": "Basic"}
    assert registry.inputs["registryName"] == derived_registry_name(MOCK_SUBSCRIPTION, "esl-aks-dev-rg", "esl-aks-dev")
    (pull,) = [r for r in plan.of_type(ROLE) if r.inputs["scope"] == registry.id]
    kubelet = plan.one(MC).state["identityProfile"]["kubeletidentity"]["objectId"]
    assert pull.inputs["principalId"] == kubelet and pull.inputs["principalType"] == "ServicePrincipal"
    assert pull.inputs["roleDefinitionId"].endswith(f"/roleDefinitions/{ROLE_ACR_PULL}")
    assert plan.outputs["imageRegistry"] == registry.state["loginServer"]


CREDENTIALS = "azure-native:containerservice:listManagedClusterUserCredentials"


def test_kubernetes_provider_and_kubeconfig(plan):
    provider = plan.one("pulumi:providers:kubernetes")
    assert "kubeconfig" in provider.secret_inputs  # secret in state, never plain
    assert "kubeconfig" in plan.secret_outputs and "kubeconfig" in plan.one(COMPONENT_TYPE).secret_outputs
    assert provider.inputs["kubeconfig"] == plan.outputs["kubeconfig"]  # the provider uses the exported one
    pools = {r.urn for r in plan.of_type(POOL)}
    assert pools <= set(provider.depends_on)
    [creds] = [c for c in plan.invokes if c["token"] == CREDENTIALS]
    assert creds["args"]["resourceName"] == "esl-aks-dev" and creds["args"]["resourceGroupName"] == "esl-aks-dev-rg"


def _credentials_answer(monkeypatch, kubeconfigs):
    """Make the listClusterUserCredentials invoke answer `kubeconfigs` (other calls as usual)."""
    seen = []
    original = PlanMocks.call

    def call(self, args):
        if args.token == CREDENTIALS:
            seen.append(dict(args.args))
            return {"kubeconfigs": kubeconfigs}, []
        return original(self, args)

    monkeypatch.setattr(PlanMocks, "call", call)
    return seen


def test_kubeconfig_is_the_decoded_first_credential_of_the_invoke(monkeypatch, cluster_only_plan):
    """Whatever Azure returns is what the provider and the output get: the first
    kubeconfig of listClusterUserCredentials, base64-decoded, and secret."""
    first = "apiVersion: v1\nkind: Config\nclusters: []\n# from-the-invoke-1\n"
    second = "apiVersion: v1\nkind: Config\nclusters: []\n# from-the-invoke-2\n"
    seen = _credentials_answer(
        monkeypatch,
        [
            {"name": "clusterUser", "value": base64.b64encode(first.encode()).decode()},
            {"name": "other", "value": base64.b64encode(second.encode()).decode()},
        ],
    )
    plan = cluster_only_plan()
    assert seen and seen[0]["resourceName"] == "esl-aks-dev"
    assert plan.outputs["kubeconfig"] == first and "kubeconfig" in plan.secret_outputs
    provider = plan.one("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == first and "kubeconfig" in provider.secret_inputs


def test_no_credentials_from_the_invoke_is_an_error(monkeypatch, cluster_only_plan):
    import gc

    from pulumi.runtime.sync_await import _ensure_event_loop

    # The failed run's outputs hold the error in futures nobody awaits; asyncio reports
    # each when it is collected. Collect them here and check they are this error only.
    loop = _ensure_event_loop()
    dropped: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: dropped.append(context))
    try:
        _credentials_answer(monkeypatch, [])
        with pytest.raises(Exception, match="listManagedClusterUserCredentials returned no kubeconfig"):
            cluster_only_plan()
        # The failed run leaves nothing behind: the next plan in this process succeeds.
        monkeypatch.undo()
        assert cluster_only_plan().outputs["kubeconfig"].startswith("apiVersion: v1")
        gc.collect()
    finally:
        loop.set_exception_handler(previous)
    assert all("returned no kubeconfig" in str(c.get("exception")) for c in dropped), dropped


def test_outputs(plan):
    o = plan.outputs
    assert o["nodeResourceGroup"] == "MC_esl-aks-dev-rg_esl-aks-dev_eastus"
    assert o["poolNames"] == {"system": "system", "cpu": "cpu", "gpu-spot": "gpuspot"}
    assert o["storageAccountName"] == plan.one(SA).inputs["accountName"]
    assert o["storageContainerName"] == "checkpoints"
    assert o["workloadIdentityClientId"] == plan.one(UAMI, "aks-training").state["clientId"]
    assert o["gpuTaints"] == [labels.GPU_TAINT.text(), AKS_SPOT_TAINT.text()]
    assert set(plan.secret_outputs) == {"kubeconfig"}
    assert not any("key" in k.lower() for k in o), "no account keys in outputs"


def test_each_gpu_capacity_rank_is_a_pool_after_the_one_above(plan):
    """aks-dev: the T4 spot pool, a larger T4 on spot, the T4 on demand; each pool created
    after the one before (one agent-pool operation at a time), rank 1 under its old name."""
    ranks = sorted(
        (p for p in plan.of_type(POOL) if p.inputs["nodeLabels"].get(labels.POOL_LABEL) == labels.POOL_GPU_SPOT),
        key=lambda p: int(p.inputs["nodeLabels"][RANK_LABEL]),
    )
    assert [(p.name, p.inputs["agentPoolName"], p.inputs["vmSize"], p.inputs["scaleSetPriority"]) for p in ranks] == [
        ("aks-gpu-spot", "gpuspot", "Standard_NC4as_T4_v3", "Spot"),
        ("aks-gpu-spot-rank2", "gpuspot2", "Standard_NC8as_T4_v3", "Spot"),
        ("aks-gpu-spot-rank3", "gpuondemand", "Standard_NC4as_T4_v3", "Regular"),
    ]
    for above, below in itertools.pairwise(ranks):
        assert plan.waits_for(below, above)
    on_demand = ranks[-1].inputs
    assert on_demand["nodeLabels"][labels.CAPACITY_LABEL] == labels.CAPACITY_ON_DEMAND
    assert AKS_SPOT_LABEL not in on_demand["nodeLabels"] and "spotMaxPrice" not in on_demand
    assert on_demand["nodeTaints"] == [labels.GPU_TAINT.text()]
    assert (on_demand["minCount"], on_demand["maxCount"], on_demand["gpuProfile"]) == (0, 3, {"driver": "Install"})
    assert "count" in ranks[-1].ignore_changes


def test_the_autoscaler_tries_the_ranks_in_order(plan):
    """The managed autoscaler uses the priority expander, whose ConfigMap ranks the pools' scale
    sets (`aks-<pool>-<digits>-vmss`) highest first and every other pool lowest."""
    profile = plan.one(MC, "aks").inputs["autoScalerProfile"]
    assert profile == {"expander": "priority", "maxNodeProvisionTime": f"{PROVISION_TIMEOUT_MIN}m"}
    config_map = plan.one("kubernetes:core/v1:ConfigMap", "aks-gpu-priorities")
    assert (config_map.inputs["metadata"]["name"], config_map.inputs["metadata"]["namespace"]) == (
        PRIORITY_CONFIGMAP,
        "kube-system",
    )
    table = yaml.safe_load(config_map.inputs["data"]["priorities"])
    assert [rank_of_group(table, f"aks-{pool}-12345678-vmss") for pool in ("gpuspot", "gpuspot2", "gpuondemand")] == [
        30,
        20,
        10,
    ]
    assert rank_of_group(table, "aks-cpu-12345678-vmss") == 1
    # Anchored: a pool whose name starts with another's is not taken for it.
    assert rank_of_group({10: table[30]}, "aks-gpuspot2-12345678-vmss") is None


@pytest.mark.parametrize(
    ("fallback", "key", "expected"),
    [
        (
            [{"vmSize": "Standard_NC4as_T4_v3", "capacity": "on-demand"}, {"vmSize": "Standard_NC8as_T4_v3"}],
            "gpu_fallback[0].capacity",
            "only the last rank may be on-demand",
        ),
        ([{"vmSize": "Standard_NC6s_v3"}], "gpu_fallback[0].vmSize", "has a V100"),
        ([{"vmSize": "Standard_NC8as_T4_v3", "zones": ["4"]}], "gpu_fallback[0].zones", "zones from 1, 2, 3"),
        ([{"vmSize": "Standard_NC8as_T4_v3", "name": "cpu"}], "gpu_fallback", "cpu repeats"),
        ([{"size": "Standard_NC8as_T4_v3"}], "gpu_fallback[0].size", "one of capacity, name, vmSize, zones"),
        ([{"vmSize": "Standard_NC8as_T4_v3", "capacity": "reserved"}], "gpu_fallback[0].capacity", "spot or on-demand"),
        ("Standard_NC8as_T4_v3", "gpu_fallback", "a list of ranks"),
        (
            # After H100s (94 GiB per GPU), A100s and T4s: a job sized for 94 GiB fits in neither.
            [{"vmSize": "Standard_NC24ads_A100_v4"}, {"vmSize": "Standard_NC4as_T4_v3", "capacity": "on-demand"}],
            "gpu_fallback[1].vmSize",
            "at least 94 GiB per GPU",
        ),
    ],
)
def test_bad_fallback_ranks_are_refused_naming_the_rank(fallback, key, expected):
    args = AksClusterArgs(location="eastus", resource_group_name="rg", cluster_name="c", gpu_fallback=fallback)
    if key == "gpu_fallback[1].vmSize":
        args = args.replace(gpu_vm_size="Standard_NC40ads_H100_v5")  # 94 GiB per GPU
    with pytest.raises(InvalidInput) as caught:
        args.validate()
    assert any(p.key == key and expected in p.expected for p in caught.value.problems), caught.value


def test_cluster_info_for_the_platform():
    seen = {}

    def program():
        args = AksClusterArgs(
            location="westeurope",
            resource_group_name="rg1",
            cluster_name="c1",
            gpu_fallback=[{"vmSize": "Standard_NC4as_T4_v3", "capacity": "on-demand"}],
        )
        cluster = AksCluster("aks", args)
        info = cluster.info
        seen["info"] = info
        assert isinstance(info.checkpoint, AzureBlobCheckpoint)
        pulumi.export("account", info.checkpoint.storage_account)
        pulumi.export("clientId", info.checkpoint.client_id)
        pulumi.export("annotations", dict(info.identity.annotations))

    plan = run_program("aks-dev", program=program)
    info = seen["info"]
    placement = info.placement
    assert placement.gpu_taints == (labels.GPU_TAINT, AKS_SPOT_TAINT)
    assert [t.toleration() for t in placement.gpu_taints] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"},
    ]
    assert placement.cpu_taints == ()
    assert placement.cpu_labels == labels.pool_labels(labels.POOL_CPU, spot=False)
    # The last rank is on demand: workers select what every rank carries, the GPU
    # taint and AKS's spot taint tolerated (a rank without the spot taint needs no toleration).
    assert placement.gpu_labels == {labels.POOL_LABEL: labels.POOL_GPU_SPOT, labels.NVIDIA_GPU_PRESENT_LABEL: "true"}
    # ... and the spot-notice handler only the spot ranks' nodes (an on-demand VM gets no notice).
    assert placement.spot_gpu_labels == {
        **placement.gpu_labels,
        AKS_SPOT_LABEL: "spot",
        labels.CAPACITY_LABEL: labels.CAPACITY_SPOT,
    }
    for pool in plan.of_type(POOL):
        if pool.inputs["nodeLabels"].get(labels.POOL_LABEL) == labels.POOL_GPU_SPOT:
            assert placement.gpu_labels.items() <= pool.inputs["nodeLabels"].items()
            assert set(pool.inputs["nodeTaints"]) <= {t.text() for t in placement.gpu_taints}
    # What every spot node carries: AKS's own label and ours; nothing preserved may select them.
    assert placement.spot_labels == {AKS_SPOT_LABEL: "spot", labels.CAPACITY_LABEL: labels.CAPACITY_SPOT}
    assert (info.identity.namespace, info.identity.service_account) == ("training", "trainer")
    assert info.checkpoint.mount_with_token is False and info.eviction_notice_s == 30
    client_id = plan.one(UAMI, "aks-training").state["clientId"]
    assert plan.outputs["clientId"] == client_id
    assert plan.outputs["annotations"] == {"azure.workload.identity/client-id": client_id}
    assert plan.outputs["account"] == plan.one(SA).state["accountName"]
    assert plan.one(MC).inputs["nodeResourceGroup"] == "MC_rg1_c1_westeurope"


def test_invalid_args_declare_nothing():
    def program():
        AksCluster(
            "aks",
            AksClusterArgs(
                location="eastus", resource_group_name="rg", cluster_name="c", gpu_vm_size="Standard_D4s_v5"
            ),
        )

    with pytest.raises(
        InvalidInput, match="gpu_vm_size='Standard_D4s_v5' is invalid: expected an NVIDIA GPU VM size"
    ) as info:
        run_program("aks-dev", program=program)
    assert info.value.recorded_resources == []


def test_user_pools_share_their_common_arguments(plan):
    """Both user pools come from one helper: same shape, differing only where they must."""
    cpu, gpu = plan.one(POOL, "aks-cpu").inputs, plan.one(POOL, "aks-gpu-spot").inputs
    mc = plan.one(MC).inputs
    for i in (cpu, gpu):
        assert (i["mode"], i["osType"], i["type"]) == ("User", "Linux", "VirtualMachineScaleSets")
        assert i["orchestratorVersion"] == mc["kubernetesVersion"] == "1.35"
        assert i["resourceGroupName"] == mc["resourceGroupName"] and i["resourceName"] == mc["resourceName"]
        assert i["tags"] == {"project": "elastic-spot-lab", "environment": "dev"}
        assert i["count"] == i["minCount"] and i["enableAutoScaling"] is True
    common = {
        "resourceGroupName",
        "resourceName",
        "agentPoolName",
        "mode",
        "vmSize",
        "osType",
        "type",
        "orchestratorVersion",
        "enableAutoScaling",
        "count",
        "minCount",
        "maxCount",
        "nodeLabels",
        "tags",
    }
    assert set(cpu) - common == {"scaleSetPriority", "upgradeSettings"} | ({"nodeTaints"} & set(cpu))
    assert set(gpu) - common == {
        "scaleSetPriority",
        "scaleSetEvictionPolicy",
        "spotMaxPrice",
        "gpuProfile",
        "nodeTaints",
    }


def test_default_kubernetes_version_is_one_constant(cluster_only_plan):
    from components import config as config_mod
    from components.aks.args import AksClusterArgs as Args
    from lab.vocab.versions import DEFAULT_KUBERNETES_VERSION

    assert (
        Args(location="eastus", resource_group_name="rg", cluster_name="c").kubernetes_version
        == DEFAULT_KUBERNETES_VERSION
    )
    plan = cluster_only_plan(kubernetesVersion=None)  # the stack sets none
    assert plan.one(MC).inputs["kubernetesVersion"] == DEFAULT_KUBERNETES_VERSION
    assert {p.inputs["orchestratorVersion"] for p in plan.of_type(POOL)} == {DEFAULT_KUBERNETES_VERSION}
    values = {"elastic-spot-lab:cloud": "aks", "elastic-spot-lab:location": "eastus"}
    assert config_mod.load(values, stack="t").kubernetes_version == DEFAULT_KUBERNETES_VERSION
    values["elastic-spot-lab:kubernetesVersion"] = "1.34"
    assert config_mod.load(values, stack="t").kubernetes_version == "1.34"


def test_tag_keys_are_ones_azure_accepts(plan):
    """ARM refuses `/` in a tag name (InvalidTagNameCharacters) at the first resource."""
    tagged = [r for r in plan.resources if isinstance(r.inputs.get("tags"), dict) and r.inputs["tags"]]
    assert {r.type for r in tagged} >= {RG, MC, UAMI}
    for r in tagged:
        for name in r.inputs["tags"]:
            assert tag_name_problem(name, storage_account=r.type == SA) is None, (r.label, name)
    assert plan.one(RG).inputs["tags"][CLUSTER_TAG] == "esl-aks-dev"


def test_bad_tag_keys_are_refused_before_anything_is_declared(cluster_only_plan):
    with pytest.raises(InvalidInput) as err:
        cluster_only_plan(tags='{"team/ml": "a", "azure-owner": "b", "' + "k" * 129 + '": "c"}')
    text = str(err.value)
    assert "elastic-spot-lab:tags['team/ml']='team/ml' is invalid: expected a tag name without /" in text
    assert "azure-owner" in text and "Azure reserves them" in text
    assert "at most 128 characters on a storage account" in text


def test_the_gpu_pool_waits_for_the_cpu_pool(plan):
    """AKS runs one agent-pool operation at a time: create CPU then GPU, delete in reverse."""
    cpu, gpu = plan.one(POOL, "aks-cpu"), plan.one(POOL, "aks-gpu-spot")
    assert cpu.urn in gpu.depends_on
    assert gpu.urn not in cpu.dependencies


def test_checkpoint_storage_is_kept_on_destroy_by_default(plan, cluster_only_plan):
    for r in (plan.one(SA), plan.one(CONTAINER), plan.one(RG)):
        assert r.retain_on_delete, r.label
    # Everything else goes with `pulumi destroy`.
    assert not any(r.retain_on_delete for r in plan.resources if r.type not in (SA, CONTAINER, RG))
    released = cluster_only_plan(checkpointsOnDestroy="delete")
    assert not any(r.retain_on_delete for r in released.resources)


def test_upgrades_wait_for_one_weekly_window(plan, cluster_only_plan):
    profile = plan.one(MC).inputs["autoUpgradeProfile"]
    assert profile == {"upgradeChannel": "patch", "nodeOSUpgradeChannel": "NodeImage"}
    windows = {r.inputs["configName"]: r.inputs for r in plan.of_type(MAINTENANCE)}
    assert set(windows) == {"aksManagedAutoUpgradeSchedule", "aksManagedNodeOSUpgradeSchedule"}
    for w in windows.values():
        assert w["resourceName"] == plan.one(MC).inputs["resourceName"]
        assert w["maintenanceWindow"] == {
            "schedule": {"weekly": {"dayOfWeek": "Sunday", "intervalWeeks": 1}},
            "startTime": "03:00",
            "utcOffset": "+00:00",
            "durationHours": 4,
        }
    off = cluster_only_plan(upgradeChannel="none", nodeOsUpgradeChannel="None")
    assert off.one(MC).inputs["autoUpgradeProfile"] == {"upgradeChannel": "none", "nodeOSUpgradeChannel": "None"}
    assert not off.of_type(MAINTENANCE)


def test_bad_upgrade_settings_are_refused(cluster_only_plan):
    with pytest.raises(InvalidInput) as err:
        cluster_only_plan(
            upgradeChannel="weekly",
            maintenanceDay="Sun",
            maintenanceStartUtc="25:00",
            maintenanceHours="2",
            checkpointsOnDestroy="forget",
        )
    keys = {p.key for p in err.value.problems}
    assert keys == {
        f"elastic-spot-lab:{k}"
        for k in ("upgradeChannel", "maintenanceDay", "maintenanceStartUtc", "maintenanceHours", "checkpointsOnDestroy")
    }

"""`AksClusterArgs`: every knob of the AKS stack, typed and validated before anything is declared.

Each field carries the stack-config key it is read from (`metadata["key"]`, read by
components/config.py), so an error can name the key the user wrote. `problems()` collects
every problem at once; each names the field, the bad value and what is expected.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from components.field_problems import (
    Check,
    ClusterArgs,
    FieldProblems,
    RankRules,
    adopt_checkpoints_field,
    adopted_checkpoints,
    gpu_fallback,
    is_int,
    kubernetes_version,
    meta,
    node_bounds,
    training_identity,
    training_namespace_field,
    training_service_account_field,
)
from lab.vocab.azure_regions import AZURE_REGIONS
from lab.vocab.azure_tags import tag_problems
from lab.vocab.capacity import GpuRank
from lab.vocab.checkpoint_location import AKS_KEPT
from lab.vocab.machine_shapes import AZURE as AZURE_SHAPES
from lab.vocab.problems import Problem
from lab.vocab.versions import (
    DEFAULT_KUBERNETES_VERSION,
    MIN_GPU_ARCHITECTURE,
    TORCH_CUDA_BUILD,
)

# --------------------------------------------------------------------------- value rules

# Azure region *names* (as `az account list-locations -o table` prints in the Name column):
# lower-case letters and digits, no spaces: eastus, westeurope, eastus2, ...
_REGION = re.compile(r"^[a-z]+[a-z0-9]*$")
_K8S_VERSION = re.compile(r"^1\.(\d+)(\.\d+)?$")
MIN_K8S_MINOR = 29  # Blob CSI workload-identity mounts need CSIDriver tokenRequests (AKS 1.29+)
_VM_SIZE = re.compile(r"^Standard_[A-Z][A-Za-z0-9_-]*$")
# NVIDIA GPU families: NC (T4, V100, A100, H100), ND (A100/H100 clusters), NV (M60, A10).
_NVIDIA_GPU = re.compile(r"^Standard_N[CDV]\d+[a-z]*(_[A-Za-z0-9]+)*$")
# AMD GPU sizes in the N families: NVv4 (MI25), NGads V620, ND MI300X. The NVIDIA device
# plugin and AKS's GPU driver install do not serve them.
_AMD_GPU = re.compile(r"^Standard_(NV\d+as_v4|NG\d+\w*|ND\d+\w*MI300X\w*)$")
# NVIDIA sizes with GPUs older than the image's CUDA build runs on (lab.vocab.versions):
# NCv3 and NDv2 (V100), NCv2 (P100), NV and NVv3 (M60), NC (K80).
_PRE_TURING = (
    (re.compile(r"^Standard_NC\d+r?s_v3$|^Standard_ND40r?s_v2$"), "V100"),
    (re.compile(r"^Standard_NC\d+r?s_v2$"), "P100"),
    (re.compile(r"^Standard_NV\d+s?(_v3)?$"), "M60"),
    (re.compile(r"^Standard_NC\d+r?$"), "K80"),
)
# NVIDIA sizes of the families the trainer image runs on (Turing and newer, x86_64), by GPU: the
# GPU pool's size must be one of them. A family Azure adds later: add its sizes here.
NVIDIA_GPU_SIZES = (
    (re.compile(r"^Standard_NC(4|8|16|64)as_T4_v3$"), "T4"),
    (re.compile(r"^Standard_NV(6|12|18|36|72)ads_A10_v5$|^Standard_NV36adms_A10_v5$"), "A10"),
    (re.compile(r"^Standard_NC(24|48|96)ads_A100_v4$"), "A100 80GB PCIe"),
    (re.compile(r"^Standard_ND96asr_v4$"), "A100 40GB (8x, InfiniBand)"),
    (re.compile(r"^Standard_ND96amsr_A100_v4$"), "A100 80GB (8x, InfiniBand)"),
    (re.compile(r"^Standard_NC40ads_H100_v5$|^Standard_NC80adis_H100_v5$|^Standard_NCC40ads_H100_v5$"), "H100 NVL"),
    (re.compile(r"^Standard_ND96isr_H100_v5$"), "H100 (8x, InfiniBand)"),
    (re.compile(r"^Standard_ND96isr_H200_v5$"), "H200 (8x, InfiniBand)"),
)
_CLUSTER_NAME = re.compile(r"^[a-zA-Z0-9]$|^[a-zA-Z0-9][-_a-zA-Z0-9]{0,61}[a-zA-Z0-9]$")
_RESOURCE_GROUP = re.compile(r"^[-\w._()]{1,90}$")
_POOL_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")
_STORAGE_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
_CONTAINER = re.compile(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$")

SKU_TIERS = ("Free", "Standard", "Premium")
STORAGE_SKUS = ("Standard_LRS", "Standard_ZRS", "Standard_GRS", "Standard_RAGRS", "Standard_GZRS", "Standard_RAGZRS")
# How the Blob CSI driver authenticates a static checkpoint volume with the pods' workload
# identity (kubernetes-sigs/blob-csi-driver docs/workload-identity-static-pv-mount.md):
#   workload-identity-key    GA path: the driver uses the identity to fetch the account key
#                            (needs "Storage Account Contributor"; shared-key access on).
#   workload-identity-token  preview (driver >= 1.27): mounts with the token only
#                            (`mountWithWorkloadIdentityToken: "true"` on the PV; "Storage
#                            Blob Data Contributor"; shared-key access can be off). The
#                            token expires after 24 h, so long jobs must remount.
CHECKPOINT_AUTH_MODES = ("workload-identity-key", "workload-identity-token")
# What `pulumi destroy` does with the checkpoint account, its container and their resource
# group: keep them (Pulumi forgets them; they outlive the cluster) or delete them.
CHECKPOINTS_ON_DESTROY = ("keep", "delete")
# AKS auto-upgrade channels (ManagedClusterAutoUpgradeProfile). Upgrades drain and reimage
# nodes, the CPU pool's etcd among them: they run inside the maintenance window below.
UPGRADE_CHANNELS = ("none", "patch", "stable", "rapid", "node-image")
NODE_OS_UPGRADE_CHANNELS = ("None", "Unmanaged", "NodeImage", "SecurityPatch")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_HH_MM = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")
MAX_POOL_NODES = 1000  # AKS limit per node pool
_NO_NODES = " (0 would leave the pool unable to run anything)"
AZURE_ZONES = ("1", "2", "3")


def is_nvidia_gpu_size(size: str) -> bool:
    return bool(_NVIDIA_GPU.match(size)) and not _AMD_GPU.match(size)


def is_gpu_size(size: str) -> bool:
    return bool(_NVIDIA_GPU.match(size)) or bool(_AMD_GPU.match(size))


def default_node_resource_group(resource_group: str, cluster: str, location: str) -> str:
    """AKS's default node resource group name, `MC_<rg>_<cluster>_<location>` (max 80)."""
    return f"MC_{resource_group}_{cluster}_{location}"[:80]


def _rank_size_problems(size: Any, key: str) -> list[Problem]:
    if not isinstance(size, str):
        return [Problem(key, size, "an NVIDIA GPU VM size such as Standard_NC8as_T4_v3")]
    expected = gpu_size_expected(size)
    return [Problem(key, size, expected)] if expected else []


def _rank_name_problem(name: Any) -> str | None:
    return None if isinstance(name, str) and _POOL_NAME.match(name) else _POOL_NAME_RULE


# A fallback rank: one VM size, its own zones, a pool name of at most 12 characters.
_RANKS = RankRules(
    sizes_key="vmSize",
    size_problems=_rank_size_problems,
    name_problem=_rank_name_problem,
    zones_allowed=AZURE_ZONES,
    shapes=AZURE_SHAPES,
    limit=12,
)


# --------------------------------------------------------------------------- args


@dataclass(frozen=True)
class AksClusterArgs(ClusterArgs):
    """Arguments of `AksCluster`. Defaults are the lab's; the stack file sets the usual ones."""

    described_as: ClassVar[str] = "AKS cluster arguments"
    rank_rules: ClassVar[RankRules] = _RANKS

    location: str = field(metadata=meta("location", "str", "Azure region name, e.g. eastus"))
    resource_group_name: str = field(
        metadata=meta("resourceGroupName", "str", "resource group for the cluster and checkpoints")
    )
    cluster_name: str = field(metadata=meta("clusterName", "str", "AKS cluster name (also the DNS prefix)"))
    kubernetes_version: str = field(
        default=DEFAULT_KUBERNETES_VERSION,
        metadata=meta("kubernetesVersion", "str", "Kubernetes version, 1.<minor> or 1.<minor>.<patch>"),
    )
    sku_tier: str = field(
        default="Free", metadata=meta("skuTier", "str", "AKS control-plane tier: Free, Standard or Premium")
    )
    node_resource_group: str | None = field(
        default=None, metadata=meta("nodeResourceGroup", "str", "node resource group [MC_<rg>_<cluster>_<location>]")
    )
    # System pool: AKS add-ons only (tainted CriticalAddonsOnly), on-demand.
    system_pool_name: str = field(default="system", metadata=meta("systemPoolName", "str", "system pool name"))
    system_vm_size: str = field(
        default="Standard_D2s_v5", metadata=meta("systemVmSize", "str", "system pool VM size (CPU)")
    )
    system_node_count: int = field(default=1, metadata=meta("systemNodeCount", "int", "system pool node count"))
    # CPU pool: etcd rendezvous, training operator, launchers. On-demand, autoscaled.
    cpu_pool_name: str = field(default="cpu", metadata=meta("cpuPoolName", "str", "CPU (control-plane) pool name"))
    cpu_vm_size: str = field(default="Standard_D4s_v5", metadata=meta("cpuVmSize", "str", "CPU pool VM size"))
    cpu_min_nodes: int = field(default=1, metadata=meta("cpuMinNodes", "int", "CPU pool autoscaler minimum"))
    cpu_max_nodes: int = field(default=2, metadata=meta("cpuMaxNodes", "int", "CPU pool autoscaler maximum"))
    # GPU spot pool: elastic workers. Spot, Delete, pay up to on-demand, scales to zero.
    gpu_pool_name: str = field(default="gpuspot", metadata=meta("gpuPoolName", "str", "GPU spot pool name"))
    gpu_vm_size: str = field(
        default="Standard_NC4as_T4_v3", metadata=meta("gpuVmSize", "str", "GPU spot pool VM size (NVIDIA)")
    )
    gpu_min_nodes: int = field(
        default=0, metadata=meta("gpuMinNodes", "int", "GPU pool autoscaler minimum (0 to scale to zero)")
    )
    gpu_max_nodes: int = field(default=3, metadata=meta("gpuMaxNodes", "int", "GPU pool autoscaler maximum"))
    gpu_spot_max_price: float = field(
        default=-1.0, metadata=meta("gpuSpotMaxPrice", "float", "spot max price in USD/h, -1 = up to on-demand")
    )
    gpu_zones: list[str] = field(
        default_factory=list,
        metadata=meta("gpuZones", "list", 'availability zones of the GPU spot pool, e.g. ["1", "2"] [any zone]'),
    )
    # Further GPU capacity, tried in order when the ranks above it have none (lab/vocab/capacity.py).
    gpu_fallback: list[dict[str, Any]] = field(
        default_factory=list,
        metadata=meta(
            "gpuFallback",
            "list",
            "GPU capacity tried after the GPU spot pool, in order: each {vmSize, capacity: spot | on-demand, "
            "zones, name}; an on-demand rank only last",
        ),
    )
    # Checkpoints: our own storage account, outside the node resource group.
    storage_account_name: str | None = field(
        default=None,
        metadata=meta(
            "storageAccountName", "str", "checkpoint storage account [derived, unique per subscription and stack]"
        ),
    )
    storage_sku: str = field(
        default="Standard_LRS", metadata=meta("storageSku", "str", "checkpoint storage redundancy")
    )
    checkpoint_container: str = field(
        default="checkpoints", metadata=meta("checkpointContainer", "str", "blob container for checkpoints")
    )
    checkpoint_auth: str = field(
        default="workload-identity-key",
        metadata=meta("checkpointAuth", "str", "how the Blob CSI driver mounts with workload identity"),
    )
    checkpoints_on_destroy: str = field(
        default="keep",
        metadata=meta(
            "checkpointsOnDestroy",
            "str",
            "keep: `pulumi destroy` leaves the checkpoint account, container and resource group; delete: removes them",
        ),
    )
    # Upgrades and when they may run: every upgrade drains the CPU pool's nodes (etcd, the
    # operator) and reimages GPU nodes, so both channels wait for one weekly window.
    upgrade_channel: str = field(
        default="patch", metadata=meta("upgradeChannel", "str", "Kubernetes auto-upgrade channel (none to turn off)")
    )
    node_os_upgrade_channel: str = field(
        default="NodeImage", metadata=meta("nodeOsUpgradeChannel", "str", "node OS auto-upgrade channel")
    )
    maintenance_day: str = field(
        default="Sunday", metadata=meta("maintenanceDay", "str", "weekday of the upgrade window")
    )
    maintenance_start_utc: str = field(
        default="03:00", metadata=meta("maintenanceStartUtc", "str", "start of the upgrade window, HH:MM in UTC")
    )
    maintenance_hours: int = field(
        default=4, metadata=meta("maintenanceHours", "int", "length of the upgrade window in hours (4-24)")
    )
    # Workload identity of the training pods (the platform creates this service account).
    training_namespace: str = training_namespace_field()
    training_service_account: str = training_service_account_field()
    tags: dict[str, str] = field(default_factory=dict, metadata=meta("tags", "map", "Azure tags on every resource"))
    adopt_checkpoints: dict[str, str] = adopt_checkpoints_field()  # noqa: RUF009 - a Field, a new dict each

    # ------------------------------------------------------------------ derived
    @property
    def node_resource_group_name(self) -> str:
        return self.node_resource_group or default_node_resource_group(
            self.resource_group_name, self.cluster_name, self.location
        )

    @property
    def mounts_checkpoints_with_token(self) -> bool:
        """The Blob CSI driver mounts checkpoints with the workload identity's token only."""
        return self.checkpoint_auth == "workload-identity-token"

    @property
    def workload_identity_subject(self) -> str:
        return f"system:serviceaccount:{self.training_namespace}:{self.training_service_account}"

    def first_rank(self) -> GpuRank:
        return GpuRank(1, self.gpu_pool_name, (self.gpu_vm_size,), True, tuple(str(z) for z in self.gpu_zones))

    # ------------------------------------------------------------------ validation
    def checks(self) -> tuple[Check, ...]:
        """The checks below, in the order `problems()` runs them."""
        return _CHECKS


# --------------------------------------------------------------------------- checks
# Each check adds the problems of a few fields; `AksClusterArgs.problems` runs them in order.
# A string field is read once, through `found.text`, which reports a value of another type.


def _location(args: AksClusterArgs, found: FieldProblems) -> None:
    if (loc := found.text("location")) is None:
        return
    if not _REGION.match(loc) or len(loc) > 40:
        hint = f" (did you mean {re.sub(r'[^a-z0-9]', '', loc.lower())!r}?)" if loc.strip() else ""
        found.bad(
            "location",
            "an Azure region name: lower-case letters and digits, no spaces, e.g. eastus or westeurope" + hint,
        )
    elif loc not in AZURE_REGIONS:
        close = difflib.get_close_matches(loc, sorted(AZURE_REGIONS), n=1)
        found.bad(
            "location",
            "an Azure region (`az account list-locations --query [].name`)"
            + (f": did you mean {close[0]!r}?" if close else "")
            + " (if Azure opened it after lab/vocab/azure_regions.py was written, add it there)",
        )


def _kubernetes_version(args: AksClusterArgs, found: FieldProblems) -> None:
    kubernetes_version(
        found,
        _K8S_VERSION,
        MIN_K8S_MINOR,
        f"a Kubernetes version 1.<minor> or 1.<minor>.<patch>, e.g. {DEFAULT_KUBERNETES_VERSION} "
        "(see `az aks get-versions -l <region>`)",
        "Blob CSI workload-identity mounts need CSIDriver tokenRequests",
    )


def _sku_tier(args: AksClusterArgs, found: FieldProblems) -> None:
    found.one_of("sku_tier", SKU_TIERS)


def _cluster_name(args: AksClusterArgs, found: FieldProblems) -> None:
    if (name := found.text("cluster_name")) is not None and not _CLUSTER_NAME.match(name):
        found.bad("cluster_name", "1-63 letters, digits, '-' or '_', starting and ending with a letter or digit")


def _resource_groups(args: AksClusterArgs, found: FieldProblems) -> None:
    """The cluster's resource group and the node resource group AKS owns, which must differ."""
    if (rg := found.text("resource_group_name")) is not None and (not _RESOURCE_GROUP.match(rg) or rg.endswith(".")):
        found.bad("resource_group_name", "1-90 letters, digits, '-', '_', '.', '(' or ')', not ending with '.'")
    if args.node_resource_group is None:
        return
    nrg = args.node_resource_group
    if not isinstance(nrg, str) or not _RESOURCE_GROUP.match(nrg) or len(nrg) > 80 or nrg.endswith("."):
        found.bad("node_resource_group", "1-80 letters, digits, '-', '_', '.', '(' or ')', not ending with '.'")
    elif isinstance(rg, str) and nrg.lower() == rg.lower():
        found.bad(
            "node_resource_group",
            f"a resource group other than resource_group_name ({rg!r}): AKS owns and deletes the node resource group",
        )


_POOL_NAME_RULE = "1-12 lower-case letters and digits, starting with a letter (AKS Linux pool name)"


def _pool_names(args: AksClusterArgs, found: FieldProblems) -> None:
    pools = ("system_pool_name", "cpu_pool_name", "gpu_pool_name")
    for p in pools:
        if (pname := found.text(p)) is not None and not _POOL_NAME.match(pname):
            found.bad(p, _POOL_NAME_RULE)
    names = [getattr(args, p) for p in pools]
    if len(set(names)) == len(names):
        return
    said = "pool names that differ from each other: " + ", ".join(
        f"{p}={n!r}" for p, n in zip(pools, names, strict=True)
    )
    # Blame the names the stack chose, not the defaults they ran into (a later one when both
    # are chosen or both defaults).
    clashing = [p for p in pools if names.count(getattr(args, p)) > 1]
    chosen = [p for p in clashing if getattr(args, p) != AksClusterArgs.__dataclass_fields__[p].default]
    for p in chosen or clashing[-1:]:
        found.bad(p, said)


def gpu_size_expected(gpu: str) -> str | None:
    """What a GPU pool's VM size should be instead, or None when `gpu` is one the image runs on."""
    if _AMD_GPU.match(gpu):
        return (
            "an NVIDIA GPU VM size; this is an AMD GPU size, which the NVIDIA device plugin cannot serve "
            "(e.g. Standard_NC4as_T4_v3)"
        )
    if not _NVIDIA_GPU.match(gpu):
        return (
            "an NVIDIA GPU VM size (N-series: Standard_NC*, Standard_ND*, Standard_NV*), "
            "e.g. Standard_NC4as_T4_v3 or Standard_NC24ads_A100_v4"
        )
    if (old := next((name for pattern, name in _PRE_TURING if pattern.match(gpu)), None)) is not None:
        return (
            f"a GPU the trainer image can run: {gpu} has a {old}, and {TORCH_CUDA_BUILD} has no kernels for GPUs "
            f"before {MIN_GPU_ARCHITECTURE} (e.g. Standard_NC4as_T4_v3, Standard_NV6ads_A10_v5, "
            "Standard_NC24ads_A100_v4)"
        )
    if not any(pattern.match(gpu) for pattern, _ in NVIDIA_GPU_SIZES):
        return (
            "an NVIDIA GPU size Azure offers and the trainer image runs on: the NCasT4_v3 (T4), NVadsA10_v5 (A10), "
            "NC_A100_v4, ND_A100_v4, NCads_H100_v5, ND_H100_v5 or ND_H200_v5 sizes, e.g. Standard_NC4as_T4_v3 "
            "(a size Azure added since: add it to NVIDIA_GPU_SIZES in components/aks/args.py)"
        )
    return None


def _gpu_ranks(args: AksClusterArgs, found: FieldProblems) -> None:
    """The GPU spot pool's zones and the fallback ranks: sizes, capacity, zones, distinct names."""
    zones = args.gpu_zones
    if not isinstance(zones, list) or any(str(z) not in AZURE_ZONES for z in zones):
        found.bad("gpu_zones", "a list of availability zones from " + ", ".join(AZURE_ZONES) + " (empty: any zone)")
    pools = {args.system_pool_name, args.cpu_pool_name, args.gpu_pool_name}
    gpu_fallback(
        args,
        found,
        other_pools=(args.system_pool_name, args.cpu_pool_name),
        # Pools whose own names clash: _pool_names says so, once.
        names_ok=isinstance(args.gpu_pool_name, str) and len(pools) == 3,
    )


def _checkpoint_storage(args: AksClusterArgs, found: FieldProblems) -> None:
    """The checkpoint account, its container and redundancy, how pods mount it, and destroy's choice."""
    account = args.storage_account_name
    if account is not None and (not isinstance(account, str) or not _STORAGE_ACCOUNT.match(account)):
        found.bad("storage_account_name", "3-24 lower-case letters and digits, unique across Azure")
    if (container := found.text("checkpoint_container")) is not None and not _CONTAINER.match(container):
        found.bad(
            "checkpoint_container",
            "3-63 lower-case letters, digits and single '-', starting and ending with a letter or digit",
        )
    found.one_of("storage_sku", STORAGE_SKUS, " (a StorageV2 account)")
    found.one_of("checkpoint_auth", CHECKPOINT_AUTH_MODES)
    found.one_of("checkpoints_on_destroy", CHECKPOINTS_ON_DESTROY)


def _upgrade_window(args: AksClusterArgs, found: FieldProblems) -> None:
    """The auto-upgrade channels and the weekly window they wait for."""
    found.one_of("upgrade_channel", UPGRADE_CHANNELS)
    found.one_of("node_os_upgrade_channel", NODE_OS_UPGRADE_CHANNELS)
    found.one_of("maintenance_day", WEEKDAYS)
    if (start := found.text("maintenance_start_utc")) is not None and not _HH_MM.match(start):
        found.bad("maintenance_start_utc", "a time of day HH:MM in UTC, 00:00 to 23:59")
    hours = args.maintenance_hours
    if not is_int(hours) or not 4 <= hours <= 24:
        found.bad("maintenance_hours", "a whole number of hours in 4..24 (AKS's window length)")


def _cpu_vm_sizes(args: AksClusterArgs, found: FieldProblems) -> None:
    for n in ("system_vm_size", "cpu_vm_size"):
        if (size := found.text(n)) is None:
            continue
        if not _VM_SIZE.match(size):
            found.bad(n, "an Azure VM size such as Standard_D4s_v5")
        elif is_gpu_size(size):
            found.bad(n, "a CPU VM size (this pool runs no GPU work), e.g. Standard_D4s_v5")


def _gpu_vm_size(args: AksClusterArgs, found: FieldProblems) -> None:
    if (gpu := found.text("gpu_vm_size")) is not None and (expected := gpu_size_expected(gpu)) is not None:
        found.bad("gpu_vm_size", expected)


def _node_counts(args: AksClusterArgs, found: FieldProblems) -> None:
    """The system pool's fixed count and the autoscaled pools' bounds."""
    if not is_int(args.system_node_count) or not 1 <= args.system_node_count <= 100:
        found.bad("system_node_count", "a whole number in 1..100")
    for lo, hi, floor, why in (
        ("cpu_min_nodes", "cpu_max_nodes", 1, "the CPU pool hosts etcd and the operator, so it never scales to zero"),
        ("gpu_min_nodes", "gpu_max_nodes", 0, "0 lets the spot pool scale to zero"),
    ):
        node_bounds(args, found, lo, hi, most=MAX_POOL_NODES, floor=floor, why=why, zero_note=_NO_NODES)


def _spot_price(args: AksClusterArgs, found: FieldProblems) -> None:
    price = args.gpu_spot_max_price
    if isinstance(price, bool) or not isinstance(price, (int, float)) or not (price == -1 or price > 0):
        found.bad(
            "gpu_spot_max_price",
            "-1 (pay up to the on-demand price, never evicted for price) or a price in USD/h > 0",
        )
    elif price != -1 and round(price, 5) != price:
        found.bad("gpu_spot_max_price", "at most 5 decimal places")


def _tags(args: AksClusterArgs, found: FieldProblems) -> None:
    # Azure's rules, the storage account's shorter names included (it carries them too); the
    # cluster tag is ours.
    found.extend(tag_problems(args.tags, "tags", storage_account=True, reserved=1))


# The checks of `AksClusterArgs.problems`, in the order they run.
_CHECKS = (
    _location,
    _kubernetes_version,
    _sku_tier,
    _cluster_name,
    _resource_groups,
    _pool_names,
    _checkpoint_storage,
    _upgrade_window,
    training_identity,
    _cpu_vm_sizes,
    _gpu_vm_size,
    _gpu_ranks,
    _node_counts,
    _spot_price,
    _tags,
    adopted_checkpoints(AKS_KEPT),
)

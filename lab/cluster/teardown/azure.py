"""Teardown on Azure: resource groups tagged for the stack's cluster, and in the node resource
group the disks and public IPs that the cluster's controllers created."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from azure.core.exceptions import ResourceNotFoundError

from lab.cluster.azure_errors import Wording, azure_errors
from lab.cluster.eviction import ApiCall
from lab.cluster.teardown.base import GONE, Leftover, Recorded, TeardownError, _delete_all, _planned
from lab.vocab import azure_tags

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential


RESOURCE_GROUP = "resource-group"
DISK = "disk"
PUBLIC_IP = "public-ip"
RESOURCE_API = "azure-mgmt-resource"
COMPUTE_API = "azure-mgmt-compute"
NETWORK_API = "azure-mgmt-network"

# The tag the AKS stack puts on its resource groups (valued with the cluster's name).
AZURE_CLUSTER_TAG = azure_tags.CLUSTER_TAG
# What the Azure Disk CSI driver tags its disks with, and how it names them.
AZURE_PVC_NAME_TAG = "kubernetes.io-created-for-pvc-name"
AZURE_PVC_NAMESPACE_TAG = "kubernetes.io-created-for-pvc-namespace"
CSI_DISK_PREFIX = "pvc-"
# What Azure's cloud provider tags the public IPs of LoadBalancer Services with.
AZURE_SERVICE_TAGS = ("k8s-azure-service", "kubernetes-cluster-name", "k8s-azure-cluster-name")
STORAGE_ACCOUNT_TYPE = "Microsoft.Storage/storageAccounts"


def _default_azure_credential() -> TokenCredential:
    """azure-identity's DefaultAzureCredential (the Azure CLI's login, environment variables,
    a managed identity); imported only when a real call needs it."""
    from azure.identity import DefaultAzureCredential

    return DefaultAzureCredential()


def _same(a: str | None, b: str | None) -> bool:
    """ARM names compare without regard to case."""
    return a is not None and b is not None and a.casefold() == b.casefold()


def _tag(tags: Mapping[str, str] | None, name: str) -> str | None:
    """A tag's value; ARM tag names are case-insensitive."""
    return next((v for k, v in (tags or {}).items() if _same(k, name)), None)


def _resource_group_of(resource_id: str) -> str:
    """The resource group segment of an ARM id ('' when it has none)."""
    parts = resource_id.strip("/").split("/")
    return next((parts[i + 1] for i, p in enumerate(parts[:-1]) if p.casefold() == "resourcegroups"), "")


def _worded(call: ApiCall) -> Wording:
    """How a failure of `call` is said."""
    return Wording(
        cannot=f"make {call}",
        failed=f"{call} failed",
        denied=f"Azure denied {call}",
        grant="the signed-in identity needs a role that allows it (Contributor on the stack's resource groups)",
    )


class AzureSweep(Recorded):
    """An AKS stack's leftovers in Azure (a `Sweep`).

    `resource_group`, `node_resource_group`, `cluster_name` and `storage_account` are the
    stack's outputs (resourceGroupName, nodeResourceGroup, clusterName, storageAccountName).
    Resource groups count as the stack's when they carry the stack's cluster tag
    (`elastic-spot-lab-cluster`) with the cluster's name; without `cluster_name` the name is
    read from that tag on `resource_group`. The node resource group is AKS's: AKS deletes it
    with the cluster, so only what controllers made in it is swept (CSI disks that are not
    attached, the cloud provider's public IPs that no load balancer uses). With
    `keep_checkpoints` the stack's resource group and any tagged group holding a storage
    account are kept. `credential` defaults to DefaultAzureCredential, made on the first
    real call; `client_kwargs` go to every management client (a `transport`, retry and
    polling settings)."""

    name = "azure"
    ORDER = (PUBLIC_IP, DISK, RESOURCE_GROUP)

    def __init__(
        self,
        subscription_id: str,
        stack: str,
        resource_group: str,
        node_resource_group: str,
        credential: TokenCredential | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        keep_checkpoints: bool = True,
        *,
        cluster_name: str | None = None,
        storage_account: str | None = None,
    ) -> None:
        self.subscription_id = subscription_id
        self.stack = stack
        self.resource_group = resource_group
        self.node_resource_group = node_resource_group
        self.keep_checkpoints = keep_checkpoints
        self.cluster_name = cluster_name
        self.storage_account = storage_account
        self._credential = credential
        self._client_kwargs = dict(client_kwargs or {})
        super().__init__()

    # ------------------------------------------------------------------ the Sweep protocol
    def _look(self) -> list[Leftover]:
        return [*self._find_groups(), *self._find_disks(), *self._find_public_ips()]

    def delete(self, items: Sequence[Leftover]) -> list[str]:
        def delete_one(item: Leftover) -> bool:
            call = self._delete_call(item)
            if item.kind == RESOURCE_GROUP:
                group = call.params["resource_group_name"]
                result = self._run(call, "resource", lambda c: c.resource_groups.begin_delete(group).result())
            elif item.kind == DISK:
                disk = call.params["disk_name"]
                result = self._run(
                    call, "compute", lambda c: c.disks.begin_delete(self.node_resource_group, disk).result()
                )
            else:
                ip = call.params["public_ip_address_name"]
                result = self._run(
                    call, "network", lambda c: c.public_ip_addresses.begin_delete(self.node_resource_group, ip).result()
                )
            return result is GONE

        return _delete_all(self.name, items, self.ORDER, delete_one)

    def calls(self) -> list[ApiCall]:
        out = [self._list_groups_call(), self._list_disks_call(), self._list_ips_call()]
        if not self.keep_checkpoints:
            pass  # no group is kept for its storage accounts, so none is looked into
        elif self._found is None:
            out.append(self._storage_call("<each other tagged resource group>"))
        else:
            # The storage-account reads find() made for the groups it kept or found.
            checked = [i for i in [*self._found, *self.kept] if i.kind == RESOURCE_GROUP]
            for group in checked:
                name = _resource_group_of(group.id)
                if not _same(name, self.node_resource_group) and not _same(name, self.resource_group):
                    out.append(self._storage_call(name))
        placeholders = {
            PUBLIC_IP: f"/subscriptions/{self.subscription_id}/resourceGroups/{self.node_resource_group}/providers/"
            "Microsoft.Network/publicIPAddresses/<each public IP found>",
            DISK: f"/subscriptions/{self.subscription_id}/resourceGroups/{self.node_resource_group}/providers/"
            "Microsoft.Compute/disks/<each disk found>",
            RESOURCE_GROUP: f"/subscriptions/{self.subscription_id}/resourceGroups/<each tagged resource group found>",
        }
        for kind in self.ORDER:
            out += [self._delete_call(item) for item in _planned(self._found, kind, placeholders[kind])]
        return out

    # ------------------------------------------------------------------ what is found
    def _find_groups(self) -> list[Leftover]:
        call = self._list_groups_call()
        groups = self._run(call, "resource", lambda c: list(c.resource_groups.list(filter=call.params["filter"])))
        cluster = self._cluster_of(groups)
        if cluster is None:
            return []
        where = f"subscription {self.subscription_id}"
        found: list[Leftover] = []
        for group in groups:
            if _tag(group.tags, AZURE_CLUSTER_TAG) != cluster:
                continue  # another cluster's
            tagged = f"tagged {AZURE_CLUSTER_TAG}={cluster}"
            kept_because = self._why_kept(group.name)
            if kept_because:
                self.kept.append(Leftover(RESOURCE_GROUP, group.id, where, tagged + kept_because))
                continue
            state = (group.properties.provisioning_state if group.properties else None) or ""
            found.append(
                Leftover(
                    RESOURCE_GROUP,
                    group.id,
                    where,
                    tagged + (" (already being deleted)" if state == "Deleting" else ""),
                )
            )
        return found

    def _cluster_of(self, groups: list[Any]) -> str | None:
        """The cluster whose tagged groups are this stack's: the one given, else the stack's
        resource group's tag; None (and a note) when neither says."""
        cluster = self.cluster_name or next(
            (_tag(g.tags, AZURE_CLUSTER_TAG) for g in groups if _same(g.name, self.resource_group)), None
        )
        if cluster is None:
            self.notes.append(
                f"the stack's resource group {self.resource_group} carries no {AZURE_CLUSTER_TAG} tag (or is gone) and "
                "no cluster name was given: tagged resource groups were not looked for"
            )
        return cluster

    def _why_kept(self, group: str) -> str | None:
        """Why a tagged resource group is not deleted (the rest of its description), or None:
        AKS's node resource group, and with the checkpoints kept, the group that holds them."""
        if _same(group, self.node_resource_group):
            return (
                ", but it is AKS's node resource group: AKS deletes it with the cluster (and refuses "
                "while the cluster exists); the disks and IPs controllers made in it are swept one by one"
            )
        if not self.keep_checkpoints:
            return None
        if _same(group, self.resource_group):
            account = f" {self.storage_account}" if self.storage_account else ""
            return (
                f"; the stack's resource group, holding the checkpoint storage account{account}: "
                "kept with the checkpoints"
            )
        accounts = self._storage_accounts(group)
        if accounts:
            return f"; it holds the storage account(s) {', '.join(accounts)}: kept with the checkpoints"
        return None

    def _storage_accounts(self, group: str) -> list[str]:
        call = self._storage_call(group)
        found = self._run(
            call,
            "resource",
            lambda c: list(c.resources.list_by_resource_group(group, filter=call.params["filter"])),
            gone_ok=True,
        )
        return [] if found is GONE else [r.name for r in found]

    def _find_disks(self) -> list[Leftover]:
        call = self._list_disks_call()
        disks = self._run(
            call, "compute", lambda c: list(c.disks.list_by_resource_group(self.node_resource_group)), True
        )
        if disks is GONE:
            return []  # the node resource group is gone: AKS deleted it with the cluster
        where = f"resource group {self.node_resource_group}"
        found: list[Leftover] = []
        for disk in disks:
            claim = _tag(disk.tags, AZURE_PVC_NAME_TAG)
            if claim is None and not disk.name.lower().startswith(CSI_DISK_PREFIX):
                continue  # not the CSI driver's (a node's OS disk belongs to its scale set)
            if claim is not None:
                namespace = _tag(disk.tags, AZURE_PVC_NAMESPACE_TAG)
                made = f"made by the Azure Disk CSI driver for PVC {namespace + '/' if namespace else ''}{claim}"
            else:
                made = f"named like an Azure Disk CSI driver volume ({CSI_DISK_PREFIX}...)"
            state = getattr(disk.disk_state, "value", disk.disk_state)
            if disk.managed_by or state not in (None, "Unattached"):
                user = f", by {disk.managed_by}" if disk.managed_by else ""
                self.kept.append(Leftover(DISK, disk.id, where, f"{made}, but in use ({state}{user})"))
                continue
            found.append(Leftover(DISK, disk.id, where, f"{made}, attached to nothing"))
        return found

    def _find_public_ips(self) -> list[Leftover]:
        call = self._list_ips_call()
        ips = self._run(call, "network", lambda c: list(c.public_ip_addresses.list(self.node_resource_group)), True)
        if ips is GONE:
            return []
        where = f"resource group {self.node_resource_group}"
        found: list[Leftover] = []
        for ip in ips:
            tags = {t: v for t in AZURE_SERVICE_TAGS if (v := _tag(ip.tags, t)) is not None}
            if not tags:
                continue  # not the cloud provider's (AKS's own outbound IP, say)
            made = "made by the cloud provider for a LoadBalancer Service (" + ", ".join(
                f"{k}={v}" for k, v in tags.items()
            )
            made += ")"
            config = ip.properties.ip_configuration if ip.properties else None
            if config is not None:
                self.kept.append(Leftover(PUBLIC_IP, ip.id, where, f"{made}, but in use by {config.id}"))
                continue
            found.append(Leftover(PUBLIC_IP, ip.id, where, f"{made}, used by no load balancer"))
        return found

    # ------------------------------------------------------------------ the requests
    def _list_groups_call(self) -> ApiCall:
        params = {"subscription_id": self.subscription_id, "filter": f"tagName eq '{AZURE_CLUSTER_TAG}'"}
        return ApiCall(RESOURCE_API, "resource_groups.list", params, reads_only=True)

    def _storage_call(self, group: str) -> ApiCall:
        params = {
            "subscription_id": self.subscription_id,
            "resource_group_name": group,
            "filter": f"resourceType eq '{STORAGE_ACCOUNT_TYPE}'",
        }
        return ApiCall(RESOURCE_API, "resources.list_by_resource_group", params, reads_only=True)

    def _list_disks_call(self) -> ApiCall:
        params = {"subscription_id": self.subscription_id, "resource_group_name": self.node_resource_group}
        return ApiCall(COMPUTE_API, "disks.list_by_resource_group", params, reads_only=True)

    def _list_ips_call(self) -> ApiCall:
        params = {"subscription_id": self.subscription_id, "resource_group_name": self.node_resource_group}
        return ApiCall(NETWORK_API, "public_ip_addresses.list", params, reads_only=True)

    def _delete_call(self, item: Leftover) -> ApiCall:
        """The deletion of one found item; refuses one outside what this sweep covers."""
        parts = item.id.strip("/").split("/")
        if len(parts) < 4 or not _same(parts[0], "subscriptions") or not _same(parts[1], self.subscription_id):
            raise TeardownError(f"{item.kind} {item.id} is not in the stack's subscription {self.subscription_id}")
        group, name = _resource_group_of(item.id), parts[-1]
        sub = {"subscription_id": self.subscription_id}
        if item.kind == RESOURCE_GROUP:
            return ApiCall(RESOURCE_API, "resource_groups.begin_delete", {**sub, "resource_group_name": group})
        if not _same(group, self.node_resource_group):
            raise TeardownError(
                f"{item.kind} {item.id} is not in the node resource group {self.node_resource_group}: not this sweep's"
            )
        where = {**sub, "resource_group_name": self.node_resource_group}
        if item.kind == DISK:
            return ApiCall(COMPUTE_API, "disks.begin_delete", {**where, "disk_name": name})
        return ApiCall(NETWORK_API, "public_ip_addresses.begin_delete", {**where, "public_ip_address_name": name})

    def _run(self, call: ApiCall, which: str, request: Callable[[Any], Any], gone_ok: bool = False) -> Any:
        """`request` with a client of `which` API; a 404 is GONE where `gone_ok`, every other
        failure a TeardownError naming `call`."""
        with azure_errors(_worded(call), TeardownError):
            client = self._client(which)
            with client:
                try:
                    return request(client)
                except ResourceNotFoundError:
                    if gone_ok or not call.reads_only:
                        return GONE  # a deletion of something already gone is done
                    raise

    def _client(self, which: str) -> Any:
        """A management client of `which` API (imported on use: each is a large package)."""
        if self._credential is None:
            self._credential = _default_azure_credential()
        args = (self._credential, self.subscription_id)
        if which == "resource":
            from azure.mgmt.resource.resources import ResourceManagementClient

            return ResourceManagementClient(*args, **self._client_kwargs)
        if which == "compute":
            from azure.mgmt.compute import ComputeManagementClient

            return ComputeManagementClient(*args, **self._client_kwargs)
        from azure.mgmt.network import NetworkManagementClient

        return NetworkManagementClient(*args, **self._client_kwargs)

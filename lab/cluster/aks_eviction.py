"""Evicting an AKS spot GPU node the way Azure itself would: VMSS `simulateEviction`.

An AKS node pool is a virtual machine scale set in the cluster's node resource group, and a
node's `spec.providerID` names its scale set instance:

    azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/
        virtualMachineScaleSets/<vmss>/virtualMachines/<instance id>

Azure's `simulateEviction` on that instance (a POST answered 204) makes Azure evict the spot
VM within about 30 minutes, with the same Scheduled Events notice a real capacity eviction
gives, so the drill exercises the notice handler and the rendezvous the way production will.

Because the call destroys a VM, `AksVmssEvictor` refuses any node that is not provably one of
the stack's GPU spot nodes: its providerID must be in the stack's subscription and node
resource group (otherwise it is a node of another cluster, which `--force` never overrides),
and the scale set Azure returns must carry the AKS pool tag of the stack's GPU pool and have
Spot priority. The only reads and writes are azure-mgmt-compute's own client calls, so the
tests run the SDK's real URL building and error mapping against a recorded transport.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from azure.identity import DefaultAzureCredential
from azure.mgmt.compute import ComputeManagementClient

from lab.cluster.azure_errors import Wording, azure_errors
from lab.cluster.eviction import ApiCall, EvictionError, EvictionRefused, EvictionStarted, Node
from lab.vocab.placeholders import placeholder

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

API = "azure-mgmt-compute"
GET_SCALE_SET = "virtual_machine_scale_sets.get"
SIMULATE_EVICTION = "virtual_machine_scale_set_vms.simulate_eviction"

# The tag AKS puts on every scale set it creates for a node pool, valued with the pool's name.
POOL_TAG = "aks-managed-poolName"
SPOT = "Spot"

# The Azure RBAC actions each call needs; a 403 names the one that is missing.
READ_PERMISSION = "Microsoft.Compute/virtualMachineScaleSets/read"
EVICT_PERMISSION = "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/simulateEviction/action"

PROVIDER_ID_FORMAT = (
    "azure:///subscriptions/<subscription>/resourceGroups/<resource group>/providers/Microsoft.Compute/"
    "virtualMachineScaleSets/<scale set>/virtualMachines/<instance id>"
)

# Kubernetes' Azure cloud provider writes the resource group in lower case and ARM treats
# every name in a resource id case-insensitively, so the whole match ignores case. The instance
# id of a uniform scale set is a number; anything else (an availability-set VM's name, a
# flexible scale set's VM name) is not a node this backend can evict.
_PROVIDER_ID = re.compile(
    r"^azure:///subscriptions/(?P<subscription_id>[^/]+)"
    r"/resourceGroups/(?P<resource_group>[^/]+)"
    r"/providers/Microsoft\.Compute/virtualMachineScaleSets/(?P<vmss>[^/]+)"
    r"/virtualMachines/(?P<instance_id>\d+)/?$",
    re.IGNORECASE,
)

T = TypeVar("T")


@dataclass(frozen=True)
class VmssInstance:
    """One VM of a scale set, as a node's providerID names it."""

    subscription_id: str
    resource_group: str
    vmss: str
    instance_id: str

    def __str__(self) -> str:
        return (
            f"instance {self.instance_id} of scale set {self.vmss} "
            f"(resource group {self.resource_group}, subscription {self.subscription_id})"
        )


def parse_provider_id(provider_id: str) -> VmssInstance:
    """The scale set instance a node's `spec.providerID` names; EvictionError when it names none."""
    match = _PROVIDER_ID.match(provider_id.strip())
    if match is None:
        raise EvictionError(
            f"providerID {provider_id!r} does not name an Azure scale set VM; an AKS node's providerID "
            f"has the form {PROVIDER_ID_FORMAT}"
        )
    return VmssInstance(**match.groupdict())


def _same(a: str, b: str) -> bool:
    """ARM names compare without regard to case."""
    return a.casefold() == b.casefold()


class AksVmssEvictor:
    """Evicts AKS spot GPU nodes through their scale set's `simulateEviction` (an `Evictor`).

    `node_resource_group` and `gpu_pool_name` come from the stack's outputs (`nodeResourceGroup`
    and `poolNames["gpu-spot"]`); `spot_pool_names`, every spot GPU rank's pool (`gpuRanks`),
    are the pools a node may be evicted from (default: the GPU spot pool alone). Without
    `subscription_id` the node's providerID supplies it; without `credential` azure-identity's
    DefaultAzureCredential is made on the first real call (the Azure CLI's login, environment
    variables or a managed identity). `client_kwargs` go to ComputeManagementClient (a
    `transport`, retry settings, ...).
    """

    name = "aks"

    def __init__(
        self,
        node_resource_group: str,
        gpu_pool_name: str,
        subscription_id: str | None = None,
        credential: TokenCredential | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        spot_pool_names: Sequence[str] = (),
    ) -> None:
        self.node_resource_group = node_resource_group
        self.gpu_pool_name = gpu_pool_name
        self.spot_pool_names = tuple(spot_pool_names) or (gpu_pool_name,)
        self.subscription_id = subscription_id
        self._credential = credential
        self._client_kwargs = dict(client_kwargs or {})

    # ------------------------------------------------------------------ what a run does
    def calls(self, node: Node) -> list[ApiCall]:
        """The requests `check` then `evict` make for `node`, in order; makes none itself.

        Each call's params are the SDK method's arguments, preceded by the subscription the
        ComputeManagementClient is made for. A node a dry run stands in for (`Node.to_be_found`)
        gets placeholders for what only its providerID tells."""
        target = self._target(node) if node.known else self._placeholder_target()
        scale_set = {
            "subscription_id": target.subscription_id,
            "resource_group_name": target.resource_group,
            "vm_scale_set_name": target.vmss,
        }
        return [
            ApiCall(API, GET_SCALE_SET, scale_set, reads_only=True),
            ApiCall(API, SIMULATE_EVICTION, {**scale_set, "instance_id": target.instance_id}),
        ]

    def check(self, node: Node) -> None:
        """Refuse `node` unless Azure says it is a Spot VM of the stack's GPU pool scale set.

        The subscription and resource group are compared first, without any request; then the
        scale set is read and its AKS pool tag and priority must be the GPU spot pool's."""
        try:
            target = self._target(node)
        except EvictionRefused:
            raise
        except EvictionError as e:
            # A node that no Azure scale set instance backs is not one of this cluster's nodes.
            raise EvictionRefused(f"node {node.name} is not an AKS scale set node: {e}") from e

        def read(client: ComputeManagementClient) -> Any:
            return client.virtual_machine_scale_sets.get(target.resource_group, target.vmss)

        scale_set = self._call(
            target,
            read,
            action=f"read scale set {target.vmss} of node {node.name}",
            permission=READ_PERMISSION,
            not_found=(
                f"scale set {target.vmss} does not exist in resource group {target.resource_group} "
                f"(the node may be gone: the pool scaled in or the VM was already evicted)"
            ),
        )
        pool = (scale_set.tags or {}).get(POOL_TAG)
        if pool is None or not any(_same(pool, name) for name in self.spot_pool_names):
            shown = " or ".join(repr(n) for n in self.spot_pool_names)
            raise EvictionRefused(
                f"node {node.name} is not in the GPU spot pool: its scale set {target.vmss} has "
                f"{POOL_TAG}={pool!r}, the GPU spot pool is {shown}"
            )
        profile = scale_set.virtual_machine_profile
        priority = getattr(profile, "priority", None) if profile is not None else None
        # The SDK may hand back an enum member or the raw string.
        priority = getattr(priority, "value", priority)
        if priority is None or not _same(str(priority), SPOT):
            raise EvictionRefused(
                f"node {node.name} is not a spot VM: its scale set {target.vmss} has priority {priority!r}, "
                f"not {SPOT!r}"
            )

    def evict(self, node: Node) -> EvictionStarted:
        """Ask Azure to evict `node`'s VM; returns once Azure accepted (204). The caller has
        called `check` first; only the offline subscription and resource group guard runs again."""
        target = self._target(node)
        request_ids: list[str] = []

        def simulate(client: ComputeManagementClient) -> None:
            # The `cls` hook sees the raw response: keep Azure's request id for the report.
            def keep_request_id(pipeline_response: Any, _deserialized: Any, _headers: Any) -> None:
                request_id = pipeline_response.http_response.headers.get("x-ms-request-id")
                if request_id:
                    request_ids.append(request_id)

            client.virtual_machine_scale_set_vms.simulate_eviction(
                target.resource_group, target.vmss, target.instance_id, cls=keep_request_id
            )

        self._call(
            target,
            simulate,
            action=f"simulate the eviction of node {node.name}",
            permission=EVICT_PERMISSION,
            not_found=(
                f"{target} does not exist (the node may be gone: the pool scaled in or the VM was already evicted)"
            ),
        )
        detail = f"simulateEviction accepted for {target}; Azure evicts the VM within 30 minutes"
        if request_ids:
            detail += f" (x-ms-request-id {request_ids[0]})"
        return EvictionStarted(node=node.name, backend=self.name, detail=detail)

    # ------------------------------------------------------------------ helpers
    def _placeholder_target(self) -> VmssInstance:
        """The scale set instance of a node not known yet: the stack's node resource group, the
        rest placeholders."""
        return VmssInstance(
            subscription_id=self.subscription_id or placeholder("the node's subscription"),
            resource_group=self.node_resource_group,
            vmss=placeholder(f"the scale set of the node's pool, one of {', '.join(self.spot_pool_names)}"),
            instance_id=placeholder("the node's instance id"),
        )

    def _target(self, node: Node) -> VmssInstance:
        """The node's scale set instance, once it is known to be in the stack's subscription and
        node resource group (EvictionRefused otherwise: a node of another cluster). The resource
        group is spelled as the stack spells it, not as the providerID lowercased it."""
        target = parse_provider_id(node.provider_id)
        if self.subscription_id is not None and not _same(target.subscription_id, self.subscription_id):
            raise EvictionRefused(
                f"node {node.name} is a node of another cluster: its VM is in subscription "
                f"{target.subscription_id}, the stack's is {self.subscription_id}"
            )
        if not _same(target.resource_group, self.node_resource_group):
            raise EvictionRefused(
                f"node {node.name} is a node of another cluster: its VM is in resource group "
                f"{target.resource_group}, the stack's nodes are in {self.node_resource_group}"
            )
        return VmssInstance(
            subscription_id=self.subscription_id or target.subscription_id,
            resource_group=self.node_resource_group,
            vmss=target.vmss,
            instance_id=target.instance_id,
        )

    def _call(
        self,
        target: VmssInstance,
        request: Callable[[ComputeManagementClient], T],
        *,
        action: str,
        permission: str,
        not_found: str,
    ) -> T:
        """Run `request` with a client for the target's subscription, its errors made EvictionErrors."""
        wording = Wording(
            cannot=action,
            failed=f"cannot {action}",
            denied=f"cannot {action}: the signed-in identity lacks the permission {permission}",
            grant="grant a role that includes it on the node resource group",
            not_found=not_found,
        )
        with azure_errors(wording, EvictionError):
            client = ComputeManagementClient(
                self._credential_or_default(), target.subscription_id, **self._client_kwargs
            )
            with client:
                return request(client)

    def _credential_or_default(self) -> TokenCredential:
        """The credential given, else DefaultAzureCredential, made once and only when a call is made."""
        if self._credential is None:
            self._credential = DefaultAzureCredential()
        return self._credential

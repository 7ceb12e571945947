"""The AKS eviction backend against Azure Resource Manager as the real SDK sees it, offline.

`AksVmssEvictor` is given the real azure-mgmt-compute client with an azure-core transport of
our own (`ArmTransport`): it records every request the SDK builds (method, path, api-version,
Authorization header) and answers canned responses shaped like ARM's (a scale set with its AKS
tags and `properties.virtualMachineProfile.priority`, 204 for simulateEviction, ARM error
bodies for 403/404/409). So the SDK's own URL building, authentication policy and error
mapping run for real; only the network is replaced.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import HttpResponseError
from azure.core.pipeline.transport import HttpTransport
from azure.core.rest import HttpRequest, HttpResponse
from azure.core.utils import case_insensitive_dict
from azure.identity import CredentialUnavailableError

from lab.cluster import aks_eviction
from lab.cluster.aks_eviction import (
    EVICT_PERMISSION,
    PROVIDER_ID_FORMAT,
    READ_PERMISSION,
    AksVmssEvictor,
    VmssInstance,
    parse_provider_id,
)
from lab.cluster.eviction import ApiCall, EvictionError, EvictionRefused, EvictionStarted, Evictor, Node

SUBSCRIPTION = "0b1f6471-1bf0-4dda-aec3-111122223333"
OTHER_SUBSCRIPTION = "9e8d7c6b-5a49-4838-a271-444455556666"
NODE_RG = "MC_elastic-lab-rg_elastic-lab-aks_eastus"
VMSS = "aks-gpuspot-27458611-vmss"
GPU_POOL = "gpuspot"
INSTANCE = "3"
TOKEN = "fake-arm-access-token"
REQUEST_ID = "5f0c1f8e-6a0e-4a55-9d2c-0d1d2c3b4a59"

SCALE_SET_PATH = (
    f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{NODE_RG}/providers/Microsoft.Compute/virtualMachineScaleSets/{VMSS}"
)
EVICTION_PATH = f"{SCALE_SET_PATH}/virtualMachines/{INSTANCE}/simulateEviction"


def provider_id(
    subscription: str = SUBSCRIPTION, resource_group: str = NODE_RG.lower(), vmss: str = VMSS, instance: str = INSTANCE
) -> str:
    """A node's providerID as Kubernetes' Azure cloud provider writes it (resource group lowercased)."""
    return (
        f"azure:///subscriptions/{subscription}/resourceGroups/{resource_group}/providers/Microsoft.Compute/"
        f"virtualMachineScaleSets/{vmss}/virtualMachines/{instance}"
    )


def gpu_node(pid: str | None = None) -> Node:
    return Node(name=f"{VMSS}00000{INSTANCE}", provider_id=provider_id() if pid is None else pid)


def scale_set_body(pool: str = GPU_POOL, priority: str | None = "Spot") -> dict[str, Any]:
    """A VirtualMachineScaleSet as ARM returns it for an AKS pool (trimmed to what matters plus
    enough of the rest to be realistic)."""
    profile: dict[str, Any] = {
        "osProfile": {"computerNamePrefix": f"{VMSS[:-5]}", "adminUsername": "azureuser"},
        "storageProfile": {"osDisk": {"createOption": "FromImage", "diskSizeGB": 128}},
    }
    if priority is not None:
        profile.update({"priority": priority, "evictionPolicy": "Delete", "billingProfile": {"maxPrice": -1}})
    return {
        "name": VMSS,
        "id": SCALE_SET_PATH,
        "type": "Microsoft.Compute/virtualMachineScaleSets",
        "location": "eastus",
        "tags": {
            "aks-managed-createOperationID": "3c1f1b2a-0000-0000-0000-000000000000",
            "aks-managed-orchestrator": "Kubernetes:1.33.2",
            "aks-managed-poolName": pool,
            "aks-managed-resourceNameSuffix": "27458611",
        },
        "sku": {"name": "Standard_NC4as_T4_v3", "tier": "Standard", "capacity": 1},
        "properties": {
            "singlePlacementGroup": False,
            "orchestrationMode": "Uniform",
            "upgradePolicy": {"mode": "Manual"},
            "virtualMachineProfile": profile,
            "overprovision": False,
            "provisioningState": "Succeeded",
            "uniqueId": "d6b2c0de-0000-0000-0000-000000000000",
        },
    }


def arm_error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


# ------------------------------------------------------------------ the fake ARM endpoint
@dataclass(frozen=True)
class Answer:
    status: int
    body: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Sent:
    """One request as it left the SDK's pipeline."""

    method: str
    path: str
    api_version: str | None
    authorization: str | None


class CannedResponse(HttpResponse):
    """A complete, already-read response (azure-core's public ABC for transport responses)."""

    def __init__(self, request: HttpRequest, answer: Answer) -> None:
        self._request = request
        self._status = answer.status
        self._content = b"" if answer.body is None else json.dumps(answer.body).encode()
        headers = {"x-ms-request-id": REQUEST_ID, **answer.headers}
        if answer.body is not None:
            headers["Content-Type"] = "application/json; charset=utf-8"
        self._headers = case_insensitive_dict(headers)
        self._closed = False

    @property
    def request(self) -> HttpRequest:
        return self._request

    @property
    def status_code(self) -> int:
        return self._status

    @property
    def headers(self) -> Any:
        return self._headers

    @property
    def reason(self) -> str:
        return {200: "OK", 204: "No Content", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}.get(
            self._status, "Conflict"
        )

    @property
    def content_type(self) -> str | None:
        return self._headers.get("Content-Type")

    @property
    def encoding(self) -> str | None:
        return "utf-8"

    @property
    def url(self) -> str:
        return self._request.url

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def is_stream_consumed(self) -> bool:
        return True

    @property
    def content(self) -> bytes:
        return self._content

    def text(self, encoding: str | None = None) -> str:
        return self._content.decode(encoding or "utf-8")

    def json(self) -> Any:
        return json.loads(self._content)

    def raise_for_status(self) -> None:
        if self._status >= 400:
            raise HttpResponseError(response=self)

    def read(self) -> bytes:
        return self._content

    def iter_raw(self, **kwargs: Any) -> Iterator[bytes]:
        yield self._content

    def iter_bytes(self, **kwargs: Any) -> Iterator[bytes]:
        yield self._content

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> CannedResponse:
        return self

    def __exit__(self, *args: Any) -> None:
        self.close()


class ArmTransport(HttpTransport[HttpRequest, CannedResponse]):
    """Answers each (method, path) from `answers` and records what was sent; anything not in
    `answers` fails the test, so an unexpected request cannot pass unnoticed."""

    def __init__(self, answers: Mapping[tuple[str, str], Answer] | None = None) -> None:
        self.answers = dict(answers or {})
        self.sent: list[Sent] = []

    def send(self, request: Any, **kwargs: Any) -> CannedResponse:
        url = urlsplit(request.url)
        assert url.scheme == "https" and url.netloc == "management.azure.com", request.url
        self.sent.append(
            Sent(
                method=request.method,
                path=url.path,
                api_version=parse_qs(url.query).get("api-version", [None])[0],
                authorization=request.headers.get("Authorization"),
            )
        )
        answer = self.answers.get((request.method, url.path))
        if answer is None:
            pytest.fail(f"unexpected request {request.method} {request.url}")
        return CannedResponse(request, answer)

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> ArmTransport:
        return self

    def __exit__(self, *args: Any) -> None:
        pass


class NoNetwork(ArmTransport):
    """A transport for code that must make no request at all."""

    def send(self, request: Any, **kwargs: Any) -> CannedResponse:
        pytest.fail(f"a request was made: {request.method} {request.url}")


class FakeCredential:
    """A TokenCredential that hands out a fixed token and records the scopes asked for."""

    def __init__(self) -> None:
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken(TOKEN, int(time.time()) + 3600)


class NoCredential:
    """What azure-identity's credentials raise when nothing to sign in with is there."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        raise CredentialUnavailableError(message="Azure CLI not found on path; no environment credentials")


class UnusableCredential:
    """A credential the code under test must not touch."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        pytest.fail("a token was requested")


def evictor(transport: ArmTransport, credential: Any = None, **kwargs: Any) -> AksVmssEvictor:
    return AksVmssEvictor(
        node_resource_group=NODE_RG,
        gpu_pool_name=GPU_POOL,
        credential=FakeCredential() if credential is None else credential,
        client_kwargs={"transport": transport},
        **kwargs,
    )


GET_SCALE_SET = ("GET", SCALE_SET_PATH)
POST_EVICTION = ("POST", EVICTION_PATH)
API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}(-preview)?$")


# ------------------------------------------------------------------ the providerID
def test_parse_provider_id_reads_the_scale_set_instance_case_insensitively():
    pid = provider_id(resource_group=NODE_RG.lower()).replace("resourceGroups", "resourcegroups")
    assert parse_provider_id(pid) == VmssInstance(SUBSCRIPTION, NODE_RG.lower(), VMSS, INSTANCE)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("", id="empty"),
        pytest.param("aws:///us-east-1a/i-0abc123def4567890", id="aws"),
        pytest.param("kind://docker/kind/kind-worker", id="kind"),
        pytest.param(
            f"azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/{NODE_RG}/providers/Microsoft.Compute/"
            "virtualMachines/aks-nodepool1-12345678-0",
            id="availability-set-vm",
        ),
        pytest.param(provider_id(instance="aks-gpuspot-vm1"), id="instance-not-a-number"),
        pytest.param(provider_id().rsplit("/", 2)[0], id="no-instance"),
        pytest.param(provider_id().replace("/subscriptions/", "/subscription/"), id="misspelt"),
    ],
)
def test_parse_provider_id_names_the_bad_value_and_the_format(bad):
    with pytest.raises(EvictionError) as raised:
        parse_provider_id(bad)
    assert repr(bad) in str(raised.value)
    assert PROVIDER_ID_FORMAT in str(raised.value)


# ------------------------------------------------------------------ dry run
def test_calls_lists_the_read_then_the_eviction_and_makes_no_request(monkeypatch):
    # No credential given: even the default one must not be made for a dry run.
    monkeypatch.setattr(aks_eviction, "DefaultAzureCredential", lambda: pytest.fail("credential made"))
    backend: Evictor = AksVmssEvictor(NODE_RG, GPU_POOL, client_kwargs={"transport": NoNetwork()})
    assert backend.name == "aks"
    where = {"subscription_id": SUBSCRIPTION, "resource_group_name": NODE_RG, "vm_scale_set_name": VMSS}
    assert backend.calls(gpu_node()) == [
        ApiCall("azure-mgmt-compute", "virtual_machine_scale_sets.get", where, reads_only=True),
        ApiCall("azure-mgmt-compute", "virtual_machine_scale_set_vms.simulate_eviction", {**where, "instance_id": "3"}),
    ]


def test_calls_of_a_non_azure_node_is_an_error_without_a_request():
    with pytest.raises(EvictionError, match="aws:///"):
        evictor(NoNetwork(), UnusableCredential()).calls(gpu_node("aws:///us-east-1a/i-0abc"))


# ------------------------------------------------------------------ check and evict
def test_check_reads_the_scale_set_and_accepts_a_spot_node_of_the_gpu_pool():
    transport = ArmTransport({GET_SCALE_SET: Answer(200, scale_set_body())})
    credential = FakeCredential()
    evictor(transport, credential, subscription_id=SUBSCRIPTION).check(gpu_node())
    [sent] = transport.sent
    assert (sent.method, sent.path) == GET_SCALE_SET
    assert sent.api_version and API_VERSION.match(sent.api_version)
    assert sent.authorization == f"Bearer {TOKEN}"
    assert credential.scopes == [("https://management.azure.com/.default",)]


def test_a_spot_node_of_a_fallback_rank_may_be_evicted_and_no_other_pool():
    """A job on a fallback spot rank (gpuRanks) is drilled there; the on-demand rank is no spot pool."""
    transport = ArmTransport({GET_SCALE_SET: Answer(200, scale_set_body(pool="gpuspot2"))})
    evictor(transport, spot_pool_names=(GPU_POOL, "gpuspot2")).check(gpu_node())
    with pytest.raises(EvictionRefused, match=r"the GPU spot pool is 'gpuspot'$"):
        evictor(transport).check(gpu_node())
    with pytest.raises(EvictionRefused, match="the GPU spot pool is 'gpuspot' or 'gpuspot3'"):
        evictor(transport, spot_pool_names=(GPU_POOL, "gpuspot3")).check(gpu_node())


def test_evict_posts_simulate_eviction_and_reports_the_request_id():
    transport = ArmTransport({POST_EVICTION: Answer(204)})
    started = evictor(transport).evict(gpu_node())
    [sent] = transport.sent
    assert (sent.method, sent.path) == ("POST", EVICTION_PATH)
    assert sent.api_version and API_VERSION.match(sent.api_version)
    assert sent.authorization == f"Bearer {TOKEN}"
    assert isinstance(started, EvictionStarted)
    assert (started.node, started.backend) == (gpu_node().name, "aks")
    assert REQUEST_ID in started.detail
    assert VMSS in started.detail and f"instance {INSTANCE}" in started.detail


def test_check_then_evict_makes_exactly_the_calls_a_dry_run_lists():
    transport = ArmTransport({GET_SCALE_SET: Answer(200, scale_set_body()), POST_EVICTION: Answer(204)})
    backend = evictor(transport)
    listed = backend.calls(gpu_node())
    backend.check(gpu_node())
    backend.evict(gpu_node())
    assert [(s.method, s.path) for s in transport.sent] == [GET_SCALE_SET, POST_EVICTION]
    assert [c.reads_only for c in listed] == [True, False]


def test_the_default_credential_is_made_once_and_only_for_a_real_call(monkeypatch):
    made: list[FakeCredential] = []

    def default_credential() -> FakeCredential:
        made.append(FakeCredential())
        return made[-1]

    monkeypatch.setattr(aks_eviction, "DefaultAzureCredential", default_credential)
    transport = ArmTransport({GET_SCALE_SET: Answer(200, scale_set_body()), POST_EVICTION: Answer(204)})
    backend = AksVmssEvictor(NODE_RG, GPU_POOL, client_kwargs={"transport": transport})
    backend.calls(gpu_node())
    assert made == []
    backend.check(gpu_node())
    backend.evict(gpu_node())
    assert len(made) == 1
    assert [s.authorization for s in transport.sent] == [f"Bearer {TOKEN}"] * 2


# ------------------------------------------------------------------ refusals
@dataclass(frozen=True)
class Refusal:
    provider_id: str
    says: tuple[str, ...]  # fragments the refusal must contain
    scale_set: Mapping[str, Any] | None = None  # what ARM answers for the scale set; None: no request allowed
    subscription_id: str | None = SUBSCRIPTION


REFUSALS = {
    "another-subscription": Refusal(
        provider_id(subscription=OTHER_SUBSCRIPTION), ("another cluster", OTHER_SUBSCRIPTION, SUBSCRIPTION)
    ),
    "another-resource-group": Refusal(
        provider_id(resource_group="mc_other-rg_other-aks_westeurope"),
        ("another cluster", "mc_other-rg_other-aks_westeurope", NODE_RG),
    ),
    "another-resource-group-without-a-subscription-given": Refusal(
        provider_id(resource_group="MC_x_y_z"), ("another cluster", "MC_x_y_z"), subscription_id=None
    ),
    "a-cpu-pool-scale-set": Refusal(
        provider_id(), ("not in the GPU spot pool", "aks-managed-poolName='cpu'", GPU_POOL), scale_set_body(pool="cpu")
    ),
    "a-scale-set-without-a-pool-tag": Refusal(
        provider_id(),
        ("not in the GPU spot pool", "aks-managed-poolName=None"),
        {k: v for k, v in scale_set_body().items() if k != "tags"},
    ),
    "a-regular-priority-scale-set": Refusal(
        provider_id(), ("not a spot VM", "'Regular'"), scale_set_body(priority="Regular")
    ),
    "a-scale-set-without-a-priority": Refusal(provider_id(), ("not a spot VM", "None"), scale_set_body(priority=None)),
    "a-non-azure-provider-id": Refusal("aws:///us-east-1a/i-0abc123def4567890", ("not an AKS", "aws:///us-east-1a")),
    "a-malformed-provider-id": Refusal(
        "azure:///subscriptions/x/resourceGroups/y/virtualMachines/3", ("not an AKS", PROVIDER_ID_FORMAT)
    ),
    "an-empty-provider-id": Refusal("", ("not an AKS", "''")),
}


@pytest.mark.parametrize("case", REFUSALS.values(), ids=REFUSALS.keys())
def test_check_refuses_what_is_not_a_spot_node_of_the_stacks_gpu_pool(case: Refusal):
    if case.scale_set is None:
        transport: ArmTransport = NoNetwork()
        credential: Any = UnusableCredential()
    else:
        transport = ArmTransport({GET_SCALE_SET: Answer(200, case.scale_set)})
        credential = FakeCredential()
    backend = evictor(transport, credential, subscription_id=case.subscription_id)
    with pytest.raises(EvictionRefused) as raised:
        backend.check(gpu_node(case.provider_id))
    for fragment in case.says:
        assert fragment in str(raised.value)
    assert [(s.method, s.path) for s in transport.sent] == ([] if case.scale_set is None else [GET_SCALE_SET])


def test_evict_refuses_a_node_of_another_cluster_without_a_request():
    backend = evictor(NoNetwork(), UnusableCredential(), subscription_id=SUBSCRIPTION)
    with pytest.raises(EvictionRefused, match="another cluster"):
        backend.evict(gpu_node(provider_id(resource_group="mc_other_rg")))


# ------------------------------------------------------------------ errors
@dataclass(frozen=True)
class Failure:
    call: str  # "check" or "evict"
    answer: Answer
    says: tuple[str, ...]


NOT_FOUND = arm_error(
    "ResourceNotFound",
    f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{VMSS}' under resource group '{NODE_RG}' was not found.",
)
FORBIDDEN = arm_error(
    "AuthorizationFailed",
    "The client 'lab@example.com' with object id '11111111-2222-3333-4444-555555555555' does not have "
    f"authorization to perform action '{EVICT_PERMISSION}' over scope '{EVICTION_PATH[: -len('/simulateEviction')]}' "
    "or the scope is invalid.",
)
CONFLICT = arm_error("OperationNotAllowed", "The operation is not allowed while the VM is being deallocated.")

FAILURES = {
    "scale-set-not-found": Failure(
        "check", Answer(404, NOT_FOUND), (f"scale set {VMSS} does not exist", "may be gone", "404", "ResourceNotFound")
    ),
    "instance-not-found": Failure("evict", Answer(404, NOT_FOUND), ("does not exist", "may be gone", "404")),
    "read-forbidden": Failure(
        "check", Answer(403, FORBIDDEN), (f"lacks the permission {READ_PERMISSION}", "403", "AuthorizationFailed")
    ),
    "eviction-forbidden": Failure(
        "evict", Answer(403, FORBIDDEN), (f"lacks the permission {EVICT_PERMISSION}", "403", "does not have")
    ),
    "eviction-conflict": Failure("evict", Answer(409, CONFLICT), ("409", "OperationNotAllowed", "being deallocated")),
    "token-refused": Failure(
        "evict",
        Answer(401, arm_error("InvalidAuthenticationToken", "The access token is invalid.")),
        ("az login", "401", "InvalidAuthenticationToken"),
    ),
}


@pytest.mark.parametrize("case", FAILURES.values(), ids=FAILURES.keys())
def test_what_azure_refuses_is_an_eviction_error_with_its_reason(case: Failure):
    request = GET_SCALE_SET if case.call == "check" else POST_EVICTION
    transport = ArmTransport({request: case.answer})
    with pytest.raises(EvictionError) as raised:
        getattr(evictor(transport), case.call)(gpu_node())
    # Azure's answer is an error, not a refusal of the node: --force must not be able to skip it.
    assert type(raised.value) is EvictionError
    message = str(raised.value)
    for fragment in case.says:
        assert fragment in message
    assert TOKEN not in message
    assert [(s.method, s.path) for s in transport.sent] == [request]


@pytest.mark.parametrize("call", ["check", "evict"])
def test_missing_credentials_tell_how_to_sign_in_without_a_request(call):
    transport = ArmTransport({GET_SCALE_SET: Answer(200, scale_set_body()), POST_EVICTION: Answer(204)})
    with pytest.raises(EvictionError) as raised:
        getattr(evictor(transport, NoCredential()), call)(gpu_node())
    message = str(raised.value)
    for fragment in ("az login", "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "managed identity"):
        assert fragment in message
    assert "Azure CLI not found" in message
    assert transport.sent == []

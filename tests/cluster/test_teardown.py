"""The teardown sweeps against recorded leftovers, offline: each world holds things a sweep must
find and things it must leave alone (another cluster's, untagged, in use, the checkpoints),
every deletion is asserted exactly, and a second run finds nothing.

- Kubernetes: the loopback API server of tests/cluster/fake_kube.py (taught PVCs here, and
  a 403 for the error tests), through the real kubernetes client.
- Azure: the real azure-mgmt-resource, -compute and -network clients over an azure-core
  transport that keeps an ARM world in memory and answers ARM-shaped pages (with nextLink),
  404s and long-running deletes (202 + Location), so the SDKs' URL building, paging, polling
  and error mapping run for real.
- AWS: moto's elbv2, elb, ec2 and s3 for the world (requests recorded through botocore's
  own `provide-client-params` event), botocore's Stubber for what moto cannot script (a
  security group still in use, a refusal) and a session without credentials.
- Local: real processes started the way lab.local.LocalTarget starts them (node agents with
  the workdir's events file in their environment and their pid recorded, a real etcd, a real
  watchdog), stopped and checked by pid, beside bystanders that must survive.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import boto3
import psutil
import pytest
from azure.core.pipeline.transport import HttpTransport
from botocore.stub import Stubber
from moto import mock_aws

from lab.cluster import teardown
from lab.cluster.eviction import ApiCall
from lab.cluster.kube import connect
from lab.cluster.teardown import (
    AwsSweep,
    AzureSweep,
    KubernetesSweep,
    Leftover,
    LocalTeardown,
    Sweep,
    TeardownError,
)
from lab.cluster.teardown import azure as teardown_azure
from lab.cluster.teardown.base import Recorded
from lab.local import LocalTarget
from lab.local.etcd import EtcdServer, find_etcd
from lab.local.procs import ServerError, wait_until
from lab.vocab.job import ENV_EVENTS_FILE, ENV_NODE, JobSpec, RdzvBackend
from tests.cluster import fake_kube
from tests.cluster.fake_kube import FakeKube
from tests.cluster.test_aks_eviction import TOKEN, Answer, CannedResponse, FakeCredential, NoCredential, arm_error
from tests.runtime.notice.fakes import _status


def test_every_sweep_is_a_sweep(kube):
    sweeps: list[Sweep] = [
        KubernetesSweep(kube, "ns"),
        AzureSweep("sub", "stack", "rg", "nrg"),
        AwsSweep("us-east-1", "c", "vpc-1"),
        LocalTeardown("/nonexistent/elastic-lab-run"),
    ]
    assert [s.name for s in sweeps] == ["kubernetes", "azure", "aws", "local"]


# ====================================================================== Kubernetes

NS = "training"


class GuardedKube(FakeKube):
    """The fake API server, answering 403 (as RBAC would) for the (method, path)s in `forbidden`."""

    def __init__(self) -> None:
        super().__init__()
        self.forbidden: set[tuple[str, str]] = set()

    def _handle(self, http: Any, method: str, path: str, query: dict, body: Any) -> None:
        if (method, "/" + path) in self.forbidden:
            with self.lock:
                self.requests.append((method, "/" + path, query, body))
            message = f'{path} is forbidden: User "lab" cannot {method.lower()} it in namespace "{NS}"'
            return self._send(http, 403, _status(403, "Forbidden", message))
        return super()._handle(http, method, path, query, body)


@pytest.fixture
def api_server(monkeypatch) -> Iterator[GuardedKube]:
    # The fake serves no PersistentVolumeClaims of its own: teach it the collection.
    monkeypatch.setitem(fake_kube._NAMESPACED, ("api/v1", "persistentvolumeclaims"), "PersistentVolumeClaim")
    with GuardedKube() as server:
        yield server


@pytest.fixture
def kube(api_server, tmp_path):
    return connect(str(api_server.kubeconfig(tmp_path, namespace=NS)))


def _job(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"pytorchReplicaSpecs": {}},
    }


def _service(name: str, namespace: str, kind: str, ingress_ip: str | None = None) -> dict[str, Any]:
    status = {"loadBalancer": {"ingress": [{"ip": ingress_ip}]}} if ingress_ip else {}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"type": kind, "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]},
        "status": status,
    }


def _claim(name: str, namespace: str, volume: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteMany"], "volumeName": volume, "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound"},
    }


def _kube_world(api_server: FakeKube) -> None:
    api_server.put(_job("demo", NS))
    api_server.put(fake_kube.pod("demo-worker-0", NS, {"training.kubeflow.org/job-name": "demo"}))
    api_server.put(fake_kube.pod("demo-worker-1", NS, {"training.kubeflow.org/job-name": "demo"}))
    api_server.put(_service("demo-lb", NS, "LoadBalancer", "20.1.2.3"))
    api_server.put(_service("demo-c10d", NS, "ClusterIP"))  # no cloud resource: left alone
    api_server.put(_claim("checkpoints", NS, "esl-checkpoints-pv"))
    api_server.put(_claim("scratch", NS, "pvc-0a1b"))
    # Another namespace's: none of it is the sweep's.
    api_server.put(_job("other", "elsewhere"))
    api_server.put(fake_kube.pod("other-worker-0", "elsewhere", {"training.kubeflow.org/job-name": "other"}))
    api_server.put(_service("other-lb", "elsewhere", "LoadBalancer", "20.9.9.9"))
    api_server.put(_claim("other-data", "elsewhere", "pvc-9f9f"))


JOBS_PATH = f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs"
SERVICES_PATH = f"/api/v1/namespaces/{NS}/services"
CLAIMS_PATH = f"/api/v1/namespaces/{NS}/persistentvolumeclaims"


@dataclass(frozen=True)
class KubeCase:
    keep_checkpoints: bool
    found: list[tuple[str, str]]
    kept: list[tuple[str, str]]
    deletes: list[str]


KUBE_CASES = {
    "keep-checkpoints": KubeCase(
        True,
        found=[("PyTorchJob", "demo"), ("Service", "demo-lb")],
        kept=[("PersistentVolumeClaim", "checkpoints"), ("PersistentVolumeClaim", "scratch")],
        deletes=[f"DELETE {JOBS_PATH}/demo", f"DELETE {SERVICES_PATH}/demo-lb"],
    ),
    "delete-checkpoints": KubeCase(
        False,
        found=[
            ("PyTorchJob", "demo"),
            ("Service", "demo-lb"),
            ("PersistentVolumeClaim", "checkpoints"),
            ("PersistentVolumeClaim", "scratch"),
        ],
        kept=[],
        deletes=[
            f"DELETE {JOBS_PATH}/demo",
            f"DELETE {SERVICES_PATH}/demo-lb",
            f"DELETE {CLAIMS_PATH}/checkpoints",
            f"DELETE {CLAIMS_PATH}/scratch",
        ],
    ),
}


@pytest.mark.parametrize("case", KUBE_CASES.values(), ids=KUBE_CASES.keys())
def test_kubernetes_sweep_deletes_the_namespaces_jobs_load_balancers_and_claims(api_server, kube, case: KubeCase):
    _kube_world(api_server)
    sweep = KubernetesSweep(kube, NS, keep_checkpoints=case.keep_checkpoints)
    found = sweep.find()
    assert [(i.kind, i.id) for i in found] == case.found
    assert [(i.kind, i.id) for i in sweep.kept] == case.kept
    assert all(i.where == f"namespace {NS}" for i in found)
    assert "20.1.2.3" in next(i.reason for i in found if i.kind == "Service")
    assert api_server.calls("DELETE") == []  # find() only reads

    done = sweep.delete(found)
    assert api_server.calls("DELETE") == case.deletes
    assert done == [f"{kind} {name}" for kind, name in case.found]
    # The job went in the background, and the garbage collector took its pods with it.
    job_delete = next(q for m, p, q, _ in api_server.requests if m == "DELETE" and p.endswith("/demo"))
    assert job_delete.get("propagationPolicy") == ["Background"]
    assert [p["metadata"]["name"] for p in api_server.of_kind("Pod")] == ["other-worker-0"]
    # The other namespace and the ClusterIP Service are untouched.
    assert api_server.get("PyTorchJob", "other", "elsewhere") and api_server.get("Service", "other-lb", "elsewhere")
    assert api_server.get("PersistentVolumeClaim", "other-data", "elsewhere") and api_server.get(
        "Service", "demo-c10d", NS
    )

    again = KubernetesSweep(kube, NS, keep_checkpoints=case.keep_checkpoints)
    assert again.find() == []
    assert [(i.kind, i.id) for i in again.kept] == case.kept


def test_kubernetes_delete_of_what_is_already_gone_is_done(api_server, kube):
    _kube_world(api_server)
    sweep = KubernetesSweep(kube, NS, keep_checkpoints=False)
    found = sweep.find()
    sweep.delete(found)
    assert sweep.delete(found) == [f"{i.kind} {i.id} (already gone)" for i in found]


def test_kubernetes_without_the_training_operator_has_no_jobs(api_server, kube, monkeypatch):
    # No PyTorchJob resource on the server (404 for the collection): nothing to delete there.
    monkeypatch.delitem(fake_kube._NAMESPACED, ("apis/kubeflow.org/v1", "pytorchjobs"))
    api_server.put(_service("demo-lb", NS, "LoadBalancer"))
    found = KubernetesSweep(kube, NS).find()
    assert [(i.kind, i.id, "no address yet" in i.reason) for i in found] == [("Service", "demo-lb", True)]


def test_kubernetes_calls_list_the_requests_without_making_any(api_server, kube):
    before = len(api_server.requests)
    sweep = KubernetesSweep(kube, NS, keep_checkpoints=False)
    listed = sweep.calls()
    assert len(api_server.requests) == before
    assert [(c.operation, c.reads_only) for c in listed] == [
        ("list_namespaced_custom_object", True),
        ("list_namespaced_service", True),
        ("list_namespaced_persistent_volume_claim", True),
        ("delete_namespaced_custom_object", False),
        ("delete_namespaced_service", False),
        ("delete_namespaced_persistent_volume_claim", False),
    ]
    assert listed[3].params["name"] == "<each PyTorchJob found>"
    # Once find() ran, the deletions are the ones it would make.
    _kube_world(api_server)
    sweep.find()
    assert [(c.operation, c.params.get("name")) for c in sweep.calls() if not c.reads_only] == [
        ("delete_namespaced_custom_object", "demo"),
        ("delete_namespaced_service", "demo-lb"),
        ("delete_namespaced_persistent_volume_claim", "checkpoints"),
        ("delete_namespaced_persistent_volume_claim", "scratch"),
    ]


def test_kubernetes_refusals_are_teardown_errors_and_the_rest_is_still_deleted(api_server, kube):
    _kube_world(api_server)
    api_server.forbidden.add(("DELETE", f"{SERVICES_PATH}/demo-lb"))
    sweep = KubernetesSweep(kube, NS)
    with pytest.raises(TeardownError) as raised:
        sweep.delete(sweep.find())
    message = str(raised.value)
    assert "could not delete 1 of 2" in message and "Service demo-lb" in message and "403" in message
    assert "lacks this permission" in message
    assert raised.value.deleted == ["PyTorchJob demo"]
    assert api_server.get("PyTorchJob", "demo", NS) is None


def test_kubernetes_a_refused_listing_is_a_teardown_error(api_server, kube):
    api_server.forbidden.add(("GET", SERVICES_PATH))
    with pytest.raises(TeardownError, match=f"listing the services of {NS}: 403"):
        KubernetesSweep(kube, NS).find()


def test_kubernetes_an_unreachable_cluster_is_a_teardown_error(tmp_path):
    with GuardedKube() as server:
        config = server.kubeconfig(tmp_path)
    gone = connect(str(config), probe=False)  # the server is closed now
    gone.api.configuration.retries = 0
    with pytest.raises(TeardownError, match="no Kubernetes API server reachable"):
        KubernetesSweep(gone, NS).find()


# ====================================================================== Azure

SUB = "0b1f6471-1bf0-4dda-aec3-111122223333"
STACK = "aks-dev"
AKS_CLUSTER = "esl-aks-dev"
RG = "esl-aks-dev-rg"
NODE_RG = "MC_esl-aks-dev-rg_esl-aks-dev_eastus"
ACCOUNT = "eslck0123456789abcdef"
TAG = "elastic-spot-lab-cluster"
LB_FRONTEND = (
    f"/subscriptions/{SUB}/resourceGroups/{NODE_RG}/providers/Microsoft.Network/loadBalancers/kubernetes/"
    "frontendIPConfigurations/a2222"
)
VM = (
    f"/subscriptions/{SUB}/resourceGroups/{NODE_RG}/providers/Microsoft.Compute/virtualMachineScaleSets/aks-cpu-1/"
    "virtualMachines/0"
)


def _group_id(name: str) -> str:
    return f"/subscriptions/{SUB}/resourceGroups/{name}"


def _group(name: str, tags: Mapping[str, str], managed_by: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": _group_id(name),
        "name": name,
        "type": "Microsoft.Resources/resourceGroups",
        "location": "eastus",
        "tags": dict(tags),
        "properties": {"provisioningState": "Succeeded"},
    }
    if managed_by:
        body["managedBy"] = managed_by
    return body


def _storage_account(group: str, name: str) -> dict[str, Any]:
    return {
        "id": f"{_group_id(group)}/providers/Microsoft.Storage/storageAccounts/{name}",
        "name": name,
        "type": "Microsoft.Storage/storageAccounts",
        "location": "eastus",
        "kind": "StorageV2",
        "sku": {"name": "Standard_LRS", "tier": "Standard"},
        "tags": {"project": "elastic-spot-lab"},
    }


def _disk_id(name: str, group: str = NODE_RG) -> str:
    return f"{_group_id(group)}/providers/Microsoft.Compute/disks/{name}"


def _disk(name: str, tags: Mapping[str, str], state: str = "Unattached", group: str = NODE_RG) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": _disk_id(name, group),
        "name": name,
        "type": "Microsoft.Compute/disks",
        "location": "eastus",
        "tags": dict(tags),
        "sku": {"name": "StandardSSD_LRS", "tier": "Standard"},
        "properties": {
            "creationData": {"createOption": "Empty"},
            "diskSizeGB": 10,
            "diskState": state,
            "provisioningState": "Succeeded",
            "timeCreated": "2026-01-01T00:00:00.0000000+00:00",
        },
    }
    if state == "Attached":
        body["managedBy"] = VM
    return body


def _ip_id(name: str) -> str:
    return f"{_group_id(NODE_RG)}/providers/Microsoft.Network/publicIPAddresses/{name}"


def _public_ip(name: str, tags: Mapping[str, str], used_by: str | None = None) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "provisioningState": "Succeeded",
        "ipAddress": "20.1.2.3",
        "publicIPAddressVersion": "IPv4",
        "publicIPAllocationMethod": "Static",
        "idleTimeoutInMinutes": 4,
    }
    if used_by:
        properties["ipConfiguration"] = {"id": used_by}
    return {
        "id": _ip_id(name),
        "name": name,
        "type": "Microsoft.Network/publicIPAddresses",
        "location": "eastus",
        "tags": dict(tags),
        "sku": {"name": "Standard", "tier": "Regional"},
        "properties": properties,
    }


PVC_TAGS = {
    "kubernetes.io-created-for-pvc-name": "scratch",
    "kubernetes.io-created-for-pvc-namespace": NS,
    "kubernetes.io-created-for-pv-name": "pvc-1111",
    "k8s-azure-created-by": "kubernetes-azure-dd",
}


def _azure_world() -> list[dict[str, Any]]:
    """An AKS stack after `pulumi destroy` with its checkpoints kept, plus what is not its."""
    return [
        # The stack's group, kept by Pulumi with the checkpoint account in it.
        _group(RG, {TAG: AKS_CLUSTER, "project": "elastic-spot-lab"}),
        _storage_account(RG, ACCOUNT),
        # AKS's node group (AKS copies the cluster's tags onto it): never deleted as a whole.
        _group(NODE_RG, {TAG: AKS_CLUSTER}, managed_by=f"{_group_id(RG)}/providers/Microsoft.ContainerService/x"),
        # A tagged group with nothing of the checkpoints in it: a leftover.
        _group("esl-aks-dev-scratch", {TAG: AKS_CLUSTER}),
        _disk("scratch-data", {}, group="esl-aks-dev-scratch"),
        # A tagged group holding a storage account: kept with the checkpoints unless asked.
        _group("esl-aks-dev-old", {TAG: AKS_CLUSTER}),
        _storage_account("esl-aks-dev-old", "eslckold0000000000"),
        # Another cluster's group: never.
        _group("other-rg", {TAG: "esl-other"}),
        _disk("pvc-9999", PVC_TAGS, group="other-rg"),
        # In the node group: CSI disks (tagged, named pvc-, attached), a node's OS disk.
        _disk("pvc-1111", PVC_TAGS),
        _disk("pvc-3333", {}),
        _disk("pvc-2222", PVC_TAGS, state="Attached"),
        _disk("aks-cpu-1_OsDisk_1_abc", {"aks-managed-poolName": "cpu"}, state="Attached"),
        # Public IPs: one a deleted Service left, one still in use, AKS's outbound IP.
        _public_ip("kubernetes-a1111", {"k8s-azure-service": f"{NS}/demo-lb", "k8s-azure-cluster-name": "kubernetes"}),
        _public_ip("kubernetes-a2222", {"k8s-azure-service": f"{NS}/live-lb"}, used_by=LB_FRONTEND),
        _public_ip("aks-outbound-1", {"aks-managed-type": "aks-slb-managed-outbound-ip"}, used_by=LB_FRONTEND),
    ]


@dataclass
class ArmRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    authorization: str | None


class ArmWorld(HttpTransport):
    """An ARM endpoint over an in-memory subscription: the list pages, deletions and
    long-running operations the sweep's SDK calls make, shaped as ARM answers them
    (pages of `page_size` with a nextLink, 404 ResourceGroupNotFound, a resource group
    deletion answered 202 with a Location to poll). `refuse` answers (method, path
    suffix) with a canned error. Anything else fails the test."""

    def __init__(self, resources: list[dict[str, Any]], page_size: int = 2) -> None:
        self.resources = {r["id"].lower(): r for r in resources}
        self.page_size = page_size
        self.sent: list[ArmRequest] = []
        self.refuse: dict[tuple[str, str], Answer] = {}
        self._operations = 0

    # ------------------------------------------------------------------ azure-core transport
    def send(self, request: Any, **kwargs: Any) -> CannedResponse:
        url = urlsplit(request.url)
        assert url.scheme == "https" and url.netloc == "management.azure.com", request.url
        path, query = unquote(url.path), parse_qs(url.query)
        self.sent.append(ArmRequest(request.method, path, query, request.headers.get("Authorization")))
        for (method, suffix), answer in self.refuse.items():
            if request.method == method and path.lower().endswith(suffix.lower()):
                return CannedResponse(request, answer)
        return CannedResponse(request, self._answer(request.method, path, query))

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> ArmWorld:
        return self

    def __exit__(self, *args: Any) -> None:
        pass

    # ------------------------------------------------------------------ ARM
    def groups(self) -> list[str]:
        return [r["name"] for r in self.resources.values() if r["type"] == "Microsoft.Resources/resourceGroups"]

    def names(self, type_: str) -> list[str]:
        return sorted(r["name"] for r in self.resources.values() if r["type"] == type_)

    def deletes(self) -> list[str]:
        return [r.path for r in self.sent if r.method == "DELETE"]

    def _in_group(self, group: str, type_: str | None = None) -> list[dict[str, Any]]:
        prefix = _group_id(group).lower() + "/"
        return [r for k, r in self.resources.items() if k.startswith(prefix) and type_ in (None, r["type"])]

    def _page(self, items: list[dict[str, Any]], path: str, query: dict[str, list[str]]) -> Answer:
        start = int((query.get("$skiptoken") or ["0"])[0])
        page: dict[str, Any] = {"value": items[start : start + self.page_size]}
        if start + self.page_size < len(items):
            rest = {k: v[0] for k, v in query.items() if k != "$skiptoken"}
            rest["$skiptoken"] = str(start + self.page_size)
            page["nextLink"] = f"https://management.azure.com{path}?" + "&".join(f"{k}={v}" for k, v in rest.items())
        return Answer(200, page)

    def _answer(self, method: str, path: str, query: dict[str, list[str]]) -> Answer:
        parts = path.strip("/").split("/")
        low = [p.lower() for p in parts]
        assert low[:2] == ["subscriptions", SUB.lower()], path
        rest, names = low[2:], parts[2:]
        if method == "GET" and rest == ["resourcegroups"]:
            wanted = re.fullmatch(r"tagName eq '([^']+)'", (query.get("$filter") or [""])[0])
            assert wanted, query
            groups = [
                r
                for r in self.resources.values()
                if r["type"] == "Microsoft.Resources/resourceGroups"
                and wanted[1].lower() in {t.lower() for t in r.get("tags", {})}
            ]
            return self._page(groups, path, query)
        if method == "GET" and rest[:1] == ["operationresults"]:
            return Answer(200)  # the deletion it tracks is done
        if rest[:1] != ["resourcegroups"] or len(rest) < 2:
            pytest.fail(f"unexpected request {method} {path}")
        group = names[1]
        exists = _group_id(group).lower() in self.resources
        if method == "DELETE" and len(rest) == 2:
            if not exists:
                return Answer(404, arm_error("ResourceGroupNotFound", f"Resource group '{group}' could not be found."))
            for key in [k for k in self.resources if k.startswith(_group_id(group).lower())]:
                del self.resources[key]
            self._operations += 1
            location = f"https://management.azure.com/subscriptions/{SUB}/operationresults/op{self._operations}"
            return Answer(202, None, {"Location": f"{location}?api-version=2024-03-01", "Retry-After": "0"})
        if not exists:
            return Answer(404, arm_error("ResourceGroupNotFound", f"Resource group '{group}' could not be found."))
        if method == "GET" and rest[2:] == ["resources"]:
            wanted = re.fullmatch(r"resourceType eq '([^']+)'", (query.get("$filter") or [""])[0])
            assert wanted, query
            return self._page(self._in_group(group, wanted[1]), path, query)
        types = {"microsoft.compute/disks": "Microsoft.Compute/disks"}
        types["microsoft.network/publicipaddresses"] = "Microsoft.Network/publicIPAddresses"
        kind = types.get("/".join(rest[3:5])) if rest[2:3] == ["providers"] else None
        if kind and method == "GET" and len(rest) == 5:
            return self._page(self._in_group(group, kind), path, query)
        if kind and method == "DELETE" and len(rest) == 6:
            # ARM answers the deletion of a resource that is not there with 204.
            return Answer(200 if self.resources.pop(path.lower(), None) else 204)
        pytest.fail(f"unexpected request {method} {path}")


def _path_of(call: ApiCall) -> str:
    """The ARM path a listed deletion's SDK call requests."""
    if call.operation == "resource_groups.begin_delete":
        return f"/subscriptions/{SUB}/resourcegroups/{call.params['resource_group_name']}"
    if call.operation == "disks.begin_delete":
        return _disk_id(call.params["disk_name"], call.params["resource_group_name"])
    assert call.operation == "public_ip_addresses.begin_delete", call
    return _ip_id(call.params["public_ip_address_name"])


def _azure(world: ArmWorld, credential: Any = None, **kwargs: Any) -> AzureSweep:
    args: dict[str, Any] = {
        "credential": FakeCredential() if credential is None else credential,
        "client_kwargs": {"transport": world, "polling_interval": 0},
        "storage_account": ACCOUNT,
        **kwargs,
    }
    return AzureSweep(SUB, STACK, RG, NODE_RG, **args)


@dataclass(frozen=True)
class AzureCase:
    keep_checkpoints: bool
    found: list[tuple[str, str]]
    kept: list[str]  # names
    deletes: list[str]
    groups_left: list[str]
    kwargs: Mapping[str, Any] = field(default_factory=dict)


_COMMON_DELETES = [
    _ip_id("kubernetes-a1111"),
    _disk_id("pvc-1111"),
    _disk_id("pvc-3333"),
]
AZURE_CASES = {
    "keep-checkpoints": AzureCase(
        True,
        found=[
            ("resource-group", _group_id("esl-aks-dev-scratch")),
            ("disk", _disk_id("pvc-1111")),
            ("disk", _disk_id("pvc-3333")),
            ("public-ip", _ip_id("kubernetes-a1111")),
        ],
        kept=[RG, NODE_RG, "esl-aks-dev-old", "pvc-2222", "kubernetes-a2222"],
        deletes=[*_COMMON_DELETES, f"/subscriptions/{SUB}/resourcegroups/esl-aks-dev-scratch"],
        groups_left=[RG, NODE_RG, "esl-aks-dev-old", "other-rg"],
    ),
    "delete-checkpoints": AzureCase(
        False,
        found=[
            ("resource-group", _group_id(RG)),
            ("resource-group", _group_id("esl-aks-dev-scratch")),
            ("resource-group", _group_id("esl-aks-dev-old")),
            ("disk", _disk_id("pvc-1111")),
            ("disk", _disk_id("pvc-3333")),
            ("public-ip", _ip_id("kubernetes-a1111")),
        ],
        kept=[NODE_RG, "pvc-2222", "kubernetes-a2222"],
        deletes=[
            *_COMMON_DELETES,
            f"/subscriptions/{SUB}/resourcegroups/{RG}",
            f"/subscriptions/{SUB}/resourcegroups/esl-aks-dev-scratch",
            f"/subscriptions/{SUB}/resourcegroups/esl-aks-dev-old",
        ],
        groups_left=[NODE_RG, "other-rg"],
    ),
    "cluster-name-given": AzureCase(
        True,
        found=[
            ("resource-group", _group_id("esl-aks-dev-scratch")),
            ("disk", _disk_id("pvc-1111")),
            ("disk", _disk_id("pvc-3333")),
            ("public-ip", _ip_id("kubernetes-a1111")),
        ],
        kept=[RG, NODE_RG, "esl-aks-dev-old", "pvc-2222", "kubernetes-a2222"],
        deletes=[*_COMMON_DELETES, f"/subscriptions/{SUB}/resourcegroups/esl-aks-dev-scratch"],
        groups_left=[RG, NODE_RG, "esl-aks-dev-old", "other-rg"],
        kwargs={"cluster_name": AKS_CLUSTER},
    ),
}


@pytest.mark.parametrize("case", AZURE_CASES.values(), ids=AZURE_CASES.keys())
def test_azure_sweep_finds_and_deletes_only_the_stacks_leftovers(case: AzureCase):
    world = ArmWorld(_azure_world())
    sweep = _azure(world, keep_checkpoints=case.keep_checkpoints, **case.kwargs)
    found = sweep.find()
    assert [(i.kind, i.id) for i in found] == case.found
    assert [i.id.rsplit("/", 1)[1] for i in sweep.kept] == case.kept
    assert world.deletes() == []  # find() only reads
    assert all(r.authorization == f"Bearer {TOKEN}" for r in world.sent)
    reasons = {i.id.rsplit("/", 1)[1]: i.reason for i in [*found, *sweep.kept]}
    assert "PVC training/scratch" in reasons["pvc-1111"] and "named like" in reasons["pvc-3333"]
    assert "in use" in reasons["pvc-2222"] and VM in reasons["pvc-2222"]
    assert f"in use by {LB_FRONTEND}" in reasons["kubernetes-a2222"]
    assert "AKS's node resource group" in reasons[NODE_RG]
    if case.keep_checkpoints:
        assert ACCOUNT in reasons[RG] and "eslckold0000000000" in reasons["esl-aks-dev-old"]
    # The stack's dry run lists exactly the deletions that follow.
    planned = [c for c in sweep.calls() if not c.reads_only]

    done = sweep.delete(found)
    assert world.deletes() == case.deletes
    assert [_path_of(c) for c in planned] == case.deletes
    # Each resource group deletion was polled to its end through its Location.
    polls = [r.path for r in world.sent if "operationresults" in r.path]
    assert len(polls) == sum("/providers/" not in d for d in case.deletes)
    assert sorted(done) == sorted(f"{kind} {id_}" for kind, id_ in case.found)
    assert sorted(world.groups()) == sorted(case.groups_left)
    assert "pvc-9999" in world.names("Microsoft.Compute/disks")  # another cluster's group's disk
    assert "aks-outbound-1" in world.names("Microsoft.Network/publicIPAddresses")

    again = _azure(world, keep_checkpoints=case.keep_checkpoints, cluster_name=AKS_CLUSTER)
    assert again.find() == []


def test_azure_delete_of_what_is_already_gone_is_done():
    world = ArmWorld(_azure_world())
    sweep = _azure(world)
    found = sweep.find()
    sweep.delete(found)
    # The group answers 404 now; the disk and IP deletions 204, as ARM does.
    assert sweep.delete(found) == [
        f"public-ip {_ip_id('kubernetes-a1111')}",
        f"disk {_disk_id('pvc-1111')}",
        f"disk {_disk_id('pvc-3333')}",
        f"resource-group {_group_id('esl-aks-dev-scratch')} (already gone)",
    ]


def test_azure_without_the_stacks_group_or_a_cluster_name_looks_for_no_tagged_group():
    world = ArmWorld([r for r in _azure_world() if r["id"].lower() != _group_id(RG).lower()])
    sweep = _azure(world)
    found = sweep.find()
    assert {i.kind for i in found} == {"disk", "public-ip"}
    assert sweep.notes and TAG in sweep.notes[0] and RG in sweep.notes[0]


def test_azure_a_gone_node_resource_group_has_nothing_left_in_it():
    world = ArmWorld([r for r in _azure_world() if not r["id"].lower().startswith(_group_id(NODE_RG).lower())])
    sweep = _azure(world)
    assert [(i.kind, i.id) for i in sweep.find()] == [("resource-group", _group_id("esl-aks-dev-scratch"))]


def test_azure_calls_make_no_request_and_no_credential(monkeypatch):
    monkeypatch.setattr(teardown_azure, "_default_azure_credential", lambda: pytest.fail("credential made"))
    world = ArmWorld(_azure_world())
    sweep = AzureSweep(SUB, STACK, RG, NODE_RG, client_kwargs={"transport": world})
    listed = sweep.calls()
    assert world.sent == []
    assert [(c.api, c.operation, c.reads_only) for c in listed] == [
        ("azure-mgmt-resource", "resource_groups.list", True),
        ("azure-mgmt-compute", "disks.list_by_resource_group", True),
        ("azure-mgmt-network", "public_ip_addresses.list", True),
        ("azure-mgmt-resource", "resources.list_by_resource_group", True),
        ("azure-mgmt-network", "public_ip_addresses.begin_delete", False),
        ("azure-mgmt-compute", "disks.begin_delete", False),
        ("azure-mgmt-resource", "resource_groups.begin_delete", False),
    ]
    assert listed[0].params == {"subscription_id": SUB, "filter": f"tagName eq '{TAG}'"}


def test_azure_default_credential_is_made_once_for_a_real_call(monkeypatch):
    made: list[FakeCredential] = []
    monkeypatch.setattr(teardown_azure, "_default_azure_credential", lambda: made.append(FakeCredential()) or made[-1])
    world = ArmWorld(_azure_world())
    AzureSweep(SUB, STACK, RG, NODE_RG, client_kwargs={"transport": world}).find()
    assert len(made) == 1 and made[0].scopes


def test_azure_missing_credentials_say_how_to_log_in_without_a_request():
    world = ArmWorld(_azure_world())
    with pytest.raises(TeardownError) as raised:
        _azure(world, NoCredential()).find()
    message = str(raised.value)
    assert "azure-mgmt-resource: resource_groups.list(" in message
    for fragment in ("az login", "AZURE_CLIENT_ID", "managed identity", "Azure CLI not found"):
        assert fragment in message
    assert world.sent == []


@pytest.mark.parametrize(
    ("refused", "answer", "says"),
    [
        pytest.param(
            ("GET", "/providers/Microsoft.Compute/disks"),
            Answer(403, arm_error("AuthorizationFailed", "The client 'lab@example.com' does not have authorization")),
            ("Azure denied azure-mgmt-compute: disks.list_by_resource_group(", "403", "AuthorizationFailed", "role"),
            id="forbidden",
        ),
        pytest.param(
            ("GET", "/resourcegroups"),
            Answer(401, arm_error("InvalidAuthenticationToken", "The access token is invalid.")),
            ("resource_groups.list", "az login", "401", "InvalidAuthenticationToken"),
            id="token-refused",
        ),
        pytest.param(
            ("GET", "/providers/Microsoft.Network/publicIPAddresses"),
            Answer(500, arm_error("InternalServerError", "Something went wrong.")),
            ("public_ip_addresses.list", "HTTP 500", "InternalServerError"),
            id="server-error",
        ),
    ],
)
def test_azure_refusals_are_teardown_errors_naming_the_call(refused, answer, says):
    world = ArmWorld(_azure_world())
    world.refuse[refused] = answer
    # No retries: the SDK would retry a 500 with its default policy.
    sweep = _azure(world, client_kwargs={"transport": world, "retry_total": 0})
    with pytest.raises(TeardownError) as raised:
        sweep.find()
    message = str(raised.value)
    for fragment in says:
        assert fragment in message
    assert TOKEN not in message
    assert world.deletes() == []


def test_azure_a_failed_deletion_names_it_after_trying_the_rest():
    world = ArmWorld(_azure_world())
    world.refuse[("DELETE", "/disks/pvc-1111")] = Answer(
        409, arm_error("OperationNotAllowed", "Disk pvc-1111 is attached to VM aks-cpu-1.")
    )
    sweep = _azure(world, client_kwargs={"transport": world, "retry_total": 0, "polling_interval": 0})
    with pytest.raises(TeardownError) as raised:
        sweep.delete(sweep.find())
    assert "could not delete 1 of 4" in str(raised.value) and "OperationNotAllowed" in str(raised.value)
    assert raised.value.deleted == [
        f"public-ip {_ip_id('kubernetes-a1111')}",
        f"disk {_disk_id('pvc-3333')}",
        f"resource-group {_group_id('esl-aks-dev-scratch')}",
    ]


def test_azure_refuses_to_delete_what_is_outside_the_sweep():
    world = ArmWorld(_azure_world())
    sweep = _azure(world)
    outside = [
        Leftover("disk", _disk_id("pvc-9999", "other-rg"), "resource group other-rg", "hand-made"),
        Leftover("resource-group", f"/subscriptions/{'f' * 8}-0000-0000-0000-000000000000/resourceGroups/x", "", ""),
        Leftover("volume", "vol-1", "", ""),
    ]
    for item in outside:
        with pytest.raises(TeardownError):
            sweep.delete([item])
    assert world.sent == []


# ====================================================================== AWS

REGION = "us-east-1"
EKS_CLUSTER = "esl-eks-dev"
OTHER_CLUSTER = "esl-other"
BUCKET = "esl-eks-dev-ckpt-20260101"
REPOSITORY = f"{EKS_CLUSTER}/trainer"
REGISTRY = f"123456789012.dkr.ecr.{REGION}.amazonaws.com/{REPOSITORY}"
AWS_KEY_ID, AWS_SECRET = "AKIATESTTESTTEST0000", "testing-secret-do-not-print"


@pytest.fixture
def aws(monkeypatch) -> Iterator[boto3.session.Session]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": AWS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": "/nonexistent/aws-config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        yield boto3.session.Session(region_name=REGION)


@dataclass
class Recorder:
    """Every request the clients make, as (service, operation, params), through botocore's
    own `provide-client-params` event (the parameters as the caller gave them)."""

    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def attach(self, clients: Mapping[str, Any]) -> dict[str, Any]:
        for service, client in clients.items():

            def record(params: Mapping[str, Any], model: Any, service: str = service, **kwargs: Any) -> None:
                self.calls.append((service, model.name, dict(params)))

            client.meta.events.register("provide-client-params", record)
        return dict(clients)

    def deletes(self) -> list[tuple[str, str, dict[str, Any]]]:
        return [c for c in self.calls if c[1].startswith("Delete")]


def _tags(resource_type: str, **tags: str) -> list[dict[str, Any]]:
    return [{"ResourceType": resource_type, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def _aws_world(session: boto3.session.Session) -> dict[str, Any]:
    """An EKS stack's VPC after its cluster is gone, with what its controllers left and what
    must stay; returns the ids by role."""
    ec2, elb, elbv2, s3, ecr = (session.client(s) for s in ("ec2", "elb", "elbv2", "s3", "ecr"))
    ids: dict[str, Any] = {}
    vpc = ids["vpc"] = ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    other_vpc = ec2.create_vpc(CidrBlock="10.50.0.0/16")["Vpc"]["VpcId"]
    a = ec2.create_subnet(VpcId=vpc, CidrBlock="10.40.1.0/24", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    b = ec2.create_subnet(VpcId=vpc, CidrBlock="10.40.2.0/24", AvailabilityZone="us-east-1b")["Subnet"]["SubnetId"]
    elsewhere = ec2.create_subnet(VpcId=other_vpc, CidrBlock="10.50.1.0/24", AvailabilityZone="us-east-1a")["Subnet"][
        "SubnetId"
    ]
    mine = f"kubernetes.io/cluster/{EKS_CLUSTER}"

    def balancer(name: str, subnets: list[str], **tags: str) -> str:
        tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
        kwargs: dict[str, Any] = {"Tags": tag_list} if tag_list else {}
        return elbv2.create_load_balancer(Name=name, Subnets=subnets, Type="network", **kwargs)["LoadBalancers"][0][
            "LoadBalancerArn"
        ]

    # elbv2: the Load Balancer Controller's and the service controller's; another cluster's,
    # an untagged one, one of ours outside the VPC.
    ids["lbc_lb"] = balancer("k8s-training-demolb-0a1b", [a, b], **{"elbv2.k8s.aws/cluster": EKS_CLUSTER})
    ids["nlb"] = balancer("a0123456789abcdef", [a, b], **{mine: "owned", "kubernetes.io/service-name": "training/x"})
    balancer("k8s-other-lb", [a, b], **{"elbv2.k8s.aws/cluster": OTHER_CLUSTER})
    balancer("hand-made", [a, b])
    balancer("elsewhere-lb", [elsewhere], **{"elbv2.k8s.aws/cluster": EKS_CLUSTER})
    # A target group of the controller, still behind a listener of its load balancer: the
    # load balancer must go first.
    tg = elbv2.create_target_group(
        Name="k8s-training-demolb-tg",
        Protocol="TCP",
        Port=80,
        VpcId=vpc,
        TargetType="ip",
        Tags=[{"Key": "elbv2.k8s.aws/cluster", "Value": EKS_CLUSTER}],
    )["TargetGroups"][0]["TargetGroupArn"]
    ids["tg"] = tg
    elbv2.create_listener(
        LoadBalancerArn=ids["lbc_lb"],
        Protocol="TCP",
        Port=80,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}],
    )
    elbv2.create_target_group(Name="hand-made-tg", Protocol="TCP", Port=80, VpcId=vpc, TargetType="ip")
    # Classic ELBs of the service controller: ours and another cluster's.
    listener = [{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}]
    ids["clb"] = "a1b2c3d4e5f60718"
    elb.create_load_balancer(
        LoadBalancerName=ids["clb"], Listeners=listener, Subnets=[a], Tags=[{"Key": mine, "Value": "owned"}]
    )
    elb.create_load_balancer(
        LoadBalancerName="f0e1d2c3b4a59687",
        Listeners=listener,
        Subnets=[a],
        Tags=[{"Key": f"kubernetes.io/cluster/{OTHER_CLUSTER}", "Value": "owned"}],
    )

    # ENIs: the VPC CNI's (untagged, and tagged), another cluster's, a user's, one in use,
    # one in another VPC.
    def eni(subnet: str, description: str, **tags: str) -> str:
        kwargs: dict[str, Any] = {"TagSpecifications": _tags("network-interface", **tags)} if tags else {}
        return ec2.create_network_interface(SubnetId=subnet, Description=description, **kwargs)["NetworkInterface"][
            "NetworkInterfaceId"
        ]

    ids["cni_eni"] = eni(a, "aws-K8S-i-0123456789abcdef0")
    ids["tagged_eni"] = eni(b, "", **{"cluster.k8s.amazonaws.com/name": EKS_CLUSTER})
    eni(a, "aws-K8S-i-0fedcba9876543210", **{"cluster.k8s.amazonaws.com/name": OTHER_CLUSTER})
    eni(a, "my own interface")
    eni(elsewhere, "aws-K8S-i-0aaaaaaaaaaaaaaaa")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=a)["Instances"][0]["InstanceId"]
    attached = eni(a, "aws-K8S-i-0bbbbbbbbbbbbbbbb", **{"cluster.k8s.amazonaws.com/name": EKS_CLUSTER})
    ec2.attach_network_interface(NetworkInterfaceId=attached, InstanceId=instance, DeviceIndex=1)

    # EBS volumes of PVCs: ours available, ours in use, another cluster's, one with no cluster tag.
    def volume(**tags: str) -> str:
        return ec2.create_volume(AvailabilityZone="us-east-1a", Size=10, TagSpecifications=_tags("volume", **tags))[
            "VolumeId"
        ]

    pvc = {"kubernetes.io/created-for/pvc/name": "scratch", "kubernetes.io/created-for/pvc/namespace": "training"}
    ids["volume"] = volume(**pvc, **{mine: "owned"})
    ids["used_volume"] = volume(**pvc, **{mine: "owned"})
    ec2.attach_volume(VolumeId=ids["used_volume"], InstanceId=instance, Device="/dev/sdf")
    volume(**pvc, KubernetesCluster=OTHER_CLUSTER)
    volume(**pvc)
    volume(Name="data")  # no PVC tag at all

    # Security groups: the controllers' and the stack's own (Pulumi deletes that one).
    def group(name: str, **tags: str) -> str:
        return ec2.create_security_group(
            GroupName=name, Description=name, VpcId=vpc, TagSpecifications=_tags("security-group", **tags)
        )["GroupId"]

    ids["lbc_sg"] = group("k8s-traffic-esleksdev-0a1b", **{"elbv2.k8s.aws/cluster": EKS_CLUSTER})
    ids["elb_sg"] = group("k8s-elb-a1b2c3d4e5f60718", **{mine: "owned"})
    group("esl-eks-dev-nodes", **{"elastic-spot-lab-cluster": EKS_CLUSTER})
    group("k8s-elb-f0e1d2c3b4a59687", **{f"kubernetes.io/cluster/{OTHER_CLUSTER}": "owned"})

    # The checkpoint bucket (versioned, with versions and a delete marker) and a foreign one.
    s3.create_bucket(Bucket=BUCKET)
    s3.put_bucket_tagging(
        Bucket=BUCKET, Tagging={"TagSet": [{"Key": "elastic-spot-lab-cluster", "Value": EKS_CLUSTER}]}
    )
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    for body in (b"step-50", b"step-100"):
        s3.put_object(Bucket=BUCKET, Key="ckpt/latest.pt", Body=body)
    s3.delete_object(Bucket=BUCKET, Key="ckpt/latest.pt")
    s3.create_bucket(Bucket="someone-elses-bucket")

    # The stack's image repository, with the training image pushed; another cluster's.
    for name, cluster in ((REPOSITORY, EKS_CLUSTER), (f"{OTHER_CLUSTER}/trainer", OTHER_CLUSTER)):
        ecr.create_repository(
            repositoryName=name,
            imageTagMutability="IMMUTABLE",
            tags=[{"Key": "elastic-spot-lab-cluster", "Value": cluster}],
        )
        ecr.put_image(repositoryName=name, imageManifest=_MANIFEST, imageTag="0a1b2c3")
    return ids


# A Docker image manifest as `docker push` uploads it (moto takes its digest from the text).
_MANIFEST = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "size": 7023,
            "digest": "sha256:" + "a" * 64,
        },
        "layers": [
            {
                "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                "size": 32654,
                "digest": "sha256:" + "b" * 64,
            }
        ],
    }
)


def _aws_sweep(session: boto3.session.Session, recorder: Recorder, **kwargs: Any) -> AwsSweep:
    clients = recorder.attach({s: session.client(s) for s in ("elbv2", "elb", "ec2", "ecr", "s3")})
    vpc = kwargs.pop("vpc_id")
    kwargs.setdefault("image_registry", REGISTRY)
    return AwsSweep(REGION, EKS_CLUSTER, vpc, clients=clients, checkpoint_bucket=BUCKET, poll_s=0, **kwargs)


def _expected_aws(ids: Mapping[str, Any], keep: bool) -> tuple[list[tuple[str, str]], list[tuple[str, str, Any]]]:
    found = [
        ("load-balancer", ids["lbc_lb"]),
        ("load-balancer", ids["nlb"]),
        ("target-group", ids["tg"]),
        ("classic-load-balancer", ids["clb"]),
        ("network-interface", ids["cni_eni"]),
        ("network-interface", ids["tagged_eni"]),
        ("volume", ids["volume"]),
        ("security-group", ids["lbc_sg"]),
        ("security-group", ids["elb_sg"]),
        ("repository", REPOSITORY),
    ]
    deletes: list[tuple[str, str, Any]] = [
        ("elb", "DeleteLoadBalancer", {"LoadBalancerName": ids["clb"]}),
        ("elbv2", "DeleteLoadBalancer", {"LoadBalancerArn": ids["lbc_lb"]}),
        ("elbv2", "DeleteLoadBalancer", {"LoadBalancerArn": ids["nlb"]}),
        ("elbv2", "DeleteTargetGroup", {"TargetGroupArn": ids["tg"]}),
        ("ec2", "DeleteNetworkInterface", {"NetworkInterfaceId": ids["cni_eni"]}),
        ("ec2", "DeleteNetworkInterface", {"NetworkInterfaceId": ids["tagged_eni"]}),
        ("ec2", "DeleteVolume", {"VolumeId": ids["volume"]}),
        ("ec2", "DeleteSecurityGroup", {"GroupId": ids["lbc_sg"]}),
        ("ec2", "DeleteSecurityGroup", {"GroupId": ids["elb_sg"]}),
        # With its images: a plain delete of a repository holding one is refused.
        ("ecr", "DeleteRepository", {"repositoryName": REPOSITORY, "force": True}),
    ]
    if not keep:
        found.append(("bucket", BUCKET))
        deletes += [
            ("s3", "DeleteObjects", {"Bucket": BUCKET, "objects": 3}),  # two versions and a delete marker
            ("s3", "DeleteBucket", {"Bucket": BUCKET}),
        ]
    return found, deletes


def _normalized(deletes: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[str, str, Any]]:
    """DeleteObjects' keys and version ids are moto's: compared by count and quietness."""
    out: list[tuple[str, str, Any]] = []
    for service, operation, params in deletes:
        if operation == "DeleteObjects":
            assert params["Delete"]["Quiet"] is True
            assert {o["Key"] for o in params["Delete"]["Objects"]} == {"ckpt/latest.pt"}
            params = {"Bucket": params["Bucket"], "objects": len(params["Delete"]["Objects"])}
        out.append((service, operation, params))
    return out


@pytest.mark.parametrize("keep", [True, False], ids=["keep-checkpoints", "delete-checkpoints"])
def test_aws_sweep_finds_and_deletes_only_the_clusters_leftovers(aws, keep):
    ids = _aws_world(aws)
    recorder = Recorder()
    sweep = _aws_sweep(aws, recorder, vpc_id=ids["vpc"], keep_checkpoints=keep)
    expected_found, expected_deletes = _expected_aws(ids, keep)
    found = sweep.find()
    assert [(i.kind, i.id) for i in found] == expected_found
    assert recorder.deletes() == []  # find() only reads
    kept = {(i.kind, i.id) for i in sweep.kept}
    assert ("volume", ids["used_volume"]) in kept
    assert (("bucket", BUCKET) in kept) is keep
    reasons = {i.id: i.reason for i in found}
    assert "VPC CNI" in reasons[ids["cni_eni"]] and "cluster.k8s.amazonaws.com/name" in reasons[ids["tagged_eni"]]
    assert "Load Balancer Controller" in reasons[ids["lbc_sg"]] and "service controller" in reasons[ids["elb_sg"]]
    assert "PVC training/scratch" in reasons[ids["volume"]]
    planned = [(c.api.removeprefix("aws "), c.operation) for c in sweep.calls() if not c.reads_only]
    ec2, s3 = aws.client("ec2"), aws.client("s3")
    volumes_before = {v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]}

    done = sweep.delete(found)
    assert _normalized(recorder.deletes()) == expected_deletes
    # The dry run's list, made after find(), names the same deletions in the same order.
    assert planned == [(s, re.sub(r"(?<!^)(?=[A-Z])", "_", op).lower()) for s, op, _ in expected_deletes]
    assert sorted(done) == sorted(f"{kind} {id_}" for kind, id_ in expected_found)
    # Only the available volume of ours went: not the one in use, another cluster's, the
    # untagged ones, nor the instance's root volume.
    assert {v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]} == volumes_before - {ids["volume"]}
    buckets = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    assert buckets == ({BUCKET, "someone-elses-bucket"} if keep else {"someone-elses-bucket"})
    remaining_lbs = {lb["LoadBalancerName"] for lb in aws.client("elbv2").describe_load_balancers()["LoadBalancers"]}
    assert remaining_lbs == {"k8s-other-lb", "hand-made", "elsewhere-lb"}

    again = _aws_sweep(aws, Recorder(), vpc_id=ids["vpc"], keep_checkpoints=keep)
    assert again.find() == []


def test_aws_a_foreign_bucket_is_never_deleted(aws):
    _aws_world(aws)
    sweep = AwsSweep(REGION, EKS_CLUSTER, None, keep_checkpoints=False, checkpoint_bucket="someone-elses-bucket")
    sweep._clients = {s: aws.client(s) for s in ("elbv2", "elb", "ec2", "s3")}
    found = sweep.find()
    assert "bucket" not in {i.kind for i in found}
    # Without a VPC to hold it to, a load balancer of the cluster's in another VPC counts too.
    assert len([i for i in found if i.kind == "load-balancer"]) == 3
    [kept] = [i for i in sweep.kept if i.kind == "bucket"]
    assert "not this stack's" in kept.reason
    assert sweep.notes == ["no VPC given: network interfaces and security groups were not looked for"]


def test_aws_delete_of_what_is_already_gone_is_done(aws):
    ids = _aws_world(aws)
    sweep = _aws_sweep(aws, Recorder(), vpc_id=ids["vpc"], keep_checkpoints=False)
    found = sweep.find()
    sweep.delete(found)
    again = sweep.delete(found)
    gone = {"network-interface", "volume", "security-group", "repository", "bucket", "target-group"}
    # elbv2's and elb's DeleteLoadBalancer succeed for a balancer that is not there, as AWS's do.
    assert again == [
        f"{kind} {id_}" + (" (already gone)" if kind in gone else "")
        for kind, id_ in sorted([(i.kind, i.id) for i in found], key=lambda k: AwsSweep.ORDER.index(k[0]))
    ]


def test_aws_a_destroy_stopped_by_a_pushed_image_deletes_the_repository_with_force(aws, capsys):
    """A stack made before its repository was force-deleted keeps force_delete false in its
    state: pulumi_aws's delete (ECR DeleteRepository unforced, here moto's) of the repository
    holding the pushed image fails with RepositoryNotEmptyException and the destroy stops.
    Teardown then sweeps: the repository goes with its images, and the second destroy's delete
    finds it gone (RepositoryNotFoundException, which pulumi_aws counts as deleted)."""
    from lab.cli.teardown import destroy_and_sweep
    from lab.stacks.automation import StackError

    ids = _aws_world(aws)
    ecr = aws.client("ecr")
    recorder = Recorder()
    sweep = _aws_sweep(aws, recorder, vpc_id=ids["vpc"])
    said: list[str] = []

    def destroy() -> None:
        try:
            ecr.delete_repository(repositoryName=REPOSITORY)
        except ecr.exceptions.RepositoryNotFoundException:
            said.append("already gone")
        except ecr.exceptions.RepositoryNotEmptyException as exc:
            said.append("not empty")
            message = f"deleting ECR Repository ({REPOSITORY}): not empty, consider using force_delete: {exc}"
            raise StackError(message) from exc

    destroy_and_sweep(destroy, sweep, "eks")
    assert said == ["not empty", "already gone"]
    assert ("ecr", "DeleteRepository", {"repositoryName": REPOSITORY, "force": True}) in recorder.deletes()
    with pytest.raises(ecr.exceptions.RepositoryNotFoundException):
        ecr.describe_repositories(repositoryNames=[REPOSITORY])
    # Another cluster's repository, pushed to as well, is still there with its image.
    assert len(ecr.list_images(repositoryName=f"{OTHER_CLUSTER}/trainer")["imageIds"]) == 1
    out, err = capsys.readouterr()
    assert "RepositoryNotEmptyException" in err and "destroying again" in err
    assert f"- repository {REPOSITORY} (the training image's repository" in out


def test_aws_another_clusters_repository_is_never_deleted(aws):
    _aws_world(aws)
    registry = REGISTRY.replace(REPOSITORY, f"{OTHER_CLUSTER}/trainer")
    sweep = _aws_sweep(aws, Recorder(), vpc_id=None, image_registry=registry)
    assert "repository" not in {i.kind for i in sweep.find()}
    [kept] = [i for i in sweep.kept if i.kind == "repository"]
    assert kept.id == f"{OTHER_CLUSTER}/trainer" and "not this stack's" in kept.reason


@pytest.fixture
def ec2_stub(aws) -> Iterator[tuple[Any, Stubber]]:
    client = aws.client("ec2")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def test_aws_a_security_group_still_in_use_is_retried_until_it_is_free(ec2_stub):
    client, stub = ec2_stub
    for _ in range(2):
        stub.add_client_error(
            "delete_security_group",
            service_error_code="DependencyViolation",
            service_message="resource sg-0123456789abcdef0 has a dependent object",
            expected_params={"GroupId": "sg-0123456789abcdef0"},
        )
    stub.add_response("delete_security_group", {}, {"GroupId": "sg-0123456789abcdef0"})
    slept: list[float] = []
    now = [0.0]

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    sweep = AwsSweep(REGION, EKS_CLUSTER, "vpc-1", clients={"ec2": client}, poll_s=5, sleep=sleep, clock=lambda: now[0])
    item = Leftover("security-group", "sg-0123456789abcdef0", "", "")
    assert sweep.delete([item]) == ["security-group sg-0123456789abcdef0"]
    assert slept == [5, 5]


def test_aws_a_security_group_in_use_for_too_long_is_a_teardown_error(ec2_stub):
    client, stub = ec2_stub
    for _ in range(3):
        stub.add_client_error("delete_security_group", service_error_code="DependencyViolation", service_message="dep")
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    sweep = AwsSweep(
        REGION,
        EKS_CLUSTER,
        "vpc-1",
        clients={"ec2": client},
        busy_timeout_s=10,
        poll_s=5,
        sleep=sleep,
        clock=lambda: now[0],
    )
    with pytest.raises(TeardownError, match="DependencyViolation after 10 s"):
        sweep.delete([Leftover("security-group", "sg-0123456789abcdef0", "", "")])


def test_aws_access_denied_names_the_permission(aws):
    client = aws.client("elbv2")
    with Stubber(client) as stub:
        stub.add_client_error(
            "describe_load_balancers",
            service_error_code="AccessDenied",
            service_message="User: arn:aws:iam::123456789012:user/lab is not authorized",
            http_status_code=403,
        )
        with pytest.raises(TeardownError) as raised:
            AwsSweep(REGION, EKS_CLUSTER, "vpc-1", clients={"elbv2": client}).find()
    message = str(raised.value)
    assert "AWS denied aws elbv2: describe_load_balancers()" in message
    assert "elasticloadbalancing:DescribeLoadBalancers" in message


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({}, id="no-credentials"),
        pytest.param({"AWS_SECRET_ACCESS_KEY": AWS_SECRET}, id="a-secret-without-its-key"),
    ],
)
def test_aws_missing_credentials_say_how_to_log_in_and_print_no_secret(monkeypatch, env):
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    sweep = AwsSweep(REGION, EKS_CLUSTER, "vpc-1")  # its session is made on the first call
    with pytest.raises(TeardownError) as raised:
        sweep.find()
    message = str(raised.value)
    assert "aws elbv2: describe_load_balancers()" in message
    assert "aws configure" in message and "aws sso login" in message
    assert AWS_SECRET not in message


def test_aws_calls_make_no_client():
    class NoSession:
        def client(self, *args: Any, **kwargs: Any) -> Any:
            pytest.fail("a client was made")

    sweep = AwsSweep(
        REGION,
        EKS_CLUSTER,
        "vpc-1",
        keep_checkpoints=False,
        checkpoint_bucket=BUCKET,
        image_registry=REGISTRY,
        session=NoSession(),  # type: ignore[arg-type]
    )
    listed = sweep.calls()
    assert [(c.api, c.operation) for c in listed if c.reads_only] == [
        ("aws elbv2", "describe_load_balancers"),
        ("aws elbv2", "describe_tags"),
        ("aws elbv2", "describe_target_groups"),
        ("aws elbv2", "describe_tags"),
        ("aws elb", "describe_load_balancers"),
        ("aws elb", "describe_tags"),
        ("aws ec2", "describe_network_interfaces"),
        ("aws ec2", "describe_volumes"),
        ("aws ec2", "describe_security_groups"),
        ("aws ecr", "describe_repositories"),
        ("aws ecr", "list_tags_for_resource"),
        ("aws s3", "get_bucket_tagging"),
        ("aws s3", "list_object_versions"),
    ]
    assert [c.operation for c in listed if not c.reads_only] == [
        "delete_load_balancer",
        "delete_load_balancer",
        "delete_target_group",
        "delete_network_interface",
        "delete_volume",
        "delete_security_group",
        "delete_repository",
        "delete_objects",
        "delete_bucket",
    ]
    assert (
        ApiCall("aws ec2", "describe_network_interfaces", {"Filters": [{"Name": "vpc-id", "Values": ["vpc-1"]}]}, True)
        in listed
    )
    assert ApiCall("aws ecr", "delete_repository", {"repositoryName": REPOSITORY, "force": True}) in listed


# ====================================================================== the local target


def _running(pid: int) -> bool:
    """The pid is a live process (a zombie runs nothing: it only waits for its parent)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen]]:
    """Processes a test starts; whatever of them and their children is left is killed after it."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        try:
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        for p in tree:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        proc.wait(10)


def _start(spawned: list[subprocess.Popen], cmd: list[str], **kwargs: Any) -> subprocess.Popen:
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    kwargs.setdefault("stdout", subprocess.DEVNULL)
    kwargs.setdefault("stderr", subprocess.DEVNULL)
    proc = subprocess.Popen(cmd, **kwargs)
    spawned.append(proc)
    return proc


def _children(pid: int, count: int) -> list[int]:
    """The pids of a process's descendants, once it has `count` of them."""
    assert wait_until(lambda: len(psutil.Process(pid).children(recursive=True)) >= count, 10)
    return [c.pid for c in psutil.Process(pid).children(recursive=True)]


@pytest.mark.processes
def test_local_teardown_stops_the_runs_processes_and_removes_its_directories(tmp_path, spawned):
    try:
        find_etcd()
    except ServerError as e:
        pytest.skip(f"no etcd here: {e}")
    workdir = tmp_path / "run"
    # The work directory's layout and its events file are LocalTarget's own.
    kube = LocalTarget(
        JobSpec(name="demo", rdzv_backend=RdzvBackend.ETCD_V2, checkpoint_dir=str(workdir / "checkpoints")), workdir
    )
    assert kube.events_file == workdir / teardown.EVENTS_FILE
    # The nodes' temp dir outside the workdir, as LocalTarget makes it when the workdir's path is long.
    tmp = Path(tempfile.mkdtemp(prefix=teardown.TMP_PREFIX))
    (tmp / "pymp-socket").write_text("")

    def node(name: str, script: str, *, env_of_the_run: bool = True) -> subprocess.Popen:
        env = {"PATH": os.environ["PATH"]}
        if env_of_the_run:
            env.update({ENV_EVENTS_FILE: str(kube.events_file), ENV_NODE: name, "TMPDIR": str(tmp)})
        home = kube.node_dir(name)
        home.mkdir(parents=True)
        log = open(workdir / "nodes" / f"{name}.log", "ab")  # noqa: SIM115 - closed below, the child keeps it
        proc = _start(
            spawned,
            ["sh", "-c", script],
            cwd=home,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        kube.record("node_added", node=name, pid=proc.pid)  # as LocalTarget.add_node records it
        return proc

    # An agent with workers, one of them in a session of its own (as torch's workers are).
    agent = node("node-0", "setsid sleep 300 & sleep 300 & wait")
    workers = _children(agent.pid, 2)
    # An agent that ignores SIGTERM, and so does its worker: only SIGKILL ends them.
    stubborn = node("node-1", "trap '' TERM; sleep 300 & wait")
    stubborn_workers = _children(stubborn.pid, 1)
    # A silently evicted node: stopped (SIGSTOP), as LocalTarget.evict(silent=True) leaves it.
    silent = node("node-2", "exec sleep 300")
    os.kill(silent.pid, signal.SIGSTOP)
    # A node known only by its recorded pid (its environment is not the run's), and its worker.
    recorded_only = node("node-3", "sleep 300 & wait", env_of_the_run=False)
    recorded_workers = _children(recorded_only.pid, 1)
    # The rendezvous server: a real etcd on the workdir's data dir.
    etcd = EtcdServer(workdir).start()
    assert etcd.proc is not None
    spawned.append(etcd.proc)
    # The c10d store's command line and log, as LocalTarget starts it (a run has etcd or
    # the store; a stand-in here, so as not to import torch, with the real one's argv and stdout).
    with open(workdir / teardown.STORE_LOG, "ab") as out:
        store = _start(
            spawned,
            [sys.executable, "-c", "import time; time.sleep(300)", "-m", "lab.runtime.store", "--port", "29400"],
            stdout=out,
            start_new_session=True,
        )
    # The real watchdog, given the nodes' temp dir.
    watchdog = _start(
        spawned, [sys.executable, "-m", "lab.local.watchdog", str(tmp)], stdin=subprocess.PIPE, start_new_session=True
    )

    # Bystanders: a stranger, another run's node, a reused pid, a viewer of the run's log, the launcher.
    stranger = _start(spawned, ["sleep", "300"])
    other_run = _start(spawned, ["sleep", "300"], env={ENV_EVENTS_FILE: str(tmp_path / "other" / "events.jsonl")})
    reused = _start(spawned, ["sleep", "300"])
    created = psutil.Process(reused.pid).create_time()
    kube.record("node_added", node="node-9", pid=reused.pid, t=created - 60)  # a record older than the process
    viewer = _start(spawned, ["tail", "-f", str(workdir / "nodes" / "node-0.log")])
    launcher = _start(spawned, ["sleep", "300"])
    kube.record("cluster_started", pid=launcher.pid)
    bystanders = [stranger, other_run, reused, viewer, launcher]

    ours = {
        agent.pid: "node node-0",
        **dict.fromkeys(workers, "node node-0"),
        stubborn.pid: "node node-1",
        **dict.fromkeys(stubborn_workers, "node node-1"),
        silent.pid: "node node-2",
        recorded_only.pid: "node node-3's agent, recorded in events.jsonl",
        **dict.fromkeys(recorded_workers, f"started by process {recorded_only.pid}"),
        etcd.proc.pid: "etcd, --data-dir",
        store.pid: "c10d store",
        watchdog.pid: "watchdog",
    }
    sweep = LocalTeardown(workdir, term_timeout_s=1.0)
    found = sweep.find()
    processes = {int(i.id): i.reason for i in found if i.kind == "process"}
    assert sorted(processes) == sorted(ours)
    for pid, says in ours.items():
        assert says in processes[pid], (pid, processes[pid])
    assert [(i.kind, i.id) for i in found if i.kind == "directory"] == [
        ("directory", str(workdir)),
        ("directory", os.path.realpath(tmp)),
    ]
    assert [(i.kind, i.id) for i in sweep.kept] == [("process", str(launcher.pid))]
    assert all(_running(pid) for pid in ours)  # find() signals nothing

    done = sweep.delete(found)
    assert not [pid for pid in ours if _running(pid)]
    killed = {int(line.split()[1]) for line in done if line.endswith("(SIGKILL)")}
    assert killed == {stubborn.pid, *stubborn_workers}
    assert f"directory {workdir}" in done and not workdir.exists() and not tmp.exists()
    assert all(_running(p.pid) for p in bystanders)

    again = LocalTeardown(workdir)
    assert again.find() == [] and again.delete([]) == []


def test_local_teardown_refuses_a_directory_that_is_not_a_runs(tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    with pytest.raises(TeardownError, match="not a local run's work directory"):
        LocalTeardown(precious).find()
    assert (precious / "thesis.tex").exists()


@pytest.mark.processes
def test_local_teardown_stops_only_what_it_found(tmp_path, spawned):
    workdir = tmp_path / "run"
    (workdir / "nodes").mkdir(parents=True)
    stranger = _start(spawned, ["sleep", "300"])
    sweep = LocalTeardown(workdir)
    assert [(i.kind, i.id) for i in sweep.find()] == [("directory", str(workdir))]
    with pytest.raises(TeardownError, match="not this run's"):
        sweep.delete([Leftover("process", str(stranger.pid), str(workdir), "hand-made")])
    with pytest.raises(TeardownError, match="not this run's"):
        sweep.delete([Leftover("directory", str(tmp_path), "local", "hand-made")])
    assert _running(stranger.pid) and tmp_path.exists()
    assert sweep.calls() == [ApiCall("shutil", "rmtree", {"path": str(workdir)})]
    assert sweep.delete(sweep.find()) == [f"directory {workdir}"]
    assert not workdir.exists()


class _Leftovers:
    """A cloud sweep whose leftovers block the destroy until they are deleted."""

    def __init__(self, log: list[str]):
        from lab.cluster.teardown.base import Leftover

        eni = Leftover("ENI", "eni-1", "vpc-1", "a load balancer's, in the cluster's VPC")
        self.log, self.kept, self.left = log, [], [eni]

    def find(self):
        self.log.append("find")
        return list(self.left)

    def delete(self, items):
        self.log.append(f"delete {[i.id for i in items]}")
        self.left = [i for i in self.left if i not in items]
        return [str(i) for i in items]

    def calls(self):
        return []


def test_a_destroy_blocked_by_controller_leftovers_sweeps_them_and_destroys_again(capsys):
    from lab.cli.teardown import destroy_and_sweep
    from lab.stacks.automation import StackError

    log: list[str] = []
    cloud = _Leftovers(log)

    def destroy():
        log.append("destroy")
        if cloud.left:
            raise StackError("deleting subnet: DependencyViolation: has dependencies and cannot be deleted")

    destroy_and_sweep(destroy, cloud, "eks")
    assert log == ["destroy", "find", "delete ['eni-1']", "destroy", "find", "delete []"]
    out, err = capsys.readouterr()
    assert "before the second destroy: 1 to delete" in out and "after the destroy: 0 to delete" in out
    assert "the destroy failed (deleting subnet: DependencyViolation" in err and "destroying again" in err


def test_a_destroy_that_fails_for_another_reason_fails_after_one_sweep():
    from lab.cli.teardown import destroy_and_sweep
    from lab.stacks.automation import StackError

    log: list[str] = []

    def destroy():
        log.append("destroy")
        raise StackError("the stack is locked")

    with pytest.raises(StackError, match="locked"):
        destroy_and_sweep(destroy, _Leftovers(log), "eks")
    assert log.count("destroy") == 2 and log.count("find") == 1
    with pytest.raises(StackError, match="locked"):
        destroy_and_sweep(destroy, None, "byo")  # nothing of a cloud to sweep: the destroy's own error


# ------------------------------------------------------------------ what every sweep records
def test_recorded_starts_each_find_afresh_and_keeps_what_it_found():
    class Counting(Recorded):
        def __init__(self) -> None:
            super().__init__()
            self.looks = 0

        def _look(self) -> list[Leftover]:
            self.looks += 1
            self.kept.append(Leftover("thing", f"kept-{self.looks}", "here", "kept"))
            self.notes.append(f"note {self.looks}")
            return [Leftover("thing", f"found-{self.looks}", "here", "found")]

    sweep = Counting()
    assert (sweep.kept, sweep.notes, sweep._found) == ([], [], None)  # calls() lists placeholders until find()
    first = sweep.find()
    assert sweep._found == first == [Leftover("thing", "found-1", "here", "found")]
    second = sweep.find()
    assert second == [Leftover("thing", "found-2", "here", "found")]
    assert [k.id for k in sweep.kept] == ["kept-2"] and sweep.notes == ["note 2"]

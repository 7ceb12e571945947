"""Loopback stand-ins for the two servers the handler talks to, each an http.server in a
thread on 127.0.0.1 (port 0).

FakeImds answers like IMDS: 400 without `Metadata: true` or without `api-version`, the events
document and the VM's name otherwise; `fail_next` makes the next polls fail.
FakeKube answers the calls the handler makes (cordon, list the node's pods, evictions), records
each with its time, and answers evictions with scripted statuses (429 for a refusing PDB).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubernetes import client

from lab.local.procs import wait_until
from tests.patience import within


class _Server:
    """A ThreadingHTTPServer on a free loopback port, served from a thread until `close`."""

    handler: type[BaseHTTPRequestHandler]

    def __init__(self) -> None:
        outer = self

        class Handler(self.handler):  # type: ignore[misc, valid-type, name-defined]
            server_state = outer

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _send(handler: BaseHTTPRequestHandler, status: int, body: Any, content_type: str = "application/json") -> None:
    data = body if isinstance(body, bytes) else (body if isinstance(body, str) else json.dumps(body)).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


# ------------------------------------------------------------------------------ IMDS
def rfc1123(t: float) -> str:
    """Unix time as IMDS writes NotBefore: "Mon, 19 Sep 2016 18:29:47 GMT"."""
    return formatdate(t, usegmt=True)


def event(
    event_id: str, vm: str, event_type: str = "Preempt", not_before: float | None = None, status: str = "Scheduled"
) -> dict[str, Any]:
    return {
        "EventId": event_id,
        "EventType": event_type,
        "ResourceType": "VirtualMachine",
        "Resources": [vm],
        "EventStatus": status,
        "NotBefore": "" if not_before is None else rfc1123(not_before),
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    }


class _ImdsHandler(BaseHTTPRequestHandler):
    server_state: FakeImds

    def do_GET(self) -> None:
        fake = self.server_state
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        with fake.lock:
            fake.requests.append((time.time(), self.path, self.headers.get("Metadata")))
            if self.headers.get("Metadata") != "true":
                fake.rejected += 1
                return _send(self, 400, {"error": "Bad request. Required metadata header not specified"})
            if "api-version" not in query:
                return _send(self, 400, {"error": "Bad request. api-version was not specified in the request"})
            if fake.failures:
                fake.failures -= 1
                return _send(self, fake.failure_status, {"error": "injected"})
            if url.path == "/metadata/scheduledevents":
                fake.served.append((time.time(), fake.incarnation))
                return _send(self, 200, {"DocumentIncarnation": fake.incarnation, "Events": fake.events})
            if url.path == "/metadata/instance/compute/name" and query.get("format") == ["text"]:
                return _send(self, 200, fake.vm_name, "text/plain")
        return _send(self, 404, {"error": "Not found"})


class FakeImds(_Server):
    handler = _ImdsHandler

    def __init__(self, vm_name: str = "aks-gpuspot-12345678-vmss_3") -> None:
        self.lock = threading.Lock()
        self.vm_name = vm_name
        self.events: list[dict[str, Any]] = []
        self.incarnation = 1
        self.requests: list[tuple[float, str, str | None]] = []
        self.served: list[tuple[float, int]] = []  # each events document answered: when, its incarnation
        self.rejected = 0
        self.failures = 0
        self.failure_status = 500
        self.published_at: float | None = None
        super().__init__()

    def publish(self, *events: dict[str, Any]) -> float:
        """Serve `events` from now on (a new incarnation); returns the time they appeared."""
        with self.lock:
            self.events = list(events)
            self.incarnation += 1
            self.published_at = time.time()
            return self.published_at

    def fail_next(self, n: int, status: int = 500) -> None:
        with self.lock:
            self.failures, self.failure_status = n, status

    def answered_with_current(self, before: float) -> int:
        """How many polls were answered with the current events document before `before`."""
        with self.lock:
            return sum(1 for t, incarnation in self.served if incarnation == self.incarnation and t < before)

    def polls(self) -> int:
        with self.lock:
            return sum(1 for _, path, _ in self.requests if path.startswith("/metadata/scheduledevents"))


# ------------------------------------------------------------------------ Kubernetes
def pod(
    name: str,
    node: str,
    namespace: str = "training",
    grace: int | None = 30,
    owner: str | None = "ReplicaSet",
    mirror: bool = False,
    terminating: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner,
                "name": f"{name}-owner",
                "uid": f"uid-o-{name}",
                "controller": True,
            }
        ]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc123"}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Running"}}


class _KubeHandler(BaseHTTPRequestHandler):
    server_state: FakeKube

    def _record(self) -> tuple[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        self.server_state.record(self.command, self.path, body, self.headers)
        return urllib.parse.urlsplit(self.path).path, body

    def do_PATCH(self) -> None:
        path, body = self._record()
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": parts[3]}, "spec": body.get("spec", {})}
            return _send(self, 200, node)
        return _send(self, 404, _status(404, "NotFound", path))

    def do_GET(self) -> None:
        path, _ = self._record()
        fake = self.server_state
        if path == "/api/v1/pods":
            selector = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("fieldSelector", [""])[0]
            with fake.lock:
                if fake.list_failures:
                    fake.list_failures -= 1
                    return _send(self, 500, _status(500, "InternalError", "injected"))
                items = [p for p in fake.pods if selector == f"spec.nodeName={p['spec']['nodeName']}"]
            return _send(self, 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items})
        return _send(self, 404, _status(404, "NotFound", path))

    def do_POST(self) -> None:
        path, body = self._record()
        parts = path.strip("/").split("/")
        # api/v1/namespaces/<ns>/pods/<name>/eviction
        if (
            len(parts) == 7
            and parts[:3] == ["api", "v1", "namespaces"]
            and parts[4] == "pods"
            and parts[6] == "eviction"
        ):
            key = f"{parts[3]}/{parts[5]}"
            self.server_state.meet_other_evictions()
            status = self.server_state.next_eviction_status(key)
            if status == 429:
                return _send(
                    self,
                    429,
                    _status(
                        429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
                    ),
                )
            if status == 404:
                return _send(self, 404, _status(404, "NotFound", f'pods "{parts[5]}" not found'))
            if status >= 400:
                return _send(self, status, _status(status, "Failure", "injected"))
            return _send(self, 201, body)
        return _send(self, 404, _status(404, "NotFound", path))


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class FakeKube(_Server):
    handler = _KubeHandler

    def __init__(self, pods: list[dict[str, Any]] | None = None) -> None:
        self.lock = threading.Lock()
        self.pods = list(pods or [])
        self.calls: list[dict[str, Any]] = []
        self.eviction_script: dict[str, list[int]] = {}  # "ns/name" -> statuses to answer, in order, then 201
        self.list_failures = 0
        # Set, an eviction is answered only once this many are waiting for their answers at
        # once (or, after 10 s, never together: `evictions_met` tells which).
        self.evictions_together: threading.Barrier | None = None
        self.evictions_met: bool | None = None
        super().__init__()

    def meet_other_evictions(self) -> None:
        if self.evictions_together is None:
            return
        try:
            self.evictions_together.wait(timeout=within(10))
            met = True
        except threading.BrokenBarrierError:
            met = False
        with self.lock:
            self.evictions_met = met if self.evictions_met is None else self.evictions_met and met

    def record(self, method: str, path: str, body: Any, headers: Any) -> None:
        with self.lock:
            self.calls.append(
                {
                    "t": time.time(),
                    "method": method,
                    "path": path,
                    "body": body,
                    "content_type": headers.get("Content-Type"),
                    "authorization": headers.get("Authorization"),
                }
            )

    def next_eviction_status(self, key: str) -> int:
        with self.lock:
            script = self.eviction_script.get(key) or []
            return script.pop(0) if script else 201

    def evictions(self) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.calls if c["method"] == "POST" and c["path"].endswith("/eviction")]

    def of(self, method: str) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.calls if c["method"] == method]

    def core_api(self) -> client.CoreV1Api:
        """A CoreV1Api of the official client pointed at this server."""
        configuration = client.Configuration(host=self.url)
        return client.CoreV1Api(client.ApiClient(configuration))


def wait_for(predicate, timeout: float = 3.0, interval: float = 0.01) -> bool:
    return wait_until(predicate, timeout, interval)

"""A Kubernetes API server on loopback, small but strict where our clients depend on it.

It keeps objects in memory by their REST path and answers the verbs the project's cluster
code uses, with the API server's own status codes and `Status` bodies: 201 on create, 409
AlreadyExists, 404 NotFound, 200 list with label selectors (equality only), strategic/merge
patches applied as JSON merges, DELETE with 200 and the object, pod logs (plain text,
`follow=true` streams until the pod's log is closed), the Eviction subresource (201, or
429 while `refuse_evictions` names the pod, as a PodDisruptionBudget would), and the API group
discovery (`GET /apis`: the groups it serves, plus the aggregated `api_groups` a test adds, as
the aggregator lists an APIService's group while it is Available). Everything it was asked is
kept in `requests` as (method, path, query, body), and each request's Authorization header in
`authorizations`.

With `graceful_evictions`, an eviction or a DELETE of a pod bound to a node does what the API
server does there: the pod stays, marked with `deletionTimestamp` (now plus the request's grace
period, else the pod's own) and `deletionGracePeriodSeconds`, until its kubelet would confirm it
gone; an eviction also adds the condition `DisruptionTarget` (reason `EvictionByEvictionAPI`).
With `scheduling`, a pod created with no node goes through priority admission and the
scheduler's placement and preemption (tests/cluster/fake_scheduler.py), and PriorityClasses are
served. With `tls` (a server-side SSLContext) it serves HTTPS, as a
pod's in-cluster client expects.

The real `kubernetes` client and the kubeflow-training SDK talk to it through a kubeconfig
that `kubeconfig()` writes, so their URL building, serialisation and error handling run for
real.
"""

from __future__ import annotations

import calendar
import copy
import json
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from lab.cluster.pytorchjob import JOB_NAME_LABEL, REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL
from tests.cluster import fake_scheduler
from tests.runtime.notice.fakes import _status

# Collections the fake serves: URL prefix of the collection -> kind of its items.
_NAMESPACED = {
    ("apis/kubeflow.org/v1", "pytorchjobs"): "PyTorchJob",
    ("api/v1", "pods"): "Pod",
    ("api/v1", "services"): "Service",
    ("api/v1", "events"): "Event",
    ("api/v1", "persistentvolumeclaims"): "PersistentVolumeClaim",
    ("api/v1", "resourcequotas"): "ResourceQuota",
    ("apis/apps/v1", "deployments"): "Deployment",
    ("apis/policy/v1", "poddisruptionbudgets"): "PodDisruptionBudget",
    ("apis/networking.k8s.io/v1", "networkpolicies"): "NetworkPolicy",
}
_CLUSTER = {("api/v1", "nodes"): "Node", ("apis/scheduling.k8s.io/v1", "priorityclasses"): "PriorityClass"}


def _merge(target: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386): what our clients send as strategic/merge patches."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _rfc3339(unix_s: float) -> str:
    """A time as the API server writes metadata timestamps: whole seconds, UTC."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))


def _selected(obj: dict[str, Any], selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeKube:
    """Start with `with FakeKube() as kube:`; `kube.kubeconfig(tmp_path)` is a kubeconfig for it."""

    def __init__(self, *, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls
        self.graceful_evictions = False
        self.scheduling = False  # pods created with no node: admitted and placed (tests/cluster/fake_scheduler.py)
        self.authorizations: list[str | None] = []
        self.objects: dict[str, dict[str, Any]] = {}  # "<group path>/<ns or ''>/<plural>/<name>" -> object
        self.logs: dict[tuple[str, str], list[str]] = {}  # (namespace, pod) -> lines
        self.closed_logs: set[tuple[str, str]] = set()
        self.previous_logs: dict[tuple[str, str], list[str]] = {}  # a restarted container's last run
        self.log_queries: list[dict[str, list[str]]] = []  # each log request's query, as sent
        self.log_line_s = 0.0  # how long each followed log line takes to send: a reader that lags
        self.requests: list[tuple[str, str, dict[str, list[str]], Any]] = []
        self.refuse_evictions: set[str] = set()
        self.api_groups: list[str] = []  # aggregated "group/version"s discovery lists (metrics.k8s.io/v1beta1)
        self.on_request: Callable[[str, str], None] | None = None
        self.lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._uid = 0

    # ------------------------------------------------------------------ setup
    def __enter__(self) -> FakeKube:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                url = urlparse(self.path)
                fake.authorizations.append(self.headers.get("Authorization"))
                fake._handle(self, method, url.path.strip("/"), parse_qs(url.query), body)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

            def do_PATCH(self) -> None:
                self._answer("PATCH")

            def do_PUT(self) -> None:
                self._answer("PUT")

            def do_DELETE(self) -> None:
                self._answer("DELETE")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if self.tls is not None:
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._server is not None
        with self.lock:
            self.closed_logs.update(self.logs)
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self, directory: Path, context: str = "fake", namespace: str = "default") -> Path:
        path = directory / f"kubeconfig-{context}.yaml"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": context, "cluster": {"server": self.url}}],
                    "users": [{"name": context, "user": {"token": "fake-token-not-secret"}}],
                    "contexts": [
                        {"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}
                    ],
                    "current-context": context,
                }
            )
        )
        return path

    # ------------------------------------------------------------------ state helpers
    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` as the server would after a create (uid, resourceVersion, timestamps)."""
        with self.lock:
            key = self._key_of(obj)
            self._uid += 1
            meta = obj.setdefault("metadata", {})
            meta.setdefault("uid", f"uid-{self._uid}")
            meta["resourceVersion"] = str(self._uid)
            meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            self.objects[key] = obj
            return obj

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self.lock:
            for obj in self.objects.values():
                meta = obj["metadata"]
                if obj.get("kind") == kind and meta["name"] == name and meta.get("namespace", "") == namespace:
                    return obj
        return None

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [o for o in self.objects.values() if o.get("kind") == kind]

    def add_log(self, namespace: str, pod: str, *lines: str, close: bool = False) -> None:
        with self.lock:
            self.logs.setdefault((namespace, pod), []).extend(lines)
            if close:
                self.closed_logs.add((namespace, pod))

    def calls(self, method: str | None = None) -> list[str]:
        """'METHOD path' of every request so far (or of one method)."""
        return [f"{m} {p}" for m, p, _, _ in self.requests if method in (None, m)]

    def _key_of(self, obj: dict[str, Any]) -> str:
        kind = obj.get("kind")
        meta = obj.get("metadata", {})
        for table in (_NAMESPACED, _CLUSTER):
            for (group, plural), k in table.items():
                if k == kind:
                    ns = meta.get("namespace", "") if table is _NAMESPACED else ""
                    return f"{group}/{ns}/{plural}/{meta['name']}"
        raise KeyError(f"the fake serves no kind {kind!r}")

    # ------------------------------------------------------------------ routing
    def _route(self, path: str) -> tuple[str, str, str, str, str] | None:
        """(group, namespace, plural, name, subresource) of a path, or None."""
        for group, _plural in [*_NAMESPACED, *_CLUSTER]:
            if not path.startswith(group + "/"):
                continue
            rest = path[len(group) + 1 :].split("/")
            ns = ""
            if rest[0] == "namespaces" and len(rest) >= 3:
                ns, rest = rest[1], rest[2:]
            plural = rest[0]
            if (group, plural) not in _NAMESPACED and (group, plural) not in _CLUSTER:
                continue
            name = rest[1] if len(rest) > 1 else ""
            sub = rest[2] if len(rest) > 2 else ""
            return group, ns, plural, name, sub
        return None

    def _handle(self, http: BaseHTTPRequestHandler, method: str, path: str, query: dict, body: Any) -> None:
        with self.lock:
            self.requests.append((method, "/" + path, query, body))
            if self.scheduling:
                fake_scheduler.schedule(self.objects, self._mark_deleted)
        if self.on_request:
            self.on_request(method, "/" + path)
        if path == "version":
            return self._send(
                http,
                200,
                {
                    "major": "1",
                    "minor": "33",
                    "gitVersion": "v1.33.0",
                    "gitCommit": "0" * 40,
                    "gitTreeState": "clean",
                    "buildDate": "2026-01-01T00:00:00Z",
                    "goVersion": "go1.24",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                },
            )
        if path == "apis" and method == "GET":
            return self._send(http, 200, self._group_list())
        route = self._route(path)
        if route is None:
            return self._send(
                http, 404, _status(404, "NotFound", f"the server could not find the requested resource ({path})")
            )
        group, ns, plural, name, sub = route
        kind = _NAMESPACED.get((group, plural)) or _CLUSTER[(group, plural)]
        key = f"{group}/{ns}/{plural}/{name}"
        if sub == "log":
            return self._log(http, ns, name, query)
        if sub == "eviction" and method == "POST":
            return self._evict(http, ns, name, body)
        if sub == "scale" and kind == "PyTorchJob":
            return self._scale(http, method, f"{group}/{ns}/{plural}/{name}", body)
        with self.lock:
            if not name and method == "GET":
                selector = (query.get("labelSelector") or [""])[0]
                field = (query.get("fieldSelector") or [""])[0]
                items = [
                    copy.deepcopy(o)
                    for k, o in sorted(self.objects.items())
                    if k.startswith(f"{group}/{ns}/{plural}/")
                    or (not ns and k.startswith(f"{group}/") and f"/{plural}/" in k)
                ]
                items = [o for o in items if _selected(o, selector) and self._field_ok(o, field)]
                api_version = (
                    "kubeflow.org/v1"
                    if group.startswith("apis/kubeflow")
                    else group.removeprefix("apis/").removeprefix("api/")
                )
                return self._send(
                    http,
                    200,
                    {
                        "kind": kind + "List",
                        "apiVersion": api_version,
                        "metadata": {"resourceVersion": "1"},
                        "items": items,
                    },
                )
            if method == "POST" and not name:
                name = (body.get("metadata") or {}).get("name", "")
                key = f"{group}/{ns}/{plural}/{name}"
                if key in self.objects:
                    return self._send(
                        http, 409, _status(409, "AlreadyExists", f'{plural}.{group} "{name}" already exists')
                    )
                if ns:
                    body.setdefault("metadata", {})["namespace"] = ns
                if kind == "Pod" and self.scheduling and (refused := fake_scheduler.admit(self.objects, body)):
                    return self._send(http, 403, _status(403, "Forbidden", refused))
                created = copy.deepcopy(self.put(body))
                if kind == "Pod" and self.scheduling:
                    fake_scheduler.schedule(self.objects, self._mark_deleted)
                return self._send(http, 201, created)
            obj = self.objects.get(key)
            if obj is None:
                return self._send(http, 404, _status(404, "NotFound", f'{plural} "{name}" not found'))
            if method == "GET":
                return self._send(http, 200, copy.deepcopy(obj))
            if method == "PATCH":
                self.objects[key] = _merge(obj, body)
                return self._send(http, 200, copy.deepcopy(self.objects[key]))
            if method == "DELETE":
                if kind == "Pod" and self.graceful_evictions and (obj.get("spec") or {}).get("nodeName"):
                    self._mark_deleted(obj, (body or {}).get("gracePeriodSeconds"))
                    return self._send(http, 200, copy.deepcopy(obj))
                del self.objects[key]
                if kind == "PyTorchJob":  # the garbage collector removes the pods it owns
                    for k, o in list(self.objects.items()):
                        labels = (o.get("metadata") or {}).get("labels") or {}
                        if o.get("kind") == "Pod" and labels.get("training.kubeflow.org/job-name") == name:
                            del self.objects[k]
                return self._send(http, 200, copy.deepcopy(obj))
        return self._send(http, 405, _status(405, "MethodNotAllowed", f"{method} {path}"))

    def _group_list(self) -> dict[str, Any]:
        """An APIGroupList of every group/version served under /apis."""
        served = [g.removeprefix("apis/") for g, _ in [*_NAMESPACED, *_CLUSTER] if g.startswith("apis/")]
        groups = []
        for group_version in dict.fromkeys([*served, *self.api_groups]):
            name, _, version = group_version.partition("/")
            entry = {"groupVersion": group_version, "version": version}
            groups.append({"name": name, "versions": [entry], "preferredVersion": entry})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _scale(self, http: BaseHTTPRequestHandler, method: str, key: str, body: Any) -> None:
        """The PyTorchJob CRD's scale subresource: autoscaling/v1 Scale over
        .spec.pytorchReplicaSpecs.Worker.replicas (GET, and PATCH of spec.replicas)."""
        with self.lock:
            obj = self.objects.get(key)
            if obj is None:
                return self._send(http, 404, _status(404, "NotFound", f"{key} not found"))
            worker = obj.setdefault("spec", {}).setdefault("pytorchReplicaSpecs", {}).setdefault("Worker", {})
            if method == "PATCH":
                replicas = ((body or {}).get("spec") or {}).get("replicas")
                if not isinstance(replicas, int) or replicas < 0:
                    return self._send(http, 422, _status(422, "Invalid", f"spec.replicas: {replicas!r}"))
                worker["replicas"] = replicas
            elif method != "GET":
                return self._send(http, 405, _status(405, "MethodNotAllowed", f"{method} scale"))
            meta = obj.get("metadata") or {}
            scale = {
                "kind": "Scale",
                "apiVersion": "autoscaling/v1",
                "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
                "spec": {"replicas": worker.get("replicas", 0)},
                "status": {"replicas": worker.get("replicas", 0)},
            }
        return self._send(http, 200, scale)

    @staticmethod
    def _field_ok(obj: dict[str, Any], selector: str) -> bool:
        for term in filter(None, selector.split(",")):
            key, _, value = term.partition("=")
            if key == "spec.nodeName" and (obj.get("spec") or {}).get("nodeName") != value:
                return False
            if key == "metadata.name" and obj["metadata"]["name"] != value:
                return False
        return True

    @staticmethod
    def _mark_deleted(pod: dict[str, Any], grace: int | None) -> None:
        """A graceful deletion of a pod bound to a node, as the API server records it: the
        pod stays until its kubelet confirms it gone. A later request may bring the end
        nearer, never put it further off."""
        if grace is None:
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        meta = pod["metadata"]
        end = time.time() + grace
        if "deletionTimestamp" in meta:
            end = min(end, calendar.timegm(time.strptime(meta["deletionTimestamp"], "%Y-%m-%dT%H:%M:%SZ")))
        meta["deletionTimestamp"] = _rfc3339(end)
        meta["deletionGracePeriodSeconds"] = min(grace, meta.get("deletionGracePeriodSeconds", grace))

    def _evict(self, http: BaseHTTPRequestHandler, ns: str, name: str, body: Any) -> None:
        with self.lock:
            key = f"api/v1/{ns}/pods/{name}"
            if key not in self.objects:
                return self._send(http, 404, _status(404, "NotFound", f'pods "{name}" not found'))
            if name in self.refuse_evictions:
                return self._send(
                    http,
                    429,
                    _status(
                        429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
                    ),
                )
            pod = self.objects[key]
            if self.graceful_evictions and (pod.get("spec") or {}).get("nodeName"):
                conditions = pod.setdefault("status", {}).setdefault("conditions", [])
                if not any(c.get("type") == "DisruptionTarget" for c in conditions):
                    conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"})
                self._mark_deleted(pod, ((body or {}).get("deleteOptions") or {}).get("gracePeriodSeconds"))
            else:
                del self.objects[key]
        return self._send(http, 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})

    def _log(self, http: BaseHTTPRequestHandler, ns: str, name: str, query: dict) -> None:
        if self.get("Pod", name, ns) is None and (ns, name) not in self.logs:
            return self._send(http, 404, _status(404, "NotFound", f'pods "{name}" not found'))
        follow = (query.get("follow") or ["false"])[0].lower() == "true"  # the client sends True
        self.log_queries.append(query)
        previous = (query.get("previous") or ["false"])[0].lower() == "true"
        tail = int(query["tailLines"][0]) if "tailLines" in query else None
        http.send_response(200)
        http.send_header("Content-Type", "text/plain")
        http.send_header("Transfer-Encoding", "chunked")
        http.end_headers()
        sent = 0
        while True:
            with self.lock:
                lines = list((self.previous_logs if previous else self.logs).get((ns, name), []))
                closed = previous or (ns, name) in self.closed_logs
                if tail is not None and sent == 0:
                    sent = max(0, len(lines) - tail)
            for line in lines[sent:]:
                time.sleep(self.log_line_s)
                data = (line + "\n").encode()
                http.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                http.wfile.flush()
            sent = len(lines)
            if not follow or closed:
                break
            time.sleep(0.02)
        http.wfile.write(b"0\r\n\r\n")
        http.wfile.flush()

    @staticmethod
    def _send(http: BaseHTTPRequestHandler, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        http.send_response(code)
        http.send_header("Content-Type", "application/json")
        http.send_header("Content-Length", str(len(data)))
        http.end_headers()
        http.wfile.write(data)


def node(name: str, labels: dict[str, str], provider_id: str = "", ready: bool = True) -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": provider_id} if provider_id else {},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pod(
    name: str, namespace: str, labels: dict[str, str], node_name: str = "", phase: str = "Running", restarts: int = 0
) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"nodeName": node_name, "containers": [{"name": "pytorch", "image": "img"}]}
        if node_name
        else {"containers": [{"name": "pytorch", "image": "img"}]},
        "status": {
            "phase": phase,
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "ready": phase == "Running",
                    "restartCount": restarts,
                    "image": "img",
                    "imageID": "",
                    "state": {},
                }
            ],
        },
    }


def job_worker(
    server: FakeKube,
    index: int,
    node_name: str = "gpu-0",
    phase: str = "Running",
    restarts: int = 0,
    job: str = "demo",
    namespace: str = "training",
) -> dict[str, Any]:
    """Worker `index` of PyTorchJob `job`, labelled as the training operator labels it, put on the server."""
    labels = {JOB_NAME_LABEL: job, REPLICA_INDEX_LABEL: str(index), REPLICA_TYPE_LABEL: "worker"}
    return server.put(pod(f"{job}-worker-{index}", namespace, labels, node_name, phase, restarts))


def loopback_tls(directory: Path) -> tuple[ssl.SSLContext, Path]:
    """A server-side TLS context for 127.0.0.1 and the CA file a client verifies it with (a
    self-signed certificate, as a cluster's ca.crt signs its API server's)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kube-apiserver")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    ca = directory / "ca.crt"
    ca.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file = directory / "apiserver.key"
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(ca, key_file)
    return context, ca

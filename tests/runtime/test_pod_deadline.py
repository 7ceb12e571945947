"""A cluster worker's deadline read from its own pod: the in-cluster client over TLS with the
pod's token, against an API server that marks an evicted pod as the real one does."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from kubernetes import client

from lab.runtime.notice.drain import Drainer
from lab.runtime.pod_deadline import deadline_of, pod_deletion_deadline
from lab.vocab.job import ENV_NODE, ENV_POD_NAMESPACE
from tests.cluster.fake_kube import FakeKube, loopback_tls, node, pod
from tests.patience import within

NAMESPACE = "training"
POD = "job-worker-1"
TOKEN = "token-of-the-trainer-service-account"


@pytest.fixture
def api_server(tmp_path):
    """An HTTPS API server on loopback, the pod's mounted token and CA, and the pod's
    environment (as the chart and the kubelet set it)."""
    tls, ca = loopback_tls(tmp_path)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    with FakeKube(tls=tls) as kube:
        kube.graceful_evictions = True
        kube.put(node("gpu-0", {}))
        kube.put(pod(POD, NAMESPACE, {}, node_name="gpu-0"))
        environ = {
            ENV_NODE: POD,
            ENV_POD_NAMESPACE: NAMESPACE,
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": kube.url.rpartition(":")[2],
        }
        yield kube, environ, {"token_file": str(token), "ca_file": str(ca)}


def _core(kube: FakeKube, ca: str) -> client.CoreV1Api:
    configuration = client.Configuration()
    configuration.host = kube.url
    configuration.ssl_ca_cert = ca
    configuration.api_key = {"authorization": "bearer an-administrator"}
    return client.CoreV1Api(client.ApiClient(configuration))


def _evict(core: client.CoreV1Api, grace_s: int) -> None:
    body = client.V1Eviction(
        metadata=client.V1ObjectMeta(name=POD, namespace=NAMESPACE),
        delete_options=client.V1DeleteOptions(grace_period_seconds=grace_s),
    )
    core.create_namespaced_pod_eviction(POD, NAMESPACE, body)


def test_a_pod_evicted_with_a_grace_period_reads_when_it_will_be_killed(api_server):
    kube, environ, files = api_server
    assert pod_deletion_deadline(environ, **files) is None  # running, not deleted
    asked = time.time()
    _evict(_core(kube, files["ca_file"]), grace_s=17)
    deadline = pod_deletion_deadline(environ, **files)
    # The API server keeps whole seconds: the time read is at most a second early, never late.
    assert deadline is not None and asked + 17 - 1.0 <= deadline <= time.time() + 17, deadline - asked
    # Read as the pod's service account, over TLS verified against the cluster's CA.
    assert kube.authorizations[-1] == f"Bearer {TOKEN}"
    assert kube.calls("GET")[-1] == f"GET /api/v1/namespaces/{NAMESPACE}/pods/{POD}"


def test_a_pod_deleted_plainly_gives_no_deadline(api_server):
    """Its job deleted or scaled in: the pod goes with a grace period, but Kubernetes is not
    disrupting it (no DisruptionTarget), so its workers save and leave at once."""
    kube, environ, files = api_server
    _core(kube, files["ca_file"]).delete_namespaced_pod(POD, NAMESPACE, grace_period_seconds=25)
    assert kube.get("Pod", POD, NAMESPACE)["metadata"]["deletionTimestamp"]
    assert pod_deletion_deadline(environ, **files) is None


def test_the_end_is_bounded_by_the_grace_period_counted_on_this_nodes_clock():
    """The kubelet counts the grace period from its SIGTERM: a node whose clock is behind the
    API server's would otherwise read an end after its kill."""
    pod = {
        "metadata": {"deletionTimestamp": "2026-11-28T12:00:30Z", "deletionGracePeriodSeconds": 25},
        "status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]},
    }
    api_end = 1_795_867_230.0  # 2026-11-28T12:00:30Z
    assert deadline_of(pod) == api_end
    assert deadline_of(pod, signalled_at=api_end - 25 - 10) == api_end - 10  # this clock 10 s behind
    assert deadline_of(pod, signalled_at=api_end - 20) == api_end  # the API server's end comes first
    not_disrupted = {**pod, "status": {"conditions": [{"type": "DisruptionTarget", "status": "False"}]}}
    assert deadline_of(not_disrupted) is None


def test_the_notice_handlers_drain_tells_each_worker_when_its_pod_goes(api_server):
    """The chain on a spot node: the handler's drain shortens each eviction's grace to end
    `margin_s` before the VM's NotBefore, and the worker reads that end from its pod."""
    kube, environ, files = api_server
    lines: list[dict[str, Any]] = []

    def log(event: str, **fields: Any) -> None:
        lines.append({"event": event, **fields})

    not_before = time.time() + 20
    drainer = Drainer(_core(kube, files["ca_file"]), "gpu-0", log, margin_s=5.0)
    results = drainer.drain(not_before, deadline=not_before)
    assert [r.outcome for r in results] == ["evicted"], lines
    deadline = pod_deletion_deadline(environ, **files)
    assert deadline is not None and not_before - 5.0 - 2.0 <= deadline <= not_before - 5.0, not_before - deadline


def test_outside_a_pod_there_is_no_deadline_and_nothing_is_asked(api_server):
    kube, _, files = api_server
    before = len(kube.requests)
    # The local target names its node too, but no namespace: no pod to read.
    assert pod_deletion_deadline({ENV_NODE: "node-0"}, **files) is None
    assert pod_deletion_deadline({}, **files) is None
    assert len(kube.requests) == before


@pytest.mark.parametrize("fault", ["no-such-pod", "no-token-mounted", "no-server", "a-server-that-never-answers"])
def test_a_pod_that_cannot_be_read_gives_no_deadline_and_no_error(api_server, fault, tmp_path, caplog):
    """The worker then takes its notice at once, as before this read existed."""
    _, environ, files = api_server
    if fault == "no-such-pod":
        environ = {**environ, ENV_NODE: "another-pod"}
    elif fault == "no-token-mounted":
        files = {**files, "token_file": str(tmp_path / "absent")}
    elif fault == "no-server":
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            environ = {**environ, "KUBERNETES_SERVICE_PORT": str(free.getsockname()[1])}
    silent = socket.socket()
    try:
        if fault == "a-server-that-never-answers":
            # The kernel completes the handshake into the backlog; nothing ever reads or writes.
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            environ = {**environ, "KUBERNETES_SERVICE_PORT": str(silent.getsockname()[1])}
        started = time.monotonic()
        assert pod_deletion_deadline(environ, **files, timeout_s=1.0) is None
        assert time.monotonic() - started < within(3.0)
    finally:
        silent.close()
    assert "deletion time cannot be read" in caplog.text


def test_the_token_and_ca_are_read_where_the_kubernetes_client_reads_them_in_a_pod():
    from kubernetes.config import incluster_config

    from lab.runtime import pod_deadline

    assert pod_deadline.SERVICE_TOKEN_FILE == incluster_config.SERVICE_TOKEN_FILENAME
    assert pod_deadline.SERVICE_CA_FILE == incluster_config.SERVICE_CERT_FILENAME

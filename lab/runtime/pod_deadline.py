"""When this worker's pod must be gone, read from the pod itself: its `deletionTimestamp`.

A pod that Kubernetes takes away with a grace period (evicted by a drain or by the spot-notice
handler, which shortens the grace to end before the VM's `NotBefore`; preempted by the
scheduler; deleted for a taint) keeps running until `metadata.deletionTimestamp`, the request's
time plus its grace period, and carries the condition `DisruptionTarget`: the kubelet sends
SIGTERM at once and SIGKILL at the end. A worker that reads it on its SIGTERM knows how long it
may train on, as the local target's notice file tells a local node's workers. A pod deleted
plainly (its job deleted or scaled in) has no such condition: its workers save and leave at
once, as they do where the pod cannot be read (no service account, a VM that vanished, a
kubelet shutting its node down).

The read is one GET of the pod, as the pod's own service account (the platform grants it `get`
on pods in the training namespace) with the name and namespace the job's chart hands in from
the Downward API (`ENV_NODE`, `ENV_POD_NAMESPACE`), over TLS checked against the cluster's CA.
It is plain HTTPS rather than the Kubernetes client: the client's `Configuration` sets logger
levels for the whole process (a user's script calls this), its timeouts take no float, and its
import alone costs a quarter of a second of a notice that may be under ten.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import urllib.request
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from lab.vocab.job import ENV_NODE, ENV_POD_NAMESPACE

log = logging.getLogger(__name__)

# A notice's read must not eat the time it is for: Azure's notices are often under 10 s.
READ_TIMEOUT_S = 2.0
SERVICE_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_CA_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
# Where a pod finds its API server (the kubelet sets them in every container).
ENV_SERVICE_HOST = "KUBERNETES_SERVICE_HOST"
ENV_SERVICE_PORT = "KUBERNETES_SERVICE_PORT"
# The condition Kubernetes adds to a pod it takes away (an eviction, a preemption, a taint).
DISRUPTION_TARGET = "DisruptionTarget"


def on_a_cluster(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process is a cluster's worker, whose pod can say when it goes."""
    return bool(environ.get(ENV_NODE) and environ.get(ENV_POD_NAMESPACE))


def pod_deletion_deadline(
    environ: Mapping[str, str] = os.environ,
    *,
    signalled_at: float | None = None,
    token_file: str | None = None,
    ca_file: str | None = None,
    timeout_s: float = READ_TIMEOUT_S,
) -> float | None:
    """The Unix time at which this process's pod is killed, when Kubernetes is taking the pod
    away with a grace period; None otherwise, or when the pod cannot be read. `signalled_at`
    (when the SIGTERM came, on this node's clock) bounds it by the grace period the kubelet
    counts from there, whatever the API server's clock says. The service account's token and
    the cluster's CA are read where Kubernetes mounts them unless given."""
    if not on_a_cluster(environ):
        return None
    name, namespace = environ[ENV_NODE], environ[ENV_POD_NAMESPACE]
    try:
        pod = _read_pod(
            environ, name, namespace, token_file or SERVICE_TOKEN_FILE, ca_file or SERVICE_CA_FILE, timeout_s
        )
        return deadline_of(pod, signalled_at)
    except Exception as exc:  # noqa: BLE001 - a notice must never be lost to this read
        log.warning(
            "spot notice: pod %s/%s's deletion time cannot be read (%s): taking the notice now", namespace, name, exc
        )
        return None


def deadline_of(pod: Mapping[str, Any], signalled_at: float | None = None) -> float | None:
    """When `pod` (a Pod object as the API serves it) is killed: its deletion time when
    Kubernetes is disrupting it, bounded by `signalled_at` plus its grace period."""
    meta = pod.get("metadata") or {}
    stamp = meta.get("deletionTimestamp")
    conditions = (pod.get("status") or {}).get("conditions") or []
    disrupted = any(c.get("type") == DISRUPTION_TARGET and c.get("status") == "True" for c in conditions)
    if not stamp or not disrupted:
        return None
    end = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    grace = meta.get("deletionGracePeriodSeconds")
    if signalled_at is not None and isinstance(grace, int | float):
        end = min(end, signalled_at + float(grace))
    return end


def _read_pod(
    environ: Mapping[str, str], name: str, namespace: str, token_file: str, ca_file: str, timeout_s: float
) -> dict[str, Any]:
    host, port = environ.get(ENV_SERVICE_HOST), environ.get(ENV_SERVICE_PORT)
    if not host or not port:
        raise LookupError(f"{ENV_SERVICE_HOST} and {ENV_SERVICE_PORT} are not set")
    token = Path(token_file).read_text().strip()
    address = f"[{host}]" if ":" in host else host
    url = f"https://{address}:{port}/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    # No proxy: the API server is reached inside the cluster, as the Kubernetes client does.
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca_file))
    )
    with opener.open(request, timeout=timeout_s) as answer:
        pod = json.load(answer)
    if not isinstance(pod, dict):
        raise ValueError(f"the API server answered a {type(pod).__name__}, not a Pod")
    return pod

"""When this worker's pod must be gone, read from the pod itself: its `deletionTimestamp`.

A pod deleted with a grace period (evicted by a drain or by the spot-notice handler, which
shortens the grace to end before the VM's `NotBefore`; a job scaled down) keeps running until
`metadata.deletionTimestamp`, the request's time plus its grace period: the kubelet sends
SIGTERM at once and SIGKILL then. A worker that reads it on its SIGTERM knows how long it may
train on, as the local target's notice file tells a local node's workers.

The read uses the pod's own service account (the platform grants it `get` on pods in the
training namespace) and the pod's name and namespace, which the job's chart hands in from the
Downward API (`ENV_NODE`, `ENV_POD_NAMESPACE`). Outside a cluster, or for a pod that was not
deleted through the API (a VM that vanished, a kubelet shutting its node down), there is no
deadline, and the worker takes its notice at once.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping

from lab.vocab.job import ENV_NODE, ENV_POD_NAMESPACE

log = logging.getLogger(__name__)

# A notice's read must not eat the time it is for: Azure's notices are often under 10 s.
READ_TIMEOUT_S = 2.0
SERVICE_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_CA_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"


def on_a_cluster(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process is a cluster's worker, whose pod can say when it goes."""
    return bool(environ.get(ENV_NODE) and environ.get(ENV_POD_NAMESPACE))


def load_client_soon(environ: Mapping[str, str] = os.environ) -> None:
    """On a cluster's worker, import the Kubernetes client in the background now (about 0.25 s),
    so that a SIGTERM, a notice or the agent restarting the workers, does not wait for it."""
    if on_a_cluster(environ):
        threading.Thread(target=_import_client, name="pod-deadline-import", daemon=True).start()


def _import_client() -> None:
    from kubernetes import client
    from kubernetes.config.incluster_config import InClusterConfigLoader

    log.debug("loaded %s and %s", client.__name__, InClusterConfigLoader.__name__)


def pod_deletion_deadline(
    environ: Mapping[str, str] = os.environ,
    *,
    token_file: str | None = None,
    ca_file: str | None = None,
    timeout_s: float = READ_TIMEOUT_S,
) -> float | None:
    """The Unix time at which this process's pod is killed, when the pod has been deleted with a
    grace period; None when it has not, when this is no pod, or when the pod cannot be read.
    The service account's token and the cluster's CA are read from where Kubernetes mounts them
    (`SERVICE_TOKEN_FILE`, `SERVICE_CA_FILE`) unless given."""
    if not on_a_cluster(environ):
        return None
    name, namespace = environ[ENV_NODE], environ[ENV_POD_NAMESPACE]
    # Imported here: only a worker on a cluster that got a SIGTERM pays for the client.
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.incluster_config import InClusterConfigLoader
    from urllib3.exceptions import HTTPError

    configuration = client.Configuration()
    try:
        InClusterConfigLoader(
            token_file or SERVICE_TOKEN_FILE, ca_file or SERVICE_CA_FILE, environ=environ
        ).load_and_set(configuration)
        with client.ApiClient(configuration) as api:
            pod = client.CoreV1Api(api).read_namespaced_pod(name, namespace, _request_timeout=timeout_s)
    except (ConfigException, ApiException, HTTPError, OSError) as exc:
        why = f"HTTP {exc.status} {exc.reason}" if isinstance(exc, ApiException) else str(exc)
        log.warning(
            "spot notice: pod %s/%s's deletion time cannot be read (%s): taking the notice now", namespace, name, why
        )
        return None
    stamp = pod.metadata.deletion_timestamp if pod.metadata is not None else None
    return stamp.timestamp() if stamp is not None else None

"""A connection to a cluster's API server, from the kubeconfig a user means.

Which kubeconfig: `--kubeconfig` if given; else the stack's own (the byo stack's file, or
the Pulumi stack output `kubeconfig` of a cloud stack: lab.stacks.target); else
what kubectl would use (`$KUBECONFIG`, which may list several files, or ~/.kube/config).
`--context` picks a context in it. The client's configuration is built for this call only
(never the kubernetes package's global default), and the server is asked for its version
before anything else so that an unreachable or unauthorised cluster is one clear error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from lab.cluster.unreachable import unreachable_reason
from lab.vocab.errors import LabError
from lab.vocab.problems import Problem


class KubeError(LabError):
    """The cluster cannot be reached or refused a request; the message says why and what to do."""


@dataclass
class KubeApi:
    """An API client and where it came from (for messages)."""

    api: client.ApiClient
    source: str  # "kubeconfig <path> context <name>"
    namespace: str

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)


def api_error(exc: ApiException, doing: str) -> KubeError:
    """A ClusterError for a refused request: the status, the server's own message, a hint."""
    message = exc.reason or ""
    try:
        import json

        message = json.loads(exc.body or "{}").get("message", message)
    except ValueError:
        pass
    hint = {
        401: " (the kubeconfig's credentials were refused: log in again, e.g. `az aks get-credentials` or "
        "`aws eks update-kubeconfig`)",
        403: " (the kubeconfig's user lacks this permission)",
    }.get(exc.status or 0, "")
    return KubeError(f"{doing}: {exc.status} {message}{hint}")


def _configuration(path: str | None, context: str | None) -> tuple[client.Configuration, str, str]:
    """(configuration, description, default namespace) from a kubeconfig file or $KUBECONFIG."""
    configuration = client.Configuration()
    # $KUBECONFIG is read now (the kubernetes package reads it once, at import); it may list
    # several files, merged as kubectl merges them.
    path = path or os.environ.get("KUBECONFIG") or None
    where = path or "~/.kube/config"
    try:
        contexts, current = config.list_kube_config_contexts(config_file=path)
        chosen = current
        if context is not None:
            chosen = next((c for c in contexts if c["name"] == context), None)
            if chosen is None:
                known = ", ".join(sorted(c["name"] for c in contexts)) or "none"
                raise KubeError(f"--context {context!r}: no such context in {where} (it has: {known})")
        config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
    except ConfigException as exc:
        raise KubeError(f"cannot use kubeconfig {where}: {exc}") from None
    except FileNotFoundError as exc:
        raise KubeError(f"kubeconfig {where}: {exc.strerror}") from None
    namespace = str((chosen or {}).get("context", {}).get("namespace") or "default")
    return configuration, f"kubeconfig {where} context {(chosen or {}).get('name', '?')}", namespace


def connect(path: str | None = None, context: str | None = None, *, probe: bool = True) -> KubeApi:
    """A Cluster for kubeconfig `path` (None: $KUBECONFIG or ~/.kube/config) and `context`."""
    configuration, source, namespace = _configuration(path, context)
    api = client.ApiClient(configuration)
    kube = KubeApi(api=api, source=source, namespace=namespace)
    if probe:
        try:
            client.VersionApi(api).get_code(_request_timeout=15)
        except ApiException as exc:
            raise api_error(exc, f"the API server of {source} refused a version request") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(
                f"no Kubernetes API server reachable with {source} ({configuration.host}): "
                + unreachable_reason(exc, configuration.host)
            ) from None
    return kube


def kubeconfig_problems(kubeconfig: str | None) -> list[Problem]:
    """--kubeconfig, when given: a file that is there."""
    if kubeconfig is not None and not Path(kubeconfig).expanduser().is_file():
        return [Problem("--kubeconfig", kubeconfig, "a kubeconfig file (there is no such file)")]
    return []

"""Teardown on the cluster itself: the namespace's jobs, LoadBalancer Services and (unless
checkpoints are kept) PersistentVolumeClaims, before the cluster goes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import urllib3
from kubernetes.client.rest import ApiException

from lab.cluster.eviction import ApiCall
from lab.cluster.kube import KubeApi, api_error

if TYPE_CHECKING:
    pass


from lab.cluster.teardown.base import (
    _JOBS,
    KUBERNETES_API,
    PVC,
    PYTORCHJOB,
    SERVICE,
    Leftover,
    Recorded,
    TeardownError,
    _delete_all,
    _planned,
)


class KubernetesSweep(Recorded):
    """The namespace's training jobs, LoadBalancer Services and (unless `keep_checkpoints`)
    PersistentVolumeClaims, through the cluster's API server (a `Sweep`).

    Meant to run before `pulumi destroy`, while the cluster's controllers still run: deleting
    a LoadBalancer Service makes the cloud provider delete its load balancer and public IP,
    and deleting a claim whose volume is dynamic makes the CSI driver delete its disk."""

    name = "kubernetes"
    ORDER = (PYTORCHJOB, SERVICE, PVC)

    def __init__(self, kube: KubeApi, namespace: str, keep_checkpoints: bool = True) -> None:
        self.kube = kube
        self.namespace = namespace
        self.keep_checkpoints = keep_checkpoints
        super().__init__()

    @property
    def _where(self) -> str:
        return f"namespace {self.namespace}"

    def _look(self) -> list[Leftover]:
        found: list[Leftover] = []
        ns = self.namespace
        try:
            jobs = self.kube.custom.list_namespaced_custom_object(namespace=ns, **_JOBS)
        except ApiException as e:
            # No PyTorchJob resource at all: the training operator is gone, and so are its jobs.
            jobs = {} if e.status == 404 else self._fail(e, f"listing PyTorchJobs in {ns}")
        except (urllib3.exceptions.HTTPError, OSError) as e:
            self._unreachable(e)
        for job in jobs.get("items", []):
            found.append(Leftover(PYTORCHJOB, job["metadata"]["name"], self._where, "a training job"))
        for service in self._list("service").items:
            if (service.spec.type if service.spec else None) != "LoadBalancer":
                continue
            ingress = service.status.load_balancer.ingress if service.status and service.status.load_balancer else None
            address = ", ".join(i.ip or i.hostname or "" for i in ingress or []) or "no address yet"
            found.append(
                Leftover(
                    SERVICE,
                    service.metadata.name,
                    self._where,
                    f"a LoadBalancer Service: its cloud load balancer ({address}) is outside Pulumi's state",
                )
            )
        for claim in self._list("persistent_volume_claim").items:
            volume = (claim.spec.volume_name if claim.spec else None) or "no volume yet"
            claimed = f"a volume claim (volume {volume})"
            if self.keep_checkpoints:
                self.kept.append(
                    Leftover(PVC, claim.metadata.name, self._where, f"{claimed}: kept with the checkpoints")
                )
            else:
                found.append(Leftover(PVC, claim.metadata.name, self._where, claimed))
        return found

    def delete(self, items: Sequence[Leftover]) -> list[str]:
        core, custom, ns = self.kube.core, self.kube.custom, self.namespace

        def delete_one(item: Leftover) -> bool:
            try:
                if item.kind == PYTORCHJOB:
                    # Background propagation: the garbage collector deletes the job's pods.
                    custom.delete_namespaced_custom_object(
                        namespace=ns, name=item.id, propagation_policy="Background", **_JOBS
                    )
                elif item.kind == SERVICE:
                    core.delete_namespaced_service(item.id, ns)
                else:
                    core.delete_namespaced_persistent_volume_claim(item.id, ns)
            except ApiException as e:
                if e.status == 404:
                    return True
                self._fail(e, f"deleting {item.kind} {ns}/{item.id}")
            except (urllib3.exceptions.HTTPError, OSError) as e:
                self._unreachable(e)
            return False

        return _delete_all(self.name, items, self.ORDER, delete_one)

    def calls(self) -> list[ApiCall]:
        return kubernetes_sweep_calls(self.namespace, self.keep_checkpoints, self._found)

    def _list(self, suffix: str) -> Any:
        try:
            return getattr(self.kube.core, f"list_namespaced_{suffix}")(self.namespace)
        except ApiException as e:
            self._fail(e, f"listing the {suffix.replace('_', ' ')}s of {self.namespace}")
        except (urllib3.exceptions.HTTPError, OSError) as e:
            self._unreachable(e)

    @staticmethod
    def _fail(e: ApiException, doing: str) -> Any:
        raise TeardownError(str(api_error(e, doing))) from None

    def _unreachable(self, e: BaseException) -> Any:
        raise TeardownError(
            f"no Kubernetes API server reachable with {self.kube.source} ({type(e).__name__}); is the cluster "
            "still there? (`elastic-lab teardown` sweeps it before `pulumi destroy`)"
        ) from None


def kubernetes_sweep_calls(
    namespace: str, keep_checkpoints: bool = True, found: list[Leftover] | None = None
) -> list[ApiCall]:
    """The requests of a `KubernetesSweep` of `namespace`: its reads, then a deletion of each
    thing `found` (None: find() has not run, or there is no cluster to run it on; placeholders)."""
    ns = {"namespace": namespace}
    out = [
        ApiCall(KUBERNETES_API, "list_namespaced_custom_object", {**_JOBS, **ns}, reads_only=True),
        ApiCall(KUBERNETES_API, "list_namespaced_service", ns, reads_only=True),
        ApiCall(KUBERNETES_API, "list_namespaced_persistent_volume_claim", ns, reads_only=True),
    ]
    for job in _planned(found, PYTORCHJOB, "<each PyTorchJob found>"):
        params = {**_JOBS, **ns, "name": job.id, "propagation_policy": "Background"}
        out.append(ApiCall(KUBERNETES_API, "delete_namespaced_custom_object", params))
    for service in _planned(found, SERVICE, "<each LoadBalancer Service found>"):
        out.append(ApiCall(KUBERNETES_API, "delete_namespaced_service", {"name": service.id, **ns}))
    if not keep_checkpoints:
        for claim in _planned(found, PVC, "<each PersistentVolumeClaim found>"):
            out.append(ApiCall(KUBERNETES_API, "delete_namespaced_persistent_volume_claim", {"name": claim.id, **ns}))
    return out

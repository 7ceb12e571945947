"""Each guardrail holds on the platform's rendered objects and fails on a broken variant."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from lab.k8s.platform_guardrails import GUARDRAILS, GuardrailContext, run_guardrails
from lab.vocab.job import JobSpec
from tests.k8s.helpers import render_job, the
from tests.placements import AKS_PLACEMENT

Objects = list[dict[str, Any]]
Where = Callable[[Objects], dict[str, Any]]


# ------------------------------------------------------------------ where to break
def deployment_pod(name: str) -> Where:
    def where(objs: Objects) -> dict[str, Any]:
        return the(objs, "Deployment", name)["spec"]["template"]["spec"]

    return where


etcd_pod = deployment_pod("etcd-rendezvous")
operator_pod = deployment_pod("training-operator")
store_pod = deployment_pod("job-c10d-rdzv-store")
lighthouse_pod = deployment_pod("job-perstep-lighthouse")


def notice_pod(objs: Objects) -> dict[str, Any]:
    return the(objs, "DaemonSet", "spot-notice-handler")["spec"]["template"]["spec"]


def annotations_of(name: str) -> Where:
    def where(objs: Objects) -> dict[str, Any]:
        return the(objs, "Deployment", name)["spec"]["template"]["metadata"]["annotations"]

    return where


def etcd_container(objs: Objects) -> dict[str, Any]:
    return etcd_pod(objs)["containers"][0]


def worker(objs: Objects, job: str = "job-etcd") -> dict[str, Any]:
    return the(objs, "PyTorchJob", job)["spec"]["pytorchReplicaSpecs"]["Worker"]


def worker_pod(objs: Objects) -> dict[str, Any]:
    return worker(objs)["template"]["spec"]


def per_step_worker(objs: Objects) -> dict[str, Any]:
    return worker(objs, "job-perstep")


def per_step_worker_pod(objs: Objects) -> dict[str, Any]:
    return per_step_worker(objs)["template"]["spec"]


def per_step_env(name: str) -> Where:
    def where(objs: Objects) -> dict[str, Any]:
        return next(e for e in per_step_worker_pod(objs)["containers"][0]["env"] if e["name"] == name)

    return where


def worker_labels(objs: Objects) -> dict[str, Any]:
    return worker(objs)["template"]["metadata"]["labels"]


def pytorch(objs: Objects) -> dict[str, Any]:
    return worker_pod(objs)["containers"][0]


def pytorch_resources(objs: Objects) -> dict[str, Any]:
    return pytorch(objs)["resources"]


def policy_of(job: str) -> Where:
    def where(objs: Objects) -> dict[str, Any]:
        return the(objs, "PyTorchJob", job)["spec"]["elasticPolicy"]

    return where


policy = policy_of("job-etcd")


def burst_pod(objs: Objects) -> dict[str, Any]:
    """The pod template of job-burst's borrowed part."""
    return worker(objs, "job-burst-burst")["template"]["spec"]


def priority_class(name: str) -> Where:
    def where(objs: Objects) -> dict[str, Any]:
        return the(objs, "PriorityClass", name)

    return where


def spec_of(kind: str, name: str) -> Where:
    def where(objs: Objects) -> dict[str, Any]:
        return the(objs, kind, name)["spec"]

    return where


# ------------------------------------------------------------------ how to break it
Breakage = Callable[[Objects], None]


def put(where: Where, key: str, value: Any) -> Breakage:
    def breakage(objs: Objects) -> None:
        where(objs)[key] = value

    return breakage


def drop(where: Where, key: str) -> Breakage:
    def breakage(objs: Objects) -> None:
        where(objs).pop(key)

    return breakage


def add_to(where: Where, key: str, item: Any) -> Breakage:
    def breakage(objs: Objects) -> None:
        where(objs)[key].append(item)

    return breakage


def take_from(where: Where, key: str, item: Any) -> Breakage:
    def breakage(objs: Objects) -> None:
        where(objs)[key].remove(item)

    return breakage


def without(kind: str, name: str) -> Breakage:
    def breakage(objs: Objects) -> None:
        objs.remove(the(objs, kind, name))

    return breakage


def _min_available(objs: Objects, name: str, count: int) -> None:
    """The budget of `name` as minAvailable `count` instead of maxUnavailable."""
    spec = the(objs, "PodDisruptionBudget", name)["spec"]
    spec.pop("maxUnavailable")
    spec["minAvailable"] = count


def with_object(obj: dict[str, Any]) -> Breakage:
    def breakage(objs: Objects) -> None:
        objs.append(obj)

    return breakage


def checkpoint_volume(driver: str, options: list[str]) -> dict[str, Any]:
    """A static checkpoint volume bound to the jobs' claim, as the platform declares one."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "training-elastic-checkpoints"},
        "spec": {
            "claimRef": {"namespace": "training", "name": "elastic-checkpoints"},
            "mountOptions": options,
            "csi": {"driver": driver, "volumeHandle": "h"},
        },
    }


def not_ready_tolerated_300s(objs: Objects) -> None:
    for t in worker_pod(objs)["tolerations"]:
        if "tolerationSeconds" in t:
            t["tolerationSeconds"] = 300


def per_step_job_with_elastic_policy(objs: Objects) -> None:
    the(objs, "PyTorchJob", "job-perstep")["spec"]["elasticPolicy"] = copy.deepcopy(policy(objs))


def c10d_job_shares_the_etcd_jobs_rdzv_id(objs: Objects) -> None:
    policy(objs)["rdzvId"] = policy_of("job-c10d")(objs)["rdzvId"]


def policy_admits_a_namespace(objs: Objects) -> None:
    spec_of("NetworkPolicy", "etcd-rendezvous")(objs)["ingress"][0]["from"].append({"namespaceSelector": {}})


def hpa_on_memory_nobody_requests(objs: Objects) -> None:
    pytorch_resources(objs)["requests"].pop("memory", None)
    policy(objs)["metrics"] = [
        {
            "type": "Resource",
            "resource": {"name": "memory", "target": {"type": "Utilization", "averageUtilization": 70}},
        }
    ]


def hpa_without_room(objs: Objects) -> None:
    policy(objs)["minReplicas"] = policy(objs)["maxReplicas"]
    policy(objs)["metrics"] = [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}
    ]


def checkpoint_mounted_elsewhere(objs: Objects) -> None:
    pytorch(objs)["volumeMounts"][0]["mountPath"] = "/mnt/elsewhere"


SPOT_TOLERATION = {
    "key": "kubernetes.azure.com/scalesetpriority",
    "operator": "Equal",
    "value": "spot",
    "effect": "NoSchedule",
}
GPU_POOL = {"elastic-spot-lab/pool": "gpu-spot"}
SYSTEM_PRIORITY_CLASS = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "system-training"},
    "value": 5,
}


@dataclass(frozen=True)
class Broken:
    """A broken variant of the baseline: the guardrail it must fail, how it is broken, and
    text one of the violations must contain (the property and what was expected)."""

    guardrail: str
    breakage: Breakage
    message: str


BROKEN: dict[str, Broken] = {
    # etcd (and c10d stores) not on spot nodes
    "etcd/no-node-selector": Broken(
        "etcd-not-on-spot",
        drop(etcd_pod, "nodeSelector"),
        "nodeSelector=None: expected the on-demand CPU pool's labels",
    ),
    "etcd/spot-node-selector": Broken(
        "etcd-not-on-spot",
        put(etcd_pod, "nodeSelector", {"kubernetes.azure.com/scalesetpriority": "spot"}),
        "nodeSelector/affinity={'kubernetes.azure.com/scalesetpriority': 'spot'}: expected no spot node label",
    ),
    "etcd/tolerates-spot-taint": Broken(
        "etcd-not-on-spot",
        put(etcd_pod, "tolerations", [SPOT_TOLERATION]),
        "expected no toleration of the GPU spot pool's taint kubernetes.azure.com/scalesetpriority=spot:NoSchedule",
    ),
    "etcd/tolerates-everything": Broken(
        "etcd-not-on-spot",
        put(etcd_pod, "tolerations", [{"operator": "Exists"}]),
        "tolerations=[{'operator': 'Exists'}]: expected no toleration of the GPU spot pool's taint "
        "nvidia.com/gpu=present:NoSchedule",
    ),
    "etcd/gpu-pool-selector": Broken(
        "etcd-not-on-spot",
        put(etcd_pod, "nodeSelector", GPU_POOL),
        "nodeSelector={'elastic-spot-lab/pool': 'gpu-spot'}: expected the on-demand CPU pool's labels",
    ),
    "etcd/worker-priority": Broken(
        "etcd-not-on-spot",
        put(etcd_pod, "priorityClassName", "elastic-preemptible"),
        "priorityClassName='elastic-preemptible': expected 'elastic-preserved'",
    ),
    "etcd/c10d-store-on-spot": Broken(
        "etcd-not-on-spot",
        put(store_pod, "nodeSelector", GPU_POOL),
        "Deployment/training/job-c10d-rdzv-store: nodeSelector=",
    ),
    "etcd/c10d-store-tolerates-spot": Broken(
        "etcd-not-on-spot", put(store_pod, "tolerations", [SPOT_TOLERATION]), "job-c10d-rdzv-store: tolerations="
    ),
    "etcd/lighthouse-on-spot": Broken(
        "etcd-not-on-spot",
        put(lighthouse_pod, "nodeSelector", GPU_POOL),
        "Deployment/training/job-perstep-lighthouse: nodeSelector={'elastic-spot-lab/pool': 'gpu-spot'}: "
        "expected the on-demand CPU pool's labels",
    ),
    "etcd/lighthouse-tolerates-spot": Broken(
        "etcd-not-on-spot",
        put(lighthouse_pod, "tolerations", [SPOT_TOLERATION]),
        "job-perstep-lighthouse: tolerations=",
    ),
    "etcd/lighthouse-without-priority": Broken(
        "etcd-not-on-spot",
        drop(lighthouse_pod, "priorityClassName"),
        "Deployment/training/job-perstep-lighthouse: priorityClassName=None: expected 'elastic-preserved'",
    ),
    "etcd/no-etcd": Broken(
        "etcd-not-on-spot",
        without("Deployment", "etcd-rendezvous"),
        "expected an etcd-rendezvous Deployment among the platform's objects",
    ),
    # the training operator on the CPU pool
    "operator/placement-removed": Broken(
        "operator-on-cpu-pool",
        without("Deployment", "training-operator"),
        "expected the training operator's Deployment as placed by the platform",
    ),
    "operator/no-node-selector": Broken(
        "operator-on-cpu-pool",
        drop(operator_pod, "nodeSelector"),
        "Deployment/kubeflow/training-operator: nodeSelector=None: expected the on-demand CPU pool's labels",
    ),
    "operator/on-gpu-pool": Broken(
        "operator-on-cpu-pool",
        put(operator_pod, "nodeSelector", GPU_POOL),
        "nodeSelector={'elastic-spot-lab/pool': 'gpu-spot'}",
    ),
    "operator/tolerates-spot-taint": Broken(
        "operator-on-cpu-pool", put(operator_pod, "tolerations", [SPOT_TOLERATION]), "training-operator: tolerations="
    ),
    "operator/no-priority": Broken(
        "operator-on-cpu-pool",
        drop(operator_pod, "priorityClassName"),
        "priorityClassName=None: expected 'elastic-preserved'",
    ),
    # nothing hosting the rendezvous or the operator can be preempted by inference
    "preempt/preserved-below-inference": Broken(
        "infra-not-preemptible-by-inference",
        put(priority_class("elastic-preserved"), "value", 50_000),
        "PriorityClass/elastic-preserved: value=50000: expected >= 100000",
    ),
    "preempt/etcd-at-worker-priority": Broken(
        "infra-not-preemptible-by-inference",
        put(etcd_pod, "priorityClassName", "elastic-preemptible"),
        "Deployment/training/etcd-rendezvous: priorityClassName='elastic-preemptible': "
        "expected a PriorityClass with value >= 100000",
    ),
    "preempt/operator-without-priority": Broken(
        "infra-not-preemptible-by-inference",
        drop(operator_pod, "priorityClassName"),
        "Deployment/kubeflow/training-operator: priorityClassName=None",
    ),
    "preempt/store-at-worker-priority": Broken(
        "infra-not-preemptible-by-inference",
        put(store_pod, "priorityClassName", "elastic-preemptible"),
        "job-c10d-rdzv-store: priorityClassName='elastic-preemptible'",
    ),
    "preempt/lighthouse-at-worker-priority": Broken(
        "infra-not-preemptible-by-inference",
        put(lighthouse_pod, "priorityClassName", "elastic-preemptible"),
        "job-perstep-lighthouse: priorityClassName='elastic-preemptible'",
    ),
    # workers tolerate exactly the GPU spot pool's taints
    "tolerations/missing-spot-toleration": Broken(
        "workers-tolerate-exactly-gpu-spot-taints",
        take_from(worker_pod, "tolerations", SPOT_TOLERATION),
        "expected a toleration of the pool taint "
        "{'effect': 'NoSchedule', 'key': 'kubernetes.azure.com/scalesetpriority'",
    ),
    "tolerations/extra-toleration": Broken(
        "workers-tolerate-exactly-gpu-spot-taints",
        add_to(worker_pod, "tolerations", {"key": "CriticalAddonsOnly", "operator": "Exists"}),
        "tolerations={'key': 'CriticalAddonsOnly', 'operator': 'Exists'}: expected only the GPU spot pool's taints",
    ),
    "tolerations/wildcard": Broken(
        "workers-tolerate-exactly-gpu-spot-taints",
        add_to(worker_pod, "tolerations", {"operator": "Exists"}),
        "tolerations={'operator': 'Exists'}: expected only",
    ),
    "tolerations/default-300s-not-ready": Broken(
        "workers-tolerate-exactly-gpu-spot-taints",
        not_ready_tolerated_300s,
        "tolerations[node.kubernetes.io/not-ready].tolerationSeconds=300: expected <= 60",
    ),
    "tolerations/no-gpu-pool-affinity": Broken(
        "workers-tolerate-exactly-gpu-spot-taints",
        drop(worker_pod, "affinity"),
        "affinity=None: expected required node affinity to the GPU spot pool",
    ),
    "tolerations/per-step-worker-wildcard": Broken(
        "workers-tolerate-exactly-gpu-spot-taints",
        add_to(per_step_worker_pod, "tolerations", {"operator": "Exists"}),
        "PyTorchJob/training/job-perstep Worker: tolerations={'operator': 'Exists'}: expected only",
    ),
    "tolerations/per-step-worker-no-gpu-pool-affinity": Broken(
        "workers-tolerate-exactly-gpu-spot-taints",
        drop(per_step_worker_pod, "affinity"),
        "PyTorchJob/training/job-perstep Worker: affinity=None",
    ),
    # the rendezvous host is the etcd Service (or the job's own store)
    "rdzv/host-is-worker-0": Broken(
        "rdzv-host-is-etcd-service",
        put(policy, "rdzvHost", "job-etcd-worker-0"),
        "elasticPolicy.rdzvHost='job-etcd-worker-0': expected a rendezvous Service, never a worker pod",
    ),
    "rdzv/host-is-other-service": Broken(
        "rdzv-host-is-etcd-service",
        put(policy, "rdzvHost", "redis.training.svc.cluster.local"),
        "elasticPolicy.rdzvHost='redis.training.svc.cluster.local': expected the etcd Service",
    ),
    "rdzv/wrong-port": Broken(
        "rdzv-host-is-etcd-service",
        put(policy, "rdzvPort", 29400),
        "elasticPolicy.rdzvPort=29400: expected the etcd client port 2379",
    ),
    "rdzv/id-none": Broken(
        "rdzv-host-is-etcd-service", put(policy, "rdzvId", "none"), "elasticPolicy.rdzvId='none': expected a unique id"
    ),
    "rdzv/shared-id": Broken(
        "rdzv-host-is-etcd-service", c10d_job_shares_the_etcd_jobs_rdzv_id, "expected one job per rdzvId"
    ),
    "rdzv/c10d-host-is-etcd": Broken(
        "rdzv-host-is-etcd-service",
        put(policy_of("job-c10d"), "rdzvHost", "etcd-rendezvous.training.svc.cluster.local"),
        "expected the job's c10d store Service job-c10d-rdzv-store.training.svc.cluster.local",
    ),
    "rdzv/c10d-store-missing": Broken(
        "rdzv-host-is-etcd-service",
        without("Service", "job-c10d-rdzv-store"),
        "c10d store='training/job-c10d-rdzv-store': expected the store's Service rendered with the job",
    ),
    "rdzv/etcd-service-missing": Broken(
        "rdzv-host-is-etcd-service",
        without("Service", "etcd-rendezvous"),
        "expected the etcd Service among the platform's objects",
    ),
    # a per-step job reaches its own lighthouse, each pod its own replica group
    "rdzv/per-step-lighthouse-missing": Broken(
        "rdzv-host-is-etcd-service",
        without("Service", "job-perstep-lighthouse"),
        "lighthouse='training/job-perstep-lighthouse': expected the lighthouse's Service rendered with the job",
    ),
    "rdzv/per-step-lighthouse-elsewhere": Broken(
        "rdzv-host-is-etcd-service",
        put(per_step_env("TORCHFT_LIGHTHOUSE"), "value", "http://job-c10d-rdzv-store.training.svc.cluster.local:29510"),
        "env.TORCHFT_LIGHTHOUSE='http://job-c10d-rdzv-store.training.svc.cluster.local:29510': expected the job's "
        "lighthouse Service http://job-perstep-lighthouse.training.svc.cluster.local:<port>",
    ),
    "rdzv/per-step-lighthouse-wrong-port": Broken(
        "rdzv-host-is-etcd-service",
        put(per_step_env("TORCHFT_LIGHTHOUSE"), "value", "http://job-perstep-lighthouse:29400"),
        "expected a port of Service/training/job-perstep-lighthouse: [29510]",
    ),
    "rdzv/per-step-service-selects-another-pod": Broken(
        "rdzv-host-is-etcd-service",
        put(spec_of("Service", "job-perstep-lighthouse"), "selector", {"elastic-spot-lab/role": "worker"}),
        "spec.selector={'elastic-spot-lab/role': 'worker'}: expected the lighthouse pod",
    ),
    "rdzv/per-step-with-elastic-policy": Broken(
        "rdzv-host-is-etcd-service", per_step_job_with_elastic_policy, "expected none in per-step mode"
    ),
    "rdzv/per-step-fixed-advertise-address": Broken(
        "rdzv-host-is-etcd-service",
        lambda objs: per_step_env("LAB_FT_ADVERTISE")(objs).update(valueFrom=None, value="127.0.0.1"),
        "env.LAB_FT_ADVERTISE='127.0.0.1': expected the pod's own status.podIP",
    ),
    "rdzv/per-step-shared-group-name": Broken(
        "rdzv-host-is-etcd-service",
        lambda objs: per_step_env("LAB_REPLICA_GROUP")(objs)["valueFrom"]["fieldRef"].update(fieldPath="spec.nodeName"),
        "env.LAB_REPLICA_GROUP='spec.nodeName': expected the pod's own metadata.name",
    ),
    # the etcd image is v3.5.x with the v2 API
    "etcd-image/latest": Broken(
        "etcd-image-v3.5",
        put(etcd_container, "image", "quay.io/coreos/etcd:latest"),
        "image='quay.io/coreos/etcd:latest': expected an etcd v3.5.x tag",
    ),
    "etcd-image/v3.6": Broken(
        "etcd-image-v3.5",
        put(etcd_container, "image", "quay.io/coreos/etcd:v3.6.4"),
        "image='quay.io/coreos/etcd:v3.6.4'",
    ),
    "etcd-image/untagged": Broken(
        "etcd-image-v3.5", put(etcd_container, "image", "quay.io/coreos/etcd"), "image='quay.io/coreos/etcd'"
    ),
    "etcd-image/no-enable-v2": Broken(
        "etcd-image-v3.5", take_from(etcd_container, "args", "--enable-v2=true"), "expected --enable-v2=true"
    ),
    # no PriorityClass is globalDefault; only inference preempts, and it outranks the workers
    "priorities/global-default": Broken(
        "no-global-default-priority-class",
        put(priority_class("elastic-preemptible"), "globalDefault", True),
        "PriorityClass/elastic-preemptible: globalDefault=True: expected false",
    ),
    "priorities/system-name": Broken(
        "no-global-default-priority-class",
        with_object(SYSTEM_PRIORITY_CLASS),
        "metadata.name='system-training': expected a name not starting with system-",
    ),
    "priorities/workers-above-inference": Broken(
        "no-global-default-priority-class",
        put(priority_class("elastic-preemptible"), "value", 200_000),
        "PriorityClass/elastic-preemptible: value=200000: expected < 100000",
    ),
    "priorities/workers-preempt": Broken(
        "no-global-default-priority-class",
        put(priority_class("elastic-preemptible"), "preemptionPolicy", "PreemptLowerPriority"),
        "PriorityClass/elastic-preemptible: preemptionPolicy='PreemptLowerPriority': expected Never",
    ),
    "priorities/borrowed-above-workers": Broken(
        "no-global-default-priority-class",
        put(priority_class("elastic-borrowed"), "value", 5_000),
        "PriorityClass/elastic-borrowed: value=5000: expected < 1000, the value of elastic-preemptible",
    ),
    "priorities/borrowed-preempts": Broken(
        "no-global-default-priority-class",
        put(priority_class("elastic-borrowed"), "preemptionPolicy", "PreemptLowerPriority"),
        "PriorityClass/elastic-borrowed: preemptionPolicy='PreemptLowerPriority': expected Never",
    ),
    "priorities/no-borrowed-class": Broken(
        "no-global-default-priority-class",
        without("PriorityClass", "elastic-borrowed"),
        "PriorityClass='elastic-borrowed': expected declared by the platform",
    ),
    "burst/at-the-workers-priority": Broken(
        "workers-spot-ready",
        put(burst_pod, "priorityClassName", "elastic-preemptible"),
        "PyTorchJob/training/job-burst-burst Worker: priorityClassName='elastic-preemptible': expected "
        "'elastic-borrowed', the borrowed workers' class (below 'elastic-preemptible')",
    ),
    "burst/core-at-the-borrowed-priority": Broken(
        "workers-spot-ready",
        put(lambda objs: worker(objs, "job-burst")["template"]["spec"], "priorityClassName", "elastic-borrowed"),
        "PyTorchJob/training/job-burst Worker: priorityClassName='elastic-borrowed': expected 'elastic-preemptible'",
    ),
    "burst/another-node-range": Broken(
        "rdzv-host-is-etcd-service",
        put(policy_of("job-burst-burst"), "maxReplicas", 5),
        "PyTorchJob/training/job-burst-burst: elasticPolicy=",
    ),
    "burst/not-labelled-a-burst": Broken(
        "rdzv-host-is-etcd-service",
        drop(lambda objs: the(objs, "PyTorchJob", "job-burst-burst")["metadata"]["labels"], "elastic-spot-lab/part"),
        "metadata.labels.elastic-spot-lab/part=None: expected 'burst'",
    ),
    "priorities/preserved-preempts": Broken(
        "no-global-default-priority-class",
        put(priority_class("elastic-preserved"), "preemptionPolicy", "PreemptLowerPriority"),
        "PriorityClass/elastic-preserved: preemptionPolicy='PreemptLowerPriority': expected Never",
    ),
    # etcd is private
    "etcd-private/load-balancer": Broken(
        "etcd-private",
        put(spec_of("Service", "etcd-rendezvous"), "type", "LoadBalancer"),
        "spec.type='LoadBalancer': expected ClusterIP",
    ),
    "etcd-private/no-network-policy": Broken(
        "etcd-private",
        without("NetworkPolicy", "etcd-rendezvous"),
        "expected a NetworkPolicy that restricts ingress to etcd",
    ),
    "etcd-private/policy-admits-all": Broken(
        "etcd-private",
        put(spec_of("NetworkPolicy", "etcd-rendezvous"), "ingress", [{}]),
        "spec.ingress.from=[]: expected only pods labelled",
    ),
    "etcd-private/policy-admits-namespace": Broken(
        "etcd-private", policy_admits_a_namespace, "spec.ingress.from={'namespaceSelector': {}}"
    ),
    "etcd-private/job-without-client-label": Broken(
        "etcd-private", drop(worker_labels, "elastic-spot-lab/rdzv-client"), "template.metadata.labels="
    ),
    # workers ready for spot
    "spot-ready/restart-never": Broken(
        "workers-spot-ready", put(worker, "restartPolicy", "Never"), "restartPolicy='Never': expected ExitCode"
    ),
    "spot-ready/grace-beyond-notice": Broken(
        "workers-spot-ready",
        put(worker_pod, "terminationGracePeriodSeconds", 30),
        "terminationGracePeriodSeconds=30: expected < 30 s",
    ),
    "spot-ready/no-gpu-limit": Broken(
        "workers-spot-ready", drop(pytorch_resources, "limits"), "resources.limits.nvidia.com/gpu=None: expected 1"
    ),
    "spot-ready/no-checkpoint-mount": Broken(
        "workers-spot-ready",
        drop(pytorch, "volumeMounts"),
        "expected the checkpoint claim 'elastic-checkpoints' mounted",
    ),
    "spot-ready/checkpoint-dir-not-the-mount": Broken(
        "workers-spot-ready",
        checkpoint_mounted_elsewhere,
        "env.LAB_CHECKPOINT_DIR='/checkpoints': expected the checkpoint claim's mount path ['/mnt/elsewhere']",
    ),
    "spot-ready/inference-priority": Broken(
        "workers-spot-ready",
        put(worker_pod, "priorityClassName", "elastic-inference"),
        "priorityClassName='elastic-inference': expected 'elastic-preemptible'",
    ),
    "spot-ready/per-step-restart-never": Broken(
        "workers-spot-ready",
        put(per_step_worker, "restartPolicy", "Never"),
        "PyTorchJob/training/job-perstep Worker: restartPolicy='Never': expected ExitCode",
    ),
    # a worker's crash loop ends its pod and says why
    "failures-surface/no-termination-message": Broken(
        "worker-failures-surface",
        drop(pytorch, "terminationMessagePolicy"),
        "Worker: terminationMessagePolicy=None: expected FallbackToLogsOnError",
    ),
    "failures-surface/plain-torchrun": Broken(
        "worker-failures-surface",
        put(pytorch, "command", ["torchrun"]),
        "command=['torchrun']: expected the agent `python -m lab.runtime.launch`",
    ),
    # an elastic job's HPA can move and measures what the workers request
    "autoscaler/unrequested-resource": Broken(
        "job-autoscaler-fits",
        hpa_on_memory_nobody_requests,
        "metrics[0].resource.name='memory': expected a resource the workers request",
    ),
    "autoscaler/no-room": Broken(
        "job-autoscaler-fits",
        hpa_without_room,
        "minReplicas..maxReplicas='3..3': expected minReplicas below maxReplicas",
    ),
    # workers can write to the checkpoint volume they mount
    "writable/no-fs-group": Broken(
        "checkpoints-writable-by-workers",
        drop(worker_pod, "securityContext"),
        "Worker: securityContext.fsGroup=None: expected the image user's group (10001",
    ),
    "writable/root": Broken(
        "checkpoints-writable-by-workers",
        put(worker_pod, "securityContext", {"runAsUser": 0, "fsGroup": 10001}),
        "securityContext.runAsUser=0: expected the image's user, not root",
    ),
    "writable/blobfuse-for-root-only": Broken(
        "checkpoints-writable-by-workers",
        with_object(checkpoint_volume("blob.csi.azure.com", ["--file-cache-timeout-in-seconds=120"])),
        "PersistentVolume/training-elastic-checkpoints: mountOptions=['--file-cache-timeout-in-seconds=120']: "
        "expected '-o allow_other'",
    ),
    "writable/mountpoint-owned-by-root": Broken(
        "checkpoints-writable-by-workers",
        with_object(checkpoint_volume("s3.csi.aws.com", ["allow-delete", "uid 0", "gid 0"])),
        "expected no uid/gid but the trainer's (10001)",
    ),
    # nothing evicts a rendezvous server on its own
    "drains-only/etcd-without-budget": Broken(
        "rendezvous-moved-by-drains-only",
        without("PodDisruptionBudget", "etcd-rendezvous"),
        "PodDisruptionBudget=None: expected a PodDisruptionBudget selecting its pods with maxUnavailable 1",
    ),
    "drains-only/etcd-budget-blocks-drains": Broken(
        "rendezvous-moved-by-drains-only",
        put(spec_of("PodDisruptionBudget", "etcd-rendezvous"), "maxUnavailable", 0),
        "PodDisruptionBudget=['PodDisruptionBudget/training/etcd-rendezvous: maxUnavailable 0']",
    ),
    "drains-only/etcd-budget-allows-all": Broken(
        "rendezvous-moved-by-drains-only",
        put(spec_of("PodDisruptionBudget", "etcd-rendezvous"), "maxUnavailable", "100%"),
        "PodDisruptionBudget=['PodDisruptionBudget/training/etcd-rendezvous: maxUnavailable 100%']",
    ),
    # no budget blocks every drain (AKS: UnsatisfiablePDB, node upgrades Failed)
    "satisfiable/etcd-budget-of-zero": Broken(
        "disruption-budgets-satisfiable",
        put(spec_of("PodDisruptionBudget", "etcd-rendezvous"), "maxUnavailable", 0),
        "PodDisruptionBudget/training/etcd-rendezvous (selects Deployment/training/etcd-rendezvous, 1 replica(s)): "
        "spec.maxUnavailable=0",
    ),
    "satisfiable/store-min-available-all": Broken(
        "disruption-budgets-satisfiable",
        lambda objs: _min_available(objs, "job-c10d-rdzv-store", 1),
        "spec.minAvailable=1: expected a budget that allows at least one eviction",
    ),
    "drains-only/store-without-budget": Broken(
        "rendezvous-moved-by-drains-only",
        without("PodDisruptionBudget", "job-c10d-rdzv-store"),
        "Deployment/training/job-c10d-rdzv-store: PodDisruptionBudget=None",
    ),
    "drains-only/etcd-safe-to-evict": Broken(
        "rendezvous-moved-by-drains-only",
        put(annotations_of("etcd-rendezvous"), "cluster-autoscaler.kubernetes.io/safe-to-evict", "true"),
        "safe-to-evict='true': expected 'false'",
    ),
    "drains-only/store-without-annotation": Broken(
        "rendezvous-moved-by-drains-only",
        drop(annotations_of("job-c10d-rdzv-store"), "cluster-autoscaler.kubernetes.io/safe-to-evict"),
        "safe-to-evict=None: expected 'false'",
    ),
    "drains-only/lighthouse-without-budget": Broken(
        "rendezvous-moved-by-drains-only",
        without("PodDisruptionBudget", "job-perstep-lighthouse"),
        "Deployment/training/job-perstep-lighthouse: PodDisruptionBudget=None",
    ),
    "drains-only/lighthouse-safe-to-evict": Broken(
        "rendezvous-moved-by-drains-only",
        put(annotations_of("job-perstep-lighthouse"), "cluster-autoscaler.kubernetes.io/safe-to-evict", "true"),
        "Deployment/training/job-perstep-lighthouse: spec.template.metadata.annotations."
        "cluster-autoscaler.kubernetes.io/safe-to-evict='true'",
    ),
    # the spot-notice handler reaches every GPU spot node
    "notice-handler/no-gpu-taint-toleration": Broken(
        "notice-handler-on-spot-nodes",
        lambda objs: notice_pod(objs)["tolerations"].pop(),
        "expected a toleration of the GPU spot pool's taint kubernetes.azure.com/scalesetpriority=spot:NoSchedule",
    ),
    "notice-handler/selects-a-subset": Broken(
        "notice-handler-on-spot-nodes",
        put(notice_pod, "nodeSelector", {**AKS_PLACEMENT.gpu_labels, "zone": "1"}),
        "and nothing else",
    ),
    "notice-handler/preemptible": Broken(
        "notice-handler-on-spot-nodes",
        drop(notice_pod, "priorityClassName"),
        "priorityClassName=None: expected 'elastic-preserved' (inference must not preempt it)",
    ),
}


def test_baseline_passes_every_guardrail(baseline, facts):
    assert {
        name: [str(v) for v in vs] for name, vs in run_guardrails(baseline, GuardrailContext(facts=facts)).items() if vs
    } == {}


def test_every_guardrail_has_a_broken_variant():
    assert {case.guardrail for case in BROKEN.values()} == {g.name for g in GUARDRAILS}


@pytest.mark.parametrize("name", BROKEN)
def test_broken_variant_fails(name, baseline, facts):
    case = BROKEN[name]
    case.breakage(baseline)
    violations = run_guardrails(baseline, GuardrailContext(facts=facts))[case.guardrail]
    assert violations, f"{name} should violate {case.guardrail}"
    for v in violations:
        assert v.where and v.expected and str(v)  # names the object and what is expected
    # ... and the property and expectation this breakage is about.
    assert any(case.message in str(v) for v in violations), [str(v) for v in violations]


def test_job_alone_is_checked_without_platform(facts):
    """`elastic-lab submit` checks a job without the platform's objects."""
    _, objects = render_job(JobSpec(), facts)
    ctx = GuardrailContext(facts=facts, expect_platform=False)
    assert not any(run_guardrails(objects, ctx).values())
    worker(objects, "elastic-demo")["template"]["spec"]["tolerations"].pop(0)
    assert run_guardrails(objects, ctx)["workers-tolerate-exactly-gpu-spot-taints"]


def test_per_step_job_alone_is_checked_without_platform(facts):
    """A per-step job and its lighthouse, as `elastic-lab submit` checks them."""
    _, objects = render_job(JobSpec(name="ft", fault_tolerance="per-step"), facts)
    ctx = GuardrailContext(facts=facts, expect_platform=False)
    assert not any(run_guardrails(objects, ctx).values())
    the(objects, "Deployment", "ft-lighthouse")["spec"]["template"]["spec"]["nodeSelector"] = GPU_POOL
    assert run_guardrails(objects, ctx)["etcd-not-on-spot"]


def test_a_longer_eviction_notice_allows_a_longer_grace(baseline, facts):
    """The notice is the cluster's (AWS gives 120 s): the grace period must end within it."""
    worker_pod(baseline)["terminationGracePeriodSeconds"] = 90
    assert run_guardrails(baseline, GuardrailContext(facts=facts))["workers-spot-ready"]
    longer = replace(facts, eviction_notice_s=120)
    assert not run_guardrails(baseline, GuardrailContext(facts=longer))["workers-spot-ready"]


def test_the_platforms_checkpoint_volumes_open_to_the_workers(baseline, facts):
    """The mount options the platform gives its Blob and S3 volumes pass; the job's pods
    (the baseline's) run as the trainer image's user with its group as fsGroup."""
    from components.cluster_info import AzureBlobCheckpoint, S3Checkpoint
    from components.platform.checkpoint_volume import volume_source

    for checkpoint in (
        AzureBlobCheckpoint(storage_account="acct", container="ckpt", resource_group="rg", client_id="id"),
        S3Checkpoint(bucket="bucket"),
    ):
        source = volume_source(checkpoint, default_region="")
        volume = checkpoint_volume(source.csi["driver"], [str(o) for o in source.mount_options])
        assert (
            run_guardrails([*baseline, volume], GuardrailContext(facts=facts))["checkpoints-writable-by-workers"] == []
        )
    context = worker_pod(baseline)["securityContext"]
    assert context["runAsUser"] == context["runAsGroup"] == context["fsGroup"] == 10001

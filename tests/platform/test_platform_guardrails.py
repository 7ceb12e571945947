"""Each guardrail holds on the platform's rendered objects and fails on a broken variant."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from platform_helpers import the
from lab.k8s.guardrails import GUARDRAILS, GuardrailContext, run_guardrails

Objects = list[dict[str, Any]]


def etcd_pod(objs: Objects) -> dict[str, Any]:
    return the(objs, "Deployment", "etcd-rendezvous")["spec"]["template"]["spec"]


def worker(objs: Objects, job: str = "job-etcd") -> dict[str, Any]:
    return the(objs, "PyTorchJob", job)["spec"]["pytorchReplicaSpecs"]["Worker"]


def policy(objs: Objects, job: str = "job-etcd") -> dict[str, Any]:
    return the(objs, "PyTorchJob", job)["spec"]["elasticPolicy"]


def pc(objs: Objects, name: str) -> dict[str, Any]:
    return the(objs, "PriorityClass", name)


def _set(obj: dict, key: str, value: Any) -> None:
    obj[key] = value


def _drop_kind(objs: Objects, kind: str) -> None:
    objs[:] = [o for o in objs if o["kind"] != kind]


def operator_pod(objs: Objects) -> dict[str, Any]:
    return the(objs, "Deployment", "training-operator")["spec"]["template"]["spec"]


def pytorch(objs: Objects, job: str = "job-etcd") -> dict[str, Any]:
    return worker(objs, job)["template"]["spec"]["containers"][0]


SPOT_TOLERATION = {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}

# (guardrail, variant, breakage, text that must appear in one of its violations: the
# property and what was expected)
BROKEN: list[tuple[str, str, Callable[[Objects], Any], str]] = [
    # etcd not on spot nodes
    ("etcd-not-on-spot", "no-node-selector", lambda o: etcd_pod(o).pop("nodeSelector"), "nodeSelector=None: expected the on-demand CPU pool's labels"),
    ("etcd-not-on-spot", "spot-node-selector", lambda o: _set(etcd_pod(o), "nodeSelector", {"kubernetes.azure.com/scalesetpriority": "spot"}),
     "nodeSelector/affinity={'kubernetes.azure.com/scalesetpriority': 'spot'}: expected no spot node label"),
    ("etcd-not-on-spot", "tolerates-spot-taint", lambda o: _set(etcd_pod(o), "tolerations", [SPOT_TOLERATION]),
     "expected no toleration of the GPU spot pool's taint kubernetes.azure.com/scalesetpriority=spot:NoSchedule"),
    ("etcd-not-on-spot", "tolerates-everything", lambda o: _set(etcd_pod(o), "tolerations", [{"operator": "Exists"}]),
     "tolerations=[{'operator': 'Exists'}]: expected no toleration of the GPU spot pool's taint nvidia.com/gpu=present:NoSchedule"),
    ("etcd-not-on-spot", "gpu-pool-affinity", lambda o: _set(etcd_pod(o), "nodeSelector", {"elastic-spot-lab/pool": "gpu-spot"}),
     "nodeSelector={'elastic-spot-lab/pool': 'gpu-spot'}: expected the on-demand CPU pool's labels"),
    ("etcd-not-on-spot", "worker-priority", lambda o: _set(etcd_pod(o), "priorityClassName", "elastic-preemptible"),
     "priorityClassName='elastic-preemptible': expected 'elastic-preserved'"),
    ("etcd-not-on-spot", "c10d-store-on-spot", lambda o: _set(
        the(o, "Deployment", "job-c10d-rdzv-store")["spec"]["template"]["spec"], "nodeSelector", {"elastic-spot-lab/pool": "gpu-spot"}),
     "Deployment/training/job-c10d-rdzv-store: nodeSelector="),
    ("etcd-not-on-spot", "c10d-store-tolerates-spot", lambda o: _set(
        the(o, "Deployment", "job-c10d-rdzv-store")["spec"]["template"]["spec"], "tolerations", [SPOT_TOLERATION]),
     "job-c10d-rdzv-store: tolerations="),
    ("etcd-not-on-spot", "no-etcd", lambda o: o.remove(the(o, "Deployment", "etcd-rendezvous")),
     "expected an etcd-rendezvous Deployment among the platform's objects"),
    # the training operator on the CPU pool
    ("operator-on-cpu-pool", "placement-removed", lambda o: o.remove(the(o, "Deployment", "training-operator")),
     "expected the training operator's Deployment as placed by the platform"),
    ("operator-on-cpu-pool", "no-node-selector", lambda o: operator_pod(o).pop("nodeSelector"),
     "Deployment/kubeflow/training-operator: nodeSelector=None: expected the on-demand CPU pool's labels"),
    ("operator-on-cpu-pool", "on-gpu-pool", lambda o: _set(operator_pod(o), "nodeSelector", {"elastic-spot-lab/pool": "gpu-spot"}),
     "nodeSelector={'elastic-spot-lab/pool': 'gpu-spot'}"),
    ("operator-on-cpu-pool", "tolerates-spot-taint", lambda o: _set(operator_pod(o), "tolerations", [SPOT_TOLERATION]),
     "training-operator: tolerations="),
    ("operator-on-cpu-pool", "no-priority", lambda o: operator_pod(o).pop("priorityClassName"),
     "priorityClassName=None: expected 'elastic-preserved'"),
    # nothing hosting the rendezvous or the operator can be preempted by inference
    ("infra-not-preemptible-by-inference", "preserved-below-inference", lambda o: _set(pc(o, "elastic-preserved"), "value", 50_000),
     "PriorityClass/elastic-preserved: value=50000: expected >= 100000"),
    ("infra-not-preemptible-by-inference", "etcd-at-worker-priority", lambda o: _set(etcd_pod(o), "priorityClassName", "elastic-preemptible"),
     "Deployment/training/etcd-rendezvous: priorityClassName='elastic-preemptible': expected a PriorityClass with value >= 100000"),
    ("infra-not-preemptible-by-inference", "operator-without-priority", lambda o: operator_pod(o).pop("priorityClassName"),
     "Deployment/kubeflow/training-operator: priorityClassName=None"),
    ("infra-not-preemptible-by-inference", "store-at-worker-priority", lambda o: _set(
        the(o, "Deployment", "job-c10d-rdzv-store")["spec"]["template"]["spec"], "priorityClassName", "elastic-preemptible"),
     "job-c10d-rdzv-store: priorityClassName='elastic-preemptible'"),
    # workers tolerate exactly the GPU spot pool's taints
    ("workers-tolerate-exactly-gpu-spot-taints", "missing-spot-toleration", lambda o: worker(o)["template"]["spec"]["tolerations"].pop(0),
     "expected a toleration of the pool taint {'effect': 'NoSchedule', 'key': 'kubernetes.azure.com/scalesetpriority'"),
    ("workers-tolerate-exactly-gpu-spot-taints", "extra-toleration", lambda o: worker(o)["template"]["spec"]["tolerations"].append(
        {"key": "CriticalAddonsOnly", "operator": "Exists"}), "tolerations={'key': 'CriticalAddonsOnly', 'operator': 'Exists'}: expected only the GPU spot pool's taints"),
    ("workers-tolerate-exactly-gpu-spot-taints", "wildcard-toleration", lambda o: worker(o)["template"]["spec"]["tolerations"].append(
        {"operator": "Exists"}), "tolerations={'operator': 'Exists'}: expected only"),
    ("workers-tolerate-exactly-gpu-spot-taints", "default-300s-not-ready", lambda o: [
        t.update(tolerationSeconds=300) for t in worker(o)["template"]["spec"]["tolerations"] if "tolerationSeconds" in t],
     "tolerations[node.kubernetes.io/not-ready].tolerationSeconds=300: expected <= 60"),
    ("workers-tolerate-exactly-gpu-spot-taints", "no-gpu-pool-affinity", lambda o: worker(o)["template"]["spec"].pop("affinity"),
     "affinity=None: expected required node affinity to the GPU spot pool"),
    # rendezvous host is the etcd Service
    ("rdzv-host-is-etcd-service", "host-is-worker-0", lambda o: _set(policy(o), "rdzvHost", "job-etcd-worker-0"),
     "elasticPolicy.rdzvHost='job-etcd-worker-0': expected a rendezvous Service, never a worker pod"),
    ("rdzv-host-is-etcd-service", "host-is-other-service", lambda o: _set(policy(o), "rdzvHost", "redis.training.svc.cluster.local"),
     "elasticPolicy.rdzvHost='redis.training.svc.cluster.local': expected the etcd Service"),
    ("rdzv-host-is-etcd-service", "wrong-port", lambda o: _set(policy(o), "rdzvPort", 29400), "elasticPolicy.rdzvPort=29400: expected the etcd client port 2379"),
    ("rdzv-host-is-etcd-service", "rdzv-id-none", lambda o: _set(policy(o), "rdzvId", "none"), "elasticPolicy.rdzvId='none': expected a unique id"),
    ("rdzv-host-is-etcd-service", "shared-rdzv-id", lambda o: _set(policy(o), "rdzvId", policy(o, "job-c10d")["rdzvId"]), "expected one job per rdzvId"),
    ("rdzv-host-is-etcd-service", "c10d-host-is-etcd", lambda o: _set(policy(o, "job-c10d"), "rdzvHost", "etcd-rendezvous.training.svc.cluster.local"),
     "expected the job's c10d store Service job-c10d-rdzv-store.training.svc.cluster.local"),
    ("rdzv-host-is-etcd-service", "c10d-store-missing", lambda o: o.remove(the(o, "Service", "job-c10d-rdzv-store")),
     "c10d store='training/job-c10d-rdzv-store': expected the store's Service rendered with the job"),
    ("rdzv-host-is-etcd-service", "etcd-service-missing", lambda o: o.remove(the(o, "Service", "etcd-rendezvous")),
     "expected the etcd Service among the platform's objects"),
    # etcd image is v3.5.x with the v2 API
    ("etcd-image-v3.5", "latest", lambda o: _set(etcd_pod(o)["containers"][0], "image", "quay.io/coreos/etcd:latest"),
     "image='quay.io/coreos/etcd:latest': expected an etcd v3.5.x tag"),
    ("etcd-image-v3.5", "v3.6", lambda o: _set(etcd_pod(o)["containers"][0], "image", "quay.io/coreos/etcd:v3.6.4"), "image='quay.io/coreos/etcd:v3.6.4'"),
    ("etcd-image-v3.5", "untagged", lambda o: _set(etcd_pod(o)["containers"][0], "image", "quay.io/coreos/etcd"), "image='quay.io/coreos/etcd'"),
    ("etcd-image-v3.5", "no-enable-v2", lambda o: etcd_pod(o)["containers"][0]["args"].remove("--enable-v2=true"), "expected --enable-v2=true"),
    # no PriorityClass is globalDefault; only inference preempts, and it outranks the workers
    ("no-global-default-priority-class", "global-default", lambda o: _set(pc(o, "elastic-preemptible"), "globalDefault", True),
     "PriorityClass/elastic-preemptible: globalDefault=True: expected false"),
    ("no-global-default-priority-class", "system-name", lambda o: o.append({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "system-training"}, "value": 5}),
     "metadata.name='system-training': expected a name not starting with system-"),
    ("no-global-default-priority-class", "workers-above-inference", lambda o: _set(pc(o, "elastic-preemptible"), "value", 200_000),
     "PriorityClass/elastic-preemptible: value=200000: expected < 100000"),
    ("no-global-default-priority-class", "workers-preempt", lambda o: _set(pc(o, "elastic-preemptible"), "preemptionPolicy", "PreemptLowerPriority"),
     "PriorityClass/elastic-preemptible: preemptionPolicy='PreemptLowerPriority': expected Never"),
    ("no-global-default-priority-class", "preserved-preempts", lambda o: _set(pc(o, "elastic-preserved"), "preemptionPolicy", "PreemptLowerPriority"),
     "PriorityClass/elastic-preserved: preemptionPolicy='PreemptLowerPriority': expected Never"),
    # etcd private
    ("etcd-private", "load-balancer", lambda o: _set(the(o, "Service", "etcd-rendezvous")["spec"], "type", "LoadBalancer"),
     "spec.type='LoadBalancer': expected ClusterIP"),
    ("etcd-private", "no-network-policy", lambda o: o.remove(the(o, "NetworkPolicy", "etcd-rendezvous")), "expected a NetworkPolicy that restricts ingress to etcd"),
    ("etcd-private", "policy-admits-all", lambda o: _set(the(o, "NetworkPolicy", "etcd-rendezvous")["spec"], "ingress", [{}]),
     "spec.ingress.from=[]: expected only pods labelled"),
    ("etcd-private", "policy-admits-namespace", lambda o: the(o, "NetworkPolicy", "etcd-rendezvous")["spec"]["ingress"][0]["from"].append(
        {"namespaceSelector": {}}), "spec.ingress.from={'namespaceSelector': {}}"),
    ("etcd-private", "job-without-client-label", lambda o: worker(o)["template"]["metadata"]["labels"].pop("elastic-spot-lab/rdzv-client"),
     "template.metadata.labels="),
    # workers ready for spot
    ("workers-spot-ready", "restart-never", lambda o: _set(worker(o), "restartPolicy", "Never"), "restartPolicy='Never': expected ExitCode"),
    ("workers-spot-ready", "grace-beyond-notice", lambda o: _set(worker(o)["template"]["spec"], "terminationGracePeriodSeconds", 30),
     "terminationGracePeriodSeconds=30: expected < 30 s"),
    ("workers-spot-ready", "no-gpu-limit", lambda o: pytorch(o)["resources"].pop("limits"), "resources.limits.nvidia.com/gpu=None: expected 1"),
    ("workers-spot-ready", "no-checkpoint-mount", lambda o: pytorch(o).pop("volumeMounts"), "expected the checkpoint claim 'elastic-checkpoints' mounted"),
    ("workers-spot-ready", "checkpoint-dir-not-the-mount", lambda o: pytorch(o)["volumeMounts"][0].update(mountPath="/mnt/elsewhere"),
     "env.LAB_CHECKPOINT_DIR='/checkpoints': expected the checkpoint claim's mount path ['/mnt/elsewhere']"),
    ("workers-spot-ready", "inference-priority", lambda o: _set(worker(o)["template"]["spec"], "priorityClassName", "elastic-inference"),
     "priorityClassName='elastic-inference': expected 'elastic-preemptible'"),
]


def test_baseline_passes_every_guardrail(baseline, facts):
    assert {name: [str(v) for v in vs] for name, vs in run_guardrails(baseline, GuardrailContext(facts=facts)).items() if vs} == {}


def test_every_guardrail_has_a_broken_variant():
    assert {name for name, _, _, _ in BROKEN} == set(GUARDRAILS)


@pytest.mark.parametrize("guardrail,variant,breakage,message", BROKEN, ids=[f"{g}:{v}" for g, v, _, _ in BROKEN])
def test_broken_variant_fails(guardrail, variant, breakage, message, baseline, facts):
    breakage(baseline)
    violations = run_guardrails(baseline, GuardrailContext(facts=facts))[guardrail]
    assert violations, f"{variant} should violate {guardrail}"
    for v in violations:
        assert v.where and v.expected and str(v)  # names the object and what is expected
    # ... and the property and expectation this breakage is about.
    assert any(message in str(v) for v in violations), [str(v) for v in violations]


def test_job_alone_is_checked_without_platform(facts):
    """`elastic-lab submit` checks a job without the platform's objects."""
    from platform_helpers import render_job
    from lab.jobspec import JobSpec

    _, objects = render_job(JobSpec(), facts)
    ctx = GuardrailContext(facts=facts, expect_platform=False)
    assert not any(run_guardrails(objects, ctx).values())
    worker(objects, "elastic-demo")["template"]["spec"]["tolerations"].pop(0)
    assert run_guardrails(objects, ctx)["workers-tolerate-exactly-gpu-spot-taints"]


def test_eks_notice_allows_longer_grace(baseline, facts):
    worker(baseline)["template"]["spec"]["terminationGracePeriodSeconds"] = 90
    assert run_guardrails(baseline, GuardrailContext(facts=facts, cloud="aks"))["workers-spot-ready"]
    assert not run_guardrails(baseline, GuardrailContext(facts=facts, cloud="eks"))["workers-spot-ready"]

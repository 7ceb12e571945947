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


BROKEN: list[tuple[str, str, Callable[[Objects], Any]]] = [
    # etcd not on spot nodes
    ("etcd-not-on-spot", "no-node-selector", lambda o: etcd_pod(o).pop("nodeSelector")),
    ("etcd-not-on-spot", "spot-node-selector", lambda o: _set(etcd_pod(o), "nodeSelector", {"kubernetes.azure.com/scalesetpriority": "spot"})),
    ("etcd-not-on-spot", "tolerates-spot-taint", lambda o: _set(etcd_pod(o), "tolerations", [
        {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}])),
    ("etcd-not-on-spot", "tolerates-everything", lambda o: _set(etcd_pod(o), "tolerations", [{"operator": "Exists"}])),
    ("etcd-not-on-spot", "gpu-pool-affinity", lambda o: _set(etcd_pod(o), "nodeSelector", {"elastic-spot-lab/pool": "gpu-spot"})),
    ("etcd-not-on-spot", "worker-priority", lambda o: _set(etcd_pod(o), "priorityClassName", "elastic-preemptible")),
    ("etcd-not-on-spot", "c10d-store-on-spot", lambda o: _set(
        the(o, "Deployment", "job-c10d-rdzv-store")["spec"]["template"]["spec"], "nodeSelector", {"elastic-spot-lab/pool": "gpu-spot"})),
    ("etcd-not-on-spot", "no-etcd", lambda o: _drop_kind(o, "Deployment")),
    # workers tolerate exactly the GPU spot pool's taints
    ("workers-tolerate-exactly-gpu-spot-taints", "missing-spot-toleration", lambda o: worker(o)["template"]["spec"]["tolerations"].pop(0)),
    ("workers-tolerate-exactly-gpu-spot-taints", "extra-toleration", lambda o: worker(o)["template"]["spec"]["tolerations"].append(
        {"key": "CriticalAddonsOnly", "operator": "Exists"})),
    ("workers-tolerate-exactly-gpu-spot-taints", "wildcard-toleration", lambda o: worker(o)["template"]["spec"]["tolerations"].append(
        {"operator": "Exists"})),
    ("workers-tolerate-exactly-gpu-spot-taints", "default-300s-not-ready", lambda o: [
        t.update(tolerationSeconds=300) for t in worker(o)["template"]["spec"]["tolerations"] if "tolerationSeconds" in t]),
    ("workers-tolerate-exactly-gpu-spot-taints", "no-gpu-pool-affinity", lambda o: worker(o)["template"]["spec"].pop("affinity")),
    # rendezvous host is the etcd Service
    ("rdzv-host-is-etcd-service", "host-is-worker-0", lambda o: _set(policy(o), "rdzvHost", "job-etcd-worker-0")),
    ("rdzv-host-is-etcd-service", "host-is-other-service", lambda o: _set(policy(o), "rdzvHost", "redis.training.svc.cluster.local")),
    ("rdzv-host-is-etcd-service", "wrong-port", lambda o: _set(policy(o), "rdzvPort", 29400)),
    ("rdzv-host-is-etcd-service", "rdzv-id-none", lambda o: _set(policy(o), "rdzvId", "none")),
    ("rdzv-host-is-etcd-service", "shared-rdzv-id", lambda o: _set(policy(o), "rdzvId", policy(o, "job-c10d")["rdzvId"])),
    ("rdzv-host-is-etcd-service", "c10d-host-is-etcd", lambda o: _set(policy(o, "job-c10d"), "rdzvHost", "etcd-rendezvous.training.svc.cluster.local")),
    ("rdzv-host-is-etcd-service", "c10d-store-missing", lambda o: o.remove(the(o, "Service", "job-c10d-rdzv-store"))),
    ("rdzv-host-is-etcd-service", "etcd-service-missing", lambda o: o.remove(the(o, "Service", "etcd-rendezvous"))),
    # etcd image is v3.5.x with the v2 API
    ("etcd-image-v3.5", "latest", lambda o: _set(etcd_pod(o)["containers"][0], "image", "quay.io/coreos/etcd:latest")),
    ("etcd-image-v3.5", "v3.6", lambda o: _set(etcd_pod(o)["containers"][0], "image", "quay.io/coreos/etcd:v3.6.4")),
    ("etcd-image-v3.5", "untagged", lambda o: _set(etcd_pod(o)["containers"][0], "image", "quay.io/coreos/etcd")),
    ("etcd-image-v3.5", "no-enable-v2", lambda o: etcd_pod(o)["containers"][0]["args"].remove("--enable-v2=true")),
    # no PriorityClass is globalDefault (and the order holds)
    ("no-global-default-priority-class", "global-default", lambda o: _set(pc(o, "elastic-preemptible"), "globalDefault", True)),
    ("no-global-default-priority-class", "system-name", lambda o: o.append({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "system-training"}, "value": 5})),
    ("no-global-default-priority-class", "training-above-inference", lambda o: _set(pc(o, "elastic-preserved"), "value", 2_000_000)),
    ("no-global-default-priority-class", "workers-preempt", lambda o: _set(pc(o, "elastic-preemptible"), "preemptionPolicy", "PreemptLowerPriority")),
    # etcd private
    ("etcd-private", "load-balancer", lambda o: _set(the(o, "Service", "etcd-rendezvous")["spec"], "type", "LoadBalancer")),
    ("etcd-private", "no-network-policy", lambda o: o.remove(the(o, "NetworkPolicy", "etcd-rendezvous"))),
    ("etcd-private", "policy-admits-all", lambda o: _set(the(o, "NetworkPolicy", "etcd-rendezvous")["spec"], "ingress", [{}])),
    ("etcd-private", "policy-admits-namespace", lambda o: the(o, "NetworkPolicy", "etcd-rendezvous")["spec"]["ingress"][0]["from"].append(
        {"namespaceSelector": {}})),
    ("etcd-private", "job-without-client-label", lambda o: worker(o)["template"]["metadata"]["labels"].pop("elastic-spot-lab/rdzv-client")),
    # workers ready for spot
    ("workers-spot-ready", "restart-never", lambda o: _set(worker(o), "restartPolicy", "Never")),
    ("workers-spot-ready", "grace-beyond-notice", lambda o: _set(worker(o)["template"]["spec"], "terminationGracePeriodSeconds", 30)),
    ("workers-spot-ready", "no-gpu-limit", lambda o: worker(o)["template"]["spec"]["containers"][0]["resources"].pop("limits")),
    ("workers-spot-ready", "no-checkpoint-mount", lambda o: worker(o)["template"]["spec"]["containers"][0].pop("volumeMounts")),
    ("workers-spot-ready", "inference-priority", lambda o: _set(worker(o)["template"]["spec"], "priorityClassName", "elastic-inference")),
]


def test_baseline_passes_every_guardrail(baseline, facts):
    assert {name: [str(v) for v in vs] for name, vs in run_guardrails(baseline, GuardrailContext(facts=facts)).items() if vs} == {}


def test_every_guardrail_has_a_broken_variant():
    assert {name for name, _, _ in BROKEN} == set(GUARDRAILS)


@pytest.mark.parametrize("guardrail,variant,breakage", BROKEN, ids=[f"{g}:{v}" for g, v, _ in BROKEN])
def test_broken_variant_fails(guardrail, variant, breakage, baseline, facts):
    breakage(baseline)
    violations = run_guardrails(baseline, GuardrailContext(facts=facts))[guardrail]
    assert violations, f"{variant} should violate {guardrail}"
    for v in violations:
        assert v.where and v.expected and str(v)  # names the object and what is expected


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

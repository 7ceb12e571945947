"""Guardrails: properties of the rendered platform and jobs that keep training alive on spot.

Each guardrail takes every Kubernetes object we would apply (declared by the platform
component, rendered from our charts) and the platform's facts, and returns its violations
(empty: it holds). `run_guardrails` runs them all; `elastic-lab plan` and
`elastic-lab submit` refuse to go on when one fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from components.platform.values import OPERATOR_LABELS
from lab.jobspec import ENV_CHECKPOINT_DIR
from lab.k8s.job_values import EVICTION_NOTICE_S, PlatformFacts, store_name
from lab.k8s.scheduling import Taint, taint_text, toleration
from lab.k8s.validate import object_id

ETCD_NAME_LABEL = ("app.kubernetes.io/name", "etcd-rendezvous")
STORE_ROLE_LABEL = ("elastic-spot-lab/role", "rdzv-store")
NODE_LIFECYCLE_KEYS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
MAX_NOT_READY_TOLERATION_S = 60
ETCD_TAG = re.compile(r"^v?3\.5\.\d+$")
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Pod")


@dataclass(frozen=True)
class GuardrailContext:
    facts: PlatformFacts = field(default_factory=PlatformFacts)
    cloud: str = "aks"
    # True when the objects include the platform itself (plan); False for a job alone (submit).
    expect_platform: bool = True
    inference_priority_class: str = "elastic-inference"

    @property
    def notice_s(self) -> int:
        return EVICTION_NOTICE_S.get(self.cloud, 30)


@dataclass(frozen=True)
class Violation:
    """Where (object), which property, its value, and what is expected instead."""

    where: str
    prop: str
    value: Any
    expected: str

    def __str__(self) -> str:
        prop = f" {self.prop}={self.value!r}" if self.prop else ""
        return f"{self.where}:{prop}: expected {self.expected}"


Guardrail = Callable[[list[Mapping[str, Any]], GuardrailContext], list[Violation]]
GUARDRAILS: dict[str, Guardrail] = {}


def guardrail(name: str) -> Callable[[Guardrail], Guardrail]:
    def register(fn: Guardrail) -> Guardrail:
        GUARDRAILS[name] = fn
        return fn

    return register


def run_guardrails(objects: Iterable[Mapping[str, Any]], ctx: GuardrailContext) -> dict[str, list[Violation]]:
    objs = list(objects)
    return {name: fn(objs, ctx) for name, fn in GUARDRAILS.items()}


# ------------------------------------------------------------------ helpers
def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(((obj.get("metadata") or {}).get("labels")) or {})


def pod_template(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = obj.get("kind")
    if kind == "Pod":
        return dict(obj)
    if kind in WORKLOAD_KINDS:
        return ((obj.get("spec") or {}).get("template")) or {}
    return None


def _pod_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    tpl = pod_template(obj) or {}
    return {**_labels(obj), **dict(((tpl.get("metadata") or {}).get("labels")) or {})}


def _has(labels: Mapping[str, str], pair: tuple[str, str]) -> bool:
    return labels.get(pair[0]) == pair[1]


def rendezvous_workloads(objects: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """etcd and c10d store workloads: the rendezvous servers."""
    return [
        o for o in objects
        if o.get("kind") in WORKLOAD_KINDS
        and (_has(_pod_labels(o), ETCD_NAME_LABEL) or _has(_pod_labels(o), STORE_ROLE_LABEL))
    ]


def etcd_workloads(objects: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [o for o in rendezvous_workloads(objects) if _has(_pod_labels(o), ETCD_NAME_LABEL)]


def operator_workloads(objects: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The training operator's Deployment (as its transforms place it)."""
    return [o for o in objects if o.get("kind") in WORKLOAD_KINDS and all(_pod_labels(o).get(k) == v for k, v in OPERATOR_LABELS.items())]


def priority_values(objects: list[Mapping[str, Any]]) -> dict[str, int]:
    return {o["metadata"]["name"]: int(o.get("value", 0)) for o in objects if o.get("kind") == "PriorityClass"}


def pytorchjobs(objects: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [o for o in objects if o.get("kind") == "PyTorchJob"]


def worker_pod_specs(job: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    replicas = ((job.get("spec") or {}).get("pytorchReplicaSpecs")) or {}
    return [(rtype, (((r or {}).get("template") or {}).get("spec")) or {}) for rtype, r in replicas.items()]


def required_node_labels(pod_spec: Mapping[str, Any]) -> list[dict[str, set[str]]]:
    """Each way the pod may be placed (one per nodeSelectorTerm; nodeSelector applies to
    all) as {label key: allowed values}."""
    base = {k: {v} for k, v in (pod_spec.get("nodeSelector") or {}).items()}
    terms = (
        (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {})
        .get("nodeSelectorTerms")
    ) or [{}]
    ways = []
    for term in terms:
        way = {k: set(v) for k, v in base.items()}
        for expr in term.get("matchExpressions") or []:
            if expr.get("operator") == "In":
                values = set(expr.get("values") or [])
                way[expr["key"]] = way[expr["key"]] & values if expr["key"] in way else values
        ways.append(way)
    return ways


def pins_to(pod_spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Every placement the pod allows requires all of `labels`."""
    return all(all(way.get(k) == {v} for k, v in labels.items()) for way in required_node_labels(pod_spec))


def may_select(pod_spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Some placement the pod allows requires one of `labels` (e.g. spot labels)."""
    return any(any(v in way.get(k, set()) for k, v in labels.items()) for way in required_node_labels(pod_spec))


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    for t in tolerations or []:
        if t.get("effect") and t.get("effect") != taint.effect:
            continue
        op = t.get("operator", "Equal")
        if op == "Exists" and not t.get("key"):
            return True
        if t.get("key") != taint.key:
            continue
        if op == "Exists" or (t.get("value") or "") == taint.value:
            return True
    return False


def _containers(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(pod_spec.get("containers") or []) + list(pod_spec.get("initContainers") or [])


# ------------------------------------------------------------------ the guardrails
def _on_cpu_pool(obj: Mapping[str, Any], ctx: GuardrailContext) -> list[Violation]:
    """`obj`'s pods run on the on-demand CPU pool: pinned to its labels, never selecting spot
    labels, tolerating every taint of the CPU pool and none of the GPU spot pool's, with the
    preserved priority."""
    pools = ctx.facts.pools
    spec = (pod_template(obj) or {}).get("spec") or {}
    where = object_id(obj)
    out = []
    if not pins_to(spec, pools.cpu_labels):
        out.append(Violation(where, "nodeSelector", spec.get("nodeSelector"), f"the on-demand CPU pool's labels {dict(pools.cpu_labels)}"))
    if pools.spot_labels and may_select(spec, pools.spot_labels):
        out.append(Violation(where, "nodeSelector/affinity", spec.get("nodeSelector"), f"no spot node label {dict(pools.spot_labels)}"))
    for taint in pools.gpu_taints:
        if tolerates(spec.get("tolerations"), taint):
            out.append(Violation(where, "tolerations", spec.get("tolerations"), f"no toleration of the GPU spot pool's taint {taint_text(taint)}"))
    for taint in pools.cpu_taints:
        if not tolerates(spec.get("tolerations"), taint):
            out.append(Violation(where, "tolerations", spec.get("tolerations"), f"a toleration of the CPU pool's taint {taint_text(taint)} (or it schedules nowhere)"))
    if spec.get("priorityClassName") != ctx.facts.preserved_priority_class:
        out.append(Violation(where, "priorityClassName", spec.get("priorityClassName"), repr(ctx.facts.preserved_priority_class)))
    return out


@guardrail("etcd-not-on-spot")
def etcd_not_on_spot(objects: list[Mapping[str, Any]], ctx: GuardrailContext) -> list[Violation]:
    """Rendezvous servers (etcd, c10d stores) run on the on-demand CPU pool: pinned to its
    labels, never selecting spot labels, tolerating the CPU pool's taints and no taint of the
    GPU spot pool, with the preserved priority."""
    out = []
    if ctx.expect_platform and not etcd_workloads(objects):
        out.append(Violation("platform", "etcd-rendezvous", None, "an etcd-rendezvous Deployment among the platform's objects"))
    for obj in rendezvous_workloads(objects):
        out += _on_cpu_pool(obj, ctx)
    return out


@guardrail("operator-on-cpu-pool")
def operator_on_cpu_pool(objects: list[Mapping[str, Any]], ctx: GuardrailContext) -> list[Violation]:
    """The training operator runs on the on-demand CPU pool with the preserved priority
    (checked on its Deployment as the platform's transforms place it): on a spot node, an
    eviction would stop every job's reconciliation."""
    out = []
    found = operator_workloads(objects)
    if ctx.expect_platform and not found:
        out.append(Violation("platform", "training-operator placement", None,
                             "the training operator's Deployment as placed by the platform (TrainingPlatform output operatorPlacement)"))
    for obj in found:
        out += _on_cpu_pool(obj, ctx)
    return out


@guardrail("infra-not-preemptible-by-inference")
def infra_not_preemptible_by_inference(objects: list[Mapping[str, Any]], ctx: GuardrailContext) -> list[Violation]:
    """Nothing that hosts the rendezvous (etcd, c10d stores) or the training operator can be
    preempted by inference: the preserved PriorityClass is >= the inference one, and each of
    those pods runs at a priority >= inference (a pod preempts only lower priorities)."""
    values = priority_values(objects)
    inference = values.get(ctx.inference_priority_class)
    out = []
    if inference is None:
        if ctx.expect_platform:
            out.append(Violation("platform", "PriorityClass", ctx.inference_priority_class, "declared by the platform"))
        return out
    preserved_name = ctx.facts.preserved_priority_class
    preserved = values.get(preserved_name)
    if preserved is not None and preserved < inference:
        out.append(Violation(f"PriorityClass/{preserved_name}", "value", preserved,
                             f">= {inference}, the value of {ctx.inference_priority_class} (which preempts lower priorities)"))
    for obj in rendezvous_workloads(objects) + operator_workloads(objects):
        name = ((pod_template(obj) or {}).get("spec") or {}).get("priorityClassName")
        value = values.get(name, 0) if name else 0
        if (name is None or name in values) and value < inference:
            out.append(Violation(object_id(obj), "priorityClassName", name,
                                 f"a PriorityClass with value >= {inference} ({ctx.inference_priority_class}): "
                                 f"{name or 'none'} is {value}, so inference may preempt it"))
    return out


@guardrail("workers-tolerate-exactly-gpu-spot-taints")
def workers_tolerate_exactly(objects: list[Mapping[str, Any]], ctx: GuardrailContext) -> list[Violation]:
    """Workers tolerate exactly the GPU spot pool's taints (no more: no wildcard, nothing
    that lets them onto other pools; no less: they must fit there), require its labels,
    and leave a dead node within a minute instead of 300 s."""
    pools = ctx.facts.pools
    want = {tuple(sorted(toleration(t).items())) for t in pools.gpu_taints}
    out = []
    for job in pytorchjobs(objects):
        for rtype, spec in worker_pod_specs(job):
            where = f"{object_id(job)} {rtype}"
            tolerations = list(spec.get("tolerations") or [])
            lifecycle = [t for t in tolerations if t.get("key") in NODE_LIFECYCLE_KEYS and t.get("effect") == "NoExecute"]
            rest = [t for t in tolerations if t not in lifecycle]
            got = {tuple(sorted((k, v) for k, v in t.items() if k != "tolerationSeconds")) for t in rest}
            for missing in sorted(want - got):
                out.append(Violation(where, "tolerations", rest, f"a toleration of the pool taint {dict(missing)}"))
            for extra in sorted(got - want):
                out.append(Violation(where, "tolerations", dict(extra), f"only the GPU spot pool's taints {[taint_text(t) for t in pools.gpu_taints]}"))
            if len(rest) != len(got):
                out.append(Violation(where, "tolerations", rest, "no duplicates"))
            for key in NODE_LIFECYCLE_KEYS:
                secs = [t.get("tolerationSeconds") for t in lifecycle if t.get("key") == key]
                value = secs[0] if secs else None
                if value is None or value > MAX_NOT_READY_TOLERATION_S:
                    out.append(Violation(where, f"tolerations[{key}].tolerationSeconds", value, f"<= {MAX_NOT_READY_TOLERATION_S} (the default 300 s keeps a dead node's pods)"))
            if not pins_to(spec, pools.gpu_labels):
                out.append(Violation(where, "affinity", spec.get("affinity"), f"required node affinity to the GPU spot pool {dict(pools.gpu_labels)}"))
    return out


def _host_forms(service: str, namespace: str, domain: str, job_namespace: str) -> set[str]:
    forms = {f"{service}.{namespace}.svc.{domain}", f"{service}.{namespace}.svc", f"{service}.{namespace}"}
    if namespace == job_namespace:
        forms.add(service)
    return forms


@guardrail("rdzv-host-is-etcd-service")
def rdzv_host_is_etcd_service(objects: list[Mapping[str, Any]], ctx: GuardrailContext) -> list[Violation]:
    """A job's rendezvous host is the platform's etcd Service (etcd-v2), or, for c10d, the
    job's own store Service; never a worker; with a unique rdzvId."""
    f = ctx.facts
    out = []
    services = {
        ((o.get("metadata") or {}).get("namespace", f.namespace), (o.get("metadata") or {}).get("name")): o
        for o in objects if o.get("kind") == "Service"
    }
    etcd_svc = services.get((f.namespace, f.etcd_service))
    if ctx.expect_platform and etcd_svc is None:
        out.append(Violation("platform", "Service", f"{f.namespace}/{f.etcd_service}", "the etcd Service among the platform's objects"))
    if etcd_svc is not None and not _has(dict((etcd_svc.get("spec") or {}).get("selector") or {}), ETCD_NAME_LABEL):
        out.append(Violation(object_id(etcd_svc), "spec.selector", (etcd_svc.get("spec") or {}).get("selector"), "the etcd pods"))
    for job in pytorchjobs(objects):
        meta = job.get("metadata") or {}
        name, ns = meta.get("name", ""), meta.get("namespace", f.namespace)
        policy = (job.get("spec") or {}).get("elasticPolicy") or {}
        host, port, backend = policy.get("rdzvHost"), policy.get("rdzvPort"), policy.get("rdzvBackend", "c10d")
        where = object_id(job)
        if re.match(rf"^{re.escape(name)}-(worker|master)-\d+", host or ""):
            out.append(Violation(where, "elasticPolicy.rdzvHost", host, "a rendezvous Service, never a worker pod"))
        if backend in ("etcd-v2", "etcd"):
            if host not in _host_forms(f.etcd_service, f.namespace, f.cluster_domain, ns):
                out.append(Violation(where, "elasticPolicy.rdzvHost", host, f"the etcd Service {f.etcd_host}"))
            if port != f.etcd_port:
                out.append(Violation(where, "elasticPolicy.rdzvPort", port, f"the etcd client port {f.etcd_port}"))
        else:
            store = store_name(name)
            if host not in _host_forms(store, ns, f.cluster_domain, ns):
                out.append(Violation(where, "elasticPolicy.rdzvHost", host, f"the job's c10d store Service {store}.{ns}.svc.{f.cluster_domain}"))
            svc = services.get((ns, store))
            if svc is None:
                out.append(Violation(where, "c10d store", f"{ns}/{store}", "the store's Service rendered with the job"))
            else:
                selector = dict((svc.get("spec") or {}).get("selector") or {})
                if not _has(selector, STORE_ROLE_LABEL):
                    out.append(Violation(object_id(svc), "spec.selector", selector, "the c10d store pod"))
                ports = [p.get("port") for p in (svc.get("spec") or {}).get("ports") or []]
                if port not in ports:
                    out.append(Violation(where, "elasticPolicy.rdzvPort", port, f"a port of {object_id(svc)}: {ports}"))
        rdzv_id = policy.get("rdzvId")
        if not rdzv_id or rdzv_id == "none":
            out.append(Violation(where, "elasticPolicy.rdzvId", rdzv_id, "a unique id (jobs sharing a rendezvous server would collide)"))
    ids = [((j.get("spec") or {}).get("elasticPolicy") or {}).get("rdzvId") for j in pytorchjobs(objects)]
    for dup in sorted({i for i in ids if i and ids.count(i) > 1}):
        out.append(Violation("jobs", "elasticPolicy.rdzvId", dup, "one job per rdzvId"))
    return out


@guardrail("etcd-image-v3.5")
def etcd_image_v35(objects: list[Mapping[str, Any]], ctx: GuardrailContext) -> list[Violation]:
    """etcd runs a v3.5.x image with the v2 API on (3.6 removed it; `latest` lost it)."""
    out = []
    for obj in etcd_workloads(objects):
        for c in _containers((pod_template(obj) or {}).get("spec") or {}):
            where = f"{object_id(obj)} container {c.get('name')}"
            image = c.get("image", "")
            ref = image.split("@", 1)[0]
            tag = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else ""
            if not ETCD_TAG.match(tag):
                out.append(Violation(where, "image", image, "an etcd v3.5.x tag (3.6 removed the v2 API torch's etcd rendezvous uses)"))
            args = list(c.get("command") or []) + list(c.get("args") or [])
            if "--enable-v2=true" not in args and not ("--enable-v2" in args and "--enable-v2=false" not in args):
                out.append(Violation(where, "args", args, "--enable-v2=true (torch's etcd rendezvous speaks the v2 API)"))
    return out


@guardrail("no-global-default-priority-class")
def no_global_default(objects: list[Mapping[str, Any]], ctx: GuardrailContext) -> list[Violation]:
    """No PriorityClass is globalDefault (every unrelated pod would get it), none is named
    system-*; only inference preempts (training never evicts anyone) and it outranks the
    preemptible workers, the only pods it is meant to preempt."""
    pcs = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "PriorityClass"}
    out = []
    for name, pc in pcs.items():
        if pc.get("globalDefault"):
            out.append(Violation(f"PriorityClass/{name}", "globalDefault", True, "false (a global default would apply to every pod of the cluster)"))
        if name.startswith("system-"):
            out.append(Violation(f"PriorityClass/{name}", "metadata.name", name, "a name not starting with system- (reserved)"))
    f = ctx.facts
    wanted = [ctx.inference_priority_class, f.preserved_priority_class, f.worker_priority_class]
    if ctx.expect_platform:
        for name in wanted:
            if name not in pcs:
                out.append(Violation("platform", "PriorityClass", name, "declared by the platform"))
    if all(n in pcs for n in wanted):
        inf, pre, pmt = (pcs[n] for n in wanted)
        if not inf.get("value", 0) > pmt.get("value", 0):
            out.append(Violation(f"PriorityClass/{wanted[2]}", "value", pmt.get("value", 0),
                                 f"< {inf.get('value', 0)}, the value of {wanted[0]} (inference preempts the workers)"))
        if inf.get("preemptionPolicy", "PreemptLowerPriority") != "PreemptLowerPriority":
            out.append(Violation(f"PriorityClass/{wanted[0]}", "preemptionPolicy", inf.get("preemptionPolicy"), "PreemptLowerPriority (inference evicts training workers)"))
        for pc in (pre, pmt):
            if pc.get("preemptionPolicy") != "Never":
                out.append(Violation(f"PriorityClass/{pc['metadata']['name']}", "preemptionPolicy", pc.get("preemptionPolicy"), "Never (training never evicts anyone)"))
    return out


@guardrail("etcd-private")
def etcd_private(objects: list[Mapping[str, Any]], ctx: GuardrailContext) -> list[Violation]:
    """etcd is reachable only inside the cluster and only from job pods."""
    out = []
    if not etcd_workloads(objects):
        return out
    for svc in (o for o in objects if o.get("kind") == "Service"):
        spec = svc.get("spec") or {}
        if not _has(dict(spec.get("selector") or {}), ETCD_NAME_LABEL):
            continue
        if spec.get("type", "ClusterIP") != "ClusterIP" or spec.get("externalIPs") or spec.get("loadBalancerIP"):
            out.append(Violation(object_id(svc), "spec.type", spec.get("type"), "ClusterIP without external IPs (no public exposure)"))
    policies = [
        o for o in objects
        if o.get("kind") == "NetworkPolicy"
        and _has(dict(((o.get("spec") or {}).get("podSelector") or {}).get("matchLabels") or {}), ETCD_NAME_LABEL)
    ]
    if not policies:
        out.append(Violation("platform", "NetworkPolicy", None, "a NetworkPolicy that restricts ingress to etcd"))
    clients = dict(ctx.facts.rdzv_client_labels)
    for pol in policies:
        spec = pol.get("spec") or {}
        if "Ingress" not in (spec.get("policyTypes") or []):
            out.append(Violation(object_id(pol), "spec.policyTypes", spec.get("policyTypes"), "Ingress"))
        for rule in spec.get("ingress") or []:
            peers = rule.get("from") or []
            if not peers:
                out.append(Violation(object_id(pol), "spec.ingress.from", peers, f"only pods labelled {clients} (an empty from admits everyone)"))
            for peer in peers:
                sel = dict((peer.get("podSelector") or {}).get("matchLabels") or {})
                if "ipBlock" in peer or "namespaceSelector" in peer or sel != clients:
                    out.append(Violation(object_id(pol), "spec.ingress.from", peer, f"only pods labelled {clients}"))
    for job in pytorchjobs(objects):
        for rtype in (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}:
            tpl = job["spec"]["pytorchReplicaSpecs"][rtype].get("template") or {}
            labels = dict((tpl.get("metadata") or {}).get("labels") or {})
            if any(labels.get(k) != v for k, v in clients.items()):
                out.append(Violation(f"{object_id(job)} {rtype}", "template.metadata.labels", labels, f"the labels the etcd NetworkPolicy admits {clients}"))
    return out


@guardrail("workers-spot-ready")
def workers_spot_ready(objects: list[Mapping[str, Any]], ctx: GuardrailContext) -> list[Violation]:
    """Workers are preemptible, retried on signals (ExitCode), save within the eviction
    notice, get their GPUs, and mount the checkpoint claim where the script writes."""
    f = ctx.facts
    out = []
    for job in pytorchjobs(objects):
        replicas = job["spec"].get("pytorchReplicaSpecs") or {}
        for rtype, spec in worker_pod_specs(job):
            where = f"{object_id(job)} {rtype}"
            policy = replicas[rtype].get("restartPolicy")
            if policy != "ExitCode":
                out.append(Violation(where, "restartPolicy", policy, "ExitCode (exit codes 128-255, i.e. signals, are retried)"))
            if spec.get("priorityClassName") != f.worker_priority_class:
                out.append(Violation(where, "priorityClassName", spec.get("priorityClassName"), repr(f.worker_priority_class)))
            grace = spec.get("terminationGracePeriodSeconds", 30)
            if not grace < ctx.notice_s:
                out.append(Violation(where, "terminationGracePeriodSeconds", grace, f"< {ctx.notice_s} s, the spot eviction notice on {ctx.cloud}"))
            pytorch = next((c for c in spec.get("containers") or [] if c.get("name") == "pytorch"), {})
            gpus = ((pytorch.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
            if f.gpus_per_node and str(gpus) != str(f.gpus_per_node):
                out.append(Violation(where, "resources.limits.nvidia.com/gpu", gpus, str(f.gpus_per_node)))
            claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes") or [] if "persistentVolumeClaim" in v}
            mounts = {m.get("name"): m.get("mountPath") for m in pytorch.get("volumeMounts") or []}
            paths = {mounts[n] for n in mounts if claims.get(n) == f.checkpoint_claim}
            if not paths:
                out.append(Violation(where, "volumeMounts", sorted(mounts), f"the checkpoint claim {f.checkpoint_claim!r} mounted"))
            env = {e.get("name"): e.get("value") for e in pytorch.get("env") or []}
            if paths and env.get(ENV_CHECKPOINT_DIR) not in paths:
                out.append(Violation(where, f"env.{ENV_CHECKPOINT_DIR}", env.get(ENV_CHECKPOINT_DIR),
                                     f"the checkpoint claim's mount path {sorted(paths)} (else checkpoints land on the node's disk)"))
    return out

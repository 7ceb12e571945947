"""Guardrails: properties of the rendered platform and jobs that keep training alive on spot.

Each guardrail takes every Kubernetes object we would apply (declared by the platform
component, rendered from our charts) and the platform's facts, and returns its violations
(empty: it holds). `GUARDRAILS` lists them; `run_guardrails` runs them all. `elastic-lab
plan` and `elastic-lab submit` refuse to go on when one fails.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from lab.k8s.job_values import PER_STEP_POD_FIELD_ENV
from lab.k8s.objects import (
    ETCD_NAME_LABEL,
    LIGHTHOUSE_ROLE_LABEL,
    STORE_ROLE_LABEL,
    WORKLOAD_KINDS,
    containers,
    etcd_workloads,
    has_label,
    is_per_step,
    notice_handler_workloads,
    object_id,
    operator_workloads,
    pod_template,
    priority_values,
    pytorchjobs,
    rendezvous_workloads,
    training_containers,
    worker_pod_specs,
)
from lab.k8s.placement import may_select, pins_to, tolerates
from lab.vocab import checkpoint_location
from lab.vocab.checkpoint_location import BLOB_CSI_DRIVER, S3_CSI_DRIVER
from lab.vocab.job import ENV_CHECKPOINT_DIR, LAUNCH_MODULE, TRAINER_UID
from lab.vocab.names import ImageReference
from lab.vocab.per_step import ENV_LIGHTHOUSE
from lab.vocab.platform_facts import PlatformFacts, lighthouse_name, store_name

NODE_LIFECYCLE_KEYS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
MAX_NOT_READY_TOLERATION_S = 60
ETCD_TAG = re.compile(r"^v?3\.5\.\d+$")


@dataclass(frozen=True)
class GuardrailContext:
    facts: PlatformFacts = field(default_factory=PlatformFacts)
    # True when the objects include the platform itself (plan); False for a job alone (submit).
    expect_platform: bool = True
    inference_priority_class: str = "elastic-inference"


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


Objects = list[Mapping[str, Any]]


@dataclass(frozen=True)
class Guardrail:
    name: str
    check: Callable[[Objects, GuardrailContext], list[Violation]]

    @property
    def description(self) -> str:
        return (self.check.__doc__ or self.name).strip().splitlines()[0]


# ------------------------------------------------------------------ the guardrails
def _untolerated(spec: Mapping[str, Any], where: str, taints: Iterable[Any], pool: str, else_: str) -> list[Violation]:
    """A violation for each of `pool`'s taints the pod spec does not tolerate."""
    return [
        Violation(
            where, "tolerations", spec.get("tolerations"), f"a toleration of {pool} taint {t.text()} (or {else_})"
        )
        for t in taints
        if not tolerates(spec.get("tolerations"), t)
    ]


def _on_cpu_pool(obj: Mapping[str, Any], ctx: GuardrailContext) -> list[Violation]:
    """`obj`'s pods run on the on-demand CPU pool: pinned to its labels, never selecting spot
    labels, tolerating every taint of the CPU pool and none of the GPU spot pool's, with the
    preserved priority."""
    pools = ctx.facts.pools
    spec = (pod_template(obj) or {}).get("spec") or {}
    where = object_id(obj)
    out = []
    if not pins_to(spec, pools.cpu_labels):
        out.append(
            Violation(
                where,
                "nodeSelector",
                spec.get("nodeSelector"),
                f"the on-demand CPU pool's labels {dict(pools.cpu_labels)}",
            )
        )
    if pools.spot_labels and may_select(spec, pools.spot_labels):
        out.append(
            Violation(
                where,
                "nodeSelector/affinity",
                spec.get("nodeSelector"),
                f"no spot node label {dict(pools.spot_labels)}",
            )
        )
    for taint in pools.gpu_taints:
        if tolerates(spec.get("tolerations"), taint):
            out.append(
                Violation(
                    where,
                    "tolerations",
                    spec.get("tolerations"),
                    f"no toleration of the GPU spot pool's taint {taint.text()}",
                )
            )
    out += _untolerated(spec, where, pools.cpu_taints, "the CPU pool's", "it schedules nowhere")
    if spec.get("priorityClassName") != ctx.facts.preserved_priority_class:
        out.append(
            Violation(
                where, "priorityClassName", spec.get("priorityClassName"), repr(ctx.facts.preserved_priority_class)
            )
        )
    return out


def etcd_not_on_spot(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """Rendezvous servers (etcd, c10d stores, lighthouses) run on the on-demand CPU pool: pinned
    to its labels, never selecting spot labels, tolerating the CPU pool's taints and no taint of
    the GPU spot pool, with the preserved priority."""
    out = []
    if ctx.expect_platform and not etcd_workloads(objects):
        out.append(
            Violation("platform", "etcd-rendezvous", None, "an etcd-rendezvous Deployment among the platform's objects")
        )
    for obj in rendezvous_workloads(objects):
        out += _on_cpu_pool(obj, ctx)
    return out


def operator_on_cpu_pool(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """The training operator runs on the on-demand CPU pool with the preserved priority
    (checked on its Deployment as the platform's transforms place it): on a spot node, an
    eviction would stop every job's reconciliation."""
    out = []
    found = operator_workloads(objects)
    if ctx.expect_platform and not found:
        out.append(
            Violation(
                "platform",
                "training-operator placement",
                None,
                "the training operator's Deployment as placed by the platform "
                "(TrainingPlatform output operatorPlacement)",
            )
        )
    for obj in found:
        out += _on_cpu_pool(obj, ctx)
    return out


def infra_not_preemptible_by_inference(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """Nothing that hosts the rendezvous (etcd, c10d stores, lighthouses) or the training
    operator can be preempted by inference: the preserved PriorityClass is >= the inference
    one, and each of those pods runs at a priority >= inference (a pod preempts only lower
    priorities)."""
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
        out.append(
            Violation(
                f"PriorityClass/{preserved_name}",
                "value",
                preserved,
                f">= {inference}, the value of {ctx.inference_priority_class} (which preempts lower priorities)",
            )
        )
    for obj in rendezvous_workloads(objects) + operator_workloads(objects):
        name = ((pod_template(obj) or {}).get("spec") or {}).get("priorityClassName")
        value = values.get(name, 0) if name else 0
        if (name is None or name in values) and value < inference:
            out.append(
                Violation(
                    object_id(obj),
                    "priorityClassName",
                    name,
                    f"a PriorityClass with value >= {inference} ({ctx.inference_priority_class}): "
                    f"{name or 'none'} is {value}, so inference may preempt it",
                )
            )
    return out


def workers_tolerate_exactly(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """Workers tolerate exactly the GPU spot pool's taints (no more: no wildcard, nothing
    that lets them onto other pools; no less: they must fit there), require its labels,
    and leave a dead node within a minute instead of 300 s."""
    pools = ctx.facts.pools
    want = {tuple(sorted(t.toleration().items())) for t in pools.gpu_taints}
    out = []
    for job in pytorchjobs(objects):
        for rtype, spec in worker_pod_specs(job):
            where = f"{object_id(job)} {rtype}"
            tolerations = list(spec.get("tolerations") or [])
            lifecycle = [
                t for t in tolerations if t.get("key") in NODE_LIFECYCLE_KEYS and t.get("effect") == "NoExecute"
            ]
            rest = [t for t in tolerations if t not in lifecycle]
            got = {tuple(sorted((k, v) for k, v in t.items() if k != "tolerationSeconds")) for t in rest}
            for missing in sorted(want - got):
                out.append(Violation(where, "tolerations", rest, f"a toleration of the pool taint {dict(missing)}"))
            for extra in sorted(got - want):
                out.append(
                    Violation(
                        where,
                        "tolerations",
                        dict(extra),
                        f"only the GPU spot pool's taints {[t.text() for t in pools.gpu_taints]}",
                    )
                )
            if len(rest) != len(got):
                out.append(Violation(where, "tolerations", rest, "no duplicates"))
            for key in NODE_LIFECYCLE_KEYS:
                secs = [t.get("tolerationSeconds") for t in lifecycle if t.get("key") == key]
                value = secs[0] if secs else None
                if value is None or value > MAX_NOT_READY_TOLERATION_S:
                    out.append(
                        Violation(
                            where,
                            f"tolerations[{key}].tolerationSeconds",
                            value,
                            f"<= {MAX_NOT_READY_TOLERATION_S} (the default 300 s keeps a dead node's pods)",
                        )
                    )
            if not pins_to(spec, pools.gpu_labels):
                out.append(
                    Violation(
                        where,
                        "affinity",
                        spec.get("affinity"),
                        f"required node affinity to the GPU spot pool {dict(pools.gpu_labels)}",
                    )
                )
    return out


def _host_forms(service: str, namespace: str, domain: str, job_namespace: str) -> set[str]:
    forms = {f"{service}.{namespace}.svc.{domain}", f"{service}.{namespace}.svc", f"{service}.{namespace}"}
    if namespace == job_namespace:
        forms.add(service)
    return forms


def _per_step_wiring(
    job: Mapping[str, Any], services: Mapping[tuple[str, str | None], Mapping[str, Any]], f: PlatformFacts
) -> list[Violation]:
    """A per-step job has no elasticPolicy; its workers ask the job's own lighthouse Service
    for their quorum, name their replica group after their pod and advertise their pod's IP."""
    meta = job.get("metadata") or {}
    name, ns = meta.get("name", ""), meta.get("namespace", f.namespace)
    where = object_id(job)
    out = []
    policy = (job.get("spec") or {}).get("elasticPolicy")
    if policy is not None:
        out.append(
            Violation(
                where,
                "elasticPolicy",
                policy,
                "none in per-step mode (the operator would hand its PET_RDZV_* to each group's torchrun, "
                "and --standalone keeps PET_RDZV_CONF)",
            )
        )
    lighthouse = lighthouse_name(name)
    url = f"http://{lighthouse}.{ns}.svc.{f.cluster_domain}:<port>"
    svc = services.get((ns, lighthouse))
    ports: list[Any] = []
    if svc is None:
        out.append(
            Violation(where, "lighthouse", f"{ns}/{lighthouse}", "the lighthouse's Service rendered with the job")
        )
    else:
        selector = dict((svc.get("spec") or {}).get("selector") or {})
        if not has_label(selector, LIGHTHOUSE_ROLE_LABEL):
            out.append(Violation(object_id(svc), "spec.selector", selector, "the lighthouse pod"))
        ports = [p.get("port") for p in (svc.get("spec") or {}).get("ports") or []]
    for rtype, container in training_containers(job):
        at = f"{where} {rtype}"
        env = {e.get("name"): e for e in container.get("env") or []}
        value = (env.get(ENV_LIGHTHOUSE) or {}).get("value")
        parts = urlsplit(value or "")
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme != "http" or parts.hostname not in _host_forms(lighthouse, ns, f.cluster_domain, ns):
            out.append(Violation(at, f"env.{ENV_LIGHTHOUSE}", value, f"the job's lighthouse Service {url}"))
        elif svc is not None and port not in ports:
            out.append(Violation(at, f"env.{ENV_LIGHTHOUSE}", value, f"a port of {object_id(svc)}: {ports}"))
        for var, path in PER_STEP_POD_FIELD_ENV.items():
            got = (((env.get(var) or {}).get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if got != path:
                out.append(
                    Violation(
                        at,
                        f"env.{var}",
                        got or (env.get(var) or {}).get("value"),
                        f"the pod's own {path} (one replica group per pod, reached at its pod's address)",
                    )
                )
    return out


def rdzv_host_is_etcd_service(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """A job's rendezvous host is the platform's etcd Service (etcd-v2), or, for c10d, the
    job's own store Service; never a worker; with a unique rdzvId. A per-step job has no
    elasticPolicy: its workers reach the job's own lighthouse Service, as their own groups."""
    f = ctx.facts
    out = []
    services: dict[tuple[str, str | None], Mapping[str, Any]] = {
        ((o.get("metadata") or {}).get("namespace", f.namespace), (o.get("metadata") or {}).get("name")): o
        for o in objects
        if o.get("kind") == "Service"
    }
    etcd_svc = services.get((f.namespace, f.etcd_service))
    if ctx.expect_platform and etcd_svc is None:
        out.append(
            Violation(
                "platform",
                "Service",
                f"{f.namespace}/{f.etcd_service}",
                "the etcd Service among the platform's objects",
            )
        )
    if etcd_svc is not None and not has_label(
        dict((etcd_svc.get("spec") or {}).get("selector") or {}), ETCD_NAME_LABEL
    ):
        out.append(
            Violation(
                object_id(etcd_svc), "spec.selector", (etcd_svc.get("spec") or {}).get("selector"), "the etcd pods"
            )
        )
    for job in pytorchjobs(objects):
        if is_per_step(job):
            out += _per_step_wiring(job, services, f)
            continue
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
                out.append(
                    Violation(
                        where,
                        "elasticPolicy.rdzvHost",
                        host,
                        f"the job's c10d store Service {store}.{ns}.svc.{f.cluster_domain}",
                    )
                )
            svc = services.get((ns, store))
            if svc is None:
                out.append(Violation(where, "c10d store", f"{ns}/{store}", "the store's Service rendered with the job"))
            else:
                selector = dict((svc.get("spec") or {}).get("selector") or {})
                if not has_label(selector, STORE_ROLE_LABEL):
                    out.append(Violation(object_id(svc), "spec.selector", selector, "the c10d store pod"))
                ports = [p.get("port") for p in (svc.get("spec") or {}).get("ports") or []]
                if port not in ports:
                    out.append(Violation(where, "elasticPolicy.rdzvPort", port, f"a port of {object_id(svc)}: {ports}"))
        rdzv_id = policy.get("rdzvId")
        if not rdzv_id or rdzv_id == "none":
            out.append(
                Violation(
                    where,
                    "elasticPolicy.rdzvId",
                    rdzv_id,
                    "a unique id (jobs sharing a rendezvous server would collide)",
                )
            )
    ids = [((j.get("spec") or {}).get("elasticPolicy") or {}).get("rdzvId") for j in pytorchjobs(objects)]
    for dup in sorted({i for i in ids if i and ids.count(i) > 1}):
        out.append(Violation("jobs", "elasticPolicy.rdzvId", dup, "one job per rdzvId"))
    return out


def etcd_image_v35(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """etcd runs a v3.5.x image with the v2 API on (3.6 removed it; `latest` lost it)."""
    out = []
    for obj in etcd_workloads(objects):
        for c in containers((pod_template(obj) or {}).get("spec") or {}):
            where = f"{object_id(obj)} container {c.get('name')}"
            image = c.get("image", "")
            ref = ImageReference.parse(image)
            if ref is None or not ETCD_TAG.match(ref.tag or ""):
                out.append(
                    Violation(
                        where,
                        "image",
                        image,
                        "an etcd v3.5.x tag (3.6 removed the v2 API torch's etcd rendezvous uses)",
                    )
                )
            args = list(c.get("command") or []) + list(c.get("args") or [])
            if "--enable-v2=true" not in args and not ("--enable-v2" in args and "--enable-v2=false" not in args):
                out.append(
                    Violation(where, "args", args, "--enable-v2=true (torch's etcd rendezvous speaks the v2 API)")
                )
    return out


def no_global_default(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """No PriorityClass is globalDefault (every unrelated pod would get it), none is named
    system-*; only inference preempts (training never evicts anyone) and it outranks the
    preemptible workers, the only pods it is meant to preempt."""
    pcs = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "PriorityClass"}
    out = []
    for name, pc in pcs.items():
        if pc.get("globalDefault"):
            out.append(
                Violation(
                    f"PriorityClass/{name}",
                    "globalDefault",
                    True,
                    "false (a global default would apply to every pod of the cluster)",
                )
            )
        if name.startswith("system-"):
            out.append(
                Violation(f"PriorityClass/{name}", "metadata.name", name, "a name not starting with system- (reserved)")
            )
    f = ctx.facts
    wanted = [ctx.inference_priority_class, f.preserved_priority_class, f.worker_priority_class]
    if ctx.expect_platform:
        for name in wanted:
            if name not in pcs:
                out.append(Violation("platform", "PriorityClass", name, "declared by the platform"))
    if all(n in pcs for n in wanted):
        inf, pre, pmt = (pcs[n] for n in wanted)
        if not inf.get("value", 0) > pmt.get("value", 0):
            out.append(
                Violation(
                    f"PriorityClass/{wanted[2]}",
                    "value",
                    pmt.get("value", 0),
                    f"< {inf.get('value', 0)}, the value of {wanted[0]} (inference preempts the workers)",
                )
            )
        if inf.get("preemptionPolicy", "PreemptLowerPriority") != "PreemptLowerPriority":
            out.append(
                Violation(
                    f"PriorityClass/{wanted[0]}",
                    "preemptionPolicy",
                    inf.get("preemptionPolicy"),
                    "PreemptLowerPriority (inference evicts training workers)",
                )
            )
        for pc in (pre, pmt):
            if pc.get("preemptionPolicy") != "Never":
                out.append(
                    Violation(
                        f"PriorityClass/{pc['metadata']['name']}",
                        "preemptionPolicy",
                        pc.get("preemptionPolicy"),
                        "Never (training never evicts anyone)",
                    )
                )
    return out


def etcd_private(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """etcd is reachable only inside the cluster and only from job pods."""
    out: list[Violation] = []
    if not etcd_workloads(objects):
        return out
    for svc in (o for o in objects if o.get("kind") == "Service"):
        spec = svc.get("spec") or {}
        if not has_label(dict(spec.get("selector") or {}), ETCD_NAME_LABEL):
            continue
        if spec.get("type", "ClusterIP") != "ClusterIP" or spec.get("externalIPs") or spec.get("loadBalancerIP"):
            out.append(
                Violation(
                    object_id(svc), "spec.type", spec.get("type"), "ClusterIP without external IPs (no public exposure)"
                )
            )
    policies = [
        o
        for o in objects
        if o.get("kind") == "NetworkPolicy"
        and has_label(dict(((o.get("spec") or {}).get("podSelector") or {}).get("matchLabels") or {}), ETCD_NAME_LABEL)
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
                out.append(
                    Violation(
                        object_id(pol),
                        "spec.ingress.from",
                        peers,
                        f"only pods labelled {clients} (an empty from admits everyone)",
                    )
                )
            for peer in peers:
                sel = dict((peer.get("podSelector") or {}).get("matchLabels") or {})
                if "ipBlock" in peer or "namespaceSelector" in peer or sel != clients:
                    out.append(Violation(object_id(pol), "spec.ingress.from", peer, f"only pods labelled {clients}"))
    for job in pytorchjobs(objects):
        for rtype in (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}:
            tpl = job["spec"]["pytorchReplicaSpecs"][rtype].get("template") or {}
            labels = dict((tpl.get("metadata") or {}).get("labels") or {})
            if any(labels.get(k) != v for k, v in clients.items()):
                out.append(
                    Violation(
                        f"{object_id(job)} {rtype}",
                        "template.metadata.labels",
                        labels,
                        f"the labels the etcd NetworkPolicy admits {clients}",
                    )
                )
    return out


def workers_spot_ready(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """Workers are preemptible, retried on signals (ExitCode), save within the eviction
    notice, get their GPUs, and mount the checkpoint claim where the script writes, or write
    under the platform's object-store URL as the platform's identity."""
    f = ctx.facts
    out = []
    for job in pytorchjobs(objects):
        replicas = job["spec"].get("pytorchReplicaSpecs") or {}
        for rtype, spec in worker_pod_specs(job):
            where = f"{object_id(job)} {rtype}"
            policy = replicas[rtype].get("restartPolicy")
            if policy != "ExitCode":
                out.append(
                    Violation(
                        where, "restartPolicy", policy, "ExitCode (exit codes 128-255, i.e. signals, are retried)"
                    )
                )
            if spec.get("priorityClassName") != f.worker_priority_class:
                out.append(
                    Violation(where, "priorityClassName", spec.get("priorityClassName"), repr(f.worker_priority_class))
                )
            grace = spec.get("terminationGracePeriodSeconds", 30)
            if not grace < f.eviction_notice_s:
                out.append(
                    Violation(
                        where,
                        "terminationGracePeriodSeconds",
                        grace,
                        f"< {f.eviction_notice_s} s, the cluster's spot eviction notice",
                    )
                )
            pytorch: Mapping[str, Any] = next(
                (c for c in spec.get("containers") or [] if c.get("name") == "pytorch"), {}
            )
            gpus = ((pytorch.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
            if f.gpus_per_node and str(gpus) != str(f.gpus_per_node):
                out.append(Violation(where, "resources.limits.nvidia.com/gpu", gpus, str(f.gpus_per_node)))
            env = {e.get("name"): e.get("value") for e in pytorch.get("env") or []}
            if checkpoint_location.is_object_store(str(env.get(ENV_CHECKPOINT_DIR) or "")):
                out += _client_checkpoint_violations(where, str(env[ENV_CHECKPOINT_DIR]), replicas[rtype], f)
                continue
            claims = {
                v["name"]: v["persistentVolumeClaim"]["claimName"]
                for v in spec.get("volumes") or []
                if "persistentVolumeClaim" in v
            }
            mounts = {m.get("name"): m.get("mountPath") for m in pytorch.get("volumeMounts") or []}
            paths = {mounts[n] for n in mounts if claims.get(n) == f.checkpoint_claim}
            if not paths:
                out.append(
                    Violation(
                        where, "volumeMounts", sorted(mounts), f"the checkpoint claim {f.checkpoint_claim!r} mounted"
                    )
                )
            if paths and env.get(ENV_CHECKPOINT_DIR) not in paths:
                out.append(
                    Violation(
                        where,
                        f"env.{ENV_CHECKPOINT_DIR}",
                        env.get(ENV_CHECKPOINT_DIR),
                        f"the checkpoint claim's mount path {sorted(paths)} (else checkpoints land on the node's disk)",
                    )
                )
    return out


def _client_checkpoint_violations(
    where: str, url: str, replica: Mapping[str, Any], f: PlatformFacts
) -> list[Violation]:
    """A job writing checkpoints with its own clients: under the platform's storage URL (the
    only place its identity may write), and its pods carry what gives them that identity."""
    out = []
    if not f.checkpoint_url or not url.startswith(f.checkpoint_url.rstrip("/") + "/"):
        expected = f"a folder under {f.checkpoint_url!r}" if f.checkpoint_url else "a mounted directory"
        out.append(
            Violation(where, f"env.{ENV_CHECKPOINT_DIR}", url, f"{expected}: the platform's identity writes there only")
        )
    template = replica.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    missing = {k: v for k, v in f.pod_labels.items() if labels.get(k) != v}
    if missing:
        out.append(
            Violation(where, "labels", labels, f"{missing} too: the pods' clients get the storage's identity by them")
        )
    return out


_OWNER_OPTION = re.compile(r"(?:^|[\s,-])(uid|gid)[\s=]+(\d+)")


def checkpoints_writable_by_workers(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """Workers can write to the checkpoint volume they mount: their pods run as a user other
    than root with its group as fsGroup (an object-storage mount opens to other users than root
    only through it), and the volume behind the claim opens to that group."""
    f, out = ctx.facts, []
    for job in pytorchjobs(objects):
        for rtype, spec in worker_pod_specs(job):
            if not any(
                (v.get("persistentVolumeClaim") or {}).get("claimName") == f.checkpoint_claim
                for v in spec.get("volumes") or []
            ):
                continue
            where = f"{object_id(job)} {rtype}"
            context = spec.get("securityContext") or {}
            fs_group, group = context.get("fsGroup"), context.get("runAsGroup")
            if not isinstance(fs_group, int) or fs_group == 0:
                out.append(
                    Violation(
                        where,
                        "securityContext.fsGroup",
                        fs_group,
                        f"the image user's group ({TRAINER_UID} for the trainer image): Mountpoint for S3 "
                        "lets only root open the checkpoint mount otherwise",
                    )
                )
            elif group is not None and group != fs_group:
                out.append(
                    Violation(
                        where, "securityContext.runAsGroup", group, f"the fsGroup {fs_group} the mount is opened to"
                    )
                )
            if context.get("runAsUser") == 0:
                out.append(Violation(where, "securityContext.runAsUser", 0, "the image's user, not root"))
    for pv in (o for o in objects if o.get("kind") == "PersistentVolume"):
        spec = pv.get("spec") or {}
        if (spec.get("claimRef") or {}).get("name") != f.checkpoint_claim:
            continue
        driver = (spec.get("csi") or {}).get("driver")
        options = spec.get("mountOptions") or []
        if driver == BLOB_CSI_DRIVER and not any("allow_other" in o for o in options):
            out.append(
                Violation(object_id(pv), "mountOptions", options, "'-o allow_other': blobfuse opens to root only")
            )
        owners = [(k, int(n)) for o in options for k, n in _OWNER_OPTION.findall(o)]
        if driver in (BLOB_CSI_DRIVER, S3_CSI_DRIVER) and any(n != TRAINER_UID for _, n in owners):
            out.append(
                Violation(
                    object_id(pv),
                    "mountOptions",
                    options,
                    f"no uid/gid but the trainer's ({TRAINER_UID}): the workers could not write their checkpoints",
                )
            )
    return out


SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"


def _blocks_evictions(pdb: Mapping[str, Any], replicas: int) -> bool:
    """Whether the budget refuses every voluntary eviction of `replicas` healthy pods."""
    spec = pdb.get("spec") or {}
    if "maxUnavailable" in spec:
        return spec["maxUnavailable"] in (0, "0", "0%")
    min_available = spec.get("minAvailable")
    return (isinstance(min_available, int) and min_available >= replicas) or min_available == "100%"


def _one_at_a_time(pdb: Mapping[str, Any]) -> bool:
    spec = pdb.get("spec") or {}
    return spec.get("maxUnavailable") in (1, "1")


def _budgets_selecting(budgets: Objects, namespace: object, labels: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        b
        for b in budgets
        if (b.get("metadata") or {}).get("namespace") == namespace
        and (match := ((b.get("spec") or {}).get("selector") or {}).get("matchLabels"))
        and all(labels.get(k) == v for k, v in match.items())
    ]


def rendezvous_moved_by_drains_only(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """A rendezvous server (etcd, a c10d store, a lighthouse) moves only when its node is
    drained (an upgrade, a person), one pod at a time: a PodDisruptionBudget with
    maxUnavailable 1 (the jobs ride out its restart; a budget of 0 makes AKS refuse cluster
    upgrades and fail node-image upgrades, and EKS node group updates fail), and the cluster
    autoscaler is told not to move it to empty a node (`safe-to-evict: "false"`)."""
    out = []
    budgets = [o for o in objects if o.get("kind") == "PodDisruptionBudget"]
    for obj in rendezvous_workloads(objects):
        template = pod_template(obj) or {}
        meta = template.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if annotations.get(SAFE_TO_EVICT) != "false":
            out.append(
                Violation(
                    object_id(obj),
                    f"spec.template.metadata.annotations.{SAFE_TO_EVICT}",
                    annotations.get(SAFE_TO_EVICT),
                    "'false' (the cluster autoscaler would evict it to empty a CPU node)",
                )
            )
        covering = _budgets_selecting(budgets, (obj.get("metadata") or {}).get("namespace"), meta.get("labels") or {})
        if not covering or not all(_one_at_a_time(b) for b in covering):
            out.append(
                Violation(
                    object_id(obj),
                    "PodDisruptionBudget",
                    [f"{object_id(b)}: maxUnavailable {(b.get('spec') or {}).get('maxUnavailable')}" for b in covering]
                    or None,
                    "a PodDisruptionBudget selecting its pods with maxUnavailable 1: a drain moves it once "
                    "and waits until it is back (0 blocks drains and upgrades; none lets a drain evict a "
                    "server that is still starting)",
                )
            )
    return out


def disruption_budgets_satisfiable(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """No PodDisruptionBudget refuses every eviction of the pods it selects: AKS refuses a
    cluster upgrade up front (UnsatisfiablePDB) and ends a node-image upgrade Failed on a node
    it cannot drain; an EKS node group update fails after its drain timeout."""
    out = []
    budgets = [o for o in objects if o.get("kind") == "PodDisruptionBudget"]
    for obj in objects:
        if obj.get("kind") not in WORKLOAD_KINDS or obj.get("kind") == "DaemonSet":
            continue  # a drain leaves DaemonSet pods alone
        meta = (pod_template(obj) or {}).get("metadata") or {}
        replicas = int((obj.get("spec") or {}).get("replicas", 1))
        namespace = (obj.get("metadata") or {}).get("namespace")
        for budget in _budgets_selecting(budgets, namespace, meta.get("labels") or {}):
            if _blocks_evictions(budget, replicas):
                spec = budget.get("spec") or {}
                key = "maxUnavailable" if "maxUnavailable" in spec else "minAvailable"
                out.append(
                    Violation(
                        f"{object_id(budget)} (selects {object_id(obj)}, {replicas} replica(s))",
                        f"spec.{key}",
                        spec.get(key),
                        "a budget that allows at least one eviction: one that allows none blocks every "
                        "drain, so AKS refuses cluster upgrades (UnsatisfiablePDB) and node upgrades end Failed",
                    )
                )
    return out


def notice_handler_on_spot_nodes(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """The spot-notice handler, where installed, runs on every GPU spot node: it selects the
    pool's labels, tolerates each of its taints and runs at the preserved priority (a handler
    missing from a node, or preempted there, lets that node's workers vanish unwarned)."""
    pools = ctx.facts.pools
    out = []
    for obj in notice_handler_workloads(objects):
        spec = (pod_template(obj) or {}).get("spec") or {}
        where = object_id(obj)
        selector = dict(spec.get("nodeSelector") or {})
        wanted = pools.spot_gpu_labels
        foreign = {k: v for k, v in selector.items() if wanted.get(k) != v}
        if not pins_to(spec, wanted) or foreign:
            out.append(
                Violation(
                    where,
                    "nodeSelector",
                    selector,
                    f"the GPU spot pool's labels {wanted} and nothing else",
                )
            )
        out += _untolerated(spec, where, pools.gpu_taints, "the GPU spot pool's", "it lands on no GPU node")
        if spec.get("priorityClassName") != ctx.facts.preserved_priority_class:
            out.append(
                Violation(
                    where,
                    "priorityClassName",
                    spec.get("priorityClassName"),
                    f"{ctx.facts.preserved_priority_class!r} (inference must not preempt it)",
                )
            )
    return out


def _runs_module(command: list[Any], module: str) -> bool:
    return any(a == "-m" and b == module for a, b in itertools.pairwise(command))


def worker_failures_surface(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """A worker that fails the same way every time ends its pod soon and says why: the agent is
    our launcher (its crash-loop rule stops torchrun's in-pod restarts after a few identical
    failures; torchrun alone restarts up to max_restarts inside a pod that stays Running), and
    a failed container's last log lines become its termination message (`elastic-lab status`)."""
    out = []
    for job in pytorchjobs(objects):
        for rtype, spec in worker_pod_specs(job):
            where = f"{object_id(job)} {rtype}"
            pytorch: Mapping[str, Any] = next(
                (c for c in spec.get("containers") or [] if c.get("name") == "pytorch"), {}
            )
            policy = pytorch.get("terminationMessagePolicy")
            if policy != "FallbackToLogsOnError":
                out.append(
                    Violation(
                        where,
                        "terminationMessagePolicy",
                        policy,
                        "FallbackToLogsOnError (a failed worker's last log lines become its pod's termination message)",
                    )
                )
            command = [*(pytorch.get("command") or []), *(pytorch.get("args") or [])]
            if not _runs_module(command, LAUNCH_MODULE):
                out.append(
                    Violation(
                        where,
                        "command",
                        (pytorch.get("command") or [])[:4],
                        f"the agent `python -m {LAUNCH_MODULE}` (torchrun alone restarts a worker that fails the "
                        "same way up to max_restarts times inside a pod that stays Running)",
                    )
                )
    return out


def job_autoscaler_fits(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """An elastic job's HPA (elasticPolicy.metrics) has room to move (minReplicas below
    maxReplicas), and each Utilization target is of a resource the workers request: the HPA
    computes utilisation against the request, and without one it never scales."""
    out = []
    for job in pytorchjobs(objects):
        policy = job["spec"].get("elasticPolicy") or {}
        metrics = policy.get("metrics") or []
        if not metrics:
            continue
        where = f"{object_id(job)} elasticPolicy"
        low, high = policy.get("minReplicas"), policy.get("maxReplicas")
        if not (isinstance(low, int) and isinstance(high, int) and low < high):
            out.append(Violation(where, "minReplicas..maxReplicas", f"{low}..{high}", "minReplicas below maxReplicas"))
        requested: set[str] = set()
        for _, spec in worker_pod_specs(job):
            for c in spec.get("containers") or []:
                if c.get("name") == "pytorch":
                    requested |= set(((c.get("resources") or {}).get("requests") or {}).keys())
        for i, metric in enumerate(metrics):
            resource = metric.get("resource") or {}
            target = resource.get("target") or {}
            utilization = metric.get("type") == "Resource" and target.get("type") == "Utilization"
            if utilization and resource.get("name") not in requested:
                out.append(
                    Violation(
                        where,
                        f"metrics[{i}].resource.name",
                        resource.get("name"),
                        f"a resource the workers request ({', '.join(sorted(requested)) or 'none'}): "
                        "utilisation is measured against the request",
                    )
                )
    return out


# The guardrails, in the order they run and are reported.
GUARDRAILS = [
    Guardrail("etcd-not-on-spot", etcd_not_on_spot),
    Guardrail("operator-on-cpu-pool", operator_on_cpu_pool),
    Guardrail("infra-not-preemptible-by-inference", infra_not_preemptible_by_inference),
    Guardrail("workers-tolerate-exactly-gpu-spot-taints", workers_tolerate_exactly),
    Guardrail("rdzv-host-is-etcd-service", rdzv_host_is_etcd_service),
    Guardrail("etcd-image-v3.5", etcd_image_v35),
    Guardrail("no-global-default-priority-class", no_global_default),
    Guardrail("etcd-private", etcd_private),
    Guardrail("workers-spot-ready", workers_spot_ready),
    Guardrail("checkpoints-writable-by-workers", checkpoints_writable_by_workers),
    Guardrail("rendezvous-moved-by-drains-only", rendezvous_moved_by_drains_only),
    Guardrail("disruption-budgets-satisfiable", disruption_budgets_satisfiable),
    Guardrail("notice-handler-on-spot-nodes", notice_handler_on_spot_nodes),
    Guardrail("worker-failures-surface", worker_failures_surface),
    Guardrail("job-autoscaler-fits", job_autoscaler_fits),
]


def run_guardrails(objects: Iterable[Mapping[str, Any]], ctx: GuardrailContext) -> dict[str, list[Violation]]:
    """Every guardrail's violations, by name."""
    objs = list(objects)
    return {g.name: g.check(objs, ctx) for g in GUARDRAILS}

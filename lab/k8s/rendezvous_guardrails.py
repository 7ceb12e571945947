"""Guardrails on the rendezvous: each job reaches the platform's etcd Service, its own c10d
store or (per step) its own lighthouse, with a unique id; etcd runs a v3.5 image with the v2 API
and is reachable only from job pods."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lab.k8s.guardrail import GuardrailContext, Objects, Violation
from lab.k8s.job_values import PER_STEP_POD_FIELD_ENV
from lab.k8s.objects import (
    ETCD_NAME_LABEL,
    LIGHTHOUSE_ROLE_LABEL,
    STORE_ROLE_LABEL,
    containers,
    etcd_workloads,
    has_label,
    is_per_step,
    object_id,
    pod_template,
    pytorchjobs,
    training_containers,
)
from lab.vocab.job_parts import PART_BURST, PART_LABEL, burst_job_name, core_job_name, part_of
from lab.vocab.names import ImageReference
from lab.vocab.per_step import ENV_LIGHTHOUSE
from lab.vocab.platform_facts import PlatformFacts, lighthouse_name, store_name

ETCD_TAG = re.compile(r"^v?3\.5\.\d+$")


@dataclass(frozen=True)
class _ServerRole:
    """A job's own rendezvous server as its violations name it: the property, whose Service it
    is, the pod that Service must select, and that pod's label."""

    prop: str
    owner: str
    pod: str
    label: tuple[str, str]


_LIGHTHOUSE = _ServerRole("lighthouse", "the lighthouse's", "the lighthouse pod", LIGHTHOUSE_ROLE_LABEL)
_STORE = _ServerRole("c10d store", "the store's", "the c10d store pod", STORE_ROLE_LABEL)
# (namespace, name) -> a Service among the objects
Services = Mapping[tuple[str, str | None], Mapping[str, Any]]


def _host_forms(service: str, namespace: str, domain: str, job_namespace: str) -> set[str]:
    forms = {f"{service}.{namespace}.svc.{domain}", f"{service}.{namespace}.svc", f"{service}.{namespace}"}
    if namespace == job_namespace:
        forms.add(service)
    return forms


def _service_ports(svc: Mapping[str, Any]) -> list[Any]:
    return [p.get("port") for p in (svc.get("spec") or {}).get("ports") or []]


def _job_service(
    services: Services, ns: str, name: str, where: str, role: _ServerRole
) -> tuple[Mapping[str, Any] | None, list[Violation]]:
    """A Service rendered with the job (its lighthouse, its c10d store) and what is wrong with
    it: missing, or selecting other pods than its server's."""
    svc = services.get((ns, name))
    if svc is None:
        return None, [Violation(where, role.prop, f"{ns}/{name}", f"{role.owner} Service rendered with the job")]
    selector = dict((svc.get("spec") or {}).get("selector") or {})
    if has_label(selector, role.label):
        return svc, []
    return svc, [Violation(object_id(svc), "spec.selector", selector, role.pod)]


def _job_name(job: Mapping[str, Any], f: PlatformFacts) -> tuple[str, str]:
    """The run's name and namespace: a job's borrowed part runs with its core's servers."""
    meta = job.get("metadata") or {}
    name = meta.get("name", "")
    core = core_job_name(name) if part_of(job) == PART_BURST else None
    return core or name, meta.get("namespace", f.namespace)


def _per_step_wiring(job: Mapping[str, Any], services: Services, f: PlatformFacts) -> list[Violation]:
    """A per-step job has no elasticPolicy; its workers ask the job's own lighthouse Service
    for their quorum, name their replica group after their pod and advertise their pod's IP."""
    name, ns = _job_name(job, f)
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
    svc, wrong = _job_service(services, ns, lighthouse, where, _LIGHTHOUSE)
    out += wrong
    for rtype, container in training_containers(job):
        env = {e.get("name"): e for e in container.get("env") or []}
        out += _lighthouse_env(f"{where} {rtype}", env, svc, lighthouse, ns, f)
    return out


def _lighthouse_env(
    at: str, env: Mapping[str, Any], svc: Mapping[str, Any] | None, lighthouse: str, ns: str, f: PlatformFacts
) -> list[Violation]:
    """A per-step worker's environment: the lighthouse's URL, and its pod's own fields."""
    out = []
    url = f"http://{lighthouse}.{ns}.svc.{f.cluster_domain}:<port>"
    value = (env.get(ENV_LIGHTHOUSE) or {}).get("value")
    parts = urlsplit(value or "")
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or parts.hostname not in _host_forms(lighthouse, ns, f.cluster_domain, ns):
        out.append(Violation(at, f"env.{ENV_LIGHTHOUSE}", value, f"the job's lighthouse Service {url}"))
    elif svc is not None and port not in _service_ports(svc):
        out.append(Violation(at, f"env.{ENV_LIGHTHOUSE}", value, f"a port of {object_id(svc)}: {_service_ports(svc)}"))
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


# The label every namespace carries with its own name (Kubernetes sets it).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _etcd_service(services: Services, ctx: GuardrailContext) -> list[Violation]:
    """The platform's etcd Service: there (with the platform), selecting the etcd pods."""
    f = ctx.facts
    etcd_svc = services.get((f.rendezvous_namespace, f.etcd_service))
    if etcd_svc is None:
        if not ctx.expect_platform:
            return []
        return [
            Violation(
                "platform",
                "Service",
                f"{f.rendezvous_namespace}/{f.etcd_service}",
                "the etcd Service among the platform's objects",
            )
        ]
    selector = (etcd_svc.get("spec") or {}).get("selector")
    if has_label(dict(selector or {}), ETCD_NAME_LABEL):
        return []
    return [Violation(object_id(etcd_svc), "spec.selector", selector, "the etcd pods")]


def _elastic_wiring(job: Mapping[str, Any], services: Services, f: PlatformFacts) -> list[Violation]:
    """An elastic job's rendezvous: the etcd Service (etcd-v2) or its own c10d store's Service,
    never a worker pod, under a unique rdzvId."""
    name, ns = _job_name(job, f)
    policy = (job.get("spec") or {}).get("elasticPolicy") or {}
    host, port, backend = policy.get("rdzvHost"), policy.get("rdzvPort"), policy.get("rdzvBackend", "c10d")
    where = object_id(job)
    out = []
    if re.match(rf"^{re.escape(name)}-(worker|master)-\d+", host or ""):
        out.append(Violation(where, "elasticPolicy.rdzvHost", host, "a rendezvous Service, never a worker pod"))
    if backend in ("etcd-v2", "etcd"):
        if host not in _host_forms(f.etcd_service, f.rendezvous_namespace, f.cluster_domain, ns):
            out.append(Violation(where, "elasticPolicy.rdzvHost", host, f"the etcd Service {f.etcd_host}"))
        if port != f.etcd_port:
            out.append(Violation(where, "elasticPolicy.rdzvPort", port, f"the etcd client port {f.etcd_port}"))
    else:
        out += _store_wiring(where, host, port, services, name, ns, f)
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
    return out


def _store_wiring(
    where: str, host: Any, port: Any, services: Services, name: str, ns: str, f: PlatformFacts
) -> list[Violation]:
    """A c10d job's rendezvous host and port: its own store's Service."""
    store = store_name(name)
    out = []
    if host not in _host_forms(store, ns, f.cluster_domain, ns):
        out.append(
            Violation(
                where,
                "elasticPolicy.rdzvHost",
                host,
                f"the job's c10d store Service {store}.{ns}.svc.{f.cluster_domain}",
            )
        )
    svc, wrong = _job_service(services, ns, store, where, _STORE)
    out += wrong
    if svc is not None and port not in _service_ports(svc):
        out.append(
            Violation(where, "elasticPolicy.rdzvPort", port, f"a port of {object_id(svc)}: {_service_ports(svc)}")
        )
    return out


def rdzv_host_is_etcd_service(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """A job's rendezvous host is the platform's etcd Service (etcd-v2), or, for c10d, the
    job's own store Service; never a worker; with a unique rdzvId. A per-step job has no
    elasticPolicy: its workers reach the job's own lighthouse Service, as their own groups."""
    f = ctx.facts
    services: Services = {
        ((o.get("metadata") or {}).get("namespace", f.namespace), (o.get("metadata") or {}).get("name")): o
        for o in objects
        if o.get("kind") == "Service"
    }
    out = _etcd_service(services, ctx)
    for job in pytorchjobs(objects):
        out += _per_step_wiring(job, services, f) if is_per_step(job) else _elastic_wiring(job, services, f)
    by_id: dict[str, list[Mapping[str, Any]]] = {}
    for job in pytorchjobs(objects):
        rdzv_id = ((job.get("spec") or {}).get("elasticPolicy") or {}).get("rdzvId")
        if rdzv_id:
            by_id.setdefault(rdzv_id, []).append(job)
    for rdzv_id, jobs in sorted(by_id.items()):
        if len(jobs) > 1:
            out += _shared_rdzv_id(rdzv_id, jobs)
    return out


def _shared_rdzv_id(rdzv_id: str, jobs: list[Mapping[str, Any]]) -> list[Violation]:
    """Jobs sharing a rendezvous id are one run: a job and its borrowed part, nothing else,
    with one elasticPolicy (torch keeps the node range per agent: they must agree)."""
    names = {(j.get("metadata") or {}).get("name"): j for j in jobs}
    cores = [n for n in names if isinstance(n, str) and burst_job_name(n) in names]
    if len(jobs) != 2 or not cores:
        return [Violation("jobs", "elasticPolicy.rdzvId", rdzv_id, "one job per rdzvId (but a job and its burst)")]
    core, burst = names[cores[0]], names[burst_job_name(cores[0])]
    out = []
    if part_of(burst) != PART_BURST:
        out.append(Violation(object_id(burst), f"metadata.labels.{PART_LABEL}", None, repr(PART_BURST)))
    if core["spec"].get("elasticPolicy") != burst["spec"].get("elasticPolicy"):
        out.append(
            Violation(
                object_id(burst),
                "elasticPolicy",
                burst["spec"].get("elasticPolicy"),
                f"the elasticPolicy of {object_id(core)}, the run's other part",
            )
        )
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


def etcd_private(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """etcd is reachable only inside the cluster and only from job pods, of its namespace or a team's."""
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
    admitted = {ctx.facts.rendezvous_namespace}
    for pol in policies:
        out += _etcd_ingress(pol, clients, ctx.facts, admitted)
    for job in pytorchjobs(objects):
        ns = (job.get("metadata") or {}).get("namespace", ctx.facts.namespace)
        backend = ((job.get("spec") or {}).get("elasticPolicy") or {}).get("rdzvBackend")
        if backend in ("etcd-v2", "etcd") and ns not in admitted:
            out.append(
                Violation(
                    object_id(job),
                    "metadata.namespace",
                    ns,
                    f"a namespace the etcd NetworkPolicy admits job pods from: {sorted(admitted)}",
                )
            )
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


def _etcd_ingress(
    pol: Mapping[str, Any], clients: dict[str, str], f: PlatformFacts, admitted: set[str]
) -> list[Violation]:
    """An etcd NetworkPolicy's rules: ingress only from pods labelled `clients`, in etcd's
    namespace or (a namespaceSelector by name) a team's; the namespaces it admits go to
    `admitted`."""
    out = []
    spec = pol.get("spec") or {}
    teams = {t.namespace for t in f.teams.values()}
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
            namespaces = peer.get("namespaceSelector")
            team_ns = dict((namespaces or {}).get("matchLabels") or {}).get(NAMESPACE_NAME_LABEL)
            by_team_name = namespaces == {"matchLabels": {NAMESPACE_NAME_LABEL: team_ns}} and team_ns in teams
            if "ipBlock" in peer or (namespaces is not None and not by_team_name) or sel != clients:
                out.append(
                    Violation(
                        object_id(pol),
                        "spec.ingress.from",
                        peer,
                        f"only pods labelled {clients}, of etcd's namespace or a team's (by its name: {sorted(teams)})",
                    )
                )
            elif by_team_name:
                admitted.add(str(team_ns))
    return out

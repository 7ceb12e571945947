"""Guardrails on where the platform's and jobs' pods run and at which priority: the rendezvous
servers and the training operator on the on-demand CPU pool, out of inference's reach; workers
on the GPU spot pool and nowhere else; the notice handler on every spot node; PriorityClasses
that let only inference preempt."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lab.k8s.guardrail import GuardrailContext, Objects, Violation
from lab.k8s.objects import (
    etcd_workloads,
    notice_handler_workloads,
    object_id,
    operator_workloads,
    pod_template,
    priority_values,
    pytorchjobs,
    rendezvous_workloads,
    worker_pod_specs,
)
from lab.k8s.placement import may_select, pins_to, tolerates

NODE_LIFECYCLE_KEYS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
MAX_NOT_READY_TOLERATION_S = 60


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


def no_global_default(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """No PriorityClass is globalDefault (every unrelated pod would get it), none is named
    system-*; only inference preempts (training never evicts anyone) and it outranks the
    preemptible workers, the only pods it is meant to preempt; borrowed workers (a job's
    burst), where the platform has them, are below the workers: preempted first."""
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
    wanted += [f.burst_priority_class] if f.burst_priority_class else []
    if ctx.expect_platform:
        out += [Violation("platform", "PriorityClass", n, "declared by the platform") for n in wanted if n not in pcs]
    if all(n in pcs for n in wanted[:3]):
        out += _priority_order(pcs, wanted)
    return out


def _priority_order(pcs: Mapping[str, Mapping[str, Any]], wanted: list[str]) -> list[Violation]:
    """Inference above the workers and preempting; the workers above the borrowed ones (where
    declared); the preserved, worker and borrowed classes preempting nobody."""
    inference, workers = pcs[wanted[0]], pcs[wanted[2]]
    out = []
    below = [(wanted[0], wanted[2], "inference preempts the workers")]
    if len(wanted) > 3 and wanted[3] in pcs:
        below.append((wanted[2], wanted[3], "borrowed workers are preempted first"))
    for upper, lower, why in below:
        if not pcs[upper].get("value", 0) > pcs[lower].get("value", 0):
            value = pcs[upper].get("value", 0)
            out.append(
                Violation(
                    f"PriorityClass/{lower}",
                    "value",
                    pcs[lower].get("value", 0),
                    f"< {value}, the value of {upper} ({why})",
                )
            )
    if inference.get("preemptionPolicy", "PreemptLowerPriority") != "PreemptLowerPriority":
        out.append(
            Violation(
                f"PriorityClass/{wanted[0]}",
                "preemptionPolicy",
                inference.get("preemptionPolicy"),
                "PreemptLowerPriority (inference evicts training workers)",
            )
        )
    for pc in [pcs[wanted[1]], workers, *(pcs[n] for n in wanted[3:] if n in pcs)]:
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

"""Guardrails: properties of the rendered platform and jobs that keep training alive on spot.

Each guardrail takes every Kubernetes object we would apply (declared by the platform
component, rendered from our charts) and the platform's facts, and returns its violations
(empty: it holds). `GUARDRAILS` lists them; `run_guardrails` runs them all. `elastic-lab
plan` and `elastic-lab submit` refuse to go on when one fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lab.k8s.disruption_guardrails import disruption_budgets_satisfiable, rendezvous_moved_by_drains_only
from lab.k8s.guardrail import Guardrail, GuardrailContext, Objects, Violation
from lab.k8s.placement_guardrails import (
    etcd_not_on_spot,
    infra_not_preemptible_by_inference,
    no_global_default,
    notice_handler_on_spot_nodes,
    operator_on_cpu_pool,
    workers_tolerate_exactly,
)
from lab.k8s.rendezvous_guardrails import etcd_image_v35, etcd_private, rdzv_host_is_etcd_service
from lab.k8s.worker_guardrails import (
    checkpoints_writable_by_workers,
    job_autoscaler_fits,
    worker_failures_surface,
    workers_spot_ready,
)

__all__ = ["GUARDRAILS", "Guardrail", "GuardrailContext", "Objects", "Violation", "run_guardrails"]

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

"""Text and JSON views of a plan: resource tree, stack outputs, cost estimate, check results."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict, Unpack

from components.aks.storage import ROLE_STORAGE_ACCOUNT_CONTRIBUTOR, ROLE_STORAGE_BLOB_DATA_CONTRIBUTOR
from lab.plan.check_list import CheckRun, findings_of
from lab.plan.cost import HOURS_PER_WEEK, CostEstimate
from lab.plan.findings import errors
from lab.plan.quota_needs import quota_lines, stack_quota
from lab.plan.saving import saving_lines, saving_rows
from lab.plan.trace_saving import TraceChoice, notice_for, trace_lines, trace_rows
from lab.program.recording import SECRET_PLACEHOLDER, Plan, RecordedResource
from lab.vocab.capacity import PROVISION_TIMEOUT_MIN
from lab.vocab.checkpoint_interval import duration, intervals
from lab.vocab.layout import ROOT

ROLE_NAMES = {
    ROLE_STORAGE_BLOB_DATA_CONTRIBUTOR: "Storage Blob Data Contributor",
    ROLE_STORAGE_ACCOUNT_CONTRIBUTOR: "Storage Account Contributor",
}


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool))


def _managed_cluster_parts(r: RecordedResource, i: dict[str, Any]) -> list[Any]:
    system = [p for p in i.get("agentPoolProfiles") or [] if isinstance(p, dict)]
    return [
        i.get("resourceName"),
        f"k8s {i.get('kubernetesVersion')}",
        i.get("location"),
        f"tier {(i.get('sku') or {}).get('tier')}",
        f"nodeRG {i.get('nodeResourceGroup') or r.state.get('nodeResourceGroup')}",
        *(
            f"pool {p.get('name')}: {p.get('mode')} {p.get('scaleSetPriority', 'Regular')} "
            f"{p.get('vmSize')} x{p.get('count')}"
            for p in system
        ),
    ]


def _agent_pool_parts(r: RecordedResource, i: dict[str, Any]) -> list[Any]:
    prio = i.get("scaleSetPriority", "Regular")
    rng = f"{i.get('minCount')}..{i.get('maxCount')}" if i.get("enableAutoScaling") else f"x{i.get('count')}"
    parts = [i.get("agentPoolName"), i.get("mode"), prio, i.get("vmSize"), f"nodes {rng}"]
    if str(prio).lower() == "spot":
        parts += [f"eviction {i.get('scaleSetEvictionPolicy')}", f"maxPrice {i.get('spotMaxPrice')}"]
    if i.get("nodeTaints"):
        parts.append("taints " + ",".join(i["nodeTaints"]))
    return parts


def _role_assignment_parts(r: RecordedResource, i: dict[str, Any]) -> list[Any]:
    role = str(i.get("roleDefinitionId", "")).rsplit("/", 1)[-1]
    scope = str(i.get("scope", "")).split("/providers/", 1)[-1]
    return [ROLE_NAMES.get(role, role), f"on {scope}"]


def _provider_parts(r: RecordedResource, i: dict[str, Any]) -> list[Any]:
    return [
        f"{k}={SECRET_PLACEHOLDER if k in r.secret_inputs else v}"
        for k, v in i.items()
        if _scalar(v) and k != "version"
    ][:3]


def _other_parts(r: RecordedResource, i: dict[str, Any]) -> list[Any]:
    """A Kubernetes object's namespace/name, and a few scalar inputs of any resource."""
    metadata = i.get("metadata")
    meta: dict[str, Any] = metadata if isinstance(metadata, dict) else {}
    parts: list[Any] = []
    if meta:
        namespace = meta.get("namespace")
        parts = [f"{namespace + '/' if namespace else ''}{meta.get('name', '')}"]
    return (
        parts
        + [
            f"{k}={v}"
            for k, v in i.items()
            if _scalar(v) and k not in r.secret_inputs and k not in ("kind", "apiVersion")
        ][:3]
    )


# The key inputs of a resource type, as recorded (None or "" where unset), shown with str().
_SUMMARIES: dict[str, Callable[[RecordedResource, dict[str, Any]], list[Any]]] = {
    "azure-native:resources:ResourceGroup": lambda r, i: [i.get("resourceGroupName"), i.get("location")],
    "azure-native:managedidentity:UserAssignedIdentity": lambda r, i: [i.get("resourceName")],
    "azure-native:managedidentity:FederatedIdentityCredential": lambda r, i: [f"subject={i.get('subject')}"],
    "azure-native:containerservice:ManagedCluster": _managed_cluster_parts,
    "azure-native:containerservice:AgentPool": _agent_pool_parts,
    "azure-native:storage:StorageAccount": lambda r, i: [
        i.get("accountName"),
        (i.get("sku") or {}).get("name"),
        i.get("kind"),
        f"rg {i.get('resourceGroupName')}",
    ],
    "azure-native:storage:BlobContainer": lambda r, i: [i.get("containerName"), f"public {i.get('publicAccess')}"],
    "azure-native:authorization:RoleAssignment": _role_assignment_parts,
}


def summary(r: RecordedResource) -> str:
    """A few key inputs of a resource, one line."""
    if r.type.startswith("pulumi:providers:"):
        parts = _provider_parts(r, r.inputs)
    else:
        parts = _SUMMARIES.get(r.type, _other_parts)(r, r.inputs)
    return " ".join(str(p) for p in parts if p not in (None, ""))


def tree(plan: Plan) -> list[str]:
    urns = {r.urn for r in plan.resources}
    by_parent: dict[str | None, list[RecordedResource]] = {}
    for r in plan.resources:
        key = r.parent if r.parent in urns else None
        by_parent.setdefault(key, []).append(r)
    names = {r.urn: r.name for r in plan.resources}
    lines = [f"pulumi:pulumi:Stack {plan.project}-{plan.stack}"]

    def walk(parent: str | None, indent: str) -> None:
        kids = sorted(by_parent.get(parent, []), key=lambda r: (r.custom, r.type, r.name))
        for n, r in enumerate(kids):
            last = n == len(kids) - 1
            lines.append(f"{indent}{'└─ ' if last else '├─ '}{r.type} {r.name}")
            cont = indent + ("   " if last else "│  ")
            detail = summary(r)
            if detail:
                lines.append(f"{cont}    {detail}")
            opts = []
            if r.ignore_changes:
                opts.append(f"ignore_changes={r.ignore_changes}")
            explicit = [names.get(d, d) for d in r.depends_on]
            if explicit:
                opts.append(f"depends_on={sorted(set(explicit))}")
            if r.protect:
                opts.append("protect")
            if r.secret_inputs:
                opts.append(f"secret inputs={r.secret_inputs}")
            if opts:
                lines.append(f"{cont}    [{'; '.join(opts)}]")
            walk(r.urn, cont)

    walk(None, "")
    return lines


def _fmt_output(value: Any) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= 110 else text[:107] + "..."


def outputs_lines(plan: Plan, show_secrets: bool = False) -> list[str]:
    width = max((len(k) for k in plan.outputs), default=0)
    lines = []
    for k in sorted(plan.outputs):
        secret = k in plan.secret_outputs
        value = plan.outputs[k] if (show_secrets or not secret) else SECRET_PLACEHOLDER
        lines.append(f"  {k.ljust(width)}  {_fmt_output(value)}{'  (secret)' if secret else ''}")
    return lines


def _rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return path


def money(v: float | None, cur: str = "USD") -> str:
    return "   n/a" if v is None else f"{v:7.3f}"


def cost_lines(cost: CostEstimate | None) -> list[str]:
    if cost is None:
        return ["  (no node pools in this plan)"]
    lines = [
        f"  {cost.currency}/hour, region {cost.region}, prices as of {cost.as_of} "
        f"(ESTIMATES from {_rel(cost.prices_file)}; VMs only: disks, network, storage not included)",
        f"  {'pool':<9} {'role':<9} {'vm size':<24} {'capacity':<9} {'nodes':>6} {'$/node':>7} {'at min':>7} "
        f"{'at max':>7} {'max on-demand':>13}",
    ]
    for p in cost.pools:
        if p.fallback:
            continue
        lines.append(
            f"  {p.pool:<9} {p.role or '-'!s:<9} {p.vm_size:<24} {'spot' if p.spot else 'on-demand':<9} "
            f"{f'{p.min_nodes}..{p.max_nodes}':>6} {money(p.price)} {money(p.at_min)} {money(p.at_max)} "
            f"{money(p.at_max_on_demand):>13}"
        )
    cp = cost.control_plane
    label = 9 + 1 + 9 + 1 + 24 + 1 + 9 + 1 + 6 + 1 + 7  # up to and including the $/node column
    lines.append(f"  {cp['label']:<{label}} {money(cp['price'])} {money(cp['price'])} {money(cp['price']):>13}")
    lines.append(
        f"  {'total':<{label}} {money(cost.hourly_min)} {money(cost.hourly_max)} {money(cost.hourly_max_on_demand):>13}"
    )
    lines.append(
        f"  idle (every pool at its minimum, GPU pool at zero): {money(cost.hourly_min).strip()} {cost.currency}/h"
    )
    if cost.hourly_max is not None:
        saving = f" (spot saves about {cost.spot_saving:.0%})" if cost.spot_saving is not None else ""
        lines.append(
            f"  full (every pool at its maximum): {money(cost.hourly_max).strip()} {cost.currency}/h on spot GPUs vs "
            f"{money(cost.hourly_max_on_demand).strip()} {cost.currency}/h on on-demand GPUs{saving}"
        )
    lines += rank_lines(cost)
    sources: dict[str, tuple[str, str | None]] = {}
    for p in cost.pools:
        sources.setdefault(p.vm_size, (p.source, p.query))
    sources[cp["label"]] = (cp["source"], cp.get("query"))
    lines.append("  sources (`query`: the request that returns today's price):")
    for size, (src, query) in sources.items():
        lines.append(f"    {size}: {src}")
        if query:
            lines.append(f"      query: {query}")
    for note in cost.notes:
        lines.append(f"  note: {note}")
    return lines


def rank_lines(cost: CostEstimate) -> list[str]:
    """The GPU capacity ranks in the order the autoscaler tries them, each at the GPU maximum:
    its cost, the cluster's while the job runs there instead of on rank 1, and that difference
    for a week; then how long a worker keeps a fallback rank's node, and what the on-demand
    rank costs for that long."""
    if len(cost.ranks) < 2:
        return []
    lines = [
        "  GPU capacity, tried in this order (the cluster autoscaler's priority expander: a rank is used when the "
        "ranks above it have no capacity or quota, or their node has not arrived within "
        f"{PROVISION_TIMEOUT_MIN} min):",
        f"    {'rank':<4} {'pool':<13} {'vm size':<24} {'capacity':<9} {'nodes':>5} {'at max':>7} "
        f"{'cluster at max':>14} {'vs rank 1':>9} {'a week':>8}",
    ]
    for r in cost.ranks:
        first = r.rank == 1
        extra = "" if first else ("   n/a" if r.extra is None else f"{r.extra:+7.3f}")
        week = "" if first else ("n/a" if r.extra_per_week is None else f"{r.extra_per_week:+.2f}")
        lines.append(
            f"    {r.rank:<4} {r.pool:<13} {r.vm_size:<24} {r.capacity:<9} {r.nodes:>5} {money(r.at_max)} "
            f"{money(r.cluster_at_max):>14} {extra:>9} {week:>8}".rstrip()
        )
    lines.append(
        "  A worker placed on a fallback rank keeps that node, and its price, until the job ends or the worker is "
        "moved (a spot rank's node also ends at its eviction): the cluster autoscaler removes no GPU node whose GPU "
        "a worker holds, and moves no worker back to rank 1 (`elastic-lab rebalance JOB` does, when rank 1 has room)."
    )
    return lines + kept_fallback_lines(cost)


def kept_fallback_lines(cost: CostEstimate | None, workers: int | None = None) -> list[str]:
    """What the on-demand GPU rank costs over rank 1 while workers keep its nodes: a worker an
    hour, `workers` (default: the rank's maximum) an hour and a week. Empty without one."""
    rank = cost.on_demand_rank if cost else None
    if cost is None or rank is None:
        return []
    kept = rank.nodes if workers is None else min(workers, rank.nodes)
    where = f"The on-demand rank {rank.rank} ({rank.pool}, {rank.vm_size})"
    if rank.extra_per_node is None:
        return [f"  {where}, kept {rank.kept_until}: not priced (a price is missing from the table)."]
    per_hour = rank.extra_per_node * kept
    return [
        f"  {where}, kept {rank.kept_until}, costs over rank 1: +{rank.extra_per_node:.3f} {cost.currency}/h a "
        f"worker, +{per_hour:.3f} {cost.currency}/h at {kept} worker(s), +{per_hour * HOURS_PER_WEEK:.2f} "
        f"{cost.currency} a week of the job's life."
    ]


def checks_lines(runs: list[CheckRun], api: dict[str, dict[str, str]] | None = None) -> list[str]:
    lines = []
    for run in runs:
        if not run.applied:
            lines.append(f"  - {run.name}: not applicable")
            continue
        errs = len(errors(run.findings))
        warns = len(run.findings) - errs
        status = "ok" if not run.findings else f"{errs} error(s), {warns} warning(s)"
        lines.append(f"  {'✓' if not errs else '✗'} {run.name}: {status}")
        for f in run.findings:
            lines.append(f"      {f}")
    if api:
        lines.append("  ARM models checked against (Pulumi's API version in brackets):")
        for t, v in api.items():
            lines.append(f"      {t}: {v['model']} @ API {v['models']} [Pulumi sends {v['pulumi']}]")
    total = findings_of(runs)
    lines.append(f"  {len(errors(total))} error(s), {len(total) - len(errors(total))} warning(s)")
    return lines


def eviction_rows(cost: CostEstimate | None, save_cost_s: float) -> list[dict[str, Any]]:
    """Each spot pool at its largest: how often it loses a node at each monthly eviction band,
    and Daly's checkpoint interval for a save that costs training `save_cost_s`."""
    rows: list[dict[str, Any]] = []
    for pool in cost.pools if cost else []:
        if not pool.spot or pool.max_nodes < 1 or pool.fallback:
            continue
        for band in intervals(save_cost_s, pool.max_nodes):
            rows.append(
                {
                    "pool": pool.pool,
                    "nodes": pool.max_nodes,
                    "band": band.band,
                    "mtbf_s": round(band.mtbf_s, 1),
                    "interval_s": round(band.interval_s, 1),
                    "lost_share": round(band.lost_share, 5),
                }
            )
    return rows


def eviction_lines(cost: CostEstimate | None, save_cost_s: float) -> list[str]:
    rows = eviction_rows(cost, save_cost_s)
    if not rows:
        return ["  (no spot pool in this plan)"]
    lines = [
        "  at each monthly eviction band: how often the pool at its largest loses a node / Daly's checkpoint "
        f"interval for a save that costs training {save_cost_s:g} s (--save-cost; `elastic-lab drill` measures a "
        "job's) (the share of time saves and redone work take)"
    ]
    for pool in dict.fromkeys(r["pool"] for r in rows):
        mine = [r for r in rows if r["pool"] == pool]
        cells = ", ".join(
            f"{r['band']} {duration(r['mtbf_s'])} / {duration(r['interval_s'])} ({100 * r['lost_share']:.2f} %)"
            for r in mine
        )
        lines.append(f"  {pool} at {mine[0]['nodes']} node(s): {cells}")
    return lines


class Shown(TypedDict, total=False):
    """What both views show beside the plan, the checks and the cost (defaults in SHOWN_DEFAULTS)."""

    show_secrets: bool  # secret outputs in clear instead of a placeholder
    api: dict[str, dict[str, str]] | None  # the ARM API versions the checks read
    save_cost_s: float  # what a checkpoint's save costs training, for Daly's interval
    band: str | None  # the monthly eviction band whose saving is shown, if any
    trace: TraceChoice | None  # the trace window whose goodput and saving are shown, if any


SHOWN_DEFAULTS: Shown = {"show_secrets": False, "api": None, "save_cost_s": 1.0, "band": None, "trace": None}


def text(plan: Plan, runs: list[CheckRun], cost: CostEstimate | None, **options: Unpack[Shown]) -> str:
    shown: Shown = {**SHOWN_DEFAULTS, **options}
    parts = [
        f"Plan of stack {plan.stack!r} (cloud: {plan.cloud}) — offline, under mocks: {len(plan.resources)} resources",
        "",
        *tree(plan),
        "",
        "Outputs:",
        *outputs_lines(plan, shown["show_secrets"]),
        "",
        "Hourly cost estimate:",
        *cost_lines(cost),
        "",
        "Quota the stack needs:",
        *quota_lines(stack_quota(plan)),
        "",
        "Evictions and checkpoints:",
        *eviction_lines(cost, shown["save_cost_s"]),
        *(saving_lines(cost, band) if (band := shown["band"]) else []),
        *(trace_lines(cost, trace, plan.cloud) if (trace := shown["trace"]) else []),
        "",
        "Checks:",
        *checks_lines(runs, shown["api"]),
    ]
    return "\n".join(parts)


def urn_type(urn: str | None) -> str | None:
    """The resource type of a URN (`urn:pulumi:stack::project::parent$type::name`)."""
    if not urn:
        return None
    parts = urn.split("::")
    return parts[2].split("$")[-1] if len(parts) >= 4 else None


def _resource_json(d: dict[str, Any]) -> dict[str, Any]:
    """One resource of the JSON view, from the plan's own JSON form."""
    parent = d.get("parent")
    return {
        "type": d["type"],
        "name": d["name"],
        "urn": d["urn"],
        "parent": parent,
        "parent_type": urn_type(parent),
        "parent_name": d["parent_name"],
        "custom": d["custom"],
        "remote": d["remote"],
        "id": d["id"],
        "inputs": d["inputs"],
        "secret_inputs": d["secret_inputs"],
        "options": {
            "ignore_changes": d["ignore_changes"],
            "replace_on_changes": d["replace_on_changes"],
            # Sets to the engine, collected in no fixed order: sorted, so that two
            # plans of the same program diff as equal.
            "depends_on": sorted(d["depends_on"]),
            "dependencies": sorted(d["dependencies"]),
            "property_dependencies": {k: sorted(v) for k, v in sorted(d["property_dependencies"].items())},
            "provider": d["provider"],
            "protect": d["protect"],
            "delete_before_replace": d["delete_before_replace"],
            "retain_on_delete": d["retain_on_delete"],
            "additional_secret_outputs": d["additional_secret_outputs"],
        },
        "outputs": d["outputs"],
        "state": d["state"],
    }


def _trace_json(cost: CostEstimate | None, trace: TraceChoice, cloud: str | None) -> dict[str, Any]:
    window = trace.trace.checked_window(trace.window)
    return {
        "trace": {
            "source": trace.trace.source,
            "window_s": list(window),
            "notice": notice_for(trace, cloud),
            "model": trace.model,
        },
        "trace_saving": trace_rows(cost, trace, cloud),
    }


def json_dict(plan: Plan, runs: list[CheckRun], cost: CostEstimate | None, **options: Unpack[Shown]) -> dict[str, Any]:
    shown: Shown = {**SHOWN_DEFAULTS, **options}
    base = plan.to_json_dict(show_secrets=shown["show_secrets"])
    resources = [_resource_json(d) for d in sorted(base["resources"], key=lambda d: d["urn"])]
    all_findings = findings_of(runs)
    return {
        "stack": plan.stack,
        "project": plan.project,
        "cloud": plan.cloud,
        "resources": resources,
        "outputs": base["outputs"],
        "secret_outputs": base["secret_outputs"],
        "cost": cost.to_dict() if cost else None,
        "quota": quota.to_dict() if (quota := stack_quota(plan)) else None,
        "evictions": {
            "save_cost_s": shown["save_cost_s"],
            "rows": eviction_rows(cost, shown["save_cost_s"]),
            **({"band": band, "saving": saving_rows(cost, band)} if (band := shown["band"]) else {}),
            **(_trace_json(cost, trace, plan.cloud) if (trace := shown["trace"]) else {}),
        },
        "checks": [{"name": r.name, "applied": r.applied, "findings": [f.to_dict() for f in r.findings]} for r in runs],
        "findings": [f.to_dict() for f in all_findings],
        "arm_api_versions": shown["api"],
        "ok": not errors(all_findings),
    }

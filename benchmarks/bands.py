"""Goodput and cost per million useful samples at each monthly eviction-rate band, for the
stacks' GPU spot pools against the same pools on demand: a model fed with measured figures.

Why a model: at the published bands (<5 % to >20 % of capacity reclaimed in a month) a job of
three nodes loses one every 1-13 days, so a run of minutes on the local target sees no eviction;
compressing the rate to minutes would inflate every recovery against the time between
evictions. The model counts, per eviction of one of the job's N nodes (lab.vocab.checkpoint_interval
for the rates and Daly's interval T for a save cost C):

- elastic: the survivors' recovery R, the work redone since the last checkpoint (T/2 on a hard
  kill, nothing on a notice), N-1 nodes training until the replacement arrives after D, and
  the survivors' stall J when it joins;
- per-step: the survivors' stall R, nothing redone, N-1 nodes until the replacement, its join
  stall J; every step pays the mode's overhead;
- restart-everything: all N stopped until capacity is back (D), a restart S, the work redone;
and every mode pays C/T for its checkpoints. Cost per million useful samples is the hourly
price of the GPU pool at N nodes plus the cluster's fixed part, over the useful samples an hour.

The measured figures are the defaults (benchmarks/README.md, with their commands); D, the time a
replacement GPU node takes to arrive, is a guess (minutes): pass your own.

Run: .venv/bin/python benchmarks/bands.py [--stacks aks-dev eks-dev] [--notice-share 0]
     [--replacement-s 300] [--plot benchmarks/bands.png] [--json bands.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lab.vocab.checkpoint_interval import EVICTION_BANDS, daly_interval_s, job_mtbf_s

MODES = ("elastic", "per-step", "restart-everything")


@dataclass(frozen=True)
class Measured:
    """What each mode costs per eviction and per step (seconds), from the benchmarks."""

    elastic_recovery_s: float = 1.96  # recovery.py, etcd-v2 hard-kill median, 2026-11-26
    elastic_notice_recovery_s: float = 1.40  # recovery.py, notice median
    elastic_join_stall_s: float = 1.83  # the drill's survivors' stall when a node joins
    per_step_stall_s: float = 0.65  # the per-step hard-kill drill of gpt-small on this CPU (accelerator.py)
    per_step_join_stall_s: float = 0.15  # the same drill's survivors' stall at the join
    per_step_overhead: float = 0.28  # per-step step time over elastic's at 3 groups (+28 %, fault_tolerance.py)
    restart_s: float = 10.0  # restart-everything: the job's start and its checkpoint's load (a guess, not measured)
    save_cost_s: float = 1.376  # a real-size save's whole cost to training on one H200 (accelerator.py)


def goodput(mode: str, nodes: int, mtbf_s: float, m: Measured, replacement_s: float, notice_share: float) -> float:
    """Useful samples an hour over what N nodes would train with no eviction and no overhead."""
    interval = daly_interval_s(m.save_cost_s, mtbf_s)
    checkpoints = m.save_cost_s / (interval + m.save_cost_s)
    redo = (1 - notice_share) * interval / 2
    if mode == "elastic":
        recovery = notice_share * m.elastic_notice_recovery_s + (1 - notice_share) * m.elastic_recovery_s
        lost = recovery + redo + m.elastic_join_stall_s + replacement_s / nodes
        return max(0.0, 1 - checkpoints - lost / mtbf_s)
    if mode == "per-step":
        lost = m.per_step_stall_s + m.per_step_join_stall_s + replacement_s / nodes
        return max(0.0, (1 - checkpoints - lost / mtbf_s) / (1 + m.per_step_overhead))
    lost = replacement_s + m.restart_s + redo  # restart-everything: every node waits
    return max(0.0, 1 - checkpoints - lost / mtbf_s)


@dataclass(frozen=True)
class Pool:
    stack: str
    vm_size: str
    nodes: int
    spot_per_node: float
    on_demand_per_node: float
    fixed_per_hour: float  # the cluster's control plane and its CPU pools at their minimum
    currency: str


def pools(stacks: list[str]) -> list[Pool]:
    """Each stack's GPU spot pool at its largest, priced by the offline plan's table."""
    from lab.plan import cost
    from lab.plan.harness import run_program

    found = []
    for stack in stacks:
        estimate = cost.estimate(run_program(stack))
        gpu = next(p for p in estimate.pools if p.spot and p.price is not None)
        fixed = float(estimate.control_plane.get("price") or 0.0) + sum(
            (p.price or 0.0) * p.min_nodes for p in estimate.pools if p is not gpu
        )
        found.append(
            Pool(
                stack, gpu.vm_size, gpu.max_nodes, gpu.price, gpu.on_demand_price or math.nan, fixed, estimate.currency
            )
        )
    return found


def samples_per_node_hour(step_s: float = 0.082, batch: int = 64) -> float:
    """The demo's samples a node trains an hour at elastic's measured step time (fault_tolerance.py)."""
    return batch / step_s * 3600


def rows(pool: Pool, m: Measured, replacement_s: float, notice_share: float) -> list[dict[str, Any]]:
    rate = samples_per_node_hour() * pool.nodes
    on_demand = (pool.on_demand_per_node * pool.nodes + pool.fixed_per_hour) / rate * 1e6
    out = []
    for band, share in EVICTION_BANDS:
        mtbf = job_mtbf_s(share, pool.nodes)
        row: dict[str, Any] = {"stack": pool.stack, "band": band, "mtbf_h": mtbf / 3600, "on_demand": on_demand}
        for mode in MODES:
            g = goodput(mode, pool.nodes, mtbf, m, replacement_s, notice_share)
            row[f"goodput {mode}"] = g
            row[mode] = (pool.spot_per_node * pool.nodes + pool.fixed_per_hour) / (rate * g) * 1e6 if g else math.inf
        out.append(row)
    return out


def sweep(pool: Pool, m: Measured, replacement_s: float, notice_share: float) -> dict[str, list[float]]:
    """Cost per million samples from one eviction a month per node to one an hour."""
    rate = samples_per_node_hour() * pool.nodes
    per_node_mtbf_h = [10 ** (k / 10) for k in range(0, 47)]  # 1 h .. ~5 years
    curves: dict[str, list[float]] = {"node_mtbf_h": per_node_mtbf_h}
    for mode in MODES:
        curves[mode] = []
        for h in per_node_mtbf_h:
            g = goodput(mode, pool.nodes, h * 3600 / pool.nodes, m, replacement_s, notice_share)
            price = pool.spot_per_node * pool.nodes + pool.fixed_per_hour
            curves[mode].append(price / (rate * g) * 1e6 if g else math.nan)
    return curves


def plot(pools_: list[Pool], m: Measured, replacement_s: float, notice_share: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lab.vocab.checkpoint_interval import node_mtbf_s

    fig, axes = plt.subplots(1, len(pools_), figsize=(6 * len(pools_), 4.5), squeeze=False)
    for ax, pool in zip(axes[0], pools_, strict=True):
        curves = sweep(pool, m, replacement_s, notice_share)
        for mode in MODES:
            ax.plot(curves["node_mtbf_h"], curves[mode], label=f"spot, {mode}")
        rate = samples_per_node_hour() * pool.nodes
        ax.axhline((pool.on_demand_per_node * pool.nodes + pool.fixed_per_hour) / rate * 1e6, color="k", ls="--",
                   label="on demand")  # fmt: skip
        for band, share in EVICTION_BANDS:
            ax.axvline(node_mtbf_s(share) / 3600, color="grey", lw=0.6)
            ax.text(node_mtbf_s(share) / 3600, ax.get_ylim()[1] * 0.98, band, rotation=90, va="top", fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("a node's mean time to eviction (hours; the bands at their middle)")
        ax.set_ylabel(f"{pool.currency} per million useful samples")
        ax.set_title(f"{pool.stack}: {pool.nodes} x {pool.vm_size}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(all_rows: list[dict[str, Any]]) -> str:
    head = "| stack | band | job loses a node every | " + " | ".join(f"{m} goodput / cost" for m in MODES)
    lines = [head + " | on demand cost |", "|---" * (3 + len(MODES) + 1) + "|"]
    for r in all_rows:
        cells = " | ".join(f"{100 * r[f'goodput {m}']:.3f} % / {r[m]:.4f}" for m in MODES)
        lines.append(f"| {r['stack']} | {r['band']} | {r['mtbf_h'] / 24:.1f} d | {cells} | {r['on_demand']:.4f} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stacks", nargs="+", default=["aks-dev", "eks-dev"])
    p.add_argument("--replacement-s", type=float, default=300.0, help="seconds a replacement GPU node takes [300]")
    p.add_argument("--notice-share", type=float, default=0.0, help="share of evictions with a notice saved [0]")
    p.add_argument("--plot", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    if not 0 <= args.notice_share <= 1 or args.replacement_s < 0:
        p.error("--notice-share is a share between 0 and 1, --replacement-s seconds >= 0")
    m = Measured()
    found = pools(args.stacks)
    all_rows = [r for pool in found for r in rows(pool, m, args.replacement_s, args.notice_share)]
    print(f"measured figures: {asdict(m)}; replacement {args.replacement_s:g} s, notice share {args.notice_share:g}")
    for x in found:
        print(
            f"prices: {x.stack} {x.nodes} x {x.vm_size}: spot {x.spot_per_node} / on demand {x.on_demand_per_node} "
            f"{x.currency}/h a node, the rest of the cluster {x.fixed_per_hour:.3f} {x.currency}/h"
        )
    print(table(all_rows))
    if args.json:
        args.json.write_text(json.dumps(all_rows, indent=2))
    if args.plot:
        plot(found, m, args.replacement_s, args.notice_share, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Goodput and cost per million useful samples at each monthly eviction-rate band, for the
stacks' GPU spot pools against the same pools on demand: a model fed with measured figures.

The model and its measured figures are lab.vocab.spot_goodput's (`elastic-lab plan --band`
uses the same); D, the time a replacement GPU node takes to arrive, is a guess (minutes): pass
your own. Cost per million useful samples is the hourly price of the GPU pool at N nodes plus
the cluster's fixed part, over the useful samples an hour.

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

from lab.vocab.checkpoint_interval import EVICTION_BANDS, job_mtbf_s
from lab.vocab.spot_goodput import MODES, REPLACEMENT_S, MeasuredCosts, goodput


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
    from lab.plan.saving import rest_of_the_cluster
    from lab.program.harness import run_program

    found = []
    for stack in stacks:
        estimate = cost.estimate(run_program(stack))
        gpu = next(p for p in estimate.pools if p.spot and p.price is not None)
        fixed = rest_of_the_cluster(estimate, gpu)
        found.append(
            Pool(
                stack, gpu.vm_size, gpu.max_nodes, gpu.price, gpu.on_demand_price or math.nan, fixed, estimate.currency
            )
        )
    return found


def samples_per_node_hour(step_s: float = 0.082, batch: int = 64) -> float:
    """The demo's samples a node trains an hour at elastic's measured step time (fault_tolerance.py)."""
    return batch / step_s * 3600


def rows(pool: Pool, m: MeasuredCosts, replacement_s: float, notice_share: float) -> list[dict[str, Any]]:
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


def sweep(pool: Pool, m: MeasuredCosts, replacement_s: float, notice_share: float) -> dict[str, list[float]]:
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


def plot(pools_: list[Pool], m: MeasuredCosts, replacement_s: float, notice_share: float, path: Path) -> None:
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


def intervals_table(pool: Pool, m: MeasuredCosts, replacement_s: float, fixed_s: list[float]) -> str:
    """Elastic's goodput when it saves at Daly's interval for the band against fixed intervals."""
    from lab.vocab.checkpoint_interval import daly_interval_s, duration

    head = "| band | Daly's interval: goodput | " + " | ".join(f"every {duration(f)}: goodput" for f in fixed_s)
    lines = [head + " |", "|---" * (2 + len(fixed_s)) + "|"]
    for band, share in EVICTION_BANDS:
        mtbf = job_mtbf_s(share, pool.nodes)
        daly = daly_interval_s(m.save_cost_s, mtbf)
        cells = [f"{100 * goodput('elastic', pool.nodes, mtbf, m, replacement_s, interval_s=f):.3f} %" for f in fixed_s]
        derived = goodput("elastic", pool.nodes, mtbf, m, replacement_s)
        lines.append(f"| {band} | {duration(daly)}: {100 * derived:.3f} % | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, parsed and checked before anything starts (`argv`: sys.argv's by default)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stacks", nargs="+", default=["aks-dev", "eks-dev"])
    p.add_argument(
        "--replacement-s", type=float, default=REPLACEMENT_S, help="seconds a replacement GPU node takes [300]"
    )
    p.add_argument("--notice-share", type=float, default=0.0, help="share of evictions with a notice saved [0]")
    p.add_argument(
        "--fixed-intervals",
        type=float,
        nargs="+",
        default=[3.85, 600.0, 21600.0],
        help="fixed checkpoint intervals (seconds of work) to compare with Daly's: the demo's 50 steps of the "
        "real-size model on one H200 (0.077 s each), 10 min, 6 h [3.85 600 21600]",
    )
    p.add_argument("--plot", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if not 0 <= args.notice_share <= 1 or args.replacement_s < 0:
        p.error("--notice-share is a share between 0 and 1, --replacement-s seconds >= 0")
    return args


def main() -> int:
    args = arguments()
    m = MeasuredCosts()
    found = pools(args.stacks)
    all_rows = [r for pool in found for r in rows(pool, m, args.replacement_s, args.notice_share)]
    print(f"measured figures: {asdict(m)}; replacement {args.replacement_s:g} s, notice share {args.notice_share:g}")
    for x in found:
        print(
            f"prices: {x.stack} {x.nodes} x {x.vm_size}: spot {x.spot_per_node} / on demand {x.on_demand_per_node} "
            f"{x.currency}/h a node, the rest of the cluster {x.fixed_per_hour:.3f} {x.currency}/h"
        )
    print(table(all_rows))
    print(f"\nelastic on {found[0].stack} ({found[0].nodes} nodes): checkpoints at Daly's interval for the band "
          f"against fixed ones, a save costing {m.save_cost_s:g} s")  # fmt: skip
    print(intervals_table(found[0], m, args.replacement_s, args.fixed_intervals))
    if args.json:
        args.json.write_text(json.dumps(all_rows, indent=2))
    if args.plot:
        plot(found, m, args.replacement_s, args.notice_share, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

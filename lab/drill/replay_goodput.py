"""Goodput of a replayed trace window against the capacity it offered.

The bound: no schedule can train more than the capacity offered allows, the integral over the
window of min(nodes alive, the job's slots), times one node's throughput at full size. The job's
useful samples are those of the steps in the final model's history (a step trained again after
a restart replaces the lost one) that ended inside the window. Their ratio is the replay's
goodput. One node's throughput changes with the world size (fewer nodes may synchronise faster,
or a fixed global batch makes each step longer): the figures per world size come with the
ratio, so a ratio above 1 cannot hide a loss.

Cost per million useful samples: the nodes the capacity offered paid at a spot price per
node-hour (a job holds the nodes it is given, restart-everything's idle ones included), over the
useful samples; on demand, no loss: every slot trains the whole time at one node's full-size
throughput, at the on-demand price. The speed-up cancels out: a replay K times faster trains K
times fewer samples on K times fewer node-hours.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.vocab.events import Event


@dataclass(frozen=True)
class NodeThroughput:
    """Samples a second per node, at one number of nodes (median over its consecutive steps)."""

    nodes: int
    per_node: float
    steps: int


@dataclass(frozen=True)
class ReplayGoodput:
    window_s: float  # the replay's seconds from the first capacity record to the window's end
    capacity_node_s: float  # the integral of min(alive, slots) over the window
    full_nodes: int
    full_per_node: float | None  # one node's samples a second at full size; None: never at full size
    useful_samples: int
    per_size: tuple[NodeThroughput, ...]
    wipeouts: int  # times every node was gone in the window
    wipeouts_resumed: int  # of those, the times the job trained again afterwards
    # Per wipeout resumed: the steps trained before it that were trained again after it (the
    # newest step before it, less the step the job resumed from).
    wipeout_steps_lost: tuple[int, ...] = ()
    # Node-seconds offered at each number of nodes (min(alive, slots)): the bound at each size's
    # own throughput (`size_bound`) counts a smaller world at the rate it trains at.
    offered_by_size: tuple[tuple[int, float], ...] = ()

    def spot_cost_per_million(self, spot_per_node_hour: float) -> float | None:
        """The capacity offered at `spot_per_node_hour`, per million useful samples (None: no
        useful sample)."""
        if not self.useful_samples:
            return None
        return spot_per_node_hour * self.capacity_node_s / 3600 / self.useful_samples * 1e6

    def on_demand_cost_per_million(self, on_demand_per_node_hour: float) -> float | None:
        """Every slot on demand for the window, trained at full size, per million samples (None:
        the job never trained at full size)."""
        if not self.full_per_node:
            return None
        return on_demand_per_node_hour / 3600 / self.full_per_node * 1e6

    @property
    def bound(self) -> float | None:
        """The samples the capacity offered could have trained."""
        return None if self.full_per_node is None else self.capacity_node_s * self.full_per_node

    @property
    def ratio(self) -> float | None:
        bound = self.bound
        return None if not bound else self.useful_samples / bound

    @property
    def size_bound(self) -> float | None:
        """The samples the capacity offered could have trained with each size at its own
        measured throughput per node (a size not measured: the nearest measured one's)."""
        rates = {t.nodes: t.per_node for t in self.per_size}
        if not rates:
            return None
        return sum(
            node_s * rates[min(rates, key=lambda size: (abs(size - nodes), -size))]
            for nodes, node_s in self.offered_by_size
        )

    @property
    def size_ratio(self) -> float | None:
        """Useful samples over `size_bound`: where a node trains faster in a smaller world, the
        stricter of the two ratios."""
        bound = self.size_bound
        return None if not bound else self.useful_samples / bound

    def summary(self) -> str:
        sizes = ", ".join(f"{t.nodes} node(s) {t.per_node:.3g}" for t in self.per_size)
        ratio = self.ratio
        head = (
            f"  replay goodput: {ratio:.1%} of the capacity bound ({self.useful_samples:,} useful samples of "
            f"{self.bound:,.0f}: {self.capacity_node_s:.1f} node-seconds offered in {self.window_s:.1f} s at "
            f"{self.full_per_node:.3g} samples/s a node at full size)"
            if ratio is not None and self.bound is not None and self.full_per_node is not None
            else f"  replay goodput: no bound (the job never trained at full size, {self.full_nodes} nodes); "
            f"{self.useful_samples:,} useful samples in {self.window_s:.1f} s"
        )
        lost = f", steps lost {', '.join(map(str, self.wipeout_steps_lost))}" if self.wipeout_steps_lost else ""
        strict = self.size_ratio
        at_size = f" ({strict:.1%} of the bound at each size's own rate)" if strict is not None else ""
        return (
            f"{head}\n    samples/s a node by size: {sizes or 'no steps'}{at_size}; "
            f"wipeouts: {self.wipeouts} ({self.wipeouts_resumed} resumed{lost})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s,
            "capacity_node_s": self.capacity_node_s,
            "full_nodes": self.full_nodes,
            "full_per_node": self.full_per_node,
            "useful_samples": self.useful_samples,
            "bound": self.bound,
            "ratio": self.ratio,
            "size_bound": self.size_bound,
            "size_ratio": self.size_ratio,
            "offered_by_size": [{"nodes": n, "node_s": node_s} for n, node_s in self.offered_by_size],
            "per_size": [{"nodes": t.nodes, "per_node": t.per_node, "steps": t.steps} for t in self.per_size],
            "wipeouts": self.wipeouts,
            "wipeouts_resumed": self.wipeouts_resumed,
            "wipeout_steps_lost": list(self.wipeout_steps_lost),
        }


def _steps(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One step event per trained step, in time order: rank 0's, or in the per-step mode the
    first group's report of each committed step."""
    out: list[Mapping[str, Any]] = []
    seen: set[tuple[Any, int]] = set()
    for e in events:
        if e.get("event") != Event.STEP or not e.get("participating", True) or "samples" not in e:
            continue
        key = (e.get("quorum"), int(e["step"])) if "quorum" in e else (e["t"], int(e["step"]))
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def _capacity(events: Sequence[Mapping[str, Any]]) -> list[tuple[float, int, int]]:
    """(t, alive, slots) at the window's start and each change; the window's end last."""
    return [(float(e["t"]), int(e["alive"]), int(e["slots"])) for e in events if e.get("event") == Event.CAPACITY]


def throughput(steps: Sequence[Mapping[str, Any]], nproc_per_node: int) -> list[NodeThroughput]:
    """Samples a second per node at each number of nodes (largest first), from consecutive
    steps at that size: the wall time between them holds everything a step costs."""
    rates: dict[int, list[float]] = {}
    for before, after in itertools.pairwise(steps):
        same = before["world_size"] == after["world_size"] and int(after["step"]) == int(before["step"]) + 1
        dt = float(after["t"]) - float(before["t"])
        if same and dt > 0:
            nodes = max(int(after["world_size"]) // nproc_per_node, 1)
            if "participants" in after:
                nodes = int(after["participants"])
            rates.setdefault(nodes, []).append(int(after["samples"]) / dt / nodes)
    return [NodeThroughput(n, statistics.median(r), len(r)) for n, r in sorted(rates.items(), reverse=True)]


def replay_goodput(events: Sequence[Mapping[str, Any]], nproc_per_node: int = 1) -> ReplayGoodput | None:
    """The replay's goodput from a drill's events (None: no capacity was replayed)."""
    capacity = _capacity(events)
    if len(capacity) < 2:
        return None
    start, end = capacity[0][0], capacity[-1][0]
    by_size: dict[int, float] = {}
    for (t, alive, slots), (t_next, _, _) in itertools.pairwise(capacity):
        if min(alive, slots) > 0:
            by_size[min(alive, slots)] = by_size.get(min(alive, slots), 0.0) + min(alive, slots) * (t_next - t)
    offered = sum(by_size.values())
    slots = capacity[0][2]
    steps = _steps(events)
    final: dict[int, Mapping[str, Any]] = {}
    for e in steps:  # a step trained again replaces the one lost
        final[int(e["step"])] = e
    useful = sum(int(e["samples"]) for e in final.values() if start <= float(e["t"]) <= end)
    sizes = throughput(steps, nproc_per_node)
    full = next((t.per_node for t in sizes if t.nodes == slots), None)
    zero = [t for (_, before, _), (t, alive, _) in itertools.pairwise(capacity) if alive == 0 and before > 0]
    lost = [n for t0 in zero if (n := _steps_lost(steps, t0)) is not None]
    return ReplayGoodput(
        end - start,
        offered,
        slots,
        full,
        useful,
        tuple(sizes),
        len(zero),
        len(lost),
        tuple(lost),
        tuple(sorted(by_size.items(), reverse=True)),
    )


def _steps_lost(steps: Sequence[Mapping[str, Any]], wiped_at: float) -> int | None:
    """The steps a wipeout at `wiped_at` cost: the newest step trained before it less the one
    the job resumed from (the first step after it, less one); None: the job never trained
    again."""
    before = [int(e["step"]) for e in steps if float(e["t"]) <= wiped_at]
    after = next((int(e["step"]) for e in steps if float(e["t"]) > wiped_at), None)
    if after is None:
        return None
    return max(0, (before[-1] if before else 0) - (after - 1))

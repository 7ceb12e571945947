"""What the job's batch policy cost while nodes were missing, from its step events.

Under `fixed-global` a step covers the job's global batch at every world size: a smaller world
runs more micro-batches per rank, and its steps take longer (about 3/2 as long at world 2 of
3). Under `per-worker` the step's samples shrink with the world instead. The drill shows both
figures per world size: samples a step, micro-batches a rank ran, and the median step time
against the full size's.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lab.vocab.events import Event


@dataclass(frozen=True)
class AtWorld:
    """The steps trained at one world size."""

    world_size: int
    steps: int
    samples: int  # a full step's (the most any step at this size covered)
    micro_batches: int | None  # each rank's, where the trainer says
    step_s: float  # median


def by_world(events: Iterable[Mapping[str, Any]]) -> list[AtWorld]:
    """Per world size (largest first), what its steps covered and took; rank 0's (or a
    replica group's) step events with their samples and seconds."""
    steps: dict[int, list[Mapping[str, Any]]] = {}
    for e in events:
        if e.get("event") == Event.STEP and "samples" in e and "seconds" in e and e.get("participating", True):
            steps.setdefault(int(e["world_size"]), []).append(e)
    out = []
    for world, seen in sorted(steps.items(), reverse=True):
        micro = [int(e["micro_batches"]) for e in seen if "micro_batches" in e]
        out.append(
            AtWorld(
                world,
                len({e["step"] for e in seen}),
                max(int(e["samples"]) for e in seen),
                max(micro) if micro else None,
                statistics.median(float(e["seconds"]) for e in seen),
            )
        )
    return out


def summary(worlds: list[AtWorld]) -> str | None:
    """One line: how steps at each smaller world compared with the full size's (None: the run
    trained at one size only)."""
    if len(worlds) < 2:
        return None
    full, *smaller = worlds
    parts = []
    for w in smaller:
        micro = f", {w.micro_batches} micro-batch(es) a rank" if w.micro_batches is not None else ""
        parts.append(
            f"world {w.world_size}: {w.samples} samples a step{micro}, {w.step_s / full.step_s:.2f}x the full "
            f"size's step time ({w.steps} steps)"
        )
    full_micro = f", {full.micro_batches} micro-batch(es) a rank" if full.micro_batches is not None else ""
    return (
        f"  batch: world {full.world_size}: {full.samples} samples a step{full_micro}, {full.step_s:.3g} s a step; "
        + "; ".join(parts)
    )

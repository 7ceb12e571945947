"""What share of a spot job's time trains, per fault-tolerance mode, at an eviction rate: a
model fed with measured figures, for `elastic-lab plan --band` and benchmarks/bands.py.

At the published monthly bands a job of a few nodes loses one every few days to months, so no
run of minutes sees an eviction at those rates. The model counts, per eviction of one of the
job's N nodes (Daly's checkpoint interval T for a save that costs training C, and the job's
mean time between evictions M from lab.vocab.checkpoint_interval):

- elastic: the survivors' recovery R, the work redone since the last checkpoint (T/2 on a hard
  kill, nothing on a notice), N-1 nodes training until the replacement arrives after D, and
  the survivors' stall J when it joins;
- per-step: the survivors' stall, nothing redone, N-1 nodes until the replacement, its join
  stall; every step pays the mode's overhead;
- restart-everything: all N stopped until capacity is back (D), a restart S, the work redone;

and every mode pays C/(T+C) for its checkpoints.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from lab.vocab.checkpoint_interval import daly_interval_s
from lab.vocab.models import GPT_SIZES, MODELS, TINY

MODES = ("elastic", "per-step", "restart-everything")

# How long a replacement GPU spot node takes to arrive and join (provisioning, the driver, the
# image): minutes. A guess, not a measurement: the clouds publish none.
REPLACEMENT_S = 300.0


@dataclass(frozen=True)
class MeasuredCosts:
    """What each mode loses per eviction and per step (seconds, or a share of a step), as
    measured on the local target (benchmarks/README.md names each command)."""

    elastic_recovery_s: float = 1.30  # benchmarks/recovery.py, etcd-v2, hard kill, median
    elastic_notice_recovery_s: float = 0.86  # benchmarks/recovery.py, etcd-v2, notice, median
    elastic_join_stall_s: float = (
        0.44  # benchmarks/fault_tolerance.py, survivors' stall at a join, median of the 3 evictions' medians
    )
    per_step_stall_s: float = 0.30  # the per-step hard-kill drill of gpt-small, median of 3 (benchmarks/real_size.py)
    per_step_join_stall_s: float = 0.17  # the same drills' survivors' stall at the join, median of 3
    per_step_overhead: float = 0.032  # per-step step interval over elastic's at 3 groups (benchmarks/step_tax.py)
    restart_s: float = 10.0  # restart-everything: the job's start and checkpoint load (a guess, not measured)
    # A node's start on the local target, forked: wall time, median of 5 (benchmarks/node_start.py).
    node_start_s: float = 0.43
    # Elastic and per-step after a wipeout: from the first node back to the job's first step (the replay drill of
    # the aws-4node-wipeouts window at a speed-up of 300, no notice, tiny model: the median of its 4 resumes).
    resume_s: float = 1.09
    save_cost_s: float = 1.376  # a real-size save's whole cost to training on one H200 (benchmarks/accelerator.py)
    # A notice that says when the node goes is trained through: the node leaves this long before
    # its end (two steps, two saves and the agent's leave; lab.runtime.spot_notice). The replay
    # drill of the aws-4node-wipeouts window, AWS's notice, tiny model, elastic: the median of its
    # workers' notice exits, 0.68 s at a speed-up of 20 and 0.67 s at 60 (benchmarks/replay.py).
    notice_lead_s: float = 0.67
    # The longest a noticed worker trains on: unbounded on the local target, whose notice file
    # says when the node goes; on a cluster its pod's grace period, at whose end the kubelet kills
    # it (the worker reads that end from its pod, lab.runtime.pod_deadline). A notice longer than
    # this is left `notice - trained_through_s + notice_lead_s` before its end.
    trained_through_s: float = math.inf
    # Whether a loss without notice that leaves survivors makes them redo the work since the last
    # save: sharded checkpoints, which no rank can save alone (a whole one, the tiny model's, any
    # survivor saves at once, and nothing is redone). Elastic only: per-step survivors train on.
    loss_redoes: bool = False
    # The share of notices whose emergency save did not commit before the node went (its ranks
    # save together at a step boundary: a notice shorter than a step and a save is often too
    # short). Such a loss redoes the work since the last save, as one without a notice does where
    # that redoes work (a wipeout; any loss with `loss_redoes`). None seen by default; a replay's
    # own report gives its share (lab.vocab.trace_goodput.report_costs).
    notice_misses: float = 0.0


# The costs above are the tiny model's. A bigger model's state takes longer to stop, load and
# reshard at each change: gpt-small's (FSDP2, sharded checkpoints, 3 nodes) are the medians of
# the runs' own figures (lab.vocab.trace_goodput.report_costs) over the 8 replays of the
# aws-4node-wipeouts window at a speed-up of 20 (every notice rule, both modes; the hard-kill
# recovery from its 12 losses without notice), `benchmarks/replay.py --model gpt-small`. Fed
# with them, the model came within 0.1-0.4 points of the 6 replays of the partly available
# window it was not fitted on (benchmarks/HISTORY.md).
MODEL_COSTS = {
    TINY: MeasuredCosts(),
    GPT_SIZES[0]: replace(
        MeasuredCosts(),
        elastic_recovery_s=1.33,
        elastic_notice_recovery_s=1.12,
        elastic_join_stall_s=1.10,
        per_step_stall_s=0.398,
        per_step_join_stall_s=0.605,
    ),
}


def costs_for(model: str) -> MeasuredCosts:
    """The measured costs of the demo's `model` size; a size not measured here takes those of
    the largest measured size below it, which its own costs exceed (a bound, not a figure)."""
    if model not in MODELS:
        raise ValueError(f"model={model!r}: expected one of {', '.join(MODELS)}")
    measured = [m for m in MODELS[: MODELS.index(model) + 1] if m in MODEL_COSTS]
    return MODEL_COSTS[measured[-1]]


def goodput(
    mode: str,
    nodes: int,
    mtbf_s: float,
    costs: MeasuredCosts | None = None,
    replacement_s: float = REPLACEMENT_S,
    notice_share: float = 0.0,
    interval_s: float | None = None,
) -> float:
    """The share of the time N nodes would train with no eviction and no overhead that `mode`
    trains, when the job loses a node every `mtbf_s` seconds on average and `notice_share` of
    the evictions come with a notice the job receives (`costs`: the measured figures by default),
    saving every `interval_s` seconds of work (Daly's interval for the rate by default)."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {', '.join(MODES)}")
    costs = costs or MeasuredCosts()
    interval = daly_interval_s(costs.save_cost_s, mtbf_s) if interval_s is None else interval_s
    if not interval > 0:
        raise ValueError(f"interval_s={interval_s!r}: expected seconds > 0")
    checkpoints = costs.save_cost_s / (interval + costs.save_cost_s)
    redo = (1 - notice_share) * interval / 2
    if mode == "elastic":
        recovery = notice_share * costs.elastic_notice_recovery_s + (1 - notice_share) * costs.elastic_recovery_s
        lost = recovery + redo + costs.elastic_join_stall_s + replacement_s / nodes
        return max(0.0, 1 - checkpoints - lost / mtbf_s)
    if mode == "per-step":
        lost = costs.per_step_stall_s + costs.per_step_join_stall_s + replacement_s / nodes
        return max(0.0, (1 - checkpoints - lost / mtbf_s) / (1 + costs.per_step_overhead))
    lost = replacement_s + costs.restart_s + redo  # restart-everything: every node waits
    return max(0.0, 1 - checkpoints - lost / mtbf_s)


def eviction_times(mean_s: float, seed: int, horizon_s: float) -> list[float]:
    """When a job's nodes are evicted, in seconds from its start up to `horizon_s`: a Poisson
    process (the model's own assumption) with `mean_s` between evictions on average, drawn from
    `seed`, so that every mode of a comparison meets the same schedule."""
    if not mean_s > 0:
        raise ValueError(f"mean_s={mean_s!r} is invalid: expected seconds > 0")
    if not horizon_s >= 0:
        raise ValueError(f"horizon_s={horizon_s!r} is invalid: expected seconds >= 0")
    draw, t = random.Random(seed), 0.0
    times: list[float] = []
    while True:
        t += draw.expovariate(1.0 / mean_s)
        if t > horizon_s:
            return times
        times.append(t)

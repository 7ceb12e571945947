"""The checkpoint interval from evidence: Young's and Daly's interval from a save's cost and the
job's mean time between failures, where the failures are spot evictions at a published rate.

Eviction-rate bands: AWS's Spot Instance Advisor gives each instance type's "frequency of
interruption", the share of its capacity reclaimed in the trailing month, in the bands <5 %,
5-10 %, 10-15 %, 15-20 % and >20 %; Azure's portal shows Spot eviction rates in bands of the
same shape. Each band is read here as the share of a job's nodes evicted in a month (30 days),
at the band's middle (>20 %: 25 %), and a job of N nodes loses one N times as often as a node.

Young (1974): T = sqrt(2 C M). Daly (2006), for C < 2M: T = sqrt(2 C M) (1 + sqrt(C / 2M) / 3 +
(C / 2M) / 9) - C, else T = M; where C is what a save costs training and M the mean time
between failures. The expected share of time lost to checkpoints and the work redone after a
failure is about C / T + (T / 2 + R) / M, R being the time to recover.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MONTH_S = 30 * 24 * 3600.0
# (name, the share of nodes evicted in a month taken for it)
EVICTION_BANDS = (("<5%", 0.025), ("5-10%", 0.075), ("10-15%", 0.125), ("15-20%", 0.175), (">20%", 0.25))
BAND_NAMES = tuple(name for name, _ in EVICTION_BANDS)


def node_mtbf_s(monthly_share: float) -> float:
    """A node's mean time to eviction when `monthly_share` of nodes are evicted in a month
    (evictions as a Poisson process: P(evicted within a month) = 1 - exp(-month / MTBF))."""
    if not 0 < monthly_share < 1:
        raise ValueError(f"monthly_share={monthly_share!r} is invalid: expected a share between 0 and 1")
    return MONTH_S / -math.log1p(-monthly_share)


def job_mtbf_s(monthly_share: float, nodes: int) -> float:
    """The mean time between evictions of any of a job's `nodes` nodes."""
    if nodes < 1:
        raise ValueError(f"nodes={nodes!r} is invalid: expected at least 1")
    return node_mtbf_s(monthly_share) / nodes


def band_share(band: str) -> float:
    """The monthly share of nodes evicted taken for `band` (one of EVICTION_BANDS' names)."""
    for name, share in EVICTION_BANDS:
        if name == band:
            return share
    raise ValueError(f"band={band!r} is invalid: expected one of {', '.join(BAND_NAMES)}")


# Evictions a job must have seen before their rate replaces its band's: one is no rate.
OBSERVED_AFTER = 2
# A derived interval's first save, this many steps after a start: it times a step and a save.
FIRST_SAVE_AFTER = 10


def estimated_mtbf_s(band_mtbf_s: float, trained_s: float, evictions: int) -> tuple[float, str]:
    """The job's mean time between evictions, and where it comes from: its band's until it has
    seen OBSERVED_AFTER evictions ("band"), then the rate it has seen: its seconds of training
    over its evictions ("observed"). A job whose nodes go every few minutes in a band that says
    months then saves every few minutes, and one that sees its band's rate keeps its interval."""
    if evictions >= OBSERVED_AFTER and trained_s > 0:
        return trained_s / evictions, "observed"
    return band_mtbf_s, "band"


def young_interval_s(cost_s: float, mtbf_s: float) -> float:
    return math.sqrt(2 * cost_s * mtbf_s)


def daly_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order interval (seconds of work between saves)."""
    if cost_s <= 0:
        raise ValueError(f"cost_s={cost_s!r} is invalid: expected the seconds a save costs, > 0")
    if cost_s >= 2 * mtbf_s:
        return mtbf_s
    ratio = cost_s / (2 * mtbf_s)
    return math.sqrt(2 * cost_s * mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - cost_s


def interval_steps(cost_s: float, step_s: float, mtbf_s: float) -> int:
    """Daly's interval in whole steps (at least 1) of `step_s` seconds."""
    if not step_s > 0:
        raise ValueError(f"step_s={step_s!r} is invalid: expected the seconds a step takes, > 0")
    return max(1, round(daly_interval_s(cost_s, mtbf_s) / step_s))


def lost_share(cost_s: float, interval_s: float, mtbf_s: float, recovery_s: float = 0.0) -> float:
    """About how much of the time goes to saves and to redoing work after evictions."""
    return cost_s / interval_s + (interval_s / 2 + recovery_s) / mtbf_s


@dataclass(frozen=True)
class BandInterval:
    band: str
    mtbf_s: float  # the job's
    interval_s: float  # Daly's
    interval_steps: int | None  # at the measured step time
    lost_share: float  # at that interval


def intervals(cost_s: float, nodes: int, step_s: float | None = None, recovery_s: float = 0.0) -> list[BandInterval]:
    """Daly's interval at each eviction band, for a job of `nodes` whose save costs `cost_s`."""
    rows = []
    for band, share in EVICTION_BANDS:
        mtbf = job_mtbf_s(share, nodes)
        interval = daly_interval_s(cost_s, mtbf)
        steps = max(1, round(interval / step_s)) if step_s and step_s > 0 else None
        rows.append(BandInterval(band, mtbf, interval, steps, lost_share(cost_s, interval, mtbf, recovery_s)))
    return rows


def duration(seconds: float) -> str:
    """Seconds for people: 45 s, 12 min, 3.5 h, 2.1 d."""
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def interval_line(nodes: int, every_steps: int, cost_s: float = 1.0) -> str:
    """What a submitted job is told about its checkpoint interval: its own, in steps, and
    Daly's at each eviction band for `nodes` and a save costing `cost_s` (unknown until the
    job is drilled: the drill measures the save's cost and the step's time)."""
    bands = ", ".join(f"{row.band} {duration(row.interval_s)}" for row in intervals(cost_s, nodes))
    own = (
        "derived while the job runs from its measured saves and evictions (--checkpoint-every 0)"
        if every_steps == 0
        else f"every {every_steps} steps (--checkpoint-every)"
    )
    return (
        f"checkpoints: {own}; Daly's interval for {nodes} node(s) and a save "
        f"costing {cost_s:g} s, at each monthly eviction band: {bands} (`elastic-lab drill` measures your job's save "
        "and step and gives it in steps; `elastic-lab plan --save-cost` for another cost)"
    )

"""Timeline PNG of a drill: step and world size over time, evictions and joins marked; for a
replayed trace window, the capacity it offered as a band behind the world size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.drill.convergence import Curve
from lab.drill.parity import differences
from lab.drill.report import DrillReport
from lab.vocab.events import CAUSE_RECLAIM, CAUSE_SCALE_IN


def plot_timeline(report: DrillReport, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    panels = 3 if report.loss_curve else 2 if report.capacity_timeline else 1
    fig, axes = plt.subplots(panels, 1, sharex=True, figsize=(9, 2.2 * panels + 1), squeeze=False)
    axes = axes[:, 0]
    if report.loss_curve:
        _steps_and_loss(report, axes[0], axes[2])
    world_ax = axes[0] if panels == 1 else axes[1]
    if report.capacity_timeline:
        _capacity(report, world_ax)
    if report.world_timeline:
        _world(report, world_ax)
    for ax in axes:
        _mark_changes(report, ax)
    if report.evictions or report.joins or report.outages:
        axes[0].legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel("seconds since the drill started")
    fig.suptitle(_timeline_title(report))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _steps_and_loss(report: DrillReport, steps_ax: Any, loss_ax: Any) -> None:
    t = [p[0] for p in report.loss_curve]
    steps_ax.plot(t, [p[1] for p in report.loss_curve], ".", markersize=2, color="tab:blue")
    steps_ax.set_ylabel("step")
    if report.target_steps:
        steps_ax.axhline(report.target_steps, color="grey", linestyle=":", linewidth=1)
    # break the line where training stood still (restarts), rather than bridge the gap
    lt, lv = [], []
    for i, p in enumerate(report.loss_curve):
        if i and p[0] - report.loss_curve[i - 1][0] > 1.0:
            lt.append(p[0])
            lv.append(float("nan"))
        lt.append(p[0])
        lv.append(p[2])
    loss_ax.plot(lt, lv, linewidth=0.8, color="tab:purple")
    loss_ax.set_ylabel("loss")


def _world(report: DrillReport, ax: Any) -> None:
    ax.step(
        [p[0] for p in report.world_timeline],
        [p[1] for p in report.world_timeline],
        where="post",
        color="tab:green",
    )
    ax.set_ylabel("world size")
    top = max(p[1] for p in [*report.world_timeline, *report.capacity_timeline])
    ax.set_ylim(0, top + 1)


def _capacity(report: DrillReport, ax: Any) -> None:
    """The nodes the replayed trace offered, a band held from each change to the next."""
    t = [p[0] for p in report.capacity_timeline]
    alive = [p[1] for p in report.capacity_timeline]
    ax.fill_between(t, alive, step="post", color="tab:cyan", alpha=0.25, label="capacity offered (nodes)")
    ax.set_ylabel("world size")
    ax.set_ylim(0, max(alive) + 1)
    ax.legend(loc="lower left", fontsize=8)


def _mark_changes(report: DrillReport, ax: Any) -> None:
    """Evictions (scale-ins and reclaims apart), rendezvous outages and joins, each with how long
    it took."""
    labelled: set[str] = set()
    apart = {CAUSE_SCALE_IN: ("scale-in", "tab:purple"), CAUSE_RECLAIM: ("taken back by its owners", "tab:brown")}
    for ev in report.evictions:
        # A node that left for another cause than a spot reclaim: marked apart.
        what, color = apart.get(ev.cause or "", (f"eviction ({ev.kind})", "tab:red"))
        ax.axvline(ev.t - report.t0, color=color, linewidth=1.2, label=what if what not in labelled else None)
        labelled.add(what)
        if ev.recovery_s is not None:
            ax.axvspan(ev.t - report.t0, ev.t - report.t0 + ev.recovery_s, color=color, alpha=0.12)
    for i, o in enumerate(report.outages):
        if o.down_s is not None:
            ax.axvspan(
                o.t - report.t0,
                o.t - report.t0 + o.down_s,
                color="tab:orange",
                alpha=0.18,
                label="rendezvous server down" if i == 0 else None,
            )
    for i, j in enumerate(report.joins):
        added = "node added" + (f" (rank {j.rank}, {j.capacity})" if j.rank is not None else "")
        ax.axvline(j.t - report.t0, color="tab:green", linestyle="--", linewidth=1, label=added if i == 0 else None)
        if j.join_s is not None:
            ax.axvspan(j.t - report.t0, j.t - report.t0 + j.join_s, color="tab:green", alpha=0.10)


def _timeline_title(report: DrillReport) -> str:
    verdict = "passed" if report.passed else "FAILED"
    if report.capacity_timeline:
        return f"trace replay: {verdict} | " + _replay_title(report)
    kind = "scaling drill" if report.scaling else "eviction drill"
    title = f"{kind}: {verdict}"
    recov = [f"{e.recovery_s:.1f}s" for e in report.evictions if e.recovery_s is not None]
    if recov:
        title += f" | recovery {', '.join(recov)}"
    lost = [str(e.lost_steps) for e in report.evictions if e.lost_steps is not None]
    if lost:
        title += f" | steps lost {', '.join(lost)}"
    return title


def _replay_title(report: DrillReport) -> str:
    """A replay's dozens of evictions in a few figures: its share of the bound, its wipeouts
    and the steps they cost."""
    replay = report.replay
    if replay is None or replay.ratio is None:
        return f"{len(report.evictions)} evictions, no capacity bound"
    lost = f", steps lost {sum(replay.wipeout_steps_lost)}" if replay.wipeout_steps_lost else ""
    return (
        f"{replay.ratio:.1%} of the capacity bound | {len(report.evictions)} evictions, "
        f"{replay.wipeouts_resumed}/{replay.wipeouts} wipeouts resumed{lost}"
    )


def plot_convergence(report: DrillReport, path: str | Path) -> Path:
    """The drilled run's loss and the uninterrupted runs', by samples trained, with the
    window they are compared over (lab.drill.convergence)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conv = report.convergence
    if conv is None:
        raise ValueError("the report has no comparison with uninterrupted runs (drill with --baselines N)")
    path = Path(path)
    twin = conv["curves"].get("twin")
    if twin is None:
        fig, ax = plt.subplots(figsize=(9, 4.5))
    else:
        fig, (ax, diff_ax) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, height_ratios=(3, 2))
        _plot_differences(diff_ax, conv)
    for i, (samples, loss) in enumerate(conv["curves"]["baselines"]):
        ax.plot(samples, _smooth(loss), color="tab:grey", linewidth=0.9, label="uninterrupted runs" if i == 0 else None)
    samples, loss = conv["curves"]["drilled"]
    ax.plot(samples, _smooth(loss), color="tab:red", linewidth=1.3, label="drilled run (evictions)")
    lo, hi = conv["window_samples"]
    ax.axvspan(lo, hi, color="tab:blue", alpha=0.08, label="window compared")
    ax.hlines(conv["baseline_mean"], lo, hi, colors="tab:grey", linestyles="--", linewidth=1)
    ax.hlines(conv["drilled"]["mean"], lo, hi, colors="tab:red", linestyles="--", linewidth=1)
    for e in report.evictions:
        before = [s for s, t in zip(samples, _step_times(report, len(samples)), strict=False) if t <= e.t]
        if before:
            ax.axvline(before[-1], color="tab:red", linewidth=0.8, linestyle=":")
    ax.set_xlabel("samples trained")
    ax.set_ylabel("loss (moving average of 9 steps)")
    verdict = "within" if conv["passed"] else "OUTSIDE"
    ax.set_title(
        f"loss through evictions vs uninterrupted: difference {conv['difference']:+.4f}, "
        f"{verdict} tolerance {conv['tolerance']:.4f}"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_differences(ax: Any, conv: dict[str, Any]) -> None:
    """Each run's loss minus its twin's (the same job uninterrupted, the same sample order), step
    by step: the drilled run's and, for scale, those of the runs in other orders."""
    twin = Curve(*map(tuple, conv["curves"]["twin"]))
    for i, (samples, loss) in enumerate(conv["curves"]["baselines"]):
        diffs = differences(Curve(tuple(samples), tuple(loss)), twin)
        ax.plot(
            [s for s, _ in diffs],
            [d for _, d in diffs],
            color="tab:grey",
            linewidth=0.7,
            label="another sample order, uninterrupted" if i == 0 else None,
        )
    drilled = differences(Curve(*map(tuple, conv["curves"]["drilled"])), twin)
    ax.plot([s for s, _ in drilled], [d for _, d in drilled], color="tab:red", linewidth=1.2, label="drilled run")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xlabel("samples trained")
    ax.set_ylabel("loss - same order uninterrupted")
    parity = conv.get("parity")
    if parity:
        ax.set_title(
            f"largest per-step difference {abs(parity['largest_difference']['loss']):.3g}: "
            f"{parity['largest_fraction']:.1%} of another order's {parity['spread_between_orders']:.3g}",
            fontsize=9,
        )
    ax.legend(fontsize=8)


def _smooth(values: list[float], width: int = 9) -> list[float]:
    """A centred moving average (shorter at the ends)."""
    half = width // 2
    out = []
    for i in range(len(values)):
        window = values[max(0, i - half) : i + half + 1]
        out.append(sum(window) / len(window))
    return out


def _step_times(report: DrillReport, count: int) -> list[float]:
    """The wall time of the drilled run's steps in step order (the last record of each)."""
    by_step: dict[int, float] = {}
    for t, step, _loss, _world in report.loss_curve:
        by_step[step] = t + report.t0
    return [by_step[s] for s in sorted(by_step)][:count]

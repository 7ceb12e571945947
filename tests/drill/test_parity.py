"""lab.drill.parity: a drilled run against its twin (the same job uninterrupted, the same
sample order), with the spread runs in other sample orders make."""

from __future__ import annotations

import math
import random

import pytest

from lab.drill.convergence import Curve
from lab.drill.parity import FRACTION, differences, loss_at, parity


def _run(steps: int = 200, batch: int = 96, order: int = 0, offset: float = 0.0, after: int = 10**9) -> Curve:
    """A falling loss with the noise of a sample order; `offset` added from step `after` on."""
    noise = random.Random(order)
    loss = [
        2.0 * math.exp(-s / 80) + 0.5 + 0.05 * noise.gauss(0, 1) + (offset if s >= after else 0.0) for s in range(steps)
    ]
    return Curve(tuple(batch * (s + 1) for s in range(steps)), tuple(loss))


def test_a_run_that_trains_what_its_twin_trains_holds_parity():
    twin = _run()
    drilled = Curve(twin.samples, tuple(v + 1e-6 for v in twin.loss))  # a sum's order, nothing more
    result = parity(drilled, twin, [_run(order=1), _run(order=2)])
    assert result.holds, result.summary()
    assert result.largest_fraction < FRACTION and result.steps_compared == 200
    assert result.to_dict()["holds"] is True


def test_a_run_that_drifted_from_its_twin_does_not_hold_parity():
    twin = _run()
    drifted = _run(offset=0.03, after=60)  # e.g. smaller batches while a node was missing
    result = parity(drifted, twin, [_run(order=1)])
    assert not result.holds and "does NOT hold" in result.summary()
    assert result.largest[0] >= 96 * 61


def test_a_final_window_off_by_more_than_half_a_percent_does_not_hold():
    twin = _run()
    late = _run(offset=0.01, after=170)  # small per step, but the last fifth's mean is off
    result = parity(late, twin, [_run(order=1)])
    assert abs(result.final_relative) > 0.005 and not result.holds


def test_losses_are_compared_at_the_same_samples_between_steps_of_other_sizes():
    twin = Curve((100, 200, 300), (3.0, 2.0, 1.0))
    assert loss_at(twin, 250) == pytest.approx(1.5) and math.isnan(loss_at(twin, 50))
    smaller_steps = Curve((50, 100, 150, 200), (9.0, 3.0, 2.5, 2.0))
    assert differences(smaller_steps, twin) == [(100, 0.0), (150, 0.0), (200, 0.0)]


def test_no_other_order_no_yardstick():
    with pytest.raises(ValueError, match="others=\\[\\] is invalid"):
        parity(_run(), _run(), [])


def test_a_bit_identical_run_says_so():
    twin = _run()
    assert "bit-identical at every one of 200 steps" in parity(twin, twin, [_run(order=1)]).summary()


@pytest.mark.processes
@pytest.mark.timeout(300)
@pytest.mark.parametrize("policy", ["fixed-global", "per-worker"])
def test_a_drilled_job_trains_its_twins_model_only_with_a_fixed_global_batch(workdir, policy):
    """A small real drill (3 nodes, a hard kill, a node back) with one uninterrupted run in
    another order: under fixed-global the drilled run is its twin's, step by step; under
    per-worker the smaller batches while a node was missing take it elsewhere."""
    from lab.drill.run import DrillConfig, run_drill
    from lab.vocab.job import JobSpec
    from tests.patience import within

    spec = JobSpec(
        name="parity",
        min_nodes=2,
        max_nodes=3,
        batch_policy=policy,
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=40,
        script_args=("--steps", "160", "--step-time", "0.02"),
    )
    cfg = DrillConfig(
        spec=spec, workdir=workdir, nodes=3, target_steps=160, evict_at_step=40, timeout_s=within(120), baselines=1
    )
    report = run_drill(cfg)
    assert report.passed, report.summary()
    result = report.convergence["parity"]
    if policy == "fixed-global":
        assert result["holds"] and abs(result["largest_difference"]["loss"]) < 1e-4, result["summary"]
    else:
        assert not result["holds"] and result["largest_fraction"] > 0.1, result["summary"]

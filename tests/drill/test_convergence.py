"""lab.drill.convergence on recorded step streams: curves by samples trained, and the verdict."""

import math
import random

import pytest

from lab.drill.convergence import Curve, Level, compare


def _steps(losses, samples_per_step, t0=0.0, **extra):
    return [
        {"t": t0 + i, "event": "step", "step": i + 1, "loss": loss, "samples": samples_per_step, **extra}
        for i, loss in enumerate(losses)
    ]


def _decaying(n, noise, seed, floor=1.2, offset=0.0):
    """A loss that decays towards `floor` by samples trained, with step noise."""
    rng = random.Random(seed)
    return [floor + offset + 3.0 * math.exp(-i / 40) + rng.gauss(0, noise) for i in range(n)]


def test_a_curve_is_by_samples_and_keeps_the_run_that_went_on():
    events = _steps([5.0, 4.0, 3.0], 24)
    # a restart at step 2 re-did steps 2 and 3 at a smaller world size (16 samples each)
    events += [
        {"t": 10.0 + i, "event": "step", "step": s, "loss": loss, "samples": 16}
        for i, (s, loss) in enumerate([(2, 3.9), (3, 2.9), (4, 2.5)])
    ]
    events.append({"t": 20.0, "event": "checkpoint_saved", "step": 4})
    curve = Curve.of(events)
    assert curve.samples == (24, 40, 56, 72) and curve.loss == (5.0, 3.9, 2.9, 2.5)


def test_a_step_trained_without_its_event_is_counted_from_the_checkpoint_loaded_after_it():
    """Step 42 was trained (its boundary's all-reduce failed, the step kept by a failure save)
    and the job resumed from it at 2 nodes; step 43 ended the epoch: the epoch's end alone
    cannot say how far step 42 went, the checkpoint loaded at it does."""

    def step(t, n, samples, epoch, position):
        return {
            "t": t,
            "event": "step",
            "step": n,
            "loss": 1.0,
            "samples": samples,
            "epoch": epoch,
            "position": position,
        }

    events = [step(1.0, 40, 192, 0, 7680), step(2.0, 41, 192, 0, 7872)]
    events.append({"t": 3.0, "event": "checkpoint_loaded", "step": 42, "epoch": 0, "position": 8064})
    events += [step(4.0, 43, 128, 1, 0), step(5.0, 44, 192, 1, 192)]
    assert Curve.of(events).samples == (7680, 7872, 7872 + 192 + 128, 7872 + 192 + 128 + 192)
    # Without the checkpoint's position, each missing step counts as the next one's samples.
    assert Curve.of([e for e in events if e["event"] == "step"]).samples[2] == 7872 + 2 * 128


def test_every_group_reporting_a_step_counts_it_once():
    a = _steps([5.0, 4.0], 24, replica="node-0")
    b = _steps([5.0, 4.0], 24, t0=0.01, replica="node-1")
    assert Curve.of(a + b).samples == (24, 48)


def test_runs_that_differ_only_by_noise_pass():
    baselines = [Curve.of(_steps(_decaying(300, 0.05, seed), 24)) for seed in (1, 2)]
    drilled = Curve.of(_steps(_decaying(300, 0.05, 3), 24))
    result = compare(drilled, baselines)
    assert result.passed, result.summary()
    assert result.window == (pytest.approx(7200 * 0.8), 7200.0)
    assert result.drilled.points == 60 and all(b.points == 60 for b in result.baselines)


def test_a_run_that_ends_higher_than_the_spread_fails():
    baselines = [Curve.of(_steps(_decaying(300, 0.05, seed), 24)) for seed in (1, 2)]
    drilled = Curve.of(_steps(_decaying(300, 0.05, 3, offset=0.2), 24))
    result = compare(drilled, baselines)
    assert not result.passed and result.difference == pytest.approx(0.2, abs=0.05)
    assert "OUTSIDE the tolerance" in result.summary()


def test_the_tolerance_grows_with_the_spread_between_uninterrupted_runs():
    close = [Curve.of(_steps(_decaying(300, 0.05, s), 24)) for s in (1, 2)]
    apart = [Curve.of(_steps(_decaying(300, 0.05, s, offset=o), 24)) for s, o in ((1, 0.0), (2, 0.15))]
    drilled = Curve.of(_steps(_decaying(300, 0.05, 3), 24))
    assert compare(drilled, apart).tolerance > 2 * compare(drilled, close).tolerance


def test_a_run_at_a_smaller_world_size_is_compared_at_the_same_samples():
    """Fewer samples per step for a while: the window is over samples, not steps."""
    baseline = Curve.of(_steps(_decaying(300, 0.0, 1), 24))
    slow = _decaying(300, 0.0, 1)
    drilled = Curve.of(_steps(slow[:100], 24) + _steps(slow[100:], 16, t0=100)[:150])
    result = compare(drilled, [baseline])
    assert result.window[1] == drilled.samples[-1] < baseline.samples[-1]


def test_without_a_baseline_there_is_nothing_to_compare():
    with pytest.raises(ValueError, match="baselines=\\[\\] is invalid"):
        compare(Curve.of(_steps([1.0, 0.9], 8)), [])


def test_a_window_with_too_few_steps_has_no_error_bar():
    level = Level.of([(10, 1.0), (20, 0.9)])
    assert level.points == 2 and math.isinf(level.stderr)


def test_a_step_trained_without_its_event_still_counts_its_samples():
    """Step 3's process left at its boundary (a lost peer's save kept it, its event never came):
    step 4 is at the same samples as in a run that reported every step."""
    full = [
        {"t": float(i), "event": "step", "step": i, "loss": 1.0, "samples": 24, "epoch": 0, "position": 24 * i}
        for i in range(1, 6)
    ]
    gap = [e for e in full if e["step"] != 3]
    assert Curve.of(gap).samples == (24, 48, 96, 120) == tuple(s for s in Curve.of(full).samples if s != 72)
    no_positions = [{k: v for k, v in e.items() if k not in ("epoch", "position")} for e in gap]
    assert Curve.of(no_positions).samples == (24, 48, 96, 120)

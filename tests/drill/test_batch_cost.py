"""lab.drill.batch_cost: what a batch policy cost at each world size, from step events."""

from __future__ import annotations

from lab.drill.batch_cost import by_world, summary


def _step(step: int, world: int, samples: int, seconds: float, micro: int | None = None, **extra) -> dict:
    e = {"event": "step", "step": step, "world_size": world, "samples": samples, "seconds": seconds, **extra}
    return e if micro is None else {**e, "micro_batches": micro}


def test_fixed_global_keeps_its_samples_and_pays_in_step_time_at_a_smaller_world():
    steps = [_step(s, 3, 192, 0.04, 1) for s in range(1, 11)] + [_step(s, 2, 192, 0.06, 2) for s in range(11, 16)]
    worlds = by_world(steps)
    assert [(w.world_size, w.steps, w.samples, w.micro_batches) for w in worlds] == [(3, 10, 192, 1), (2, 5, 192, 2)]
    line = summary(worlds)
    assert line is not None and "world 2: 192 samples a step, 2 micro-batch(es) a rank, 1.50x" in line


def test_per_step_groups_each_reporting_a_step_count_it_once_and_a_spare_is_left_out():
    steps = [_step(1, 2, 128, 0.05, 1, replica=r) for r in ("node-0", "node-1")]
    steps.append(_step(1, 2, 128, 0.5, 1, replica="node-3", participating=False))
    (world,) = by_world(steps)
    assert world.steps == 1 and world.step_s == 0.05
    assert summary([world]) is None  # one size: nothing to compare


def test_a_script_without_micro_batches_says_samples_and_time_only():
    worlds = by_world([_step(1, 3, 96, 0.1), _step(2, 2, 64, 0.1)])
    line = summary(worlds)
    assert line is not None and "micro-batch" not in line and "world 2: 64 samples a step" in line

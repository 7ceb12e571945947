"""The batch policy's arithmetic: which samples each rank trains, in how many micro-batches,
and the learning rate, at every world size."""

from __future__ import annotations

import pytest

from lab.vocab.batch_policy import BatchPlan, BatchPolicy, scaled_lr


def _plan(policy: str = "fixed-global", micro: int = 4, full: int = 3, global_batch: int | None = None) -> BatchPlan:
    return BatchPlan(BatchPolicy(policy), micro, full, global_batch)


def _union(plan: BatchPlan, window: list[int], world: int) -> list[int]:
    return sorted(i for rank in range(world) for part in plan.share(window, rank, world) for i in part)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5, 7])
def test_every_sample_of_a_step_is_trained_once_by_exactly_one_rank_at_any_world_size(world):
    plan = _plan()
    window = list(range(100, 100 + plan.step_samples(world)))
    assert len(window) == 12  # fixed-global: the job's 4 x 3, whatever the world
    assert _union(plan, window, world) == window


def test_a_rank_of_a_smaller_world_accumulates_micro_batches_of_at_most_the_micro_batch():
    plan = _plan()
    window = list(range(12))
    parts = plan.share(window, 0, 2)  # 6 samples for rank 0 of 2: a full micro-batch and a half
    assert [len(p) for p in parts] == [4, 2]
    assert plan.micro_batches(12, 2) == 2


def test_uneven_shares_run_the_same_number_of_micro_batches_on_every_rank():
    """10 samples over 4 ranks: 3, 3, 2, 2; with micro-batches of 2, every rank runs 2 of them
    (FSDP2's forward is a collective every rank joins), the last ones short or empty."""
    plan = _plan(micro=2, full=5, global_batch=10)
    window = list(range(10))
    shares = [plan.share(window, rank, 4) for rank in range(4)]
    assert [[len(p) for p in parts] for parts in shares] == [[2, 1], [2, 1], [2, 0], [2, 0]]
    assert _union(plan, window, 4) == window


def test_a_world_larger_than_the_step_leaves_ranks_with_one_empty_micro_batch():
    plan = _plan(micro=4, full=1, global_batch=3)
    shares = [plan.share(list(range(3)), rank, 5) for rank in range(5)]
    assert [[len(p) for p in parts] for parts in shares] == [[1], [1], [1], [0], [0]]


def test_the_short_last_step_of_an_epoch_is_split_the_same_way():
    plan = _plan()
    window = list(range(7))  # the epoch's last 7 samples of a 12-sample step
    assert _union(plan, window, 2) == window
    assert [len(p) for p in plan.share(window, 0, 2)] == [4]
    assert [len(p) for p in plan.share(window, 1, 2)] == [3]


def test_at_full_size_both_policies_run_the_very_same_step():
    fixed, per_worker = _plan("fixed-global"), _plan("per-worker")
    window = list(range(fixed.step_samples(3)))
    assert fixed.step_samples(3) == per_worker.step_samples(3) == 12
    for rank in range(3):
        assert fixed.share(window, rank, 3) == per_worker.share(window, rank, 3)
    assert fixed.learning_rate(0.05, 3, "linear") == per_worker.learning_rate(0.05, 3, "linear")


@pytest.mark.parametrize("scaling", ["linear", "sqrt", "none"])
def test_fixed_global_keeps_its_learning_rate_and_per_worker_follows_the_world(scaling):
    fixed, per_worker = _plan("fixed-global"), _plan("per-worker")
    assert {fixed.learning_rate(0.05, world, scaling) for world in (1, 2, 3, 4)} == {scaled_lr(0.05, 3, scaling)}
    assert [per_worker.learning_rate(0.05, w, scaling) for w in (1, 2)] == [
        scaled_lr(0.05, 1, scaling),
        scaled_lr(0.05, 2, scaling),
    ]
    assert per_worker.step_samples(2) == 8


def test_a_global_batch_that_is_not_a_whole_number_of_micro_batches_scales_its_rate_by_the_fraction():
    assert _plan(micro=4, global_batch=10).learning_rate(0.1, 2, "linear") == pytest.approx(0.25)


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError):
        BatchPlan("fixed", 4, 3)  # type: ignore[arg-type]

"""lab.runtime.elastic_batches: a user's script gets the job's batch policy from its
environment, its data position through a checkpoint, and the gradient sync of each
micro-batch."""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import nn

from lab.runtime.elastic_batches import ElasticBatches, gradient_sync


def _epoch_at(world_sizes: list[int], steps_each: int, size: int = 200) -> list[int]:
    """The samples a job trains while its world size changes after every `steps_each` steps,
    each change a restart from the last step's state."""
    trained: list[int] = []
    state = None
    for world in world_sizes:
        ranks = [ElasticBatches(size, 8, seed=3, rank=r, world_size=world, full_world_size=3) for r in range(world)]
        for b in ranks:
            if state is not None:
                b.load_state_dict(state)
        for _ in range(steps_each):
            works = [b.next_step() for b in ranks]
            assert len({len(w.parts) for w in works}) == 1  # every rank runs as many micro-batches
            trained += [i for w in works for i in w.indices.tolist()]
            for b, w in zip(ranks, works, strict=True):
                b.advance(w)
        state = ranks[0].state_dict()
    return trained


def test_a_job_resumed_at_other_world_sizes_trains_each_sample_of_the_epoch_once():
    trained = _epoch_at([3, 2, 1, 3], steps_each=2)  # 8 steps of 24: 192 of the epoch's 200
    assert len(trained) == 192 and len(set(trained)) == 192


def test_the_policy_and_sizes_come_from_the_jobs_environment(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LAB_BATCH_POLICY", "fixed-global")
    monkeypatch.setenv("LAB_FULL_WORLD_SIZE", "4")
    monkeypatch.delenv("LAB_GLOBAL_BATCH", raising=False)
    batches = ElasticBatches(1000, 16)
    work = batches.next_step()
    assert work.covered == 64 and [len(p) for p in work.parts] == [16, 16]
    assert work.loss_scale == 2 / 64
    assert batches.learning_rate(0.01) == 0.04  # four micro-batches' worth, at world 2 as at 4
    monkeypatch.setenv("LAB_BATCH_POLICY", "per-worker")
    per_worker = ElasticBatches(1000, 16)
    assert per_worker.next_step().covered == 32 and per_worker.learning_rate(0.01) == 0.02


class _Sharded(nn.Linear):
    """What FSDP2's fully_shard adds to a module: a switch of its gradients' reduction."""

    syncs: list[bool]

    def set_requires_gradient_sync(self, requires: bool) -> None:
        self.syncs.append(requires)


def test_micro_batches_sync_gradients_only_in_the_last():
    sharded = _Sharded(2, 2)
    sharded.syncs = []
    for last in (False, False, True):
        with gradient_sync(sharded, last=last):
            pass
    assert sharded.syncs == [False, False, True]
    plain = nn.Linear(2, 2)  # one process: gradients simply accumulate
    assert isinstance(gradient_sync(plain, last=False), nullcontext)
    calls = []

    class _Replicated(nn.Linear):
        def no_sync(self):
            calls.append("no_sync")
            return nullcontext()

    replicated = _Replicated(2, 2)
    gradient_sync(replicated, last=False)
    assert isinstance(gradient_sync(replicated, last=True), nullcontext) and calls == ["no_sync"]
    assert torch.is_grad_enabled()

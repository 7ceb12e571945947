"""The derived checkpoint interval: when the next save comes, from what the job measured."""

from __future__ import annotations

import pytest

from lab.runtime.checkpoint_pacer import CheckpointPacer, nodes_lost
from lab.vocab.checkpoint_interval import FIRST_SAVE_AFTER, daly_interval_s, job_mtbf_s


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_save_comes_soon_after_a_start_and_costs_a_step_until_one_is_measured():
    pacer = CheckpointPacer("10-15%", nodes=3, start_step=40, clock=Clock())
    assert not pacer.due(40 + FIRST_SAVE_AFTER - 1) and pacer.due(40 + FIRST_SAVE_AFTER)
    for _ in range(FIRST_SAVE_AFTER):
        pacer.step_done(0.5)
    chosen = pacer.decide(50, pacer.proposal())
    band = job_mtbf_s(0.125, 3)
    assert (chosen.cost_s, chosen.mtbf_s, chosen.source) == (0.5, band, "band")
    assert chosen.steps == round(daly_interval_s(0.5, band) / 0.5) and pacer.next_save == 50 + chosen.steps


def test_a_save_costs_what_it_blocked_and_what_it_slowed_the_steps_it_overlapped():
    pacer = CheckpointPacer("10-15%", nodes=3, start_step=0, clock=Clock())
    for _ in range(5):
        pacer.step_done(0.1)
    pacer.save_started()
    pacer.step_done(0.4)  # 0.3 s above the median step
    pacer.step_done(0.15)
    pacer.save_done(blocked_s=0.02)
    assert pacer.cost_s == pytest.approx(0.02 + 0.3 + 0.05)
    assert pacer.step_s() == pytest.approx(0.1), "steps slowed by a save are not a step's time"


def test_the_rate_the_job_saw_replaces_its_bands_after_two_evictions():
    clock = Clock()
    pacer = CheckpointPacer(">20%", nodes=3, start_step=0, evictions=1, trained_s=500.0, clock=clock)
    pacer.step_done(1.0)
    pacer.save_done(blocked_s=2.0)
    clock.now += 100.0
    assert pacer.trained_s() == 600.0
    first = pacer.decide(10, pacer.proposal())
    assert first.source == "band" and first.mtbf_s == job_mtbf_s(0.25, 3)
    pacer.evictions = 2
    second = pacer.decide(20, pacer.proposal())
    assert (second.source, second.mtbf_s) == ("observed", 300.0)  # 600 s of training, 2 nodes lost
    assert second.steps == round(daly_interval_s(2.0, 300.0)) and second.steps < first.steps


def test_every_rank_sets_the_next_save_from_the_agreed_figures_not_its_own():
    pacer = CheckpointPacer("10-15%", nodes=3, start_step=0, clock=Clock())
    pacer.step_done(0.1)
    chosen = pacer.decide(10, [0.2, 1.0, 3600.0, 3.0])
    assert (chosen.step_s, chosen.cost_s, chosen.evictions, chosen.mtbf_s) == (0.2, 1.0, 3, 1200.0)
    assert pacer.next_save == 10 + round(daly_interval_s(1.0, 1200.0) / 0.2)


@pytest.mark.parametrize(
    "saved, now, local, lost",
    [(3, 2, 1, 1), (3, 1, 1, 2), (2, 3, 1, 0), (6, 4, 2, 1), (4, 4, 2, 0), (5, 4, 2, 1)],
    ids=["one-of-three", "two-of-three", "a-node-added", "two-ranks-a-node", "same", "a-partial-node"],
)
def test_nodes_lost_since_a_checkpoint_count_whole_nodes(saved, now, local, lost):
    assert nodes_lost(saved, now, local) == lost

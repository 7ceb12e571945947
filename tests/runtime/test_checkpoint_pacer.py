"""The derived checkpoint interval: when the next save comes, from what the job measured."""

from __future__ import annotations

import pytest

from lab.runtime.checkpoint_pacer import CheckpointPacer
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


def test_a_save_costs_what_it_held_up_and_what_the_steps_until_the_next_took_above_the_first_ones():
    pacer = CheckpointPacer("10-15%", nodes=3, start_step=0, clock=Clock())
    for _ in range(5):
        pacer.step_done(0.1)
    pacer.save_started()
    pacer.save_held(0.02)
    for seconds in (0.4, 0.15, 0.1, 0.05):  # 0.3 and 0.05 s above the steps before any save
        pacer.step_done(seconds)
    assert pacer.cost_s == 0.0, "complete only when the next save begins"
    pacer.save_started()
    assert pacer.cost_s == pytest.approx(0.02 + 0.3 + 0.05)
    assert pacer.base_step_s() == pytest.approx(0.1) and pacer.step_s() == pytest.approx(0.1)


def test_the_rate_the_job_saw_replaces_its_bands_after_two_evictions():
    clock = Clock()
    pacer = CheckpointPacer(">20%", nodes=3, start_step=0, evictions=1, trained_s=500.0, clock=clock)
    pacer.step_done(1.0)
    pacer.save_started()
    pacer.save_held(2.0)
    pacer.save_started()  # no step between: the save cost what it held up
    clock.now += 100.0
    assert pacer.trained_s() == 600.0
    first = pacer.decide(10, pacer.proposal())
    assert first.source == "band" and first.mtbf_s == job_mtbf_s(0.25, 3)
    pacer.evictions = 2
    second = pacer.decide(20, pacer.proposal())
    assert (second.source, second.mtbf_s) == ("observed", 300.0)  # 600 s of training, 2 nodes lost
    assert second.steps == round(daly_interval_s(2.0, 300.0)) and second.steps < first.steps


def test_a_known_rate_replaces_the_bands_until_the_job_has_seen_its_own():
    clock = Clock()
    pacer = CheckpointPacer("<5%", nodes=3, start_step=0, clock=clock, known_mtbf_s=40.0)
    pacer.step_done(0.05)
    pacer.save_started()
    pacer.save_held(0.01)
    pacer.save_started()
    clock.now += 30.0
    first = pacer.decide(10, pacer.proposal())
    assert (first.source, first.mtbf_s) == ("given", 40.0)
    assert first.steps == round(daly_interval_s(0.01, 40.0) / 0.05)
    pacer.evictions = 2
    assert (pacer.decide(20, pacer.proposal()).source, pacer.prior_mtbf_s) == ("observed", 40.0)
    with pytest.raises(ValueError, match=r"known_mtbf_s=0\.0 is invalid: expected a finite number"):
        CheckpointPacer("<5%", nodes=3, start_step=0, known_mtbf_s=0.0)


def test_every_rank_sets_the_next_save_from_the_agreed_figures_not_its_own():
    pacer = CheckpointPacer("10-15%", nodes=3, start_step=0, clock=Clock())
    pacer.step_done(0.1)
    chosen = pacer.decide(10, [0.2, 1.0, 3600.0, 3.0])
    assert (chosen.step_s, chosen.cost_s, chosen.evictions, chosen.mtbf_s) == (0.2, 1.0, 3, 1200.0)
    assert pacer.next_save == 10 + round(daly_interval_s(1.0, 1200.0) / 0.2)

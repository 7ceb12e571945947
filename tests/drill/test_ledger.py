"""The sample ledger (lab/drill/ledger.py) on recorded event lists: what the demo trainer's
workers record, step by step, through the rollbacks and heals of both fault-tolerance modes.
Each case says what a wrong ledger would get wrong."""

from __future__ import annotations

import random
from typing import Any

from lab.drill.analysis import analyze
from lab.drill.ledger import SampleLedger, recording_samples, sample_ledger
from lab.drill.timeline import ROUND_SPREAD_S, Timeline
from lab.vocab.events import Event, unknown_fields
from lab.vocab.job import JobSpec

SIZE = 24  # samples in the data set: an epoch is 4 steps of 6


class Recorder:
    """What the demo trainer's workers record, for a data set of SIZE samples walked in one
    permutation per epoch by global position (as lab.runtime.demo.GlobalSampler): elastic
    mode's rounds (every rank records its samples of a step before the step completes, rank 0
    the step) or per-step mode's replica groups (each records its share when its quorum
    commits). `saved` keeps the data position at each step, as a checkpoint would."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.t = 100.0
        self.rounds = 0
        self.step, self.epoch, self.position = 0, 0, 0
        self.saved: dict[int, tuple[int, int]] = {0: (0, 0)}

    def emit(self, event: Event, **fields: Any) -> None:
        self.t += 0.5
        self.events.append({"t": self.t, "event": event.value, **fields})

    def window(self, samples: int) -> list[int]:
        order = random.Random(self.epoch).sample(range(SIZE), SIZE)
        return order[self.position : min(self.position + samples, SIZE)]

    def advance(self, covered: int) -> None:
        self.step, self.position = self.step + 1, self.position + covered
        if self.position >= SIZE:
            self.epoch, self.position = self.epoch + 1, 0
        self.saved[self.step] = (self.epoch, self.position)

    # ----------------------------------------------------------------- elastic mode
    def round_from(self, step: int, ranks: int = 2, position: tuple[int, int] | None = None) -> None:
        """A round of `ranks` workers from the checkpoint of `step` (its data position, unless
        a wrong one is given)."""
        self.rounds += 1
        self.step, (self.epoch, self.position) = step, position or self.saved[step]
        for rank in range(ranks):
            self.emit(Event.RESUME if step else Event.FRESH, step=step, round=self.rounds, rank=rank, world_size=ranks)
        self.ranks = ranks

    def train(self, steps: int, samples: int = 6, completes: bool = True) -> None:
        """Steps of `samples` (the last of an epoch short); the last one left incomplete (its
        all-reduce failed everywhere) unless `completes`."""
        for i in range(steps):
            window = self.window(samples)
            for rank in range(self.ranks):
                self.emit(
                    Event.SAMPLES, step=self.step + 1, epoch=self.epoch, indices=window[rank :: self.ranks], rank=rank
                )
            if not completes and i == steps - 1:
                return
            self.advance(len(window))
            self.emit(
                Event.STEP,
                step=self.step,
                world_size=self.ranks,
                samples=len(window),
                epoch=self.epoch,
                position=self.position,
                rank=0,
            )

    def finish(self) -> None:
        for rank in range(self.ranks):
            self.emit(Event.EXIT, reason="done", step=self.step, rank=rank)

    # --------------------------------------------------------------- per-step mode
    def group_from(self, replica: str, step: int) -> None:
        """A replica group's worker starts from the checkpoint of `step` (0: none)."""
        self.rounds += 1
        self.emit(Event.RESUME if step else Event.FRESH, step=step, round=self.rounds, replica=replica, rank=0)

    def commit(
        self,
        groups: list[str],
        samples: int = 6,
        healed: tuple[str, ...] = (),
        *,
        quorum: int | None = None,
        died: tuple[str, ...] = (),
        discarded: bool = False,
    ) -> None:
        """A step committed by a quorum of `groups`; those in `healed` copied a peer's state in
        it, sat it out and report their heal after it. With `quorum`, the groups record their
        samples before the reduction, with it; those in `died` go after the reduction, before
        their commit; a `discarded` step is recorded and committed by none."""
        window = self.window(samples)
        training = [g for g in groups if g not in healed]
        epoch, tag = self.epoch, ({} if quorum is None else {"quorum": quorum})
        for i, group in enumerate(training):
            share = window[i :: len(training)]
            self.emit(Event.SAMPLES, step=self.step + 1, epoch=epoch, indices=share, replica=group, rank=0, **tag)
        if discarded:
            return
        self.advance(len(window))
        for group in [g for g in groups if g not in died]:
            if group in healed:
                self.emit(Event.HEALED, step=self.step - 1, replica=group, rank=0)
            self.emit(
                Event.STEP,
                step=self.step,
                samples=len(window),
                epoch=self.epoch,
                position=self.position,
                participants=len(training),
                participating=group not in healed,
                replica=group,
                rank=0,
                **tag,
            )

    def ledger(self) -> SampleLedger:
        assert [e for e in self.events if unknown_fields(e)] == []  # what the trainer's events carry
        return sample_ledger(Timeline(self.events, []))


def _counts(ledger: SampleLedger) -> list[tuple[int, int, int, int, int, bool]]:
    """(epoch, walked, once, doubled, lost, full) of each epoch."""
    return [(e.epoch, e.walked, e.once, e.doubled, e.lost, e.full) for e in ledger.epochs]


def test_steps_after_the_checkpoint_a_round_resumed_from_are_redone_not_doubled():
    """Elastic: 2 ranks train steps 1-6, checkpoint at 4, die during step 7 (its samples
    recorded, no rank completed it); 3 ranks resume from step 4 and train on. Steps 5-7 of
    the first round are not in the model: counted, they would double 12 samples."""
    run = Recorder()
    run.round_from(0)
    run.train(7, completes=False)
    run.round_from(4, ranks=3)
    run.train(8)
    ledger = run.ledger()
    assert _counts(ledger) == [(0, 24, 24, 0, 0, True), (1, 24, 24, 0, 0, True), (2, 24, 24, 0, 0, True)]
    assert ledger.redone_steps == 3 and ledger.once == 72 and ledger.doubled == 0 and ledger.lost == 0
    assert ledger.full_epochs == 3


def test_a_round_that_meets_an_earlier_rounds_master_port_again_is_a_round_of_its_own():
    """A round is known by its master port, which torchrun picks anew each round: a long job
    meets one again (a replay of hundreds of changes did). The third round below has the
    first's port; taken for the first round, its resume from step 11 would be lost and step
    12, begun by the second round and redone by the third, counted twice."""
    run = Recorder()
    run.round_from(0)
    run.train(6)
    run.round_from(6)
    run.train(6, completes=False)  # dies during step 12, its samples recorded
    run.rounds = 0  # the next round draws the first one's port again
    run.round_from(11)
    run.train(5)
    assert run.events[-1]["t"] - run.events[0]["t"] > 2 * ROUND_SPREAD_S
    ledger = run.ledger()
    assert (ledger.doubled, ledger.lost, ledger.redone_steps) == (0, 0, 1)
    assert [(r["step"], r["t"]) for r in Timeline(run.events, []).rounds][2][0] == 11


def _resumed_at(position: tuple[int, int], before: int, after: int) -> Recorder:
    """Elastic: a round trains `before` steps; the next resumes the last one's checkpoint at the
    data `position` given (a wrong one) and trains `after` more."""
    run = Recorder()
    run.round_from(0)
    run.train(before)
    run.round_from(before, position=position)
    run.train(after)
    return run


def test_a_resume_at_the_wrong_data_position_doubles_the_samples_it_walks_again():
    """The round resumes step 3's model at the start of its epoch (the data position not
    restored): the 18 samples of steps 1-3 are trained again, in steps 4-6."""
    (epoch,) = _resumed_at((0, 0), before=3, after=4).ledger().epochs
    assert (epoch.doubled, epoch.most, epoch.doubled_steps, epoch.lost) == (18, 2, (1, 2, 3, 4, 5, 6), 0)
    assert epoch.doubled_words() == "18 samples of epoch 0 were trained twice (steps 1, 2, 3, 4, 5, 6)"


def test_a_resume_past_its_data_position_loses_the_samples_it_skips():
    """The round resumes step 2's model 6 positions further on: those 6 samples are never
    trained, though every step's window was."""
    ledger = _resumed_at((0, 18), before=2, after=3).ledger()
    assert _counts(ledger) == [(0, 24, 18, 0, 6, True), (1, 12, 12, 0, 0, False)]
    assert ledger.epochs[0].lost_words() == "6 samples of epoch 0 were never trained (of the 24 its steps 1-3 walked)"


def test_a_rank_whose_samples_are_missing_loses_them_even_in_a_partial_epoch():
    """The last epoch is partial: counted up to where its last step left the data order. A
    rank's record of a step missing there leaves 3 samples untrained."""
    run = Recorder()
    run.round_from(0)
    run.train(6)  # an epoch and 2 steps: 12 of the next 24 positions walked
    missing = next(e for e in reversed(run.events) if e["event"] == "samples" and e["rank"] == 1)
    run.events.remove(missing)
    ledger = run.ledger()
    assert _counts(ledger) == [(0, 24, 24, 0, 0, True), (1, 12, 9, 0, 3, False)]
    assert ledger.lost == 3


def test_a_partial_last_epoch_counts_only_what_it_walked_and_still_finds_a_double():
    """12 positions of epoch 1 walked: the other 12 are not lost. A step recorded twice (by a
    round that did not resume from before it) is doubled all the same."""
    run = Recorder()
    run.round_from(0)
    run.train(5)
    assert _counts(run.ledger()) == [(0, 24, 24, 0, 0, True), (1, 6, 6, 0, 0, False)]
    again = [dict(e, t=run.t + 1) for e in run.events if e["event"] == "samples" and e["step"] == 5]
    run.events += again
    (_, last) = run.ledger().epochs
    assert (last.walked, last.doubled, last.doubled_steps, last.lost) == (6, 6, (5,), 0)


def test_a_step_a_round_recorded_but_never_completed_is_not_in_the_model():
    """The job ended during step 4 (its samples recorded, no step after them): not trained."""
    run = Recorder()
    run.round_from(0)
    run.train(4, completes=False)
    assert _counts(run.ledger()) == [(0, 18, 18, 0, 0, False)]


def test_a_per_step_group_that_heals_goes_on_from_its_peers_step():
    """Per-step: groups a and b commit 5 steps; group c starts fresh, heals from them (sitting
    its first step out) and trains in the quorum after. Its fresh start is no rollback: taken
    for one, steps 1-5 would be dropped and 30 samples called lost."""
    run = Recorder()
    run.group_from("a", 0)
    run.group_from("b", 0)
    for _ in range(5):
        run.commit(["a", "b"])
    run.group_from("c", 0)
    run.commit(["a", "b", "c"], healed=("c",))
    for _ in range(4):
        run.commit(["a", "b", "c"])
    ledger = run.ledger()
    assert _counts(ledger) == [(0, 24, 24, 0, 0, True), (1, 24, 24, 0, 0, True), (2, 12, 12, 0, 0, False)]
    assert ledger.redone_steps == 0


def test_per_step_groups_restarted_from_a_checkpoint_with_no_live_peer_redo_its_later_steps():
    """Every group died after step 6; both start again from the checkpoint of step 4 and
    commit 5 onwards: steps 5-6 of before are not in the model."""
    run = Recorder()
    run.group_from("a", 0)
    run.group_from("b", 0)
    for _ in range(6):
        run.commit(["a", "b"])
    run.step, (run.epoch, run.position) = 4, run.saved[4]
    run.group_from("a", 4)
    run.group_from("b", 4)
    for _ in range(4):
        run.commit(["a", "b"])
    ledger = run.ledger()
    assert _counts(ledger) == [(0, 24, 24, 0, 0, True), (1, 24, 24, 0, 0, True)]
    assert ledger.redone_steps == 2


def test_without_recorded_samples_the_ledger_says_it_was_not_kept():
    run = Recorder()
    run.round_from(0)
    run.train(3)
    run.events = [e for e in run.events if e["event"] != "samples"]
    ledger = run.ledger()
    assert not ledger.kept and ledger.epochs == () and "recorded no samples" in ledger.summary()
    assert "0 lost" not in ledger.summary()


def test_the_verdict_fails_a_run_that_trained_samples_twice_in_the_users_words():
    """The drill's analysis of the recorded events (lab.drill.analysis): a doubled sample fails
    it, said in the ledger's words, and the report shows the ledger."""
    run = _resumed_at((0, 0), before=3, after=5)
    run.finish()
    report = analyze(run.events, [], target_steps=8, checkpoint_every=4, node_exit_codes={})
    assert report.problems == ["18 samples of epoch 0 were trained twice (steps 1, 2, 3, 4, 5, 6)"]
    assert (
        "  samples: epochs 0-1, 1 full, epoch 1 partial (6 samples walked): 12 trained once, 0 lost, 18 trained "
        "more than once" in report.summary()
    )
    assert report.to_dict()["ledger"]["doubled"] == 18
    clean = Recorder()
    clean.round_from(0)
    clean.train(8)
    clean.finish()
    assert analyze(clean.events, [], target_steps=8, checkpoint_every=4, node_exit_codes={}).problems == []


def test_the_drill_records_the_demo_trainers_samples_and_runs_a_users_script_as_given():
    demo = JobSpec(script_args=("--steps", "10"))
    assert recording_samples(demo).script_args == ("--steps", "10", "--log-samples")
    already = demo.replace(script_args=("--log-samples", "--steps", "10"))
    assert recording_samples(already) == already
    own = JobSpec(module=None, script="train.py", script_args=("--steps", "10"))
    assert recording_samples(own) == own


def test_a_per_step_group_killed_after_the_reduction_trained_its_share_into_its_peers_update():
    """Group c records its share of step 3 with its quorum, the reduction sums it, then c is
    killed before its own commit: a and b commit step 3 in that quorum, c's samples in it. A
    step the quorum discarded (a peer lost mid-reduction) is trained again in the next one."""
    run = Recorder()
    for group in ("a", "b", "c"):
        run.group_from(group, 0)
    run.commit(["a", "b", "c"], quorum=1)
    run.commit(["a", "b", "c"], quorum=1)
    run.commit(["a", "b", "c"], quorum=1, died=("c",))
    run.commit(["a", "b"], quorum=2, discarded=True)
    for _ in range(3):
        run.commit(["a", "b"], quorum=3)
    ledger = run.ledger()
    assert _counts(ledger) == [(0, 24, 24, 0, 0, True), (1, 12, 12, 0, 0, False)]

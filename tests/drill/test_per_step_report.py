"""The per-step drill's reading of an eviction: the survivors' first step that the evicted
group no longer holds up."""

from __future__ import annotations

from lab.drill.per_step_report import SAME_QUORUM_STEPS, survivors_step


def _step(t: float, replica: str, quorum: int, step: int) -> dict:
    return {"t": t, "event": "step", "replica": replica, "quorum": quorum, "step": step, "participants": 2}


BEFORE = [_step(1.0, "a", 2, 10), _step(1.0, "b", 2, 10), _step(1.0, "c", 2, 10)]  # c is evicted at t=2


def test_the_survivors_first_step_in_a_new_quorum():
    after = [_step(2.01, "a", 2, 11), _step(3.0, "a", 3, 11), _step(3.1, "b", 3, 12)]
    assert survivors_step(BEFORE + after, 2.0, "c")["t"] == 3.0  # the in-flight commit of quorum 2 is not it


def test_survivors_that_go_on_in_their_quorum_were_not_held_up():
    """After a lighthouse restart the group can go while still joining the survivors'
    quorum: they keep committing in it, and their next step is their first without it."""
    after = [_step(2.0 + i / 10, "a", 2, 11 + i) for i in range(1, SAME_QUORUM_STEPS + 2)]
    assert survivors_step(BEFORE + after, 2.0, "c")["t"] == after[0]["t"]


def test_survivors_stuck_in_the_quorum_with_the_dead_group_have_no_step_without_it():
    after = [_step(2.01, "a", 2, 11)]  # one in-flight commit, then nothing
    assert survivors_step(BEFORE + after, 2.0, "c") is None


def test_a_group_on_notice_that_trains_on_holds_the_survivors_quorum_until_it_leaves():
    """A notice: the group steps on to a boundary in the shared quorum, then leaves; the
    survivors' first step without it is in the next quorum."""
    shared = [_step(2.0 + i / 10, r, 2, 11 + i) for i in range(1, 5) for r in ("a", "c")]
    after = [_step(3.0, "a", 3, 15)]
    assert survivors_step(BEFORE + shared + after, 2.0, "c")["t"] == 3.0

"""A replay schedule's capacity: nodes alive over time, node-seconds offered, wipeouts."""

from __future__ import annotations

from lab.vocab.replay_schedule import BACK, LOST, ReplaySchedule, SlotChange


def _schedule(*changes: SlotChange, duration_s: float = 10.0) -> ReplaySchedule:
    return ReplaySchedule("t", (0.0, 100.0), 10.0, 3, "r", frozenset({0, 1, 2}), changes, duration_s)


def test_capacity_and_wipeouts_follow_the_changes():
    s = _schedule(
        SlotChange(1.0, 0, LOST),
        SlotChange(2.0, 1, LOST),
        SlotChange(2.0, 2, LOST, notice_s=6.0),
        SlotChange(5.0, 0, BACK),
        SlotChange(6.0, 0, LOST),
    )
    assert s.alive() == [(0.0, 3), (1.0, 2), (2.0, 1), (2.0, 0), (5.0, 1), (6.0, 0)]
    assert s.capacity_node_seconds() == 3 * 1 + 2 * 1 + 1 * 1
    assert s.capacity_node_seconds(until_s=1.5) == 3 * 1 + 2 * 0.5
    assert s.wipeouts() == [(2.0, 5.0), (6.0, None)]

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
    # 3 s with a node (0-2 s, 5-6 s) over 3 loss events: the two slots lost at 2 s are one.
    assert s.mean_s_between_losses() == 1.0
    assert _schedule(SlotChange(4.0, 0, BACK)).mean_s_between_losses() is None


def test_a_capacity_record_is_in_the_traces_seconds_and_names_a_slot_and_notice_only_where_there_is_one():
    # Window (500, 600) at a speed-up of 20: 2.5 s of replay is 550 s of the trace.
    s = ReplaySchedule("t", (500.0, 600.0), 20.0, 3, "r", frozenset({0, 1, 2}), (), 5.0)
    assert s.capacity_fields(3, "start", 0.0) == {"alive": 3, "slots": 3, "change": "start", "window_t": 500.0}
    assert s.capacity_fields(2, LOST, 2.5, slot=1, notice_s=6.0) == {
        "alive": 2,
        "slots": 3,
        "change": LOST,
        "window_t": 550.0,
        "slot": 1,
        "notice_s": 6.0,
    }
    # Rounded to the millisecond; slot 0 and a notice of 0 s are said, not dropped as falsy.
    assert s.capacity_fields(1, "missed", 1 / 3, slot=0, notice_s=0.0) == {
        "alive": 1,
        "slots": 3,
        "change": "missed",
        "window_t": 506.667,
        "slot": 0,
        "notice_s": 0.0,
    }

"""A window of a trace as a job's schedule: the lowest free slot, spares, proportional counts
rounded halves up, the seeded choice of the nodes a drop takes, notices compressed and never
before a node is there, the window's cut, and every bad argument named."""

from __future__ import annotations

import math

import pytest

from lab.vocab.problems import InvalidInput
from lab.vocab.replay_schedule import BACK, LOST, ReplaySchedule
from lab.vocab.trace_files import load_trace, read_trace
from lab.vocab.trace_schedule import notice_seconds, schedule
from tests.traces import FOUR_NODE, counts, events, shared_trace


def _changes(plan: ReplaySchedule) -> list[tuple[float, int, str]]:
    return [(c.t_s, c.slot, c.kind) for c in plan.changes]


def _levels(plan: ReplaySchedule) -> dict[float, int]:
    """The slots with a node at t=0 and after every time with a change."""
    return dict(plan.alive())


def assert_consistent(plan: ReplaySchedule) -> None:
    """A slot is lost only while it has a node and given back only while it has none, in time
    order, within the window; a notice is never negative."""
    alive = set(plan.alive_at_start)
    assert alive <= set(range(plan.slots))
    last = 0.0
    for change in plan.changes:
        assert last <= change.t_s < plan.duration_s
        assert 0 <= change.slot < plan.slots
        if change.kind == LOST:
            assert change.slot in alive
            assert change.notice_s is None or change.notice_s >= 0
            alive.remove(change.slot)
        else:
            assert change.slot not in alive and change.notice_s is None
            alive.add(change.slot)
        last = change.t_s


# ------------------------------------------------------------------ instance events


def test_each_arriving_instance_takes_the_lowest_free_slot(tmp_path):
    trace = events(
        tmp_path,
        [
            "0,add,a",
            "0,add,b",
            "0,add,c",
            "60000,remove,b",
            "120000,add,d",
            "180000,remove,a",
            "180000,remove,c",
            "240000,add,e",
            "240000,add,f",
        ],
    )
    plan = schedule(trace, slots=3, rule="spares")
    assert plan.alive_at_start == {0, 1, 2}
    assert _changes(plan) == [
        (60.0, 1, LOST),
        (120.0, 1, BACK),  # d: slot 1, the only free one
        (180.0, 0, LOST),
        (180.0, 2, LOST),
        (240.0, 0, BACK),  # e: the lowest of 0 and 2
        (240.0, 2, BACK),
    ]
    assert plan.rule.startswith("instance events to 3 slot(s): each arriving instance takes the lowest free slot")


def test_instances_beyond_the_slots_are_spares_that_take_a_lost_slot_at_once(tmp_path):
    trace = events(
        tmp_path,
        [
            "0,add,a",
            "0,add,b",
            "0,add,c",
            "0,add,d",
            "60000,remove,a",  # c, the first spare, takes slot 0 at once
            "120000,remove,d",  # a spare lost: the job sees nothing
            "180000,remove,b",  # no spare left: slot 1 stays empty
            "240000,add,e",
            "300000,remove,c",
        ],
    )
    plan = schedule(trace, slots=2, rule="spares")
    assert_consistent(plan)
    assert _changes(plan) == [(60.0, 0, LOST), (60.0, 0, BACK), (180.0, 1, LOST), (240.0, 1, BACK), (300.0, 0, LOST)]
    assert _levels(plan) == {0.0: 2, 60.0: 2, 180.0: 1, 240.0: 2, 300.0: 1}


def test_a_window_of_instance_events_starts_from_the_slots_held_then(tmp_path):
    trace = events(tmp_path, ["0,add,a", "0,add,b", "60000,remove,a", "120000,add,c", "180000,remove,b"])
    plan = schedule(trace, slots=2, window=(60, 240), rule="spares")  # a's loss at 60 s is the start's state
    assert plan.alive_at_start == {1}
    assert _changes(plan) == [(60.0, 0, BACK), (120.0, 1, LOST)]
    assert (plan.window_s, plan.duration_s) == ((60.0, 240.0), 180.0)


def test_instance_events_scaled_proportionally_are_counted_first(tmp_path):
    trace = events(
        tmp_path, ["0,add,a", "0,add,b", "0,add,c", "0,add,d", "60000,remove,a", "60000,remove,b", "120000,remove,c"]
    )
    plan = schedule(trace, slots=2, rule="proportional")
    assert _levels(plan) == {0.0: 2, 60.0: 1}  # 4 -> 2, 2 -> 1; at 120 s 1 -> 0.5, halves up: still 1


def test_spares_on_the_bamboo_pool_at_its_full_size_follow_its_count_exactly():
    trace = load_trace("bamboo-p3-32")
    plan = schedule(trace, slots=32, rule="spares")
    assert_consistent(plan)
    assert _levels(plan) == dict(trace.capacity)
    assert sum(c.kind == LOST for c in plan.changes) == 167


# ------------------------------------------------------------------ counts


@pytest.mark.parametrize(
    ("data", "slots", "rule", "expected"),
    [
        ([4, 3, 2, 1, 0, 1, 2, 3, 4], 3, "proportional", [3, 2, 2, 1, 0, 1, 2, 2, 3]),
        ([4, 3, 2, 1], 2, "proportional", [2, 2, 1, 1]),  # 1.5 and 0.5 round up (Python's round: 2 and 0)
        ([32, 27, 26, 32], 3, "proportional", [3, 3, 2, 3]),  # 32 to 3 loses a slot once 6 are gone
        ([16, 5, 2, 0, 16], 3, "spares", [3, 3, 2, 0, 3]),
        ([1, 0, 1], 3, "proportional", [3, 0, 3]),  # one node scaled up: all or nothing
    ],
    ids=["4 to 3", "halves up", "32 to 3", "spares", "1 to 3"],
)
def test_counts_become_the_jobs_slots_by_the_rule(tmp_path, data, slots, rule, expected):
    plan = schedule(counts(tmp_path, data, gap_s=100), slots=slots, rule=rule)
    assert_consistent(plan)
    alive = _levels(plan)
    assert [_at(alive, i * 100) for i in range(len(data))] == expected


def _at(levels: dict[float, int], t: float) -> int:
    return levels[max(at for at in levels if at <= t)]


def test_a_rise_fills_the_lowest_free_slots(tmp_path):
    plan = schedule(counts(tmp_path, [4, 0, 2, 4], gap_s=100), slots=4, rule="spares")
    assert [(t, s) for t, s, kind in _changes(plan) if kind == BACK] == [(200.0, 0), (200.0, 1), (300.0, 2), (300.0, 3)]


def test_the_nodes_a_drop_takes_are_drawn_by_the_seed_reproducibly(tmp_path):
    trace = counts(tmp_path, [8, 5, 8, 3, 8, 6], gap_s=100)

    def lost(seed: int) -> list[tuple[float, int]]:
        plan = schedule(trace, slots=8, rule="spares", seed=seed)
        assert_consistent(plan)
        return [(t, s) for t, s, kind in _changes(plan) if kind == LOST]

    assert lost(7) == lost(7)
    assert len({tuple(lost(seed)) for seed in range(10)}) > 1
    assert "random.Random(7)" in schedule(trace, slots=8, seed=7).rule


# ------------------------------------------------------------------ time and notices


def test_the_window_is_cut_at_its_start_and_compressed_by_the_speedup(tmp_path):
    trace = counts(tmp_path, [2, 2, 1, 2, 2, 0, 2], gap_s=100)
    plan = schedule(trace, slots=2, window=(200, 600), speedup=10, rule="spares", seed=1)
    assert len(plan.alive_at_start) == 1  # the drop at 200 s is the start's state
    assert [(t, kind) for t, _, kind in _changes(plan)] == [(10.0, BACK), (30.0, LOST), (30.0, LOST)]  # 600 s: the end
    assert (plan.window_s, plan.speedup, plan.duration_s, plan.slots) == ((200.0, 600.0), 10.0, 40.0, 2)
    assert plan.source == trace.source


@pytest.mark.parametrize(
    ("notice", "replay_s"), [("aws", 6.0), ("gcp", 1.5), ("azure", 0.25), ("none", None), (40, 2.0), ("40", 2.0)]
)
def test_a_notice_is_compressed_like_the_window(tmp_path, notice, replay_s):
    plan = schedule(counts(tmp_path, [1, 1, 1, 1, 1, 0], gap_s=100), slots=1, speedup=20, notice=notice)
    (change,) = plan.changes
    assert (change.t_s, change.kind, change.notice_s) == (25.0, LOST, replay_s)


def test_a_notice_never_starts_before_the_node_joined_or_the_window_began(tmp_path):
    trace = counts(tmp_path, [1, 1, 0, 1, 0], gap_s=100)
    plan = schedule(trace, slots=1, speedup=2, notice="aws")  # 120 s of notice: 60 s of replay
    assert [(c.t_s, c.kind, c.notice_s) for c in plan.changes] == [
        (100.0, LOST, 60.0),
        (150.0, BACK, None),
        (200.0, LOST, 50.0),  # its node joined 50 s before
    ]
    late = schedule(trace, slots=1, window=(150, 500), speedup=2, notice="aws")
    assert late.changes[0].notice_s == 25.0  # 25 s into the window


def test_the_rule_says_how_the_slots_were_mapped_and_the_notice(tmp_path):
    plan = schedule(counts(tmp_path, [4, 2, 4], gap_s=100), slots=3, speedup=20, notice="gcp", seed=7)
    assert plan.rule == (
        "counts of a pool of 4 to 3 slot(s) (proportional): round(alive * 3 / 4), halves up; a drop loses running "
        "slots drawn by random.Random(7), a rise fills the lowest free slots; notice gcp 30 s of the trace (1.5 s "
        "of replay) before each loss, at most since its node joined"
    )
    assert schedule(counts(tmp_path, [4, 2, 4]), slots=3).rule.endswith("no notice: every node is lost without one")


def test_the_four_node_trace_at_four_slots_is_its_own_count():
    trace = read_trace(shared_trace(FOUR_NODE))
    plan = schedule(trace, slots=4, speedup=20, notice="aws", seed=3)
    assert_consistent(plan)
    assert _levels(plan) == {t / 20: n for t, n in trace.capacity}
    assert sum(c.kind == LOST for c in plan.changes) == 330


@pytest.mark.parametrize("rule", ["spares", "proportional"])
def test_schedules_of_the_carried_traces_are_consistent(rule):
    for name in ("bamboo-p3-32", "bamboo-g4dn-24", "skynomad-gcp-h100-16-us-east4-a"):
        assert_consistent(schedule(load_trace(name), slots=3, speedup=60, notice="aws", rule=rule, seed=0))


# ------------------------------------------------------------------ bad arguments, named


@pytest.mark.parametrize(
    ("notice", "seconds"), [("aws", 120.0), ("gcp", 30.0), ("azure", 5.0), ("none", None), ("45", 45.0)]
)
def test_a_notice_rule_is_a_clouds_name_none_or_seconds(notice, seconds):
    assert notice_seconds(notice) == seconds


@pytest.mark.parametrize("notice", [0, -5, "fast", math.nan, math.inf, True, "AWS"])
def test_a_bad_notice_is_named(notice):
    with pytest.raises(InvalidInput) as error:
        notice_seconds(notice)
    (problem,) = error.value.problems
    assert (problem.key, problem.expected) == ("notice", "one of aws, gcp, azure, none, or seconds of notice > 0")


def test_every_bad_argument_is_named_at_once(tmp_path):
    trace = counts(tmp_path, [2, 1, 2], gap_s=100)
    with pytest.raises(InvalidInput) as error:
        schedule(trace, slots=0, window=(250, 100), speedup=0, notice="ibm", rule="random", seed="x")  # type: ignore[arg-type]
    assert [p.key for p in error.value.problems] == ["slots", "speedup", "rule", "seed", "notice", "window"]


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("slots", True),
        ("slots", 2.0),
        ("slots", -1),
        ("speedup", math.nan),
        ("speedup", math.inf),
        ("speedup", -1),
        ("speedup", "20"),
        ("speedup", True),
        ("rule", "Spares"),
        ("seed", 1.5),
        ("seed", False),
    ],
)
def test_a_bad_argument_is_named_with_what_fits(tmp_path, argument, value):
    arguments = {"slots": 3, "speedup": 20.0, "rule": "spares", "seed": 0} | {argument: value}
    with pytest.raises(InvalidInput) as error:
        schedule(counts(tmp_path, [2, 1, 2]), **arguments)
    assert [(p.key, p.value) for p in error.value.problems] == [(argument, value)]


def test_a_window_with_no_capacity_for_the_job_is_refused_naming_the_trace(tmp_path):
    trace = counts(tmp_path, [0, 0, 3, 3], gap_s=100)
    with pytest.raises(InvalidInput) as error:
        schedule(trace, slots=3, window=(0, 200))
    (problem,) = error.value.problems
    assert (problem.key, problem.value) == ("window", (0.0, 200.0))
    assert (
        problem.expected
        == f"a window of {trace.source} that offers 3 slot(s) capacity under proportional (it offers none)"
    )
    assert schedule(trace, slots=3, window=(0, 250)).changes[0].kind == BACK


def test_a_pool_scaled_down_to_no_slot_offers_no_capacity_while_spares_still_run(tmp_path):
    trace = counts(tmp_path, [32, 1, 1, 32], gap_s=100)
    with pytest.raises(InvalidInput, match="under proportional"):
        schedule(trace, slots=3, window=(100, 300))  # 1 of 32 is 0.09 of 3 slots
    assert len(schedule(trace, slots=3, window=(100, 300), rule="spares").alive_at_start) == 1

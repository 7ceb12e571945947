"""A reclaim of borrowed nodes read from a drill's events (lab/drill/reclaim.py)."""

from __future__ import annotations

from lab.drill.reclaim import reclaim_lines, reclaims
from lab.drill.timeline import Timeline
from lab.vocab.events import CAUSE_RECLAIM, Event


def _steps(first: int, last: int, t0: float, world: int, **more) -> list[dict]:
    return [
        {"t": t0 + (i - first) / 10, "event": Event.STEP, "step": i, "world_size": world, **more}
        for i in range(first, last + 1)
    ]


def _run(per_step: bool = False, taken: tuple[str, ...] = ("c",), notice_s: float | None = 5.0) -> Timeline:
    """Nodes a and b (the core) and c (borrowed) of 2 workers each: c taken back at 3 s, the
    job at its core until a borrowed node d is added at 6 s, whole again at 7 s."""
    size = {"participants": 3} if per_step else {}
    half = {"participants": 2} if per_step else {}
    events = [
        *({"t": 0.5, "event": Event.NODE_ADDED, "node": n, "part": "core"} for n in "ab"),
        {"t": 0.5, "event": Event.NODE_ADDED, "node": "c", "part": "burst"},
        *({"t": 0.9, "event": Event.FRESH, "step": 0, "round": 1, "node": n} for n in "abc"),
        *_steps(1, 20, 1.0, 6, **size),
        *(
            {
                "t": 3.0,
                "event": Event.EVICT,
                "node": n,
                "kind": "notice" if notice_s else "hard",
                "notice_s": notice_s,
                "cause": CAUSE_RECLAIM,
            }
            for n in taken
        ),
        {"t": 3.5, "event": Event.RESUME, "step": 20, "round": 2, "node": "a"},
        *_steps(21, 40, 3.6, 4 if len(taken) == 1 else 2, **(half if len(taken) == 1 else {"participants": 1})),
        {"t": 6.0, "event": Event.NODE_ADDED, "node": "d", "part": "burst"},
        {"t": 6.8, "event": Event.RESUME, "step": 40, "round": 3, "node": "a"},
        *_steps(41, 50, 7.0, 6, **size),
    ]
    return Timeline(events, [])


def test_a_reclaim_is_followed_to_the_core_and_back_to_full_size():
    (r,) = reclaims(_run())
    assert (r.nodes, r.core_nodes, r.full_nodes, r.grace_s, r.lowest_nodes) == (1, 2, 3, 5.0, 2)
    assert not r.below_core
    assert round(r.at_core_s, 2) == 0.6 and r.back_t == 6.0 and round(r.grown_back_s, 2) == 1.0
    assert r.rounds_to_grow_back == 1
    assert reclaim_lines(r, 0.0) == [
        "  reclaim at 3.0 s: the owners' work took back 1 borrowed node(s) (a grace of 5 s); the job's core: 2 of 3 "
        "node(s)",
        "    trained at 2 node(s) at the fewest, at its core 0.60 s after the reclaim",
        "    capacity free again at 6.0 s: back at 3 node(s) 1.00 s later, in 1 round(s)",
    ]


def test_per_step_counts_the_quorums_groups_and_no_rounds():
    (r,) = reclaims(_run(per_step=True))
    assert (r.lowest_nodes, r.rounds_to_grow_back) == (2, None)
    assert reclaim_lines(r, 0.0)[-1] == "    capacity free again at 6.0 s: back at 3 node(s) 1.00 s later"


def test_a_core_node_taken_with_the_borrowed_ones_is_below_the_core():
    (r,) = reclaims(_run(taken=("b", "c"), notice_s=None))
    assert (r.nodes, r.grace_s, r.lowest_nodes, r.below_core) == (2, None, 1, True)
    assert "(no grace period)" in reclaim_lines(r, 0.0)[0]
    assert "trained at 1 node(s) at the fewest (BELOW its core)" in reclaim_lines(r, 0.0)[1]


def test_a_run_without_a_reclaim_has_none():
    run = _run()
    for e in run.events:
        e.pop("cause", None)
    assert reclaims(run) == []

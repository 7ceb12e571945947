"""The verdict on a script of one's own (lab/drill/findings.py): each finding from what its
workers did, table-driven, and none where the script behaved."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from lab.drill.findings import script_findings
from lab.drill.script_runs import FileUse, Position, ScriptRound, WorkerRun
from lab.vocab.script_findings import (
    NOTICE_NOT_SAVED,
    RANKS_ENDED_EARLY,
    RANKS_RESUMED_APART,
    RESTARTED_FROM_SCRATCH,
    SLOW_RECOVERY,
)

EVICT = {"t": 10.0, "event": "evict", "node": "node-2", "kind": "hard"}
NOTICE = {"t": 10.0, "event": "evict", "node": "node-2", "kind": "notice"}


def _worker(rank, node, *, loaded=(), saved=(), code=0, error=None, position=None, started=0.0):
    return WorkerRun(
        node=node,
        rank=rank,
        local_rank=0,
        world_size=3,
        started=started,
        loaded=[FileUse(started + 0.1, p, "torch.load", 100, 5.0) for p in loaded],
        saved=[FileUse(t, p, "torch.save", 100, t) for t, p in saved],
        ended=None if code is None else 30.0,
        code=code,
        error=error,
        position=position,
    )


def _first_round(saved=((5.0, "/ckpt/snapshot.pt"),)):
    return ScriptRound(
        1,
        0.0,
        [
            _worker(0, "node-0", saved=saved, code=None),
            _worker(1, "node-1", code=None),
            _worker(2, "node-2", code=None),
        ],
    )


def _after(*workers):
    return ScriptRound(2, 11.0, list(workers))


def _names(rounds, events=(EVICT,), evictions=(), accepted=()):
    found = script_findings(rounds, list(events), list(evictions), workdir="/w", accepted=accepted)
    return [(f.name, f.accepted) for f in found], found


def test_every_rank_resuming_from_the_shared_snapshot_and_finishing_passes():
    resumed = _after(
        *(_worker(r, n, loaded=["/ckpt/snapshot.pt"], started=11.0) for r, n in ((0, "node-0"), (1, "node-1")))
    )
    assert _names([_first_round(), resumed])[0] == []


def test_a_node_local_snapshot_is_ranks_resumed_apart():
    resumed = _after(
        _worker(0, "node-0", loaded=["/w/nodes/node-0/snapshot.pt"], position=Position("epoch", 165, 300), started=11),
        _worker(1, "node-1", position=None, started=11, code=1, error="RuntimeError"),
    )
    names, found = _names([_first_round(saved=((5.0, "/w/nodes/node-0/snapshot.pt"),)), resumed])
    assert names == [(RANKS_RESUMED_APART, False), (RANKS_ENDED_EARLY, False)]
    assert found[0].text.startswith(
        "ranks resumed from different places after the eviction of node-2 (hard): rank 0 (node-0) resumed from "
        "nodes/node-0/snapshot.pt (epoch 165 by its output); rank 1 (node-1) loaded no checkpoint and started over"
    )
    assert "not on a node's own disk" in found[0].text


def test_copies_of_one_snapshot_on_each_node_loaded_by_every_rank_are_apart_too():
    """Every node kept its own copy: the ranks agree now, by luck, and a new node would not."""
    resumed = _after(
        _worker(0, "node-0", loaded=["/w/nodes/node-0/snap.pt"], started=11),
        _worker(1, "node-1", loaded=["/w/nodes/node-1/snap.pt"], started=11),
    )
    assert _names([_first_round(), resumed])[0] == [(RANKS_RESUMED_APART, False)]


def test_ranks_printing_far_apart_positions_resumed_apart():
    resumed = _after(
        _worker(0, "node-0", loaded=["/c/a.pt"], position=Position("epoch", 40, 50), started=11),
        _worker(1, "node-1", loaded=["/c/a.pt"], position=Position("epoch", 0, 10), started=11),
    )
    assert _names([_first_round(), resumed])[0] == [(RANKS_RESUMED_APART, False)]


@pytest.mark.parametrize(
    ("first", "said"),
    [
        (
            ((5.0, "/ckpt/snapshot.pt"),),
            "a checkpoint had been saved (/ckpt/snapshot.pt, 5 s before) but no rank loaded",
        ),
        ((), "the script saved no checkpoint at all"),
    ],
    ids=["saved-never-loaded", "never-saved"],
)
def test_workers_that_load_nothing_after_an_eviction_restarted_from_scratch(first, said):
    resumed = _after(_worker(0, "node-0", started=11), _worker(1, "node-1", started=11))
    names, found = _names([_first_round(saved=first), resumed])
    assert names == [(RESTARTED_FROM_SCRATCH, False)]
    assert found[0].text.startswith("the job restarted from the beginning after the eviction of node-2 (hard): ")
    assert said in found[0].text


def test_a_first_save_after_the_eviction_is_named_as_too_late():
    resumed = _after(
        _worker(0, "node-0", saved=[(40.0, "/ckpt/final.pt")], started=11), _worker(1, "node-1", started=11)
    )
    names, found = _names([_first_round(saved=()), resumed])
    assert names == [(RESTARTED_FROM_SCRATCH, False)]
    assert "no checkpoint had been saved yet (the script's first save came 30 s after it)" in found[0].text


def test_a_notice_with_no_save_before_the_workers_went_is_work_lost():
    resumed = _after(
        *(_worker(r, n, loaded=["/ckpt/snapshot.pt"], started=11) for r, n in ((0, "node-0"), (1, "node-1")))
    )
    names, found = _names([_first_round(), resumed], events=(NOTICE,))
    assert names == [(NOTICE_NOT_SAVED, False)]
    assert (
        "node-2 was given a notice and no rank saved a checkpoint before its workers went (its last save was 5.0 s"
        in (found[0].text)
    )


def _trained_at(round_, **steps_by_rank):
    """`round_` with the times its workers began an optimizer step first since they started or
    last saved (rank -> times)."""
    for w in round_.workers:
        w.trained = list(steps_by_rank.get(f"rank{w.rank}", ()))
    return round_


def test_a_notice_that_finds_the_newest_save_current_lost_nothing():
    """Rank 0 saved at 9.9 s, just before the notice at 10 s, and began no step after it: its
    notice save found that step saved and wrote nothing again. Lost: nothing."""
    resumed = _after(
        *(_worker(r, n, loaded=["/ckpt/step-120.pt"], started=11) for r, n in ((0, "node-0"), (1, "node-1")))
    )
    saves = ((5.0, "/ckpt/step-60.pt"), (9.9, "/ckpt/step-120.pt"))
    current = _trained_at(_noticed_round(saves, node2_code=0), rank0=(0.5, 5.1), rank1=(0.5,), rank2=(0.5,))
    assert _names([current, resumed], events=(NOTICE,))[0] == []
    # A step begun after that save is training it does not hold: work lost.
    stale = _trained_at(_noticed_round(saves, node2_code=0), rank0=(0.5, 5.1, 9.95), rank1=(0.5,), rank2=(0.5,))
    assert _names([stale, resumed], events=(NOTICE,))[0] == [(NOTICE_NOT_SAVED, False)]
    # No optimizer step of the saver's was seen (a hand-written update): unknown, so said.
    unseen = _trained_at(_noticed_round(saves, node2_code=0), rank1=(0.5,), rank2=(0.5,))
    assert _names([unseen, resumed], events=(NOTICE,))[0] == [(NOTICE_NOT_SAVED, False)]
    # The newest save came from an earlier round: the round the notice came in trained since.
    earlier = _trained_at(_noticed_round((), node2_code=0), rank0=(0.5,), rank1=(0.5,), rank2=(0.5,))
    first = _first_round(saved=((0.2, "/ckpt/step-0.pt"),))
    earlier.t = 0.3
    assert _names([first, earlier, resumed], events=(NOTICE,))[0] == [(NOTICE_NOT_SAVED, False)]


def _noticed_round(rank0_saves, node2_saves=(), node2_code=None):
    """node-2's worker given the notice at 10 s: `node2_code` None, it never returned."""
    return ScriptRound(
        1,
        0.0,
        [
            _worker(0, "node-0", saved=rank0_saves, code=None),
            _worker(1, "node-1", code=None),
            _worker(2, "node-2", saved=node2_saves, code=node2_code),
        ],
    )


def test_a_save_in_the_notices_window_counts_only_if_the_noticed_workers_took_the_notice():
    resumed = _after(
        *(_worker(r, n, loaded=["/ckpt/snapshot.pt"], started=11) for r, n in ((0, "node-0"), (1, "node-1")))
    )
    periodic = ((5.0, "/ckpt/snapshot.pt"), (10.5, "/ckpt/snapshot.pt"))
    # The noticed worker caught SIGTERM and exited: rank 0's save in the window was the job's answer.
    assert _names([_noticed_round(periodic, node2_code=143), resumed], events=(NOTICE,))[0] == []
    # The noticed worker saved itself, then was stopped.
    assert _names([_noticed_round(periodic[:1], node2_saves=periodic[1:]), resumed], events=(NOTICE,))[0] == []
    # SIGTERM stopped it and it saved nothing: rank 0's periodic save fell in the window by chance.
    names, found = _names([_noticed_round(periodic), resumed], events=(NOTICE,))
    assert names == [(NOTICE_NOT_SAVED, False)]
    assert "its workers never returned from SIGTERM nor saved" in found[0].text
    assert "a periodic save came 0.5 s after the notice by chance" in found[0].text


def test_ranks_of_the_last_round_that_did_not_finish_are_named():
    last = _after(
        _worker(0, "node-0", loaded=["/ckpt/s.pt"], position=Position("epoch", 10, 300), started=11),
        _worker(
            1,
            "node-1",
            loaded=["/ckpt/s.pt"],
            position=Position("epoch", 10, 150),
            code=1,
            error="RuntimeError",
            started=11,
        ),
        _worker(2, "node-3", loaded=["/ckpt/s.pt"], code=None, started=11),
    )
    names, found = _names([_first_round(), last])
    assert names == [(RANKS_ENDED_EARLY, False)]
    assert found[0].text.startswith(
        "rank 0 (node-0) finished, but ranks 1, 2 (node-1, node-3) ended with RuntimeError (exit 1) / was stopped"
    )
    assert "they got to epoch 150 of 300" in found[0].text


def test_a_recovery_far_slower_than_the_detection_names_torchs_kill_grace():
    ev = SimpleNamespace(node="node-2", t=10.0, recovery_s=None, restarted_s=31.2, detected_s=0.9, rendezvous_s=31.0)
    running = _first_round()
    for w in running.workers:
        w.group_at, w.group_timeout_s = "train.py:40", None
    names, found = _names([running], events=(), evictions=[ev])
    assert names == [(SLOW_RECOVERY, False)]
    assert "torch waited its 30 s and killed them" in found[0].text and "timeout=timedelta(seconds=60)" in found[0].text
    assert "init_process_group at train.py:40 has no timeout (torch's default: 30 minutes)" in found[0].text
    quick = SimpleNamespace(node="node-2", t=10.0, recovery_s=None, restarted_s=2.0, detected_s=0.9, rendezvous_s=1.5)
    assert _names([], events=(), evictions=[quick])[0] == []


def test_a_slow_start_after_survivors_stopped_promptly_is_not_the_scripts_habit():
    """New workers slow to start (a loaded machine, heavy imports) while the survivors' stopped
    at once: no finding; survivors that ended late, or never said, are the script's."""
    ev = SimpleNamespace(node="node-2", t=10.0, recovery_s=None, restarted_s=16.0, detected_s=0.9, rendezvous_s=3.0)
    running = _first_round()
    for w in running.workers:
        w.ended, w.code = 12.0, 143
    assert _names([running], events=(), evictions=[ev])[0] == []
    late = dataclasses.replace(running.workers[1], ended=10.0 + 0.9 + 14.0)
    running.workers[1] = late
    assert _names([running], events=(), evictions=[ev])[0] == [(SLOW_RECOVERY, False)]
    running.workers[1] = dataclasses.replace(late, ended=None, code=None)
    assert _names([running], events=(), evictions=[ev])[0] == [(SLOW_RECOVERY, False)]
    # The evicted node's own worker never says: it is no survivor.
    running.workers[1] = dataclasses.replace(late, ended=12.0, code=143)
    running.workers[2] = dataclasses.replace(running.workers[2], ended=None, code=None)
    assert _names([running], events=(), evictions=[ev])[0] == []


def test_an_accepted_finding_is_kept_and_marked():
    resumed = _after(_worker(0, "node-0", started=11), _worker(1, "node-1", started=11))
    names, found = _names([_first_round(), resumed], accepted=[RESTARTED_FROM_SCRATCH])
    assert names == [(RESTARTED_FROM_SCRATCH, True)] and found[0].line().endswith(
        f"[{RESTARTED_FROM_SCRATCH}, accepted]"
    )


def test_warm_up_joins_are_no_membership_change():
    """A node slow to start joins in a round of its own before anything trained: no finding."""
    warm = {"t": 1.0, "event": "node_added", "node": "node-2"}
    rounds = [
        ScriptRound(1, 0.0, [_worker(0, "node-0", code=None)]),
        ScriptRound(2, 2.0, [_worker(0, "node-0", started=2)]),
    ]
    assert _names(rounds, events=(warm,))[0] == []


def test_resuming_from_a_checkpoint_saved_long_before_the_eviction_is_near_the_beginning():
    """A save at the start and none until the end: the ranks load it, and lose most of the work."""
    early = _first_round(saved=((1.0, "/ckpt/snapshot.pt"),))
    resumed = _after(
        *(_worker(r, n, loaded=["/ckpt/snapshot.pt"], started=11) for r, n in ((0, "node-0"), (1, "node-1")))
    )
    for w in resumed.workers:
        w.loaded = [FileUse(11.1, "/ckpt/snapshot.pt", "torch.load", 100, 1.0, "train.py:30")]
    resumed.workers[0].saved = [FileUse(40.0, "/ckpt/snapshot.pt", "torch.save", 100, 40.0, "train.py:60")]
    names, found = _names([early, resumed])
    assert names == [(RESTARTED_FROM_SCRATCH, False)]
    assert found[0].text.startswith(
        "the job restarted from near the beginning after the eviction of node-2 (hard): the newest checkpoint any "
        "rank loaded (/ckpt/snapshot.pt) was saved 9 s before it, of 10 s of training and its next save came 30 s "
        "after it, at train.py:60"
    )


def _printing(rank: int, node: str, first: int, last: int, **kw) -> WorkerRun:
    return _worker(rank, node, position=Position("epoch", first, last), code=None, **kw)


def test_a_restart_from_near_the_beginning_is_counted_in_the_epochs_the_workers_printed():
    """A node slow to start restarted the workers during warm-up (0 s to 8 s: one epoch); the
    round after that trained epochs 1 to 40 and its save at the start was all it saved. Counted
    in seconds the resume lost 5 of 10 s, half; in the epochs the workers printed, 39 of 40."""
    warm_up = ScriptRound(1, 0.0, [_printing(r, f"node-{r}", 0, 1) for r in range(3)])
    running = ScriptRound(2, 8.0, [_printing(r, f"node-{r}", 1, 40, started=8.0) for r in range(3)])
    resumed = _after(*(_printing(r, f"node-{r}", 1, 1, loaded=["/ckpt/snapshot.pt"], started=11) for r in range(2)))
    names, found = _names([warm_up, running, resumed])
    assert names == [(RESTARTED_FROM_SCRATCH, False)]
    assert found[0].text.startswith("the job restarted from near the beginning after the eviction of node-2 (hard)")
    # Resumed from epoch 38 of 40: little lost, whatever the seconds say.
    resumed_late = _after(
        *(_printing(r, f"node-{r}", 38, 38, loaded=["/ckpt/snapshot.pt"], started=11) for r in range(2))
    )
    assert _names([warm_up, running, resumed_late])[0] == []

"""A watched script's rounds read back (lab/drill/script_runs.py): positions from what workers
print, rounds from their events, each round's output from its own folder."""

from __future__ import annotations

import pytest

from lab.drill.script_runs import Position, described, position_of, read_positions, script_rounds
from lab.drill.timeline import ROUND_SPREAD_S


@pytest.mark.parametrize(
    ("lines", "position"),
    [
        (["Resuming training from snapshot at Epoch 165", "Epoch 166 | Training snapshot saved"], ("epoch", 165, 166)),
        (["[GPU0] Epoch 3 | Batchsize: 32 | Steps: 16", "[GPU0] Epoch 4 | Batchsize: 32 | Steps: 16"], ("epoch", 3, 4)),
        (["Epoch: [2][ 10/100]\tTime 0.1", "Epoch: [2][ 20/100]", "Epoch: [3][  0/100]"], ("epoch", 2, 3)),
        (["step 120 loss 0.5", "step=130 loss 0.4", "Iter 7"], ("step", 120, 130)),
        (["Iteration #5", "iteration: 9"], ("iter", 5, 9)),
        (["loading data", "done"], None),
    ],
)
def test_a_workers_position_is_what_its_output_counts(lines, position):
    found = position_of(lines)
    assert (found.kind, found.first, found.last) == position if position else found is None


def _event(t, event, rank, round_, node, **fields):
    return {
        "t": t,
        "event": event,
        "rank": rank,
        "group_rank": rank,
        "world_size": 2,
        "round": round_,
        "node": node,
        **fields,
    }


def test_rounds_group_workers_by_their_round_and_keep_what_each_did():
    events = [
        _event(1.0, "script_started", 0, 111, "node-0"),
        _event(1.1, "script_started", 1, 111, "node-1"),
        _event(2.0, "script_saved", 0, 111, "node-0", path="/c/s.pt", api="torch.save", bytes=10, mtime=2.0),
        _event(5.0, "evict", 1, None, "node-1"),  # not a worker's: no round of its own
        _event(6.0, "script_started", 0, 222, "node-0"),
        _event(6.0, "script_started", 1, 222, "node-3"),
        _event(6.1, "script_loaded", 0, 222, "node-0", path="/c/s.pt", api="torch.load", bytes=10, mtime=2.0),
        _event(9.0, "script_ended", 0, 222, "node-0", code=0),
        _event(9.1, "script_ended", 1, 222, "node-3", code=1, error="RuntimeError"),
    ]
    first, second = script_rounds(events)
    assert [w.node for w in first.workers] == ["node-0", "node-1"] and first.workers[0].saved[0].path == "/c/s.pt"
    zero, one = second.workers
    assert zero.first_load().path == "/c/s.pt" and one.first_load() is None
    assert (zero.how_it_ended(), one.how_it_ended()) == ("finished", "ended with RuntimeError (exit 1)")
    assert first.workers[1].how_it_ended() == "was stopped (it never returned)"


def test_a_round_that_meets_an_earlier_rounds_master_port_again_is_a_round_of_its_own():
    """torchrun draws each round's master port anew: a long job meets one again. The third
    round has the first's port; merged into it, the first round would seem to load what the
    third one did, and the third round would be missing."""
    events = [
        _event(1.0, "script_started", 0, 111, "node-0"),
        _event(1.1, "script_started", 1, 111, "node-1"),
        _event(6.0, "script_started", 0, 222, "node-0"),
        _event(6.0, "script_started", 1, 222, "node-3"),
        _event(1.0 + 3 * ROUND_SPREAD_S, "script_started", 0, 111, "node-4"),
        _event(1.1 + 3 * ROUND_SPREAD_S, "script_started", 1, 111, "node-5"),
        _event(1.2 + 3 * ROUND_SPREAD_S, "script_loaded", 0, 111, "node-4", path="/c/s.pt", api="torch.load"),
    ]
    first, second, third = script_rounds(events)
    assert [w.node for w in first.workers] == ["node-0", "node-1"] and first.workers[0].first_load() is None
    assert [w.node for w in third.workers] == ["node-4", "node-5"] and third.workers[0].first_load().path == "/c/s.pt"
    assert [r.t for r in (first, second, third)] == [1.0, 6.0, 1.0 + 3 * ROUND_SPREAD_S]


def test_each_round_reads_the_output_of_its_own_folder(tmp_path):
    events = [
        _event(1.0, "script_started", 0, 111, "node-0"),
        _event(6.0, "script_started", 0, 222, "node-0"),
    ]
    rounds = script_rounds(events)
    logs = tmp_path / "node-0" / "torchelastic"
    for k, text in ((1, "Epoch 0\nEpoch 1\n"), (2, "Resuming at Epoch 2\nEpoch 3\n")):
        out = logs / "job_abc" / f"round_{k}" / "attempt_0" / "0" / "stdout.log"
        out.parent.mkdir(parents=True)
        out.write_text(text)
    read_positions(rounds, {"node-0": logs, "node-1": tmp_path / "none"})
    assert [r.workers[0].position for r in rounds] == [Position("epoch", 0, 1), Position("epoch", 2, 3)]


def test_a_worker_that_said_where_its_output_went_is_read_there(tmp_path):
    """A start whose workers were stopped before the script ran left a round folder and no
    script_started: counting rounds would read the next round's output as this one's; a worker
    that named its folder is read from it."""
    logs = tmp_path / "node-0" / "torchelastic"
    folder = {}
    for k, text in ((1, "Epoch 0\nEpoch 1\n"), (2, ""), (3, "Resuming at Epoch 2\nEpoch 3\n")):
        out = logs / "job_abc" / f"round_{k}" / "attempt_0" / "0" / "stdout.log"
        out.parent.mkdir(parents=True)
        out.write_text(text)
        folder[k] = str(out.parent)
    events = [
        _event(1.0, "script_started", 0, 111, "node-0", logs=folder[1]),
        _event(6.0, "script_started", 0, 333, "node-0", logs=folder[3]),  # round_2's workers never ran it
    ]
    rounds = script_rounds(events)
    read_positions(rounds, {"node-0": logs})
    assert [r.workers[0].position for r in rounds] == [Position("epoch", 0, 1), Position("epoch", 2, 3)]


def test_a_round_is_described_worker_by_worker():
    events = [
        _event(6.0, "script_started", 0, 222, "node-0"),
        _event(6.0, "script_started", 1, 222, "node-3"),
        _event(6.1, "script_loaded", 0, 222, "node-0", path="/w/ckpt/s.pt", api="torch.load"),
        _event(9.0, "script_ended", 0, 222, "node-0", code=0),
    ]
    (round_,) = script_rounds(events)
    round_.workers[0].position = Position("epoch", 45, 99)
    assert described(round_, "/w") == (
        "rank 0 (node-0) resumed from ckpt/s.pt (epoch 45), finished; "
        "rank 1 (node-3) loaded no checkpoint (position not printed), was stopped (it never returned)"
    )

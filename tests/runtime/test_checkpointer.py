"""The Checkpointer contract (lab.runtime.checkpointer), honoured by both kinds: whole checkpoints
(lab.runtime.checkpoint.WholeCheckpointer) and sharded ones
(lab.runtime.sharded_checkpoint.ShardedCheckpointer), in a process group of one rank."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from lab.runtime.checkpoint import WholeCheckpointer
from lab.runtime.checkpointer import Checkpointer, PeerLost, TrainingState
from lab.runtime.demo import GlobalSampler
from lab.runtime.sharded_checkpoint import ShardedCheckpointer
from lab.runtime.workload import Workload, open_checkpointer

KINDS = {"whole": "tiny", "sharded": "gpt-small"}


@pytest.fixture
def one_rank(tmp_path, inductor_cache_kept):
    """A gloo process group of this process alone, taken down after the test (its optimizer's
    first step sets torch's inductor cache variable: put back)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _open(kind: str, directory) -> Checkpointer:
    args = SimpleNamespace(
        checkpoint_dir=str(directory), checkpoint_writes="rename", keep_checkpoints=3, pinned_staging=False
    )
    return open_checkpointer(
        Workload(KINDS[kind], 64, 0),
        args,
        writer="r0.test",
        device=torch.device("cpu"),
        exclusive=threading.Lock(),
    )


def _trained(step: int, seed: int = 0) -> TrainingState:
    """A small model and its optimizer after a step, at a data position of its own."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    sampler = GlobalSampler(64, 0)
    sampler.advance(40)
    return TrainingState(model, optimizer, sampler, step=step, world_size=1, batches_committed=step * 2)


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


@pytest.mark.parametrize("kind", KINDS)
def test_a_blocking_save_loads_back_the_same_step_state_and_data_position(kind, tmp_path, one_rank):
    checkpointer = _open(kind, tmp_path / "ckpt")
    saved = _trained(step=7)
    record = checkpointer.save(saved, "interval", blocking=True)
    assert record is not None and (record.step, record.reason, record.error) == (7, "interval", None)
    assert record.nbytes > 0 and record.path
    assert checkpointer.newest_step() == 7

    fresh = _trained(step=0, seed=1)  # other weights, not stepped the same
    assert not _same(fresh.model, saved.model)
    choice = checkpointer.choose()
    assert choice is not None and choice.step == 7
    resumed = checkpointer.load(choice, fresh.model, fresh.optimizer)
    assert (resumed.step, resumed.world_size, resumed.batches_committed) == (7, 1, 14)
    assert (resumed.epoch, resumed.position) == (saved.sampler.epoch, saved.sampler.position) == (0, 40)
    assert _same(fresh.model, saved.model)
    moments = [[s["exp_avg"] for s in state.optimizer.state_dict()["state"].values()] for state in (fresh, saved)]
    assert len(moments[0]) == 4 and all(torch.equal(a, b) for a, b in zip(*moments, strict=True))
    assert resumed.fields["path"] == record.path
    checkpointer.close()


@pytest.mark.parametrize("kind", KINDS)
def test_nothing_to_choose_in_an_empty_directory(kind, tmp_path, one_rank):
    checkpointer = _open(kind, tmp_path / "ckpt")
    assert checkpointer.choose() is None
    assert checkpointer.newest_step() is None
    assert checkpointer.wait() is None and checkpointer.finished() is None
    checkpointer.close()


def test_a_sharded_save_goes_on_in_the_background_until_waited_for(tmp_path, one_rank):
    checkpointer = _open("sharded", tmp_path / "ckpt")
    assert not checkpointer.saves_alone
    state = _trained(step=3)
    assert checkpointer.save(state, "interval") is None  # in flight: its record comes later
    checkpointer.wait_for_staging()
    record = checkpointer.wait()
    assert record is not None and (record.step, record.error) == (3, None)
    assert record.fields()["sharded"] is True and record.seconds >= record.blocking_s >= 0
    assert checkpointer.wait() is None and checkpointer.finished() is None  # reported once
    assert checkpointer.choose().step == 3
    assert checkpointer.save_alone(state, "notice") is None  # a rank holds only its shards
    checkpointer.save(_trained(step=4), "interval")
    checkpointer.close()  # waits for the save in flight
    assert checkpointer.wait() is None
    assert checkpointer.newest_step() == 4


def test_a_whole_save_blocks_and_any_rank_can_save_alone(tmp_path, one_rank):
    checkpointer = _open("whole", tmp_path / "ckpt")
    assert checkpointer.saves_alone
    record = checkpointer.save(_trained(step=5), "interval", since=0.0)
    assert record is not None and record.blocking_s > record.seconds  # waited since the start of time
    assert "sharded" not in record.fields()
    assert checkpointer.finished() is None and checkpointer.wait() is None  # nothing was in flight
    again = checkpointer.save_alone(_trained(step=5), "notice")
    assert again.already and again.fields() == {
        "step": 5,
        "reason": "notice",
        "seconds": 0.0,
        "blocking_s": 0.0,
        "already": True,
    }
    alone = checkpointer.save_alone(_trained(step=6), "failure")
    assert (alone.step, alone.already) == (6, False)
    assert checkpointer.newest_step() == 6
    checkpointer.close()


def test_the_kind_is_chosen_by_the_model(tmp_path, one_rank):
    assert isinstance(_open("whole", tmp_path / "a"), WholeCheckpointer)
    sharded = _open("sharded", tmp_path / "b")
    assert isinstance(sharded, ShardedCheckpointer)
    sharded.close()


def test_a_saves_collective_that_fails_is_a_lost_peer_and_its_write_failing_is_not(tmp_path, one_rank, monkeypatch):
    """The trainer leaves for the agent to restart the group (exit 75, never a crash loop) only when
    a save's collective failed (a sharded save's: every rank writes its shards together; one rank
    writes a whole save, with no collective); a write that fails (a full disk) is the save's own
    error, raised as it is so that a persistent fault ends in a crash loop, not in restarts for ever."""
    sharded = _open("sharded", tmp_path / "sharded")
    assert isinstance(sharded, ShardedCheckpointer)

    def collective_fails(*args, **kwargs):
        raise RuntimeError("Connection closed by peer")

    monkeypatch.setattr(sharded.checkpoints, "save", collective_fails)
    with pytest.raises(PeerLost) as lost:
        sharded.save(_trained(step=3), "interval")
    assert str(lost.value.__cause__) == "Connection closed by peer"
    monkeypatch.undo()
    sharded.close()

    checkpointer = _open("whole", tmp_path / "ckpt")
    assert isinstance(checkpointer, WholeCheckpointer)

    def write_fails(*args, **kwargs):
        raise RuntimeError("PytorchStreamWriter failed writing file")

    monkeypatch.setattr(checkpointer, "_write", write_fails)
    with pytest.raises(RuntimeError, match="PytorchStreamWriter") as failed:
        checkpointer.save(_trained(step=3), "interval")
    assert not isinstance(failed.value, PeerLost)

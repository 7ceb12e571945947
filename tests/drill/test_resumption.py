"""Bit-identical resumption on the local target: a job stopped on every node (a spot notice to
each, or all of them SIGKILLed after a checkpoint) and started again at the same world size
trains, at every step, exactly the loss of the same job run without a stop (each step's loss
compared as float.hex, not rounded), at the same data position, and ends with every rank's RNG
stream where the uninterrupted run's ends."""

from __future__ import annotations

import io
from typing import Any

import pytest

from lab.drill.run import DrillConfig, Progress, run_uninterrupted
from lab.local import LocalTarget
from lab.local.procs import wait_until
from lab.vocab import events
from lab.vocab.events import EXIT_DONE, Event, unknown_fields
from lab.vocab.job import JobSpec
from tests.patience import within

pytestmark = pytest.mark.processes  # every run starts etcd, agents and workers

NODES = 2
STEPS = 60
# A step sleeps this long (a simulated accelerator): the stop, once rank 0 reported STOP_AT,
# lands well before the job's end.
STEP_TIME = "0.05"
STOP_AT = 14
# A spot notice's time to save and go (the training script's default, Azure's).
NOTICE_S = 30.0


def _spec(workdir, model: str, checkpoint_every: int, mode: str = "elastic") -> JobSpec:
    """A job of exactly NODES nodes (it starts at that size and no other): in the per-step mode
    every quorum then has every group."""
    return JobSpec(
        name="t",
        min_nodes=NODES,
        max_nodes=NODES,
        fault_tolerance=mode,
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=checkpoint_every,
        script_args=("--model", model, "--steps", str(STEPS), "--step-time", STEP_TIME),
    )


def _uninterrupted(spec: JobSpec, workdir) -> list[dict[str, Any]]:
    """The same job without a stop, in a directory of its own: its events."""
    cfg = DrillConfig(spec=spec, workdir=workdir, nodes=NODES, timeout_s=within(90))
    return run_uninterrupted(cfg, order_seed=0, progress=Progress(out=io.StringIO()))


def _stopped_then_resumed(spec: JobSpec, workdir, *, notice: bool) -> list[dict[str, Any]]:
    """The job on NODES nodes until rank 0 reported step STOP_AT (and, for a kill, a checkpoint
    was saved), then every node stopped at once: a spot notice to each (SIGTERM, as long as the
    job's notice) or SIGKILL; once all are gone, as many new nodes resume the job from its
    checkpoints, to its end. Every event of both."""
    with LocalTarget(spec, workdir / "stopped-then-resumed") as local:
        tail = events.Tail(local.events_file)
        seen: list[dict[str, Any]] = []

        def stop_is_due() -> bool:
            seen.extend(tail.poll())
            steps = [e["step"] for e in seen if e["event"] == Event.STEP]
            saved = [e for e in seen if e["event"] == Event.CHECKPOINT_SAVED]
            return bool(steps) and max(steps) >= STOP_AT and (notice or bool(saved))

        started = [local.add_node() for _ in range(NODES)]
        assert wait_until(stop_is_due, within(60)), "the job did not reach the step to stop at"
        for node in started:
            local.evict(node, NOTICE_S if notice else None)
        assert local.wait(within(60)), "the stopped nodes did not exit"
        for _ in range(NODES):
            local.add_node()
        assert local.wait(within(90)), "the resumed job did not finish"
        return local.events()


def _steps(recorded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in recorded if e["event"] == Event.STEP]


def _rng_at_the_end(recorded: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """Each rank's RNG fingerprint when it finished training (per-step: each group's ranks,
    whose groups are named after nodes that differ from run to run)."""
    return sorted((e["rank"], e["rng"]) for e in recorded if e["event"] == Event.EXIT and e["reason"] == EXIT_DONE)


def _assert_bit_identical(resumed: list[dict[str, Any]], uninterrupted: list[dict[str, Any]]) -> None:
    """Every step the stopped and resumed job trained (those trained again after a resume from
    an older checkpoint too) is the uninterrupted run's step: the same loss, bit for bit, at the
    same world size and data position; the resumed run trained to the end; each rank ends with
    the uninterrupted run's RNG stream."""
    expected = {e["step"]: e for e in _steps(uninterrupted)}
    assert sorted(expected) == list(range(1, STEPS + 1))
    trained = _steps(resumed)
    loads = [e for e in resumed if e["event"] == Event.CHECKPOINT_LOADED]
    assert loads and all(0 < e["step"] < STEPS for e in loads), loads  # resumed before the end
    # A notice can save a step whose event its process never emitted (the step's loss is summed
    # over the ranks at its boundary, where a rank already gone fails the collective): the
    # resume from that step stands for it, and every later step is compared below.
    assert {e["step"] for e in trained} | {e["step"] for e in loads} == set(expected)
    different = [
        (e["step"], e["loss_hex"], expected[e["step"]]["loss_hex"])
        for e in trained
        if (e["loss_hex"], e["world_size"], e["epoch"], e["position"])
        != tuple(expected[e["step"]][k] for k in ("loss_hex", "world_size", "epoch", "position"))
    ]
    assert not different, f"(step, loss, uninterrupted loss) of the steps that differ: {different}"
    assert _rng_at_the_end(resumed) == _rng_at_the_end(uninterrupted) != []
    starts = [e for e in [*resumed, *uninterrupted] if e["event"] == Event.START]
    assert starts and all(e["deterministic"] for e in starts)  # torch's deterministic kernels
    assert [e for e in resumed if unknown_fields(e)] == []


# (model, checkpoint interval, how every node is stopped, mode): the tiny model's checkpoints
# are whole (DDP), a GPT's sharded (FSDP2, DCP). A per-step job's groups given a notice each
# save nothing (each expects its peers to carry on): it is stopped by killing them.
RUNS = {
    "tiny-ddp-notice-to-every-node": ("tiny", 50, True, "elastic"),
    "tiny-ddp-every-node-killed-after-a-checkpoint": ("tiny", 10, False, "elastic"),
    "gpt-small-fsdp2-notice-to-every-node": ("gpt-small", 50, True, "elastic"),
    "tiny-per-step-every-group-killed-after-a-checkpoint": ("tiny", 10, False, "per-step"),
}


@pytest.mark.timeout(240)
@pytest.mark.long
@pytest.mark.parametrize("name", RUNS)
def test_a_job_stopped_on_every_node_resumes_bit_identical(workdir, name):
    model, checkpoint_every, notice, mode = RUNS[name]
    uninterrupted = _uninterrupted(_spec(workdir, model, checkpoint_every, mode), workdir)
    resumed = _stopped_then_resumed(_spec(workdir, model, checkpoint_every, mode), workdir, notice=notice)
    _assert_bit_identical(resumed, uninterrupted)

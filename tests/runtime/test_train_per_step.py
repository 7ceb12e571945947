"""The per-step training script (lab.runtime.train_per_step) on the local target."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from lab.local import LocalTarget
from lab.vocab.job import JobSpec
from tests.patience import within


@pytest.mark.timeout(120)
def test_a_group_that_starts_after_the_job_ended_exits_done_instead_of_waiting_for_a_quorum(workdir):
    """A replacement node after the others finished: it resumes from the job's last checkpoint,
    has no step left to train and exits done without asking for a quorum (none of min_nodes
    groups would form again). One that starts a moment before the end: the test below."""
    spec = JobSpec(
        name="late",
        min_nodes=2,
        max_nodes=3,
        fault_tolerance="per-step",
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=10,
        script_args=("--steps", "20", "--step-time", "0.01"),
    )
    with LocalTarget(spec, workdir / "run") as local:
        first = [local.add_node(), local.add_node()]
        assert local.wait(within(60)), "the job of two groups did not finish"
        assert [n.proc.poll() for n in first] == [0, 0]
        late = local.add_node()
        assert local.wait(within(60)), "the group that came late still waits for a quorum"
        assert late.proc.poll() == 0
        exits = [
            e
            for line in local.events_file.read_text().splitlines()
            if (e := json.loads(line))["event"] == "exit" and e.get("node") == late.name
        ]
        assert [(e["reason"], e["step"]) for e in exits] == [("done", 20)]


# A group waiting for its first quorum, as the job's last checkpoint is written meanwhile.
WAITING_GROUP = """
import threading, time
from types import SimpleNamespace
from lab.runtime.train_per_step import PerStepTraining

class Checkpoints:
    looks = 0
    def newest_step(self):
        Checkpoints.looks += 1
        return 20 if Checkpoints.looks >= 3 else 10  # the others save step 20 and end meanwhile

group = SimpleNamespace(checkpointer=Checkpoints(), args=SimpleNamespace(steps=20), replica="late")
first_quorum = threading.Event()  # never comes
threading.Thread(target=PerStepTraining.leave_if_the_job_ends_first, args=(group, first_quorum), daemon=True).start()
time.sleep(60)
raise SystemExit(3)
"""


@pytest.mark.timeout(60)
def test_a_group_still_waiting_for_its_first_quorum_leaves_once_the_last_checkpoint_is_written(tmp_path, python):
    from lab.vocab.job import ENV_EVENTS_FILE

    events_file = tmp_path / "events.jsonl"
    done = subprocess.run(
        [python, "-c", WAITING_GROUP], env={**os.environ, ENV_EVENTS_FILE: str(events_file)}, timeout=50, check=False
    )
    assert done.returncode == 0
    (exit_event,) = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert (exit_event["event"], exit_event["reason"], exit_event["step"]) == ("exit", "done", 20)


def test_a_steps_collective_timeout_follows_the_slowest_recent_collective():
    from collections import deque
    from datetime import timedelta

    from lab.runtime.per_step_torchft import COLLECTIVE_SAMPLES, derived_collective_timeout

    heal = timedelta(seconds=12)
    assert derived_collective_timeout([], heal) == heal  # nothing measured yet: the heal's bound
    recent: deque[float] = deque([0.004, 0.003, 0.041], maxlen=COLLECTIVE_SAMPLES)
    assert derived_collective_timeout(recent, heal) == timedelta(seconds=0.5)  # a small model: the floor
    recent.append(0.9)  # a large model's all-reduce over a network, or a busy machine
    assert derived_collective_timeout(recent, heal) == timedelta(seconds=9)
    recent.extend([0.004] * COLLECTIVE_SAMPLES)  # the slow one is forgotten after 32 steps
    assert derived_collective_timeout(recent, heal) == timedelta(seconds=0.5)


def test_the_heal_transport_lets_go_of_the_state_it_served_once_the_step_is_over():
    """TorchFT's transport would keep the copy it served (the whole state) until its next heal."""
    from datetime import timedelta

    import torch

    from lab.runtime.per_step_torchft import heal_transport

    timeout = timedelta(seconds=within(10))
    transport = heal_transport("127.0.0.1", timeout)
    try:
        state = {"w": torch.arange(6.0), "step": 3}
        transport.send_checkpoint([1], step=3, state_dict=state, timeout=timeout)
        healed = transport.recv_checkpoint(src_rank=0, metadata=transport.metadata(), step=3, timeout=timeout)
        assert torch.equal(healed["w"], state["w"]) and healed["step"] == 3
        assert transport._state_dict is not None  # held while the step that heals from it runs
        transport.disallow_checkpoint()  # the step committed
        assert transport._state_dict is None and transport._chunks is None
        transport.send_checkpoint([1], step=4, state_dict={"w": torch.ones(2)}, timeout=timeout)  # the next heal
        healed = transport.recv_checkpoint(src_rank=0, metadata=transport.metadata(), step=4, timeout=timeout)
        assert torch.equal(healed["w"], torch.ones(2))
    finally:
        transport.shutdown()


def _two_nodes(workdir, fault_tolerance: str, model: str = "tiny", nproc: int = 1) -> list[dict]:
    """The events of a job of two nodes from start to end, nothing evicted."""
    spec = JobSpec(
        name="twins",
        min_nodes=2,
        max_nodes=2,
        fault_tolerance=fault_tolerance,
        nproc_per_node=nproc,
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=100,
        script_args=("--steps", "8", "--model", model, "--dataset-size", "256", "--batch-size", "4"),
    )
    with LocalTarget(spec, workdir) as local:
        local.add_node()
        local.add_node()
        assert local.wait(within(120)), f"the {fault_tolerance} job of two nodes did not finish"
        return [json.loads(line) for line in local.events_file.read_text().splitlines()]


def _losses(recorded: list[dict]) -> dict[int, set[float]]:
    """Each committed step's loss, as every group (every node) reported it."""
    by_step: dict[int, set[float]] = {}
    for e in recorded:
        if e["event"] == "step" and e.get("rank", 0) == 0:
            by_step.setdefault(e["step"], set()).add(e["loss"])
    return by_step


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("model", "nproc"), [("tiny", 1), ("gpt-small", 2)])
def test_two_groups_trained_without_a_fault_hold_the_same_weights_at_the_end(workdir, model, nproc):
    """Both groups build the same weights from the job's seed: the first quorum copies nothing
    (under the asynchronous quorum, a group that copied the state at step 0 trained a share of
    the batch whose gradients TorchFT zeroed), and every committed step applies the same summed
    gradients at the same learning rate everywhere: the groups end with the same weights, worker
    by worker. A whole replica (tiny) runs the asynchronous quorum; FSDP2 (gpt-small) waits for it."""
    recorded = _two_nodes(workdir, "per-step", model, nproc)
    ends = [e for e in recorded if e["event"] == "exit" and e.get("reason") == "done"]
    by_rank: dict[int, set[str]] = {}
    for e in ends:
        by_rank.setdefault(e["rank"], set()).add(e["weights"])
    assert len(ends) == 2 * nproc and all(len(digests) == 1 for digests in by_rank.values()), by_rank
    losses = _losses(recorded)
    assert sorted(losses) == list(range(1, 9)) and all(len(each) == 1 for each in losses.values()), losses
    assert [(e["replica"], e["rank"], e["step"]) for e in recorded if e["event"] == "healed"] == []


@pytest.mark.timeout(150)
def test_the_per_step_mode_trains_what_the_elastic_mode_trains(workdir):
    """The same job of two nodes in both fault-tolerance modes: the same samples per step, the
    same summed gradients, the same learning rate: the same loss at every step, the first one
    included (a global batch of which one group's share was zeroed would differ from it)."""
    per_step = _losses(_two_nodes(workdir / "per-step", "per-step"))
    elastic = _losses(_two_nodes(workdir / "elastic", "elastic"))
    assert sorted(per_step) == sorted(elastic) == list(range(1, 9))
    for step, (loss,) in elastic.items():
        (mine,) = per_step[step]
        assert mine == pytest.approx(loss, abs=1e-4), (step, mine, loss)

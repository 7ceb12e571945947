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

    from lab.runtime.train_per_step import COLLECTIVE_SAMPLES, derived_collective_timeout

    heal = timedelta(seconds=12)
    assert derived_collective_timeout([], heal) == heal  # nothing measured yet: the heal's bound
    recent: deque[float] = deque([0.004, 0.003, 0.041], maxlen=COLLECTIVE_SAMPLES)
    assert derived_collective_timeout(recent, heal) == timedelta(seconds=0.5)  # a small model: the floor
    recent.append(0.9)  # a large model's all-reduce over a network, or a busy machine
    assert derived_collective_timeout(recent, heal) == timedelta(seconds=9)
    recent.extend([0.004] * COLLECTIVE_SAMPLES)  # the slow one is forgotten after 32 steps
    assert derived_collective_timeout(recent, heal) == timedelta(seconds=0.5)

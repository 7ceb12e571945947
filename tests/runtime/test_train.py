"""lab.runtime.train under real torchrun: resume, data position, sharding across a world-size
change. The agent is the one every target runs (torchrun through lab.runtime.launch, workers
forked warm), and once plain torchrun (`python -m torch.distributed.run`, a new Python per
worker), as a user's own image may run the script."""

import collections
import os
import subprocess
import sys

from lab.runtime.demo import GlobalSampler
from lab.vocab import events


def _torchrun(workdir, nproc, *train_args, env_extra=None, agent="lab.runtime.launch"):
    env = {
        **os.environ,
        "LAB_EVENTS_FILE": str(workdir / "events.jsonl"),
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        **(env_extra or {}),
    }
    cmd = [
        sys.executable,
        "-m",
        agent,
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "lab.runtime.train",
        "--checkpoint-dir",
        str(workdir / "ckpt"),
        *train_args,
    ]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)


def test_sampler_covers_an_epoch_exactly_once_across_world_sizes():
    s = GlobalSampler(size=103, seed=1)
    seen = []
    for world in [2, 2, 3, 3, 3, 1, 4, 4, 4, 4, 4, 4, 4, 4]:
        batch = [s.peek(5, r, world)[0].tolist() for r in range(world)]
        covered = s.peek(5, 0, world)[1]
        epoch = s.epoch
        s.advance(covered)
        seen.extend((epoch, i) for b in batch for i in b)
    first_epoch = sorted(i for e, i in seen if e == 0)
    assert first_epoch == list(range(103))


def test_resume_continues_from_the_saved_step_and_data_position(workdir):
    common = ["--dataset-size", "512", "--batch-size", "16", "--checkpoint-every", "10", "--log-samples"]
    first = _torchrun(workdir, 2, "--steps", "20", *common)
    assert first.returncode == 0, first.stderr[-2000:]
    ev = events.read(workdir / "events.jsonl")
    saved = [e for e in ev if e["event"] == "checkpoint_saved"]
    assert saved[-1]["step"] == 20
    last_step = [e for e in ev if e["event"] == "step"][-1]

    # Go on at another world size: 3 workers instead of 2.
    second = _torchrun(workdir, 3, "--steps", "40", *common)
    assert second.returncode == 0, second.stderr[-2000:]
    ev = events.read(workdir / "events.jsonl")
    loaded = [e for e in ev if e["event"] == "checkpoint_loaded"]
    assert {e["step"] for e in loaded} == {20}
    assert {(e["epoch"], e["position"]) for e in loaded} == {(last_step["epoch"], last_step["position"])}
    steps = [e for e in ev if e["event"] == "step"]
    assert [e["step"] for e in steps] == list(range(1, 41))
    assert {e["world_size"] for e in steps if e["step"] > 20} == {3}

    # Every sample of the epoch was seen exactly once, across the change of world size.
    per_epoch = collections.defaultdict(list)
    for e in ev:
        if e["event"] == "samples":
            per_epoch[e["epoch"]].extend(e["indices"])
    # 512 samples / (16 x 2) = 16 steps per epoch at world 2; epoch 0 ended inside run one
    assert sorted(per_epoch[0]) == list(range(512))
    complete = [e for e in per_epoch if e < max(per_epoch)]
    for epoch in complete:
        assert sorted(per_epoch[epoch]) == list(range(512)), f"epoch {epoch} skipped or repeated samples"


def test_each_rank_resumes_its_own_rng_stream(workdir):
    first = _torchrun(workdir, 2, "--steps", "10", "--checkpoint-every", "5")
    assert first.returncode == 0, first.stderr[-2000:]
    ev = events.read(workdir / "events.jsonl")
    at_exit = {e["rank"]: e["rng"] for e in ev if e["event"] == "exit"}
    assert len(set(at_exit.values())) == 2  # two ranks, two different streams
    second = _torchrun(workdir, 2, "--steps", "12", "--checkpoint-every", "5")
    assert second.returncode == 0, second.stderr[-2000:]
    resumed = {e["rank"]: e["rng"] for e in events.read(workdir / "events.jsonl") if e["event"] == "resume"}
    assert resumed == at_exit


def test_learning_rate_scales_with_world_size(workdir):
    run = _torchrun(workdir, 2, "--steps", "2", "--lr", "0.1", "--lr-scaling", "linear", agent="torch.distributed.run")
    assert run.returncode == 0, run.stderr[-2000:]
    fresh = [e for e in events.read(workdir / "events.jsonl") if e["event"] == "fresh"]
    assert {round(e["lr"], 6) for e in fresh} == {0.2}

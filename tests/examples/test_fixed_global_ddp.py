"""examples/fixed_global_ddp.py under the drill, for real: a user's own DDP script that uses the
project's batch helper keeps its global batch through an eviction and a join, and the drill
sees it end cleanly (it ends its processes with os._exit)."""

from __future__ import annotations

import pytest

from lab.drill.run import DrillConfig, run_drill
from lab.vocab import events
from lab.vocab.job import JobSpec
from lab.vocab.layout import ROOT
from tests.patience import within

pytestmark = pytest.mark.processes

EXAMPLE = ROOT / "examples" / "fixed_global_ddp.py"
MICRO_BATCH = 32
# The example's 4096 samples in steps of 3 x 32: 42 full steps, then the epoch's short 43rd.
STEPS_PER_EPOCH = 43


@pytest.mark.timeout(200)
@pytest.mark.parametrize("eviction", ["hard", "notice"])
def test_the_example_keeps_its_global_batch_through_an_eviction_and_a_join(workdir, eviction):
    spec = JobSpec(
        name="example",
        min_nodes=2,
        max_nodes=3,
        checkpoint_dir=str(workdir / "ckpt"),
        module=None,
        script=str(EXAMPLE),
        script_args=("--steps", "400", "--step-time", "0.04", "--micro-batch", str(MICRO_BATCH)),
    )
    cfg = DrillConfig(
        spec=spec,
        workdir=workdir,
        nodes=3,
        target_steps=None,
        eviction=eviction,
        notice_s=10.0,
        evict_after_s=2,
        scale_out_after_s=2.0,
        timeout_s=within(150),
    )
    report = run_drill(cfg)
    assert report.passed and report.finished and report.findings == [], report.summary()
    recorded = events.read(workdir / "events.jsonl")
    steps = [e for e in recorded if e["event"] == "step"]
    # 4096 samples, 96 a step: every step but an epoch's last covers the job's global batch,
    # at world 2 as at world 3; at world 2 each rank ran two micro-batches.
    by_world = {e["world_size"] for e in steps}
    assert by_world == {2, 3}, by_world
    assert {e["samples"] for e in steps if e["step"] % STEPS_PER_EPOCH} == {3 * MICRO_BATCH}

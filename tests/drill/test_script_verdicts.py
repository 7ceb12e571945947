"""The catalogue of the drill's verdicts on scripts of one's own: one small DDP trainer
(scripts/toy_ddp.py), each habit that loses work under an eviction drilled for real and named,
and the script that does it right passing under a hard kill, a notice and a vanished node."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.drill.run import DrillConfig, run_drill
from lab.vocab.script_findings import RESTARTED_FROM_SCRATCH
from tests.drill.scripts.catalogue import CLASSES, EVICTIONS, RIGHT, toy_drill
from tests.patience import within

pytestmark = [pytest.mark.processes, pytest.mark.long]


def _drill(workdir: Path, eviction: str, *args: str, accept: tuple[str, ...] = ()) -> DrillConfig:
    return toy_drill(workdir, eviction, args, timeout_s=within(150), accept=accept)


def _named(report) -> list[str]:
    return [f["name"] for f in report.findings if not f["accepted"]]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("eviction", EVICTIONS)
def test_a_script_that_resumes_every_rank_from_a_shared_snapshot_passes(workdir, eviction):
    report = run_drill(_drill(workdir, eviction, *RIGHT))
    assert report.passed and report.findings == [], report.summary()
    assert report.finished and report.evictions[0].kind == eviction
    # What the drill saw each rank do after the eviction: all from the shared snapshot.
    after = report.script_rounds[0]
    assert after.startswith(f"workers after the eviction of node-2 ({eviction}): rank 0 (node-0) resumed from ckpt/")
    assert after.count("resumed from ckpt/snapshot.pt (epoch ") == 2, after


# What the first problem says of each class, drilled under the first eviction that it fails.
FIRST_LINES = {
    "node-local-snapshot": "ranks resumed from different places after the eviction of node-2 (hard): rank 0 "
    "(node-0) resumed from nodes/node-0/snapshot.pt",
    # A node slow to start (a loaded machine) restarts the workers during warm-up, and the script's
    # save on SIGTERM then writes an early checkpoint: "from near the beginning" then.
    "save-only-at-end": "the job restarted from ",
    "saved-once-early": "the job restarted from near the beginning after the eviction of node-2 (hard): the newest "
    "checkpoint any rank loaded",
    "no-checkpoint": "the job restarted from the beginning after the eviction of node-2 (hard): the script saved no "
    "checkpoint",
    "evicted-before-the-first-snapshot": "the job restarted from ",
    "a-rank-fails-at-the-end": "ranks 0, 2 (node-0, node-3) finished, but rank 1 (node-1) ended with RuntimeError "
    "(exit 1)",
    # "and no rank saved a checkpoint before its workers went", or, when rank 0's periodic save came
    # in the notice's window by chance, "and its workers never returned from SIGTERM nor saved".
    "a-notice-not-saved": "node-2 was given a notice and ",
    "no-collective-timeout": "the workers ran again 3",  # 30 s and more: torch's wait before it kills them
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", FIRST_LINES)
def test_a_habit_that_loses_work_fails_the_drill_with_its_cause_first(workdir, case):
    args, deserved = CLASSES[case]
    eviction = next(e for e in EVICTIONS if deserved[e])
    report = run_drill(_drill(workdir, eviction, *args))
    assert not report.passed, report.summary()
    assert set(deserved[eviction]) <= set(_named(report)), report.summary()
    assert report.problems[0].startswith(FIRST_LINES[case]), report.problems[0]


@pytest.mark.timeout(200)
def test_an_accepted_finding_passes_and_stays_in_the_report(workdir):
    report = run_drill(_drill(workdir, "hard", "--no-save", *RIGHT[1:], accept=(RESTARTED_FROM_SCRATCH,)))
    assert report.passed, report.summary()
    assert [(f["name"], f["accepted"]) for f in report.findings] == [(RESTARTED_FROM_SCRATCH, True)]
    assert f"ACCEPTED ({RESTARTED_FROM_SCRATCH}, with --accept): the job restarted from the beginning" in (
        report.summary()
    )


@pytest.mark.timeout(200)
def test_a_script_that_reports_its_steps_is_measured_as_the_demo_is(workdir):
    """One call per step (lab.runtime.report_step): the steps lost at the eviction, the recovery
    to the first step at the new world size and the loss, as for the project's own trainer."""
    report = run_drill(_drill(workdir, "hard", *RIGHT, "--report-steps"))
    assert report.passed and report.emits_events and report.finished, report.summary()
    (ev,) = report.evictions
    assert ev.recovery_s is not None and ev.world_after == 2
    assert ev.lost_steps is not None and ev.lost_steps < 5, report.summary()  # a snapshot every 5 epochs
    assert report.final_step == 200 and report.loss_curve
    assert "final step: 200 (as the script counts)  (finished)" in report.summary()

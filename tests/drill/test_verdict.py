"""The drill's verdict (lab/drill/verdict.py): what a run saw in, named findings and pass or fail
out. Each case names what the run saw; each rule is needed by a case (removing it changes one)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from lab.drill import verdict as verdict_module
from lab.drill.ledger import NOT_KEPT, EpochTally, SampleLedger
from lab.drill.reclaim import Reclaim
from lab.drill.report import DrillReport, Eviction, RendezvousOutage, Scaling, StillRunning
from lab.drill.timeline import Timeline
from lab.drill.verdict import ClusterSeen, Finding, LocalSeen, Observed, judged, verdict
from lab.vocab import drill_findings as kinds
from lab.vocab.events import Event
from lab.vocab.script_findings import RANKS_ENDED_EARLY, RANKS_RESUMED_APART, RESTARTED_FROM_SCRATCH

RECOVERED = Eviction(node="node-2", kind="hard", t=10.0, world_before=3, world_after=2, recovery_s=2.0, lost_steps=3)
STEPS = [{"t": 1.0, "event": Event.STEP, "step": 1, "world_size": 3}]


def _seen(
    events: list[dict[str, Any]] | None = None,
    local: LocalSeen | None = None,
    cluster: ClusterSeen | None = None,
    **figures: Any,
) -> Observed:
    """A run our trainer reported, that finished its 20 steps after one eviction it recovered
    from, but for what the case changes."""
    report = DrillReport(
        target_steps=20,
        checkpoint_every=10,
        final_step=20,
        finished=True,
        emits_events=True,
        duration_s=30.0,
        restart_rounds=1,
        max_restart_count=1,
        evictions=[RECOVERED],
    )
    return Observed(
        dataclasses.replace(report, **figures), Timeline([*STEPS, *(events or [])], []), local=local, cluster=cluster
    )


def _script(name: str, accepted: bool = False) -> Finding:
    return Finding(name, f"what the script did ({name})", accepted)


def _failed_loop(node: str = "node-0") -> dict[str, Any]:
    return {"t": 5.0, "event": Event.WORKERS_CRASH_LOOP, "node": node, "rank": 0, "attempts": 3, "error": "E"}


NOT_FINISHED = {"finished": False, "final_step": 12}
# An epoch of 24 samples, 3 of them trained twice (in steps 5 and 7).
DOUBLED = EpochTally(
    epoch=1, walked=24, full=True, once=21, doubled=3, lost=0, most=2, first_step=5, last_step=8, doubled_steps=(5, 7)
)
LOST = dataclasses.replace(DOUBLED, once=21, doubled=0, lost=3, most=1, doubled_steps=())
# The borrowed node-2 taken back at 10 s with a grace of 25 s: the job at its core of 2, back at 3.
RECLAIMED = Reclaim(
    t=10.0,
    nodes=1,
    core_nodes=2,
    full_nodes=3,
    grace_s=25.0,
    lowest_nodes=2,
    back_t=20.0,
    grown_back_s=1.0,
    taken_nodes=("node-2",),
)
TAKEN_BACK = dataclasses.replace(RECOVERED, kind="notice", lost_steps=0, cause="reclaim")
# The job trained at its full size to its end: the borrowed nodes trained on through their grace.
OUTRUN = dataclasses.replace(RECLAIMED, lowest_nodes=3, back_t=None, grown_back_s=None)
CONVERGED = {"summary": "  convergence: fine", "passed": True}
DIVERGED = {"summary": "  convergence: loss 2.0 vs 1.0", "passed": False}

# (what the run saw, the names of the findings that fail it, in the report's order)
CASES = [
    pytest.param(_seen(), [], id="a-recovered-finished-run-passes"),
    pytest.param(_seen(**NOT_FINISHED), [kinds.NOT_FINISHED], id="not-finished"),
    pytest.param(
        _seen(outages=[RendezvousOutage(t=5.0)]), [kinds.RENDEZVOUS_NOT_BACK], id="rendezvous-server-never-back"
    ),
    pytest.param(
        _seen(outages=[RendezvousOutage(t=5.0, down_s=3.0)], **NOT_FINISHED),
        [kinds.NOT_FINISHED, kinds.NO_TRAINING_AFTER_OUTAGE],
        id="no-training-after-the-outage",
    ),
    pytest.param(
        _seen(outages=[RendezvousOutage(t=5.0, down_s=3.0, stall_s=1.0)]), [], id="training-went-on-after-the-outage"
    ),
    pytest.param(
        _seen([{"t": 6.0, "event": Event.RDZV_GAVE_UP, "node": "node-1", "down_s": 600}]),
        [kinds.RENDEZVOUS_GIVEN_UP],
        id="agents-gave-up-on-the-rendezvous",
    ),
    pytest.param(_seen([_failed_loop()]), [kinds.CRASH_LOOP], id="an-agent-gave-up-on-a-crash-loop"),
    pytest.param(
        _seen(
            [
                {"t": 2.0, "event": Event.STEP, "step": 2, "world_size": 3, "participants": 3, "replica": "g1"},
                *({"t": 3.0 + i, "event": Event.HEALED, "step": 3 + i, "replica": "g1"} for i in range(3)),
            ]
        ),
        [kinds.TURN_TAKING],
        id="per-step-groups-take-turns",
    ),
    pytest.param(
        _seen([{"t": 9.0, "event": Event.K8S_JOB, "condition": "Failed", "reason": "R", "message": "m"}]),
        [kinds.JOB_FAILED],
        id="the-pytorchjob-failed",
    ),
    pytest.param(
        _seen(scaling=[Scaling(t=5.0, from_nodes=3, to_nodes=2)]), [kinds.NEVER_SCALED], id="never-trained-when-scaled"
    ),
    pytest.param(
        _seen(evictions=[dataclasses.replace(RECOVERED, lost_steps=11)]),
        [kinds.LOST_TOO_MUCH],
        id="lost-more-than-an-interval",
    ),
    pytest.param(
        _seen(evictions=[dataclasses.replace(RECOVERED, recovery_s=None)]),
        [kinds.NOT_RECOVERED],
        id="no-step-at-a-new-world-size",
    ),
    pytest.param(
        _seen(evictions=[dataclasses.replace(RECOVERED, kind="notice", recovery_s=None, finished_within=True)]),
        [],
        id="the-job-trained-through-a-notice-to-its-end",
    ),
    pytest.param(_seen(evictions=[TAKEN_BACK], reclaims=[RECLAIMED]), [], id="a-reclaim-the-job-went-through"),
    pytest.param(
        _seen(evictions=[TAKEN_BACK], reclaims=[dataclasses.replace(RECLAIMED, lowest_nodes=1)]),
        [kinds.BELOW_CORE],
        id="below-its-core-after-a-reclaim",
    ),
    pytest.param(
        _seen(evictions=[dataclasses.replace(TAKEN_BACK, lost_steps=4)], reclaims=[RECLAIMED]),
        [kinds.RECLAIM_LOST_STEPS],
        id="a-reclaim-with-a-grace-lost-steps",
    ),
    pytest.param(
        _seen(
            evictions=[dataclasses.replace(TAKEN_BACK, kind="hard", lost_steps=4)],
            reclaims=[dataclasses.replace(RECLAIMED, grace_s=None)],
        ),
        [],
        id="a-reclaim-without-a-grace-may-lose-up-to-an-interval",
    ),
    pytest.param(
        _seen(
            evictions=[TAKEN_BACK],
            reclaims=[dataclasses.replace(RECLAIMED, grown_back_s=None, trained_after_back_s=60.0)],
        ),
        [kinds.NOT_GROWN_BACK],
        id="not-grown-back-once-the-capacity-was-free",
    ),
    pytest.param(
        _seen(
            evictions=[TAKEN_BACK],
            reclaims=[dataclasses.replace(RECLAIMED, grown_back_s=None, trained_after_back_s=2.0)],
        ),
        [],
        id="a-job-that-ended-before-the-nodes-given-back-joined",
    ),
    pytest.param(
        _seen(evictions=[TAKEN_BACK], reclaims=[OUTRUN]),
        [kinds.RECLAIM_OUTRUN],
        id="a-job-that-ended-before-its-borrowed-nodes-left",
    ),
    pytest.param(
        _seen(ledger=SampleLedger.of([DOUBLED, LOST], 0)),
        [kinds.SAMPLES_DOUBLED, kinds.SAMPLES_LOST],
        id="samples-trained-twice-and-never",
    ),
    pytest.param(_seen(ledger=SampleLedger(kept=False, why_not=NOT_KEPT)), [], id="no-sample-ledger-fails-nothing"),
    # What the local drill saw itself.
    pytest.param(_seen(local=LocalSeen()), [], id="local-a-recovered-finished-run-passes"),
    pytest.param(
        _seen(local=LocalSeen(rendezvous_died=("etcd exited 1 at 3.0 s",), timed_out_s=60.0)),
        [kinds.RENDEZVOUS_DIED, kinds.TIMED_OUT],
        id="local-the-server-died-first-then-the-timeout",
    ),
    pytest.param(
        _seen(
            local=LocalSeen(timed_out_s=60.0),
            still_running=[StillRunning("node-0", "worker", 7, "train.py:3", "stacks.txt")],
        ),
        [kinds.TIMED_OUT, kinds.STILL_RUNNING],
        id="local-timed-out-with-a-process-running",
    ),
    pytest.param(
        _seen([_failed_loop()], local=LocalSeen(stopped="the script fails")),
        [kinds.SCRIPT_CRASH_LOOP],
        id="local-the-drills-words-for-a-crash-loop-replace-the-agents",
    ),
    pytest.param(
        _seen(local=LocalSeen(agents_stopped="the script fails")), [], id="local-an-old-crash-loop-fails-nothing-alone"
    ),
    pytest.param(
        _seen([_failed_loop()], local=LocalSeen(agents_stopped="the script fails")),
        [kinds.SCRIPT_CRASH_LOOP],
        id="local-a-crash-loop-its-agents-stopped-on",
    ),
    pytest.param(
        _seen(local=LocalSeen(unrecovered="a worker failed"), **NOT_FINISHED),
        [kinds.NOT_FINISHED, kinds.WORKER_FAILED],
        id="local-the-failure-that-ended-the-job",
    ),
    pytest.param(
        _seen(local=LocalSeen(unrecovered="a worker failed")), [], id="local-a-failure-of-a-passing-drill-is-no-problem"
    ),
    pytest.param(
        _seen(local=LocalSeen(failures=2, timed_out_s=60.0)),
        [kinds.TIMED_OUT, kinds.NO_FAILURE_ENDED],
        id="local-timed-out-every-failure-recovered",
    ),
    pytest.param(
        _seen(local=LocalSeen(), node_local_checkpoints=["node-0/ckpt.pt"], **NOT_FINISHED),
        [kinds.NOT_FINISHED, kinds.NODE_LOCAL_CHECKPOINTS],
        id="local-node-local-checkpoints-of-a-failing-drill",
    ),
    pytest.param(
        _seen(local=LocalSeen(), node_local_checkpoints=["node-0/ckpt.pt"]),
        [],
        id="local-node-local-checkpoints-of-a-passing-drill",
    ),
    pytest.param(
        _seen(local=LocalSeen(script_findings=(_script(RANKS_RESUMED_APART),)), node_local_checkpoints=["n/c.pt"]),
        [RANKS_RESUMED_APART],
        id="local-node-local-checkpoints-said-by-the-scripts-finding",
    ),
    pytest.param(_seen(local=LocalSeen(), evictions=[]), [kinds.NO_FAULT], id="local-no-eviction-happened"),
    pytest.param(_seen(local=LocalSeen(fault="scale")), [kinds.NO_FAULT], id="local-no-scaling-happened"),
    pytest.param(
        _seen(local=LocalSeen(rendezvous_died=("etcd exited",)), evictions=[]),
        [kinds.RENDEZVOUS_DIED],
        id="local-no-eviction-because-the-server-died",
    ),
    pytest.param(
        _seen(local=LocalSeen(baseline_unfinished=(2, 3))),
        [kinds.BASELINE_UNFINISHED],
        id="local-an-uninterrupted-run-did-not-finish",
    ),
    pytest.param(_seen(local=LocalSeen(), convergence=DIVERGED), [kinds.NOT_CONVERGED], id="local-loss-diverged"),
    pytest.param(_seen(local=LocalSeen(), convergence=CONVERGED), [], id="local-loss-converged"),
    pytest.param(
        _seen(
            local=LocalSeen(
                script_findings=(_script(RESTARTED_FROM_SCRATCH), _script(RANKS_ENDED_EARLY, accepted=True)),
                stopped="the script fails",
                rendezvous_died=("etcd exited",),
            ),
            **NOT_FINISHED,
        ),
        [kinds.RENDEZVOUS_DIED, kinds.SCRIPT_CRASH_LOOP, RESTARTED_FROM_SCRATCH, kinds.NOT_FINISHED],
        id="local-causes-before-what-they-led-to-accepted-ones-apart",
    ),
    # What the cluster drill saw itself.
    pytest.param(
        _seen(cluster=ClusterSeen(timeout_s=60, full_world=3, evict_at_step=5, evicted=True, job_ended=True)),
        [],
        id="cluster-a-recovered-finished-run-passes",
    ),
    pytest.param(
        _seen(
            cluster=ClusterSeen(
                timeout_s=60, full_world=3, evict_at_step=5, evicted=False, job_ended=False, cleanup_error="gone"
            ),
            evictions=[],
        ),
        [kinds.NEVER_FULL_SIZE, kinds.CLEANUP_FAILED],
        id="cluster-never-at-full-size",
    ),
    pytest.param(
        _seen(
            cluster=ClusterSeen(timeout_s=60, full_world=3, evict_at_step=5, evicted=True, job_ended=False),
            **NOT_FINISHED,
        ),
        [kinds.NOT_FINISHED, kinds.DEADLINE_PASSED],
        id="cluster-the-deadline-passed",
    ),
]


def _names(seen: Observed) -> list[str]:
    return [f.name for f in verdict(seen).failing]


@pytest.mark.parametrize("seen,failing", CASES)
def test_the_verdict_names_what_fails_the_drill_in_order(seen: Observed, failing: list[str]):
    found = verdict(seen)
    assert [f.name for f in found.failing] == failing
    assert found.passed == (not failing)


# The rules of `verdict`: those on the events in their list, the others called by name.
RULES = [pytest.param(rule.__name__, id=rule.__name__) for rule in verdict_module.EVENT_RULES] + [
    pytest.param(name, id=name) for name in ("_timed_out", "_what_ended", "_node_local", "_no_fault", "_baselines")
]


@pytest.mark.parametrize("rule", RULES)
def test_every_rule_is_needed_by_a_case(monkeypatch: pytest.MonkeyPatch, rule: str):
    before = [_names(case.values[0]) for case in CASES]
    event_rules = verdict_module.EVENT_RULES
    if rule in {r.__name__ for r in event_rules}:
        monkeypatch.setattr(verdict_module, "EVENT_RULES", tuple(r for r in event_rules if r.__name__ != rule))
    else:
        monkeypatch.setattr(verdict_module, rule, lambda *args, **kwargs: [])
    assert [_names(case.values[0]) for case in CASES] != before


def test_an_accepted_finding_is_kept_apart_and_fails_nothing():
    ended = _script(RANKS_ENDED_EARLY, accepted=True)
    found = verdict(_seen(local=LocalSeen(script_findings=(ended,))))
    assert found.passed and found.accepted == (ended,) and found.finished


def test_ranks_that_ended_early_leave_the_job_unfinished():
    seen = _seen(local=LocalSeen(script_findings=(_script(RANKS_ENDED_EARLY),)))
    found = verdict(seen)
    assert not found.finished and [f.name for f in found.failing] == [RANKS_ENDED_EARLY]
    assert seen.report.finished, "the figures stay as measured"


def test_the_judged_report_holds_the_verdicts_words_and_the_scripts_findings():
    resumed, accepted = _script(RANKS_RESUMED_APART), _script(RANKS_ENDED_EARLY, accepted=True)
    seen = _seen(local=LocalSeen(script_findings=(resumed, accepted), timed_out_s=60.0))
    report = judged(seen)
    assert report.problems == [
        "the drill timed out after 60 s; remaining nodes were killed",
        f"what the script did ({RANKS_RESUMED_APART}) [{RANKS_RESUMED_APART}]",
    ]
    assert report.findings == [
        {"name": RANKS_RESUMED_APART, "text": resumed.text, "accepted": False},
        {"name": RANKS_ENDED_EARLY, "text": accepted.text, "accepted": True},
    ]
    assert not report.passed and report.finished
    assert seen.report.problems == [], "the measured figures are not edited"
    assert f"  ACCEPTED ({RANKS_ENDED_EARLY}, with --accept): {accepted.text}" in report.summary()


def test_samples_trained_twice_or_never_are_said_per_epoch_with_their_steps():
    found = verdict(_seen(ledger=SampleLedger.of([DOUBLED, LOST], 0))).failing
    assert [f.text for f in found] == [
        "3 samples of epoch 1 were trained twice (steps 5, 7)",
        "3 samples of epoch 1 were never trained (of the 24 its steps 5-8 walked)",
    ]


def test_a_finding_one_may_accept_is_listed_with_its_name():
    assert Finding(RANKS_RESUMED_APART, "apart", accepted=True).line() == f"apart [{RANKS_RESUMED_APART}, accepted]"
    assert Finding(kinds.TIMED_OUT, "the drill timed out").line() == "the drill timed out"


def test_a_reclaim_the_job_outran_says_how_many_steps_would_show_it():
    """A step a second to step 20 at 20 s, the reclaim at 10 s with a grace of 25 s: the nodes would
    have left at 35 s and joined again within JOIN_PATIENCE_S (30 s); at this pace, 65 steps."""
    steps = [{"t": 1.0 + i, "event": Event.STEP, "step": 1 + i, "world_size": 3} for i in range(20)]
    [finding] = verdict(_seen(steps, evictions=[TAKEN_BACK], reclaims=[OUTRUN])).failing
    assert finding.text == (
        "the job ended 10 s after the reclaim at 10.0 s, before its borrowed nodes left (they trained on through "
        "their grace of 25 s): the drill saw it neither shrink nor grow back; run it longer: --steps 65 or more at "
        "this pace, or a shorter --grace"
    )


def test_a_reclaim_in_a_run_without_steps_is_not_judged_outrun():
    """A script that reports no steps says nothing of the sizes it trained at: no finding, no error."""
    seen = _seen(evictions=[TAKEN_BACK], reclaims=[OUTRUN])
    seen = dataclasses.replace(seen, run=Timeline([], []))
    assert kinds.RECLAIM_OUTRUN not in _names(seen)

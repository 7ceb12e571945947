"""The names of the drill's own findings (lab.drill.verdict): what fails a drill whatever the
script, beside the findings on a script of one's own (script_findings.py), which one may accept.
The report shows their words; these names are what the verdict's rules and tests hold them by."""

from __future__ import annotations

# From the job's events and the figures measured from them.
NOT_FINISHED = "not-finished"
RENDEZVOUS_NOT_BACK = "rendezvous-not-back"
NO_TRAINING_AFTER_OUTAGE = "no-training-after-outage"
RENDEZVOUS_GIVEN_UP = "rendezvous-given-up"
CRASH_LOOP = "crash-loop"  # an agent's note that it gave up on a crash loop
TURN_TAKING = "turn-taking"
JOB_FAILED = "job-failed"
NEVER_SCALED = "never-scaled"
LOST_TOO_MUCH = "lost-too-much"
NOT_RECOVERED = "not-recovered"
# A reclaim of borrowed nodes (lab.drill.reclaim): the job went below its core, lost steps though
# the nodes had a grace period, did not grow back once the capacity was free, or ended first.
BELOW_CORE = "below-core"
RECLAIM_LOST_STEPS = "reclaim-lost-steps"
NOT_GROWN_BACK = "not-grown-back"
RECLAIM_OUTRUN = "reclaim-outrun"  # the job ended before the borrowed nodes left: nothing was drilled
# The sample ledger (lab.drill.ledger): a sample trained into the model twice or more, or never.
SAMPLES_DOUBLED = "samples-doubled"
SAMPLES_LOST = "samples-lost"
# What the local drill saw itself.
RENDEZVOUS_DIED = "rendezvous-died"
TIMED_OUT = "timed-out"
STILL_RUNNING = "still-running"
SCRIPT_CRASH_LOOP = "script-crash-loop"  # the script fails the same way at every start: the job was stopped
WORKER_FAILED = "worker-failed"  # the failure that ended the job
NO_FAILURE_ENDED = "no-failure-ended"  # the drill timed out, every failure recovered from
NODE_LOCAL_CHECKPOINTS = "node-local-checkpoints"
NO_FAULT = "no-fault"  # no eviction (or no scaling) happened
BASELINE_UNFINISHED = "baseline-unfinished"
NOT_CONVERGED = "not-converged"
# What the cluster drill saw itself.
NEVER_FULL_SIZE = "never-full-size"
CLEANUP_FAILED = "cleanup-failed"
DEADLINE_PASSED = "deadline-passed"

"""The catalogue of habits the drill judges in a script of one's own, as toy_ddp.py's arguments,
and the verdict each deserves under each eviction: the findings a drill must report, at least
(none: it must pass). Read by tests/drill/test_script_verdicts.py (each class under a hard kill and the
right script under every eviction) and benchmarks/script_verdicts.py (every class under every
eviction, timed)."""

from __future__ import annotations

from pathlib import Path

from lab.drill.run import DrillConfig
from lab.vocab.job import JobSpec
from lab.vocab.script_findings import (
    NOTICE_NOT_SAVED,
    RANKS_ENDED_EARLY,
    RANKS_RESUMED_APART,
    RESTARTED_FROM_SCRATCH,
    SLOW_RECOVERY,
)

EVICTIONS = ("hard", "notice", "silent")
TOY = Path(__file__).parent / "toy_ddp.py"
# The right habits: the snapshot where every node reads it, saved on a notice, and a
# process-group timeout so that a collective on a vanished peer gives up.
RIGHT = ("--shared", "--save-on-sigterm", "--pg-timeout", "5")
_TIMEOUT = ("--pg-timeout", "5")


def _every(findings: list[str]) -> dict[str, list[str]]:
    """The same verdict under every eviction."""
    return {eviction: list(findings) for eviction in EVICTIONS}


# name -> (toy_ddp.py's arguments, {eviction: the findings it deserves})
CLASSES: dict[str, tuple[tuple[str, ...], dict[str, list[str]]]] = {
    "right": (RIGHT, _every([])),
    # Each node keeps its own snapshot: after any eviction, ranks resume apart.
    "node-local-snapshot": (("--save-on-sigterm", *_TIMEOUT), _every([RANKS_RESUMED_APART])),
    # A notice saves what was trained (the save on SIGTERM): nothing is lost then.
    "save-only-at-end": (
        ("--shared", "--save-every", "0", "--save-on-sigterm", *_TIMEOUT),
        {"hard": [RESTARTED_FROM_SCRATCH], "notice": [], "silent": [RESTARTED_FROM_SCRATCH]},
    ),
    # No save even on a notice: a notice finds it lost too.
    # One save at the start, then none until the end: the ranks resume, from near the beginning.
    "saved-once-early": (
        ("--shared", "--save-every", "0", "--save-at-start", "--save-on-sigterm", *_TIMEOUT),
        {"hard": [RESTARTED_FROM_SCRATCH], "notice": [], "silent": [RESTARTED_FROM_SCRATCH]},
    ),
    "no-checkpoint": (
        ("--no-save", "--save-on-sigterm", *_TIMEOUT),
        {
            "hard": [RESTARTED_FROM_SCRATCH],
            "notice": [NOTICE_NOT_SAVED, RESTARTED_FROM_SCRATCH],
            "silent": [RESTARTED_FROM_SCRATCH],
        },
    ),
    "evicted-before-the-first-snapshot": (
        ("--shared", "--save-every", "150", "--save-on-sigterm", *_TIMEOUT),
        {"hard": [RESTARTED_FROM_SCRATCH], "notice": [], "silent": [RESTARTED_FROM_SCRATCH]},
    ),
    "a-rank-fails-at-the-end": ((*RIGHT, "--fail-at-end-rank", "1"), _every([RANKS_ENDED_EARLY])),
    # No save on SIGTERM: only a notice had the time to save, and it was not taken.
    "a-notice-not-saved": (("--shared", *_TIMEOUT), {"hard": [], "notice": [NOTICE_NOT_SAVED], "silent": []}),
    # SIGTERM caught, no collective timeout: only a vanished peer leaves a collective waiting.
    "no-collective-timeout": (
        ("--shared", "--save-on-sigterm"),
        {"hard": [], "notice": [], "silent": [SLOW_RECOVERY]},
    ),
}


def toy_drill(
    workdir: Path, eviction: str, args: tuple[str, ...], *, timeout_s: float, accept: tuple[str, ...] = ()
) -> DrillConfig:
    """3 nodes of the toy trainer with `args` (200 epochs of 0.05 s), one evicted 4 s after all
    train, one added back a second after the job recovered. 4 s, not less: the first epochs of
    DDP on a loaded machine take a second each, and a habit that loses work must have trained a
    few epochs to lose them (an eviction at epoch 2 that resumes from epoch 1 lost nothing)."""
    spec = JobSpec(
        name="toy",
        min_nodes=2,
        max_nodes=3,
        checkpoint_dir=str(workdir / "ckpt"),
        module=None,
        script=str(TOY),
        script_args=("--epochs", "200", "--epoch-time", "0.05", *args),
    )
    return DrillConfig(
        spec=spec,
        workdir=workdir,
        nodes=3,
        target_steps=None,
        eviction=eviction,
        notice_s=10.0,
        evict_after_s=4.0,
        scale_out_after_s=1.0,
        timeout_s=timeout_s,
        accept=accept,
    )

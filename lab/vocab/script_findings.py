"""The names of the drill's findings on a script of one's own (lab.drill.findings), as
`elastic-lab drill --accept NAME` takes them."""

from __future__ import annotations

RANKS_RESUMED_APART = "ranks-resumed-apart"
RESTARTED_FROM_SCRATCH = "restarted-from-scratch"
RANKS_ENDED_EARLY = "ranks-ended-early"
NOTICE_NOT_SAVED = "notice-not-saved"
SLOW_RECOVERY = "slow-recovery"
FINDINGS = (RANKS_RESUMED_APART, RESTARTED_FROM_SCRATCH, RANKS_ENDED_EARLY, NOTICE_NOT_SAVED, SLOW_RECOVERY)

"""The goodput model behind `elastic-lab plan --band` and benchmarks/bands.py."""

from __future__ import annotations

import pytest

from lab.vocab.checkpoint_interval import EVICTION_BANDS, daly_interval_s, job_mtbf_s
from lab.vocab.spot_goodput import MODES, MeasuredCosts, goodput

COSTS = MeasuredCosts()


def test_with_no_eviction_every_mode_pays_only_its_checkpoints_and_per_step_its_overhead():
    never = 1e18  # seconds between evictions: none in the job's lifetime
    checkpoints = COSTS.save_cost_s / (daly_interval_s(COSTS.save_cost_s, never) + COSTS.save_cost_s)
    assert goodput("elastic", 3, never) == pytest.approx(1 - checkpoints)
    assert goodput("restart-everything", 3, never) == pytest.approx(1 - checkpoints)
    assert goodput("per-step", 3, never) == pytest.approx((1 - checkpoints) / (1 + COSTS.per_step_overhead))


@pytest.mark.parametrize("mode", MODES)
def test_more_evictions_never_train_more(mode):
    shares = [share for _, share in EVICTION_BANDS]
    values = [goodput(mode, 3, job_mtbf_s(share, 3)) for share in shares]
    assert values == sorted(values, reverse=True) and all(0 < v < 1 for v in values)


def test_restart_everything_loses_more_than_elastic_per_eviction():
    """Every node waits for the replacement and the restart, instead of one node's share."""
    often = 3600.0  # a node lost every hour: the difference shows
    assert goodput("restart-everything", 3, often) < goodput("elastic", 3, often)
    assert goodput("elastic", 3, often, notice_share=1.0) > goodput("elastic", 3, often)  # nothing redone


def test_an_unknown_mode_is_named():
    with pytest.raises(ValueError, match="mode='spot-only': expected one of elastic, per-step, restart-everything"):
        goodput("spot-only", 3, 3600.0)

"""The trainer's flags: a known rate of evictions, read from its flag or the launcher's
environment, and refused before training when it is no number of seconds."""

from __future__ import annotations

import pytest

from lab.runtime.train_settings import parse_args
from lab.vocab.job import ENV_EVICTION_MTBF, JobSpec


def test_a_known_rate_comes_from_the_jobs_environment(monkeypatch):
    monkeypatch.setenv(ENV_EVICTION_MTBF, JobSpec(eviction_mtbf_s=39.5).train_env()[ENV_EVICTION_MTBF])
    assert parse_args(["--checkpoint-every", "0"]).eviction_mtbf == 39.5
    monkeypatch.delenv(ENV_EVICTION_MTBF)
    assert parse_args([]).eviction_mtbf == 0.0  # unknown: the band's rate


@pytest.mark.parametrize("value", ["inf", "nan", "-5"])
def test_a_rate_that_is_no_number_of_seconds_is_refused_before_training(value, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--eviction-mtbf", value])
    said = capsys.readouterr().err
    assert f"--eviction-mtbf={float(value)} is invalid: expected a finite number of seconds > 0" in said

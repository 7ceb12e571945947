"""The per-step mode's settings and what a JobSpec in that mode hands its nodes."""

from __future__ import annotations

import pytest

from lab.vocab.job import FaultTolerance, JobSpec
from lab.vocab.per_step import (
    ENV_COLLECTIVE_TIMEOUT,
    ENV_FAULT_TOLERANCE,
    ENV_LIGHTHOUSE,
    ENV_MIN_REPLICAS,
    ENV_QUORUM_RETRIES,
    PerStepSettings,
)
from lab.vocab.problems import InvalidInput


def test_retries_are_spaced_as_asked_over_the_quorum_timeout():
    # TorchFT sleeps quorum_timeout / (retries + 1) between tries of an unreachable lighthouse.
    s = PerStepSettings(quorum_timeout_s=900, lighthouse_retry_s=1.0)
    assert s.quorum_retries == 899 and 900 / (s.quorum_retries + 1) == 1.0
    assert PerStepSettings(quorum_timeout_s=60, lighthouse_retry_s=0.5).quorum_retries == 119
    assert PerStepSettings.torchft_defaults().quorum_retries == 0  # TorchFT's own: no retry


def test_lighthouse_flags_are_in_milliseconds():
    args = PerStepSettings().lighthouse_args(2, bind="127.0.0.1:29510")
    assert args == [
        "--bind=127.0.0.1:29510",
        "--min_replicas=2",
        "--join_timeout_ms=10000",
        "--quorum_tick_ms=20",
        "--heartbeat_timeout_ms=200",
    ]


def test_a_per_step_job_runs_each_node_as_a_group_of_its_own():
    spec = JobSpec(fault_tolerance="per-step", min_nodes=2, max_nodes=4, nproc_per_node=2)
    assert spec.fault_tolerance is FaultTolerance.PER_STEP and spec.per_step_mode
    args = spec.torchrun_args(local_addr="127.0.0.1")
    assert args == [
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=2",
        "--max-restarts=100",
        "--monitor-interval=0.1",
        "--local-addr=127.0.0.1",
    ]
    assert not any(a.startswith("--rdzv") for a in args)  # no rendezvous server in this mode
    env = spec.worker_env()
    assert env[ENV_FAULT_TOLERANCE] == "per-step"
    assert env[ENV_LIGHTHOUSE] == "http://127.0.0.1:29510" and env[ENV_MIN_REPLICAS] == "2"
    assert env[ENV_QUORUM_RETRIES] == str(spec.per_step.quorum_retries)


def test_an_elastic_job_gets_no_torchft_settings():
    env = JobSpec().worker_env()
    assert env[ENV_FAULT_TOLERANCE] == "elastic"
    assert ENV_LIGHTHOUSE not in env and ENV_QUORUM_RETRIES not in env
    assert "--standalone" not in JobSpec().torchrun_args()


def test_per_step_settings_come_from_a_mapping_and_bad_ones_are_named():
    spec = JobSpec.from_mapping({"fault_tolerance": "per-step", "per_step": {"heartbeat_timeout_s": 1.5}})
    assert spec.per_step.heartbeat_timeout_s == 1.5
    with pytest.raises(InvalidInput) as err:
        JobSpec(
            fault_tolerance="per-stp",
            lighthouse_endpoint="lighthouse",
            per_step={
                "heartbeat_timeout_s": 0.1,
                "join_timeout_s": 0.2,
                "quorum_tick_s": 0.5,
                "lighthouse_retry_s": 0.01,
                "collective_timeout_s": 0.3,
                "bogus": 1,
            },
        )
    text = str(err.value)
    for expected in (
        "fault_tolerance='per-stp' is invalid: expected one of elastic, per-step",
        "lighthouse_endpoint='lighthouse' is invalid: expected host:port",
        "per_step.bogus=1 is invalid: expected a known field",
        "per_step.heartbeat_timeout_s=0.1 is invalid: expected >= 0.2 s",
        "per_step.quorum_tick_s=0.5 is invalid: expected <= join_timeout_s (0.2)",
        "per_step.lighthouse_retry_s=0.01 is invalid: expected seconds in [0.1, quorum_timeout_s (900)]",
        "per_step.collective_timeout_s=0.3 is invalid: expected 0 (derived from the measured collectives) or >= 0.5 s",
    ):
        assert expected in text, text


def test_the_collective_timeout_is_derived_unless_the_job_sets_one():
    assert PerStepSettings().collective_timeout_s == 0  # derived while the job runs
    env = JobSpec(fault_tolerance="per-step").worker_env()
    assert env[ENV_COLLECTIVE_TIMEOUT] == "0"
    env = JobSpec(fault_tolerance="per-step", per_step={"collective_timeout_s": 2.5}).worker_env()
    assert env[ENV_COLLECTIVE_TIMEOUT] == "2.5"
    assert PerStepSettings(collective_timeout_s=0.5).problems() == []
    (problem,) = PerStepSettings(collective_timeout_s=-1).problems()
    assert "expected a number of seconds >= 0 (0: derived from the measured collectives)" in str(problem)

"""The job's command-line flags (lab/vocab/job_flags.py): the same on the local target and a cluster."""

from __future__ import annotations

import argparse

import pytest

from lab.cli import drill as drill_cli
from lab.cli import submit as submit_cli
from lab.vocab.job_flags import add_job_arguments, job_spec
from lab.vocab.per_step import PerStepSettings
from lab.vocab.problems import InvalidInput
from lab.vocab.rendezvous_timeouts import RendezvousTimeouts


def test_drill_and_submit_describe_the_job_with_the_same_flags():
    def job_flags(register, argv):
        parser = argparse.ArgumentParser()
        register(parser.add_subparsers())
        sub = parser._subparsers._group_actions[0].choices[argv[0]]
        return sub, {o for a in sub._actions for o in a.option_strings}

    _, drill_flags = job_flags(drill_cli.register, ["drill"])
    submit_parser, submit_flags = job_flags(submit_cli.register, ["submit"])
    shared = {
        "--name",
        "--min-nodes",
        "--max-nodes",
        "--nproc-per-node",
        "--backend",
        "--rdzv-settings",
        "--max-restarts",
        "--checkpoint-every",
        "--pg-timeout",
    }
    assert shared <= drill_flags and shared <= submit_flags
    # and they mean the same JobSpec
    flags = "--stack byo --min-nodes 1 --max-nodes 4 --backend c10d --rdzv-settings torch-defaults --pg-timeout 20"
    args = submit_parser.parse_args(flags.split())
    from lab.stacks.target import stack_target

    spec = submit_cli.job_spec(args, stack_target("byo"))
    assert (spec.min_nodes, spec.max_nodes, spec.rdzv_backend.value, spec.pg_timeout_s) == (1, 4, "c10d", 20)
    assert spec.rdzv_timeouts == RendezvousTimeouts.torch_defaults()


def test_a_bad_job_option_is_reported_under_its_own_name_once():
    parser = argparse.ArgumentParser()
    add_job_arguments(parser.add_argument_group("job"))
    assert job_spec(parser.parse_args([]), module="lab.runtime.train").pg_timeout_s == 15

    flags = "--pg-timeout nan --join-timeout inf --min-nodes 0 --checkpoint-every -1 --backend etcd"
    with pytest.raises(InvalidInput) as caught:
        job_spec(parser.parse_args(flags.split()), module="lab.runtime.train")
    keys = [p.key for p in caught.value.problems]
    assert sorted(keys) == ["--backend", "--checkpoint-every", "--join-timeout", "--min-nodes", "--pg-timeout"]
    shown = {p.key: str(p) for p in caught.value.problems}
    assert shown["--pg-timeout"] == "--pg-timeout=nan is invalid: expected a finite number of seconds > 0"
    assert shown["--join-timeout"] == "--join-timeout=inf is invalid: expected a finite number of seconds > 0"


@pytest.mark.parametrize("flag", ["--pg-timeout", "--join-timeout"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1"])
def test_timeouts_are_finite_and_positive(flag, value):
    parser = argparse.ArgumentParser()
    add_job_arguments(parser.add_argument_group("job"))
    with pytest.raises(InvalidInput) as caught:
        job_spec(parser.parse_args([f"{flag}={value}"]), module="lab.runtime.train")
    assert [p.key for p in caught.value.problems] == [flag]


def test_the_fault_tolerance_mode_and_its_timings_come_from_the_flags():
    parser = argparse.ArgumentParser()
    add_job_arguments(parser.add_argument_group("job"))
    spec = job_spec(parser.parse_args(["--fault-tolerance", "per-step"]), module="lab.runtime.train")
    assert spec.per_step_mode and spec.per_step == PerStepSettings()
    spec = job_spec(
        parser.parse_args(["--fault-tolerance", "per-step", "--rdzv-settings", "torch-defaults"]),
        module="lab.runtime.train",
    )
    assert spec.per_step == PerStepSettings.torchft_defaults()
    with pytest.raises(InvalidInput) as caught:
        job_spec(parser.parse_args(["--fault-tolerance", "per-node"]), module="lab.runtime.train")
    (problem,) = caught.value.problems
    assert str(problem) == "--fault-tolerance='per-node' is invalid: expected one of elastic, per-step"


def test_name_and_job_are_one_option_and_two_names_are_refused():
    """submit spells the job's name --name or --job (as status, logs and delete do): naming two
    jobs at once is a contradiction, not a choice of the last."""
    parser = argparse.ArgumentParser()
    add_job_arguments(parser.add_argument_group("job"), name_as_job=True)
    assert job_spec(parser.parse_args(["--job", "a"]), module="lab.runtime.train").name == "a"
    assert job_spec(parser.parse_args(["--name", "a", "--job", "a"]), module="lab.runtime.train").name == "a"
    with pytest.raises(InvalidInput) as caught:
        job_spec(parser.parse_args(["--name", "a", "--job", "b"]), module="lab.runtime.train")
    (problem,) = caught.value.problems
    assert (
        str(problem)
        == "--job='b' is invalid: expected the same name as --name ('a'): they are one option, give it once"
    )


def test_a_core_and_a_burst_make_the_jobs_elastic_range():
    parser = argparse.ArgumentParser()
    add_job_arguments(parser.add_argument_group("job"))

    def spec(flags: str):
        return job_spec(parser.parse_args(flags.split()), module="lab.runtime.train")

    made = spec("--core 2 --burst 3")
    assert (made.min_nodes, made.max_nodes, made.burst_nodes, made.core_nodes) == (2, 5, 3, 2)
    assert (spec("--core 2 --burst 3 --min-nodes 2 --max-nodes 5").max_nodes, spec("").burst_nodes) == (5, 0)
    # Without --core, the burst is part of --max-nodes, and the core at least --min-nodes.
    borrowed = spec("--min-nodes 1 --max-nodes 4 --burst 2")
    assert (borrowed.min_nodes, borrowed.core_nodes) == (1, 2)
    with pytest.raises(InvalidInput) as caught:
        spec("--core 2 --burst 3 --max-nodes 4 --min-nodes 1")
    assert sorted(map(str, caught.value.problems)) == [
        "--max-nodes=4 is invalid: expected 5 with --core 2 --burst 3, or left out",
        "--min-nodes=1 is invalid: expected 2 with --core 2 --burst 3, or left out",
    ]
    with pytest.raises(InvalidInput, match=r"--burst=3 is invalid: expected at most max_nodes - min_nodes \(1\)"):
        spec("--min-nodes 2 --max-nodes 3 --burst 3")
    with pytest.raises(InvalidInput, match=r"--burst=-1 is invalid: expected a whole number >= 0"):
        spec("--burst -1")

"""JobSpec: one definition of a job's launch parameters, every bad value reported at once."""

from __future__ import annotations

import dataclasses

import pytest

from lab.vocab.job import JobSpec
from lab.vocab.problems import InvalidInput
from lab.vocab.rendezvous_timeouts import RendezvousTimeouts


def test_defaults_give_consistent_torchrun_args_and_pet_env():
    spec = JobSpec(min_nodes=2, max_nodes=4, nproc_per_node=2, rdzv_endpoint="etcd-rendezvous.training:2379")
    flags = dict(a[2:].split("=", 1) for a in spec.torchrun_args())
    env = spec.pet_env()
    # Every flag the local target passes is what the cluster's PET_* variables say.
    for flag, value in flags.items():
        assert env["PET_" + flag.upper().replace("-", "_")] == value
    assert flags["nnodes"] == "2:4"
    assert "join_timeout=900" in flags["rdzv-conf"] and "server_outage=60" in flags["rdzv-conf"]


def test_rdzv_id_is_unique_and_never_none():
    a, b = JobSpec(), JobSpec()
    assert a.rdzv_id != b.rdzv_id and a.rdzv_id.startswith("elastic-demo-")
    with pytest.raises(InvalidInput, match="rdzv_id='none'"):
        JobSpec(rdzv_id="none")


def test_elastic_policy_points_at_the_rendezvous_service():
    spec = JobSpec(rdzv_endpoint="etcd-rendezvous.training.svc:2379", rdzv_id="job-1")
    policy = spec.elastic_policy()
    assert policy["rdzvHost"] == "etcd-rendezvous.training.svc" and policy["rdzvPort"] == 2379
    assert policy["rdzvBackend"] == "etcd-v2" and policy["rdzvId"] == "job-1"
    assert "nProcPerNode" not in policy  # deprecated; spec.nprocPerNode carries it
    assert {"key": "keep_alive_max_attempt", "value": "3"} in policy["rdzvConf"]


def test_c10d_agents_never_host_the_store():
    spec = JobSpec(rdzv_backend="c10d")
    assert spec.rdzv_conf()["is_host"] == "false"


@pytest.mark.parametrize(
    "values, message",
    [
        ({"min_nodes": 3, "max_nodes": 2}, "min_nodes=3 is invalid: expected <= max_nodes (2)"),
        ({"min_nodes": 0}, "min_nodes=0 is invalid: expected a whole number >= 1"),
        ({"max_nodes": 0, "min_nodes": 0}, "min_nodes=0"),
        ({"rdzv_backend": "zookeeper"}, "rdzv_backend='zookeeper' is invalid: expected one of etcd-v2, c10d"),
        ({"rdzv_backend": "etcd"}, "rdzv_backend='etcd'"),
        ({"rdzv_endpoint": "etcd"}, "rdzv_endpoint='etcd' is invalid: expected host:port"),
        ({"rdzv_endpoint": "etcd:70000"}, "rdzv_endpoint='etcd:70000'"),
        ({"pg_timeout_s": 1800}, "pg_timeout_s=1800 is invalid"),
        ({"name": "Bad_Name"}, "name='Bad_Name' is invalid: expected a DNS-1035 label"),
        ({"name": "1job"}, "name='1job' is invalid: expected a DNS-1035 label"),
        ({"rdzv_timeouts": {"keep_alive_interval_s": 0.25}}, "keep_alive_interval_s x keep_alive_max_attempt >= 1.5 s"),
        ({"checkpoint_writes": "overwrite"}, "checkpoint_writes='overwrite' is invalid"),
        ({"max_restarts": -1}, "max_restarts=-1 is invalid"),
        (
            {"rdzv_timeouts": {"last_call_s": 0}},
            "rdzv_timeouts.last_call_s=0 is invalid: expected a number of seconds > 0",
        ),
        (
            {"rdzv_timeouts": {"keep_alive_max_attempt": 2}},
            "keep_alive_max_attempt=2 is invalid: expected a whole number >= 3",
        ),
        (
            {"rdzv_timeouts": {"keep_alive_interval_s": 0.2, "keep_alive_max_attempt": 10}},
            "keep_alive_interval_s=0.2 is invalid: expected >= 0.25 s",
        ),
        (
            {"rdzv_timeouts": {"poll_interval_s": 0.5}},
            "rdzv_timeouts.poll_interval_s=0.5 is invalid: expected < last_call_s (0.2)",
        ),
        ({"rdzv_timeouts": {"join": 5}}, "rdzv_timeouts.join=5 is invalid: expected a known field"),
        ({"nodes": 3}, "nodes=3 is invalid: expected a known field"),
        (
            {"checkpoint_every_steps": -1},
            "checkpoint_every_steps=-1 is invalid: expected a whole number >= 1, or 0: derived while the job runs",
        ),
        (
            {"checkpoint_every_steps": 0, "fault_tolerance": "per-step"},
            "checkpoint_every_steps=0 is invalid: expected a whole number >= 1 in per-step mode",
        ),
        (
            {"eviction_band": "12%"},
            "eviction_band='12%' is invalid: expected one of <5%, 5-10%, 10-15%, 15-20%, >20%",
        ),
        ({"eviction_mtbf_s": 0.0}, "eviction_mtbf_s=0.0 is invalid: expected a finite number of seconds > 0 between"),
        ({"eviction_mtbf_s": float("inf")}, "eviction_mtbf_s=inf is invalid: expected a finite number of seconds > 0"),
        ({"eviction_mtbf_s": "60"}, "eviction_mtbf_s='60' is invalid: expected a finite number of seconds > 0"),
        # `python -m` takes a module: a file's name, a path or nothing at all never starts.
        ({"module": "my_train.py"}, "module='my_train.py' is invalid: expected a module name, not a file: my_train"),
        ({"module": "lab/runtime/train"}, "module='lab/runtime/train' is invalid: expected a Python module name"),
        ({"module": ""}, "module='' is invalid: expected a Python module name"),
        ({"module": "my.class"}, "module='my.class' is invalid"),
        # torchrun runs a script with python: a shell script would fail on every worker.
        ({"module": None, "script": "train.sh"}, "script='train.sh' is invalid: expected a Python file's path"),
        ({"module": None, "script": ""}, "script='' is invalid"),
        ({"module": None, "script": "/app/.py"}, "script='/app/.py' is invalid"),
    ],
)
def test_bad_values_get_clear_errors(values, message):
    with pytest.raises(InvalidInput) as info:
        JobSpec.from_mapping(values)
    assert message in str(info.value)


def test_torch_default_timeouts_are_torchruns_and_plain_torchrun_accepts_them():
    t = RendezvousTimeouts.torch_defaults()
    assert (t.join_s, t.last_call_s, t.close_s, t.keep_alive_interval_s) == (600, 30, 30, 5)

    def whole_seconds(timeouts: RendezvousTimeouts) -> bool:  # all plain torchrun parses
        return all(float(getattr(timeouts, f.name)).is_integer() for f in dataclasses.fields(timeouts))

    assert whole_seconds(t) and not whole_seconds(RendezvousTimeouts())


def test_every_bad_value_is_reported_at_once():
    with pytest.raises(InvalidInput) as info:
        JobSpec(
            name="Bad_Name",
            min_nodes=0,
            rdzv_backend="zookeeper",
            pg_timeout_s=0,
            rdzv_timeouts={"last_call_s": 0, "poll_interval_s": -1},
        )
    keys = [p.key for p in info.value.problems]
    assert keys == [
        "rdzv_backend",
        "name",
        "min_nodes",
        "pg_timeout_s",
        "rdzv_timeouts.last_call_s",
        "rdzv_timeouts.poll_interval_s",
    ]
    assert str(info.value).startswith("invalid input (6 problem(s)):\n  - rdzv_backend='zookeeper' is invalid")


def test_one_bad_value_reads_as_the_problem_itself():
    with pytest.raises(InvalidInput) as info:
        JobSpec(max_restarts=-1)
    assert str(info.value) == "max_restarts=-1 is invalid: expected a whole number >= 0"


def test_unknown_fields_and_bad_values_come_together():
    with pytest.raises(InvalidInput) as info:
        JobSpec.from_mapping(
            {"min_nodes": 0, "nmae": "x", "rdzv_backend": "zk", "rdzv_timeouts": {"join": 1, "close_s": 0}}
        )
    assert sorted(p.key for p in info.value.problems) == [
        "min_nodes",
        "nmae",
        "rdzv_backend",
        "rdzv_timeouts.close_s",
        "rdzv_timeouts.join",
    ]


def test_a_derived_checkpoint_interval_reaches_the_workers_with_its_band():
    env = JobSpec(checkpoint_every_steps=0, eviction_band=">20%").train_env()
    assert (env["LAB_CHECKPOINT_EVERY"], env["LAB_EVICTION_BAND"]) == ("0", ">20%")
    assert JobSpec().train_env()["LAB_EVICTION_BAND"] == "10-15%"
    # A known rate goes with it; unknown, nothing is said.
    assert JobSpec(checkpoint_every_steps=0, eviction_mtbf_s=39.5).train_env()["LAB_EVICTION_MTBF_S"] == "39.5"
    assert "LAB_EVICTION_MTBF_S" not in JobSpec().train_env()


@pytest.mark.parametrize("module", ["lab.runtime.train", "train", "my_pkg.sub_2.main"])
def test_a_dotted_module_name_runs(module):
    assert JobSpec(module=module).entrypoint()[:2] == ["-m", module]


def test_a_python_file_runs_as_the_script():
    assert JobSpec(module=None, script="/app/train.py").entrypoint() == ["/app/train.py"]


def test_the_batch_policy_reaches_the_workers_and_a_bad_one_is_named():
    env = JobSpec(max_nodes=4, nproc_per_node=2).train_env()
    assert (env["LAB_BATCH_POLICY"], env["LAB_FULL_WORLD_SIZE"]) == ("fixed-global", "8")
    assert "LAB_GLOBAL_BATCH" not in env
    assert JobSpec(global_batch=96).train_env()["LAB_GLOBAL_BATCH"] == "96"
    for kwargs, key in (
        ({"batch_policy": "fixed"}, "batch_policy"),
        ({"global_batch": 0}, "global_batch"),
        ({"batch_policy": "per-worker", "global_batch": 96}, "global_batch"),
    ):
        with pytest.raises(InvalidInput) as refused:
            JobSpec(**kwargs)
        assert [p.key for p in refused.value.problems] == [key], refused.value

"""A job with a burst on a cluster: its core and its borrowed part, two PyTorchJobs of one run,
rendered with real Helm and checked against the PyTorchJob CRD and the guardrails."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from lab.k8s.helm import render_chart
from lab.k8s.job import render_job as render_for_stack
from lab.k8s.job_values import container_env, operator_pet_env, worker_container
from lab.k8s.platform_guardrails import GuardrailContext, run_guardrails
from lab.k8s.schemas import validate_objects
from lab.vocab.job import FaultTolerance, JobSpec
from lab.vocab.job_parts import PART_LABEL
from lab.vocab.layout import JOB_CHART
from lab.vocab.machine_shapes import NodeRoom
from lab.vocab.platform_facts import PlatformFacts
from lab.vocab.problems import InvalidInput
from tests.k8s.helpers import render_job, the


@pytest.mark.parametrize("mode", ["elastic", "per-step"])
def test_the_core_and_the_burst_are_one_run_at_two_priorities(mode, facts, crd):
    spec = JobSpec(name="demo", min_nodes=2, max_nodes=5, burst_nodes=3, fault_tolerance=FaultTolerance(mode))
    cluster_spec, objects = render_job(spec, facts)
    core, burst = the(objects, "PyTorchJob", "demo"), the(objects, "PyTorchJob", "demo-burst")
    assert validate_objects(objects, "1.33") == []
    # One run: the same rendezvous (id included), torchrun settings and environment.
    assert core["spec"].get("elasticPolicy") == burst["spec"].get("elasticPolicy")
    pet = [operator_pet_env(j) for j in (core, burst)]
    if mode == "per-step":  # the operator's node count is each part's replicas; torchrun's flag overrides it
        assert "--nnodes=1" in worker_container(burst)["args"]
        pet = [{k: v for k, v in env.items() if k != "PET_NNODES"} for env in pet]
    assert pet[0] == pet[1]
    assert container_env(worker_container(core)) == container_env(worker_container(burst))
    assert worker_container(core)["args"] == worker_container(burst)["args"]
    assert worker_container(burst)["args"][-len(cluster_spec.entrypoint()) :] == cluster_spec.entrypoint()
    if mode == "elastic":
        assert core["spec"]["elasticPolicy"] == cluster_spec.elastic_policy()
        assert (core["spec"]["elasticPolicy"]["minReplicas"], core["spec"]["elasticPolicy"]["maxReplicas"]) == (2, 5)
    # Two sizes, two priorities, each part labelled on the job and its pods.
    workers = [j["spec"]["pytorchReplicaSpecs"]["Worker"] for j in (core, burst)]
    assert [w["replicas"] for w in workers] == [2, 3]
    assert [w["template"]["spec"]["priorityClassName"] for w in workers] == [
        facts.worker_priority_class,
        facts.burst_priority_class,
    ]
    assert [j["metadata"]["labels"][PART_LABEL] for j in (core, burst)] == ["core", "burst"]
    assert [w["template"]["metadata"]["labels"][PART_LABEL] for w in workers] == ["core", "burst"]
    # A per-step job's lighthouse, or a c10d store, is rendered once, for both.
    assert len([o for o in objects if o["kind"] == "Deployment"]) == (1 if mode == "per-step" else 0)
    ctx = GuardrailContext(facts=facts, expect_platform=False)
    assert {name: v for name, v in run_guardrails(objects, ctx).items() if v} == {}


def test_a_job_without_a_burst_renders_one_pytorchjob_without_a_part(facts):
    _, objects = render_job(JobSpec(name="demo"), facts)
    (job,) = [o for o in objects if o["kind"] == "PyTorchJob"]
    assert PART_LABEL not in job["metadata"]["labels"]
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3


def test_the_chart_gives_both_parts_one_new_rendezvous_id_when_none_is_given():
    values = {"burst": {"nodes": 1, "priorityClassName": "elastic-borrowed"}}
    ids = set()
    for _ in range(2):
        objects = render_chart(JOB_CHART, values, release="r", namespace="training")
        pair = {o["spec"]["elasticPolicy"]["rdzvId"] for o in objects if o["kind"] == "PyTorchJob"}
        assert len(pair) == 1
        ids |= pair
    assert len(ids) == 2  # a new id at each render, shared by its two parts


@dataclass(frozen=True)
class Target:
    """A stack as the rendering reads it (lab.k8s.job.JobTarget)."""

    facts: PlatformFacts
    stack: str = "old"
    cloud: str = "aks"
    kubernetes_version: str = "1.33"
    inference_priority_class: str = "elastic-inference"
    worker_nodes: tuple[NodeRoom, ...] = ()


def test_a_stack_deployed_before_the_borrowed_class_refuses_a_burst(facts, crd):
    spec = JobSpec(name="demo", burst_nodes=1, image="registry.example/t:1")
    assert len([o for o in render_for_stack(spec, Target(facts)).objects if o["kind"] == "PyTorchJob"]) == 2
    with pytest.raises(InvalidInput, match="--burst=1 is invalid: expected 0 on stack 'old': its platform declares no"):
        render_for_stack(spec, Target(replace(facts, burst_priority_class="")))


@pytest.mark.parametrize(
    "spec,quotas,message",
    [
        (
            JobSpec(name="demo"),
            (2, None),
            r"--max-nodes=3 is invalid: expected at most 2 node\(s\) of 1 GPU\(s\): the team's share is 2",
        ),
        (
            JobSpec(name="demo", min_nodes=1, max_nodes=3, burst_nodes=1),
            (1, 8),
            r"--core=2 is invalid: expected at most 1 node\(s\) of 1 GPU\(s\): the team's share is 1",
        ),
        (
            JobSpec(name="demo", min_nodes=1, max_nodes=3, burst_nodes=1),
            (8, 0),
            r"--burst=1 is invalid: expected at most 0 node\(s\) of 1 GPU\(s\): what the team may borrow is 0",
        ),
    ],
    ids=["share", "core-above-share", "burst-above-borrowing"],
)
def test_a_job_the_teams_quotas_could_never_admit_is_refused_before_it_is_rendered(spec, quotas, message, facts):
    from lab.k8s.job import JobSizing

    target = Target(replace(facts, gpu_quota=quotas[0], borrowed_gpu_quota=quotas[1]))
    with pytest.raises(InvalidInput, match=message):
        render_for_stack(replace(spec, image="registry.example/t:1"), target, JobSizing())
    fits = Target(replace(facts, gpu_quota=8, borrowed_gpu_quota=8))
    assert render_for_stack(replace(spec, image="registry.example/t:1"), fits, JobSizing()).objects

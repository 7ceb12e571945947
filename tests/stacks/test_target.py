"""lab.stacks.target: which image a job runs on a stack, before anything is rendered."""

from __future__ import annotations

import dataclasses

import pytest

from lab.k8s.job import render_job
from lab.stacks.target import stack_target
from lab.vocab.job import JobSpec
from lab.vocab.problems import InvalidInput
from tests.placements import TRAINER_IMAGE


@pytest.fixture(scope="module")
def aks():
    return stack_target("aks-dev")


def test_a_job_runs_the_stacks_trainer_image_unless_told_otherwise(aks):
    pushed = dataclasses.replace(aks, trainer_image=TRAINER_IMAGE)
    assert pushed.image_for(None) == TRAINER_IMAGE
    assert pushed.image_for("other.azurecr.io/mine:2") == "other.azurecr.io/mine:2"


def test_a_cloud_stack_without_a_pushed_image_says_how_to_get_one(aks):
    assert aks.trainer_image is None  # the example stack file has none
    with pytest.raises(InvalidInput, match=r"stack 'aks-dev' has no elastic-spot-lab:trainerImage yet") as refused:
        aks.image_for(None)
    assert refused.value.exit_code == 2 and "imageRegistry output" in str(refused.value)


def test_a_byo_cluster_may_run_a_local_build_of_the_dockerfile():
    byo = stack_target("byo")
    assert byo.image_for(None) == JobSpec().image  # e.g. loaded with `kind load docker-image`
    render_job(JobSpec(), byo)


def test_the_dockerfiles_name_never_reaches_a_cloud_cluster(aks):
    with pytest.raises(InvalidInput, match=r"--image='ghcr.io/elastic-spot-lab/trainer:0.1.0' is invalid") as refused:
        render_job(JobSpec(), aks)
    assert "which nothing publishes" in str(refused.value)
    render_job(JobSpec(image=TRAINER_IMAGE), aks)


def test_the_flags_bounded_as_int32_set_the_crds_int32_fields():
    """INT32_FIELDS against the PyTorchJob CRD the project carries (training operator v1.9.4)."""
    import yaml

    from lab.k8s.job import INT32_FIELDS
    from lab.k8s.schemas import crd_path

    crd = yaml.safe_load(crd_path().read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    for flag, path in INT32_FIELDS.items():
        field = version["schema"]["openAPIV3Schema"]
        for part in path.split("."):
            field = field["properties"][part] if "properties" in field else field["additionalProperties"]
        assert (field["type"], field.get("format")) == ("integer", "int32"), (flag, path)


def test_a_job_is_sized_against_the_gpu_spot_pools_own_sizes(aks):
    """Rank 1 of the GPU capacity (the stack's GPU spot pool), where the job is sized; the
    fallback ranks' sizes are no bound. A byo stack names no sizes: nothing is checked."""
    assert [room.size for room in aks.worker_nodes] == ["Standard_NC4as_T4_v3"]
    eks = stack_target("eks-dev")
    assert sorted(room.size for room in eks.worker_nodes) == ["g4dn.xlarge", "g5.xlarge", "g6.xlarge"]
    assert stack_target("byo").worker_nodes == ()


def test_a_stack_whose_cluster_cannot_be_reached_runs_its_program_once(monkeypatch, capsys):
    """`status -s aks-dev` where the stack's outputs cannot be read and no $KUBECONFIG is set: the
    error says what is missing here, its quota included, from the one offline run of the program."""
    import lab.program.harness
    import lab.stacks.outputs
    import lab.stacks.target
    from lab.cli import main
    from lab.stacks.automation import StackError

    runs = []
    real = lab.program.harness.run_program

    def counted(*args, **kwargs):
        runs.append(args[0] if args else kwargs.get("stack"))
        return real(*args, **kwargs)

    monkeypatch.setattr(lab.program.harness, "run_program", counted)
    monkeypatch.setattr(lab.stacks.target, "run_program", counted)

    def unreadable(stack, **kwargs):
        raise StackError(f"the outputs of stack {stack!r} cannot be read here")

    monkeypatch.setattr(lab.stacks.target, "kubeconfig_file", unreadable)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert main(["status", "-s", "aks-dev", "demo"]) == 1
    err = capsys.readouterr().err
    assert "pass --kubeconfig PATH or set $KUBECONFIG instead" in err
    assert runs == ["aks-dev"]

"""Offline validators: Kubernetes schemas by cluster version, the PyTorchJob CRD."""

from __future__ import annotations

import pytest

from lab.k8s import schemas as validate
from lab.k8s.schemas import schema_version_for, validate_objects
from lab.vocab.job import JobSpec
from lab.vocab.layout import ROOT
from tests.k8s.helpers import render_job, the


@pytest.mark.parametrize(
    "cluster,used,nearest",
    [("1.33", "1.33", False), ("v1.35.2", "1.35", False), ("1.37", "1.37", False), ("1.39", "1.37", True)],
)
def test_schema_version_for_cluster(cluster, used, nearest):
    got, note = schema_version_for(cluster)
    assert got == used
    assert ("nearest" in note) is nearest


def test_schema_version_too_old():
    with pytest.raises(ValueError, match=r"kubernetesVersion='1.20' is invalid: expected 1.25 or newer"):
        schema_version_for("1.20")


def test_builtin_objects_are_strict():
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x", "namespace": "t"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicy": "IfNotPresent"}]},
            },
        },
    }
    assert validate_objects([dep], "1.33") == []
    dep["spec"]["template"]["spec"]["containers"][0]["imagePulPolicy"] = "Always"  # a typo
    [problem] = validate_objects([dep], "1.33")
    assert problem.obj == "Deployment/t/x"
    assert "imagePulPolicy" in problem.message and problem.path.endswith("containers.0")
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "p"}, "value": "high"}
    assert validate_objects([pc], "1.33")[0].path == "value"


def test_pytorchjob_against_crd(crd, facts):
    _, objects = render_job(JobSpec(), facts)
    job = the(objects, "PyTorchJob")
    assert validate.validate_pytorchjob(job, crd) == []
    job["spec"]["elasticPolicy"]["rdzvHots"] = "x"  # pruned silently by the API server
    job["spec"]["elasticPolicy"]["nProcPerNode"] = 1  # with spec.nprocPerNode: rejected
    job["spec"]["nprocPerNode"] = 1  # a string in the CRD
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"
    messages = {(p.path, p.message.split(" (")[0]) for p in validate.validate_pytorchjob(job, crd)}
    paths = {p for p, _ in messages}
    assert "spec.elasticPolicy" in paths  # additional property rdzvHots
    assert "spec.nprocPerNode" in paths  # not a string
    assert "spec.elasticPolicy.nProcPerNode" in paths
    assert "spec.pytorchReplicaSpecs.Worker" in paths  # no container named pytorch


def test_duplicate_env_is_caught(crd, facts):
    _, objects = render_job(JobSpec(), facts)
    job = the(objects, "PyTorchJob")
    env = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
    env.append(dict(env[0]))
    assert any("duplicate entry" in p.message for p in validate.validate_pytorchjob(job, crd))


def test_missing_crd_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(validate, "schema_dirs", lambda: [tmp_path])
    with pytest.raises(validate.CrdSchemaMissing, match=r"kubeflow\.org_pytorchjobs\.v1\.9\.4\.yaml not found"):
        validate.crd_path()


def test_empty_rdzv_conf_is_caught(crd, facts):
    """`rdzvConf: []` passes the CRD but crashes operator v1.9.4 (it slices val[:len(val)-1])."""
    _, objects = render_job(JobSpec(), facts)
    job = the(objects, "PyTorchJob")
    assert validate.validate_pytorchjob(job, crd) == []
    job["spec"]["elasticPolicy"]["rdzvConf"] = []
    [problem] = validate.validate_pytorchjob(job, crd)
    assert problem.path == "spec.elasticPolicy.rdzvConf" and "omit the key" in problem.message
    del job["spec"]["elasticPolicy"]["rdzvConf"]
    assert validate.validate_pytorchjob(job, crd) == []


def test_missing_crd_error_names_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setattr(validate, "schema_dirs", lambda: [tmp_path])
    with pytest.raises(validate.CrdSchemaMissing) as info:
        validate.crd_path()
    assert info.value.looked_in == [tmp_path] and "ELASTIC_LAB_SCHEMAS" in str(info.value)


def test_the_carried_crd_is_the_operators():
    """The project carries the CRD it checks against (a clone has nothing beside it); where the
    reference copy of ../shared/schemas is at hand, the two are the same file."""
    carried = validate.crd_path()
    assert carried == ROOT / "schemas" / validate.CRD_FILE
    reference = ROOT.parent / "shared" / "schemas" / validate.CRD_FILE
    if not reference.is_file():
        pytest.skip(f"no reference copy at {reference}")
    assert carried.read_bytes() == reference.read_bytes()

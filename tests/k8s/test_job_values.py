"""charts/elastic-pytorchjob and charts/etcd-rendezvous, rendered with real Helm."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from lab.k8s.helm import ChartRenderError, render_chart, render_release
from lab.k8s.job_values import (
    GROUP_PORTS,
    container_env,
    container_field_env,
    operator_pet_env,
    values_for,
    worker_container,
)
from lab.k8s.platform_guardrails import GuardrailContext, run_guardrails
from lab.k8s.schemas import validate_objects
from lab.vocab.checkpoint_location import CheckpointAccess
from lab.vocab.job import POD_FIELD_ENV, FaultTolerance, JobSpec
from lab.vocab.layout import ETCD_CHART, JOB_CHART
from lab.vocab.per_step import CHECKPOINT_PORT, LIGHTHOUSE_PORT, MANAGER_PORT, PerStepSettings
from lab.vocab.platform_facts import TERMINATION_GRACE_S
from lab.vocab.pools import PoolPlacement
from lab.vocab.problems import InvalidInput
from lab.vocab.rendezvous_timeouts import RendezvousTimeouts
from tests.k8s.helpers import render_job, the
from tests.patience import within

VARIANTS = [
    pytest.param({}, id="defaults"),
    pytest.param({"min_nodes": 1, "max_nodes": 1}, id="min=max=1"),
    pytest.param({"min_nodes": 1, "max_nodes": 8}, id="min1-max8"),
    pytest.param({"min_nodes": 4, "max_nodes": 6, "max_restarts": 0}, id="min4-max6-no-restarts"),
    pytest.param({"rdzv_backend": "c10d"}, id="c10d"),
    pytest.param(
        {"rdzv_backend": "c10d", "min_nodes": 2, "max_nodes": 5, "rdzv_timeouts": RendezvousTimeouts.torch_defaults()},
        id="c10d-torch-timeouts",
    ),
    pytest.param({"module": None, "script": "/app/train.py", "script_args": ("--lr", "0.1")}, id="script-with-args"),
    pytest.param(
        {"nproc_per_node": 1, "pg_timeout_s": 30.5, "monitor_interval_s": 0.5, "checkpoint_every_steps": 7},
        id="timings",
    ),
]


@pytest.mark.parametrize("changes", VARIANTS)
def test_rendered_job_matches_jobspec(changes, facts):
    """The chart's elasticPolicy, PET_* and container environment are the JobSpec's."""
    spec, objects = render_job(JobSpec(**changes), facts)
    job = the(objects, "PyTorchJob")
    assert job["spec"]["elasticPolicy"] == spec.elastic_policy()
    assert job["spec"]["nprocPerNode"] == str(spec.nproc_per_node)  # a string in the CRD
    assert "nProcPerNode" not in job["spec"]["elasticPolicy"]  # deprecated; both set is rejected
    assert operator_pet_env(job) == spec.pet_env()
    container = worker_container(job)
    env = container_env(container)
    assert {k: v for k, v in env.items() if not k.startswith("PET_")} == spec.worker_env()
    assert container["command"] == spec.launcher() == ["python", "-m", "lab.runtime.launch"]
    assert container["args"] == spec.entrypoint()
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == spec.max_nodes


@pytest.mark.parametrize("changes", VARIANTS)
def test_rendered_job_validates(changes, facts, crd):
    _, objects = render_job(JobSpec(**changes), facts)
    assert validate_objects(objects, "1.33") == []


def test_values_yaml_defaults_agree_with_jobspec():
    values = yaml.safe_load((JOB_CHART / "values.yaml").read_text())
    d = JobSpec()
    assert values["name"] == d.name
    assert values["image"] == d.image
    assert values["entrypoint"] == d.entrypoint()
    assert values["launcher"] == d.launcher()
    assert (values["minNodes"], values["maxNodes"]) == (d.min_nodes, d.max_nodes)
    assert values["nprocPerNode"] == d.nproc_per_node
    assert values["maxRestarts"] == d.max_restarts
    assert values["monitorIntervalS"] == d.monitor_interval_s
    assert values["checkpoint"]["dir"] == d.checkpoint_dir
    assert values["jobEnv"] == d.worker_env()
    assert values["rdzv"]["backend"] == d.rdzv_backend.value
    assert values["rdzv"]["conf"] == [{"key": k, "value": v} for k, v in d.rdzv_conf().items()]
    assert values["terminationGracePeriodSeconds"] == TERMINATION_GRACE_S


def test_chart_defaults_render(facts, crd):
    """helm template with no values at all: the platform's etcd Service, a fresh rdzvId."""
    objects = render_chart(JOB_CHART, None, release="demo", namespace="training")
    job = the(objects, "PyTorchJob")
    assert operator_pet_env(job)["PET_RDZV_ENDPOINT"] == f"{facts.etcd_host}:2379"
    policy = dict(job["spec"]["elasticPolicy"])
    d = JobSpec()
    expected = d.replace(rdzv_endpoint=f"{facts.etcd_host}:2379").elastic_policy()
    assert re.fullmatch(r"elastic-demo-[a-z0-9]{8}", policy.pop("rdzvId"))
    expected.pop("rdzvId")
    assert policy == expected
    assert validate_objects(objects, "1.33") == []
    ids = {
        the(render_chart(JOB_CHART, None, release="demo", namespace="training"), "PyTorchJob")["spec"]["elasticPolicy"][
            "rdzvId"
        ]
        for _ in range(3)
    }
    assert len(ids) == 3, "an empty rdzv.id must give every render its own rendezvous"


def test_job_env_is_whatever_the_jobspec_says(facts, monkeypatch):
    """The chart hard-codes no variable name: jobEnv is JobSpec.worker_env(), rendered as given."""
    extra = {"LAB_SOMETHING_NEW": "42", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    monkeypatch.setattr(JobSpec, "worker_env", lambda self: dict(extra))
    _, objects = render_job(JobSpec(), facts)
    env = container_env(worker_container(the(objects, "PyTorchJob")))
    assert {k: v for k, v in env.items() if not k.startswith("PET_")} == extra


def test_chart_templates_name_no_job_variable():
    text = "".join(p.read_text() for p in (JOB_CHART / "templates").iterdir())
    assert "LAB_" not in text and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in text


@pytest.mark.parametrize("backend", ["etcd-v2", "c10d"])
def test_empty_rdzv_conf_omits_the_key(backend, facts, crd):
    """Operator v1.9.4 slices an empty rdzvConf (val[:len(val)-1]) and crashes: no conf, no key."""
    values = values_for(JobSpec(name="e", rdzv_backend=backend), facts)[1]
    values["rdzv"]["conf"] = []
    objects = render_chart(JOB_CHART, values, release="e", namespace=facts.namespace)
    policy = the(objects, "PyTorchJob")["spec"]["elasticPolicy"]
    if backend == "etcd-v2":
        assert "rdzvConf" not in policy
    else:
        assert policy["rdzvConf"] == [{"key": "is_host", "value": "false"}]
    assert validate_objects(objects, "1.35") == []


def test_c10d_backend_brings_its_own_store(facts):
    spec, objects = render_job(JobSpec(name="c", rdzv_backend="c10d"), facts)
    job = the(objects, "PyTorchJob")
    store = the(objects, "Deployment", "c-rdzv-store")
    svc = the(objects, "Service", "c-rdzv-store")
    assert job["spec"]["elasticPolicy"]["rdzvHost"] == f"c-rdzv-store.{facts.namespace}.svc.cluster.local"
    assert {"key": "is_host", "value": "false"} in job["spec"]["elasticPolicy"]["rdzvConf"]
    assert store["spec"]["template"]["spec"]["nodeSelector"] == dict(facts.pools.cpu_labels)
    assert store["spec"]["template"]["spec"]["priorityClassName"] == facts.preserved_priority_class
    container = store["spec"]["template"]["spec"]["containers"][0]
    # The project's own store module, not a copy of it.
    assert container["command"] == ["python", "-m", "lab.runtime.store"]
    assert container["args"] == ["--host", "0.0.0.0", "--port", str(spec.rdzv_port)]
    assert "tolerations" not in store["spec"]["template"]["spec"]  # the default CPU pool has no taint
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"][0]["port"] == spec.rdzv_port
    etcd_only = render_job(JobSpec(name="e"), facts)[1]
    assert [o["kind"] for o in etcd_only] == ["PyTorchJob"]


def test_worker_pod_spec(facts):
    _, objects = render_job(JobSpec(), facts)
    pod = the(objects, "PyTorchJob")["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert pod["restartPolicy"] == "ExitCode"
    spec = pod["template"]["spec"]
    assert spec["priorityClassName"] == facts.worker_priority_class
    assert spec["terminationGracePeriodSeconds"] == 25 < 30  # Azure's eviction notice
    assert spec["serviceAccountName"] == facts.service_account
    limits = worker_container(the(objects, "PyTorchJob"))["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 1
    seconds = {t["key"]: t["tolerationSeconds"] for t in spec["tolerations"] if "tolerationSeconds" in t}
    assert seconds == {"node.kubernetes.io/not-ready": 30, "node.kubernetes.io/unreachable": 30}
    claim = next(v for v in spec["volumes"] if v["name"] == "checkpoints")
    assert claim["persistentVolumeClaim"]["claimName"] == facts.checkpoint_claim
    labels = pod["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in facts.rdzv_client_labels.items())


S3_FACTS = {"checkpoint_url": "s3://ckpt-bucket", "pod_env": {"AWS_REGION": "us-east-2"}}
BLOB_FACTS = {"checkpoint_url": "az://ckptacct/checkpoints", "pod_labels": {"azure.workload.identity/use": "true"}}


@pytest.mark.parametrize("storage", [S3_FACTS, BLOB_FACTS], ids=["s3", "blob"])
@pytest.mark.parametrize("mode", ["elastic", "per-step"])
def test_client_checkpoint_access_writes_under_the_storages_url_with_the_pods_identity(storage, mode, facts, crd):
    """`--checkpoint-access client`: the job's checkpoints under the storage's URL in a folder
    named after the job, no volume mounted, the platform's labels and variables on the pods;
    and what it renders is valid and holds every guardrail."""
    from dataclasses import replace

    platform = replace(facts, **storage)
    spec, values = values_for(JobSpec(name="big", fault_tolerance=mode), platform, CheckpointAccess.CLIENT)
    assert spec.checkpoint_dir == storage["checkpoint_url"] + "/big"
    objects = render_chart(JOB_CHART, values, release="big", namespace=platform.namespace)
    pod = the(objects, "PyTorchJob")["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    container = worker_container(the(objects, "PyTorchJob"))
    assert container_env(container)["LAB_CHECKPOINT_DIR"] == storage["checkpoint_url"] + "/big"
    assert all(container_env(container)[k] == v for k, v in storage.get("pod_env", {}).items())
    assert "checkpoints" not in {v["name"] for v in pod["spec"].get("volumes", [])}
    assert "checkpoints" not in {m["name"] for m in container.get("volumeMounts", [])}
    assert all(pod["metadata"]["labels"][k] == v for k, v in storage.get("pod_labels", {}).items())
    assert validate_objects(objects, "1.35") == []
    assert not any(run_guardrails(objects, GuardrailContext(facts=platform, expect_platform=False)).values())


def test_mount_access_mounts_the_claim_and_still_carries_the_platforms_labels(facts):
    from dataclasses import replace

    platform = replace(facts, **BLOB_FACTS)
    spec, objects = render_job(JobSpec(name="small"), platform)
    assert spec.checkpoint_dir == "/checkpoints"
    pod = the(objects, "PyTorchJob")["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [facts.checkpoint_claim]
    assert pod["metadata"]["labels"]["azure.workload.identity/use"] == "true"


def test_the_guardrail_refuses_a_client_job_outside_the_platforms_storage_or_identity(facts):
    """Written elsewhere than under the platform's URL, its identity may not write; without
    the platform's pod labels, the pods get no identity at all."""
    from dataclasses import replace

    platform = replace(facts, **BLOB_FACTS)
    _, values = values_for(JobSpec(name="big"), platform, CheckpointAccess.CLIENT)
    values["jobEnv"] = {**values["jobEnv"], "LAB_CHECKPOINT_DIR": "az://otheracct/ckpt/big"}
    values["podLabels"] = {}
    objects = render_chart(JOB_CHART, values, release="big", namespace=platform.namespace)
    found = run_guardrails(objects, GuardrailContext(facts=platform, expect_platform=False))["workers-spot-ready"]
    text = "\n".join(str(v) for v in found)
    assert "env.LAB_CHECKPOINT_DIR='az://otheracct/ckpt/big'" in text and "under 'az://ckptacct/checkpoints'" in text
    assert "azure.workload.identity/use" in text


def test_client_access_needs_a_platform_with_an_object_store(facts):
    with pytest.raises(InvalidInput, match=r"--checkpoint-access='client' is invalid: expected mount"):
        values_for(JobSpec(), facts, CheckpointAccess.CLIENT)


def test_cpu_only_cluster_has_no_gpu_limit(facts):
    from dataclasses import replace

    _, objects = render_job(JobSpec(), replace(facts, gpus_per_node=0))
    assert "limits" not in worker_container(the(objects, "PyTorchJob"))["resources"]


BAD_JOB_VALUES = [
    pytest.param({"minNodes": 4, "maxNodes": 2}, r"minNodes=4 is invalid: expected <= maxNodes \(2\)", id="min>max"),
    pytest.param({"rdzv": {"backend": "etcd"}}, r"/rdzv/backend.*one of 'etcd-v2', 'c10d'", id="unknown-backend"),
    pytest.param({"image": None}, r"missing property 'image'", id="missing-image"),
    pytest.param({"image": ""}, r"/image", id="empty-image"),
    pytest.param({"rdzv": {"host": "elastic-demo-worker-0"}}, r"rdzv.host=.*never a worker", id="rdzv-host-worker"),
    pytest.param({"replicas": 9}, r"replicas=9 is invalid", id="replicas-out-of-range"),
    pytest.param({"nprocPerNode": 4}, r"nprocPerNode=4 is invalid: expected <= gpusPerNode", id="nproc>gpus"),
    pytest.param({"terminationGracePeriodSeconds": 300}, r"terminationGracePeriodSeconds", id="grace-too-long"),
    pytest.param({"name": "Elastic_Demo"}, r"/name", id="bad-name"),
    pytest.param(
        {"workerPool": {"nodeLabels": None}}, r"/workerPool': missing property 'nodeLabels'", id="no-worker-pool"
    ),
    pytest.param({"env": {"PET_NNODES": "1:9"}}, r"env.PET_NNODES is invalid", id="env-overrides-pet"),
    pytest.param(
        {"env": {"LAB_CHECKPOINT_DIR": "/tmp"}},
        r"env.LAB_CHECKPOINT_DIR is invalid: expected a variable the chart does not set itself",
        id="env-overrides-job-env",
    ),
    pytest.param({"jobEnv": {"PET_NNODES": "1:9"}}, r"/jobEnv/PET_NNODES", id="job-env-sets-pet"),
    pytest.param({"jobEnv": {"BAD NAME": "x"}}, r"invalid propertyName 'BAD NAME'", id="job-env-bad-name"),
    pytest.param({"jobEnv": {"LAB_X": 1}}, r"/jobEnv/LAB_X", id="job-env-not-a-string"),
    pytest.param({"name": "1job"}, r"/name", id="name-leading-digit"),
    pytest.param(
        {"c10dStore": {"tolerations": [{"operator": "Exists"}]}},
        r"/c10dStore/tolerations/0",
        id="store-wildcard-toleration-shape",
    ),
    pytest.param(
        {"rdzv": {"backend": "c10d", "conf": [{"key": "is_host", "value": "true"}]}},
        r"is_host=.*expected \"false\"",
        id="c10d-is-host",
    ),
    pytest.param({"bogus": 1}, r"additional properties 'bogus'", id="unknown-value"),
    pytest.param(
        {"burst": {"nodes": 2, "priorityClassName": "elastic-borrowed"}},
        r"burst.nodes=2 is invalid: expected <= maxNodes - minNodes \(1\)",
        id="burst-eats-the-core",
    ),
    pytest.param(
        {"burst": {"nodes": 1, "priorityClassName": ""}},
        r"burst.priorityClassName=\"\" is invalid: expected a class of its own",
        id="burst-without-a-class",
    ),
    pytest.param(
        {"burst": {"nodes": 1, "priorityClassName": "elastic-preemptible"}},
        r"burst.priorityClassName=\"elastic-preemptible\" is invalid: expected a class of its own, below",
        id="burst-at-the-cores-class",
    ),
    pytest.param(
        {"burst": {"nodes": 1, "priorityClassName": "elastic-borrowed"}, "replicas": 3},
        r"replicas=3 is invalid: expected <= maxNodes - burst.nodes \(2\)",
        id="burst-replicas-above-the-core",
    ),
    pytest.param(
        {"burst": {"nodes": 1, "priorityClassName": "elastic-borrowed"}, "metrics": [{"type": "Resource"}]},
        r"metrics is invalid with burst.nodes > 0",
        id="burst-with-an-hpa",
    ),
    pytest.param({"burst": {"nodes": -1}}, r"/burst/nodes", id="burst-negative"),
    pytest.param(
        {"checkpoint": {"dir": "/checkpoints", "claimName": ""}},
        r"checkpoint.claimName=\"\" is invalid: expected the claim to mount",
        id="directory-without-claim",
    ),
    pytest.param(
        {"checkpoint": {"dir": "s3://bucket/job", "claimName": "elastic-checkpoints"}},
        r"checkpoint.dir=\"s3://bucket/job\" is invalid: expected the absolute path",
        id="url-with-a-claim",
    ),
    pytest.param(
        {"checkpoint": {"dir": "az://account", "claimName": ""}}, r"/checkpoint/dir", id="blob-url-no-container"
    ),
]


@pytest.mark.parametrize("values,message", BAD_JOB_VALUES)
def test_invalid_job_values_fail_at_render(values, message):
    with pytest.raises(ChartRenderError, match=message) as info:
        render_chart(JOB_CHART, values, release="r", namespace="training")
    assert str(info.value).startswith("chart elastic-pytorchjob:")


# ------------------------------------------------------------------ etcd chart
def test_etcd_chart_defaults():
    objects = render_chart(ETCD_CHART, None, release="etcd-rendezvous", namespace="training")
    assert sorted(o["kind"] for o in objects) == ["Deployment", "NetworkPolicy", "PodDisruptionBudget", "Service"]
    dep = the(objects, "Deployment")
    assert dep["spec"]["replicas"] == 1
    # Only a drain moves it, once at a time (the job rides out its restart); never the autoscaler.
    assert dep["spec"]["template"]["metadata"]["annotations"] == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"
    }
    pdb = the(objects, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": dep["spec"]["selector"]}
    unprotected = render_chart(
        ETCD_CHART, {"disruptionBudget": {"enabled": False}}, release="etcd-rendezvous", namespace="training"
    )
    assert "PodDisruptionBudget" not in {o["kind"] for o in unprotected}
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == "quay.io/coreos/etcd:v3.5.20"
    assert "--enable-v2=true" in c["args"]
    assert "--listen-client-urls=http://0.0.0.0:2379" in c["args"]
    assert "--advertise-client-urls=http://etcd-rendezvous.training.svc.cluster.local:2379" in c["args"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/keys/"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert c["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert pod["priorityClassName"] == "elastic-preserved"
    assert pod["nodeSelector"] == {"elastic-spot-lab/pool": "cpu"}
    svc = the(objects, "Service")
    assert svc["spec"]["type"] == "ClusterIP"
    pol = the(objects, "NetworkPolicy")
    assert pol["spec"]["ingress"] == [
        {
            "from": [{"podSelector": {"matchLabels": {"elastic-spot-lab/rdzv-client": "true"}}}],
            "ports": [{"protocol": "TCP", "port": 2379}],
        }
    ]
    assert validate_objects(objects, "1.33") == []


BAD_ETCD_VALUES = [
    pytest.param({"image": {"tag": "latest"}}, r"/image/tag", id="latest"),
    pytest.param({"image": {"tag": "v3.6.0"}}, r"/image/tag", id="etcd-3.6"),
    pytest.param({"nodeSelector": None}, r"nodeSelector", id="no-node-selector"),
    pytest.param({"priorityClassName": ""}, r"/priorityClassName", id="no-priority"),
    pytest.param({"service": {"type": "LoadBalancer"}}, r"additional properties 'service'", id="no-service-type-knob"),
    pytest.param({"networkPolicy": {"clientPodLabels": None}}, r"clientPodLabels", id="netpol-admits-all"),
]


@pytest.mark.parametrize("values,message", BAD_ETCD_VALUES)
def test_invalid_etcd_values_fail_at_render(values, message):
    with pytest.raises(ChartRenderError, match=message):
        render_chart(ETCD_CHART, values, release="etcd-rendezvous", namespace="training")


@pytest.mark.parametrize("chart", [JOB_CHART, ETCD_CHART], ids=lambda p: Path(p).name)
def test_charts_lint_clean(chart):
    report = helm.lint(str(chart), strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_platform_maps_replace_chart_defaults(facts):
    """Helm merges maps: labels of another cluster must not pick up the defaults' labels."""
    from dataclasses import replace

    from components.platform.settings import PlatformSettings
    from components.platform.values import etcd_values

    pools = PoolPlacement(
        cpu_labels={"node-role/cpu": "yes"},
        gpu_labels={"node-role/gpu": "yes"},
        gpu_taints=("gpu=yes:NoSchedule",),
        spot_labels={},
    )
    other = replace(facts, pools=pools, rdzv_client_labels={"team/job": "yes"})
    _, objects = render_job(JobSpec(name="x", rdzv_backend="c10d"), other)
    job = the(objects, "PyTorchJob")
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [{"matchExpressions": [{"key": "node-role/gpu", "operator": "In", "values": ["yes"]}]}]
    assert "elastic-spot-lab/rdzv-client" not in pod["metadata"]["labels"]
    assert the(objects, "Deployment")["spec"]["template"]["spec"]["nodeSelector"] == {"node-role/cpu": "yes"}
    settings = PlatformSettings(rdzv_client_labels={"team/job": "yes"})
    etcd = render_chart(ETCD_CHART, etcd_values(settings, pools), release="etcd-rendezvous", namespace="training")
    assert the(etcd, "Deployment")["spec"]["template"]["spec"]["nodeSelector"] == {"node-role/cpu": "yes"}
    assert the(etcd, "NetworkPolicy")["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"] == {
        "team/job": "yes"
    }


def test_c10d_store_tolerates_the_cpu_pools_taints(facts, crd):
    from dataclasses import replace

    tainted = replace(facts, pools=PoolPlacement(cpu_taints=("dedicated=infra:NoSchedule",)))
    _, objects = render_job(JobSpec(name="c", rdzv_backend="c10d"), tainted)
    spec = the(objects, "Deployment", "c-rdzv-store")["spec"]["template"]["spec"]
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]
    assert validate_objects(objects, "1.35") == []


def test_worker_tolerations_are_the_one_toleration_rule(facts):
    """Workers tolerate each GPU spot taint exactly as Taint.toleration() says, a taint
    without a value included (Equal with an empty value)."""
    from dataclasses import replace

    pools = PoolPlacement(gpu_taints=("gpu-only:NoSchedule", "elastic-spot-lab/spot=true:NoSchedule"), spot_labels={})
    _, objects = render_job(JobSpec(), replace(facts, pools=pools))
    tolerations = the(objects, "PyTorchJob")["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"]
    assert [t for t in tolerations if "tolerationSeconds" not in t] == [t.toleration() for t in pools.gpu_taints]
    assert {"key": "gpu-only", "operator": "Equal", "value": "", "effect": "NoSchedule"} in tolerations


@pytest.mark.parametrize("name", ["job", "job-1", "a", "x" * 40, "x" * 41, "1job", "9", "-job", "job-", "Job", "job_1"])
def test_job_names_agree_with_jobspec(name, facts):
    """JobSpec and values.schema.json accept the same names: DNS-1035 labels of at most 40."""
    try:
        JobSpec(name=name)
        spec_ok = True
    except InvalidInput as exc:
        spec_ok = False
        assert "DNS-1035" in str(exc)
    try:
        render_chart(JOB_CHART, {"name": name}, release="r", namespace="training")
        chart_ok = True
    except ChartRenderError as exc:
        chart_ok = False
        assert "/name" in str(exc)
    assert spec_ok == chart_ok
    schema = json.loads((JOB_CHART / "values.schema.json").read_text())
    assert "DNS-1035" in schema["properties"]["name"]["description"]


@pytest.mark.processes
def test_c10d_store_command_runs_the_project_store(facts):
    """The store container's command, as rendered, starts a TCPStore that accepts clients,
    and stops on SIGTERM (the kubelet's stop)."""
    pytest.importorskip("torch")
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    values = values_for(JobSpec(name="c", rdzv_backend="c10d"), facts)[1]
    values["c10dStore"]["port"] = port
    store = the(render_chart(JOB_CHART, values, release="c", namespace=facts.namespace), "Deployment", "c-rdzv-store")
    container = store["spec"]["template"]["spec"]["containers"][0]
    argv = [sys.executable if a == "python" else a for a in container["command"] + container["args"]]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        argv,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + within(60)
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the store never listened"
                time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=within(20)) == 0
        assert f"listening on 0.0.0.0:{port}" in (proc.stdout.read() if proc.stdout else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_events_name_their_pod_and_node_from_the_pods_own_fields(facts):
    _, objects = render_job(JobSpec(), facts)
    env = worker_container(the(objects, "PyTorchJob"))["env"]
    fields = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in env if "valueFrom" in e}
    assert fields == {
        "LAB_NODE": "metadata.name",
        "LAB_K8S_NODE": "spec.nodeName",
        "LAB_POD_NAMESPACE": "metadata.namespace",  # with the name: the pod its deletion time is read from
    }


# ------------------------------------------------------------------ per-step (TorchFT) jobs
PER_STEP_VARIANTS = [
    pytest.param({}, id="defaults"),
    pytest.param({"rdzv_backend": "c10d"}, id="c10d-backend-ignored"),
    pytest.param({"min_nodes": 1, "max_nodes": 1}, id="min=max=1"),
    pytest.param({"min_nodes": 3, "max_nodes": 8, "max_restarts": 0}, id="min3-max8-no-restarts"),
    pytest.param({"module": None, "script": "/app/train.py", "script_args": ("--lr", "0.1")}, id="script-with-args"),
    pytest.param({"per_step": PerStepSettings.torchft_defaults(), "monitor_interval_s": 0.5}, id="torchft-timings"),
]


def per_step(**changes: Any) -> JobSpec:
    return JobSpec(**{"name": "ft", "fault_tolerance": FaultTolerance.PER_STEP, **changes})


@pytest.mark.parametrize("changes", PER_STEP_VARIANTS)
def test_per_step_job_matches_jobspec(changes, facts):
    """Each worker pod is one replica group: torchrun alone with the spec's group flags, the
    spec's environment plus its own name and address, and the fixed ports of its servers."""
    spec, objects = render_job(per_step(**changes), facts)
    job = the(objects, "PyTorchJob")
    assert "elasticPolicy" not in job["spec"]
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Worker"}  # no Master without elasticPolicy
    assert worker["replicas"] == spec.max_nodes and worker["restartPolicy"] == "ExitCode"
    container = worker_container(job)
    assert container["command"] == spec.launcher()
    assert (
        container["args"] == spec.group_torchrun_args() + spec.entrypoint() == spec.torchrun_args() + spec.entrypoint()
    )
    ports = {"TORCHFT_MANAGER_PORT": str(MANAGER_PORT), "LAB_FT_CHECKPOINT_PORT": str(CHECKPOINT_PORT)}
    assert container_env(container) == {**spec.worker_env(), **ports}
    assert container_field_env(container) == {
        **POD_FIELD_ENV,
        "LAB_REPLICA_GROUP": "metadata.name",
        "LAB_FT_ADVERTISE": "status.podIP",
    }
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [
        ("ft-manager", MANAGER_PORT),
        ("ft-weights", CHECKPOINT_PORT),
    ]
    assert container_env(container)["TORCHFT_LIGHTHOUSE"] == (
        f"http://ft-lighthouse.{facts.namespace}.svc.cluster.local:{LIGHTHOUSE_PORT}"
    )
    # The operator's own PET_* (PET_NNODES = the replica count) lose to the explicit flags.
    assert operator_pet_env(job) == {"PET_NNODES": str(spec.max_nodes), "PET_NPROC_PER_NODE": str(spec.nproc_per_node)}
    flags = dict(a.split("=", 1) for a in container["args"] if a.startswith("--") and "=" in a)
    assert flags["--nnodes"] == "1" and flags["--nproc-per-node"] == str(spec.nproc_per_node)


@pytest.mark.parametrize("changes", PER_STEP_VARIANTS)
def test_per_step_job_brings_one_lighthouse_on_the_cpu_pool(changes, facts):
    spec, objects = render_job(per_step(**changes), facts)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("Deployment", "ft-lighthouse"),
        ("NetworkPolicy", "ft-lighthouse"),
        ("PodDisruptionBudget", "ft-lighthouse"),
        ("PyTorchJob", "ft"),
        ("Service", "ft-lighthouse"),
    ]  # and no c10d store, whatever the rendezvous backend says
    dep = the(objects, "Deployment", "ft-lighthouse")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == dict(facts.pools.cpu_labels)
    assert pod["priorityClassName"] == facts.preserved_priority_class
    assert "tolerations" not in pod  # the default CPU pool has no taint
    assert dep["spec"]["template"]["metadata"]["annotations"] == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"
    }
    (container,) = pod["containers"]
    assert container["image"] == spec.image
    assert container["command"] == ["torchft_lighthouse"]
    assert container["args"] == spec.per_step.lighthouse_args(spec.min_nodes, bind=f"[::]:{LIGHTHOUSE_PORT}")
    assert container["ports"] == [{"name": "lighthouse", "containerPort": LIGHTHOUSE_PORT, "protocol": "TCP"}]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/", "port": "lighthouse"}
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "64Mi"}
    svc = the(objects, "Service", "ft-lighthouse")
    assert svc["spec"]["type"] == "ClusterIP" and svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"] == [
        {"name": "lighthouse", "port": LIGHTHOUSE_PORT, "targetPort": "lighthouse", "protocol": "TCP"}
    ]
    pdb = the(objects, "PodDisruptionBudget", "ft-lighthouse")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": dep["spec"]["selector"]}
    pol = the(objects, "NetworkPolicy", "ft-lighthouse")
    assert pol["spec"]["ingress"][0]["from"] == [
        {"podSelector": {"matchLabels": {"elastic-spot-lab/job": "ft", "elastic-spot-lab/role": "worker"}}}
    ]


@pytest.mark.parametrize("changes", PER_STEP_VARIANTS)
def test_per_step_job_validates_and_holds_every_guardrail(changes, facts, crd):
    _, objects = render_job(per_step(**changes), facts)
    assert validate_objects(objects, "1.35") == []
    ctx = GuardrailContext(facts=facts, expect_platform=False)
    assert {k: [str(v) for v in vs] for k, vs in run_guardrails(objects, ctx).items() if vs} == {}


def test_elastic_jobs_render_no_per_step_part(facts):
    """The per-step values are there for every job; only a per-step job renders them."""
    for backend, kinds in (
        ("etcd-v2", ["PyTorchJob"]),
        ("c10d", ["Deployment", "NetworkPolicy", "PodDisruptionBudget", "PyTorchJob", "Service"]),
    ):
        spec, objects = render_job(JobSpec(name="e", rdzv_backend=backend), facts)
        assert sorted(o["kind"] for o in objects) == kinds
        assert not any("lighthouse" in o["metadata"]["name"] for o in objects)
        container = worker_container(the(objects, "PyTorchJob"))
        assert container["args"] == spec.entrypoint() and "ports" not in container
        assert container_env(container)["PET_MONITOR_INTERVAL"] == "0.1"
        assert set(container_field_env(container)) == set(POD_FIELD_ENV)


def test_per_step_lighthouse_tolerates_the_cpu_pools_taints(facts, crd):
    from dataclasses import replace

    tainted = replace(facts, pools=PoolPlacement(cpu_taints=("dedicated=infra:NoSchedule",)))
    _, objects = render_job(per_step(), tainted)
    spec = the(objects, "Deployment", "ft-lighthouse")["spec"]["template"]["spec"]
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]
    assert validate_objects(objects, "1.35") == []


def test_per_step_notes_name_the_lighthouse(facts):
    _, values = values_for(per_step(), facts)
    notes = render_release(JOB_CHART, values, release="ft", namespace=facts.namespace).notes
    assert notes.startswith("Per-step PyTorchJob ft in namespace training: 2 to 3 replica groups")
    assert f"ft-lighthouse.training.svc.cluster.local:{LIGHTHOUSE_PORT}" in notes


def test_values_yaml_per_step_defaults_agree_with_the_spec():
    values = yaml.safe_load((JOB_CHART / "values.yaml").read_text())
    d = per_step()
    assert values["faultTolerance"] == JobSpec().fault_tolerance.value
    assert values["torchrunArgs"] == []
    assert values["lighthouse"]["port"] == LIGHTHOUSE_PORT
    assert values["lighthouse"]["args"] == d.per_step.lighthouse_args(d.min_nodes, bind=f"[::]:{LIGHTHOUSE_PORT}")
    assert values["groupPorts"] == [{"name": n, "port": p, "env": e} for n, p, e in GROUP_PORTS]


BAD_PER_STEP_VALUES = [
    pytest.param(
        {"torchrunArgs": ["--nnodes=1"]},
        r"torchrunArgs=\[--nnodes=1\] is invalid: expected --standalone",
        id="no-standalone",
    ),
    pytest.param(
        {"lighthouse": {"port": 29600}},
        r"lighthouse.args=.* is invalid: expected a --bind=HOST:29600 flag",
        id="bind-port-not-the-service-port",
    ),
    pytest.param({"minNodes": 3}, r"expected --min_replicas=3, the quorum's minimum is minNodes", id="min-replicas"),
    pytest.param(
        {"env": {"TORCHFT_MANAGER_PORT": "1"}}, r"env.TORCHFT_MANAGER_PORT is invalid", id="env-overrides-group-port"
    ),
    pytest.param(
        {"groupPorts": [{"name": "Manager_Port", "port": 1, "env": "X"}]}, r"/groupPorts/0/name", id="port-name"
    ),
    pytest.param({"lighthouse": {"nodeSelector": None}}, r"missing property 'nodeSelector'", id="no-node-selector"),
    pytest.param({"lighthouse": {"priorityClassName": ""}}, r"/lighthouse/priorityClassName", id="no-priority"),
    pytest.param(
        {"lighthouse": {"tolerations": [{"operator": "Exists"}]}},
        r"/lighthouse/tolerations/0",
        id="wildcard-toleration",
    ),
]


@pytest.mark.parametrize("values,message", BAD_PER_STEP_VALUES)
def test_invalid_per_step_values_fail_at_render(values, message, facts):
    base = values_for(per_step(), facts)[1]
    for key, value in values.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and key == "lighthouse" else value
    with pytest.raises(ChartRenderError, match=message):
        render_chart(JOB_CHART, base, release="ft", namespace=facts.namespace)


def test_unknown_fault_tolerance_fails_at_render():
    with pytest.raises(ChartRenderError, match=r"/faultTolerance"):
        render_chart(JOB_CHART, {"faultTolerance": "torchft"}, release="r", namespace="training")


@pytest.mark.processes
def test_lighthouse_command_serves_its_probe_and_stops_on_sigterm(facts):
    """The lighthouse container's command, as rendered, answers its probe's GET / with its
    status page and stops on SIGTERM when it is not PID 1 (the pod shares its process
    namespace for this)."""
    import signal
    import socket
    import subprocess
    import time
    import urllib.request

    from lab.local.lighthouse import find_lighthouse

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    spec, values = values_for(per_step(), facts)
    values["lighthouse"]["port"] = port
    values["lighthouse"]["args"] = spec.per_step.lighthouse_args(spec.min_nodes, bind=f"[::]:{port}")
    dep = the(render_chart(JOB_CHART, values, release="ft", namespace=facts.namespace), "Deployment", "ft-lighthouse")
    pod = dep["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    container = pod["containers"][0]
    probe = container["readinessProbe"]["httpGet"]
    argv = [find_lighthouse(), *container["command"][1:], *container["args"]]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + within(30)
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{probe['path']}", timeout=1) as resp:
                    assert resp.status == 200 and "html" in resp.headers.get("Content-Type", "")
                    break
            except OSError:
                assert time.monotonic() < deadline, "the lighthouse never answered"
                time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=pod["terminationGracePeriodSeconds"])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

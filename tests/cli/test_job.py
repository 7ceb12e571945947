"""`elastic-lab submit | status | logs | delete | drill --stack` against a loopback API server."""

from __future__ import annotations

import json
import threading

import pytest
import yaml

from lab.cli import main
from lab.cluster.jobs import JOB_NAME_LABEL, REPLICA_INDEX_LABEL
from tests.cluster.burst_job import running
from tests.cluster.fake_kube import node, pod
from tests.cluster.test_drill import GPU, NS, SimulatedJob
from tests.placements import TRAINER_IMAGE

# A submit to the AKS stack that renders and checks the job and creates nothing.
AKS_DRY_RUN = ("submit", "--stack", "aks-dev", "--dry-run", "--image", TRAINER_IMAGE)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def kubeconfig(api_server, tmp_path):
    return str(api_server.kubeconfig(tmp_path, namespace="default"))


def test_submit_creates_then_refuses_then_replaces(api_server, kubeconfig, capsys):
    base = ("submit", "--stack", "byo", "--kubeconfig", kubeconfig, "--name", "demo")
    code, out, err = _run(capsys, *base)
    assert code == 0, err
    assert "created PyTorchJob/demo in namespace training" in out  # the stack's namespace, not the context's
    assert "Elastic PyTorchJob demo in namespace training: 2 to 3 worker pods" in out  # the chart's NOTES.txt
    assert "drill:   elastic-lab drill --stack byo --job demo --namespace training" in out
    # Its checkpoint interval against the one the evidence gives, at each eviction band.
    from lab.vocab.checkpoint_interval import daly_interval_s, duration, job_mtbf_s

    daly = duration(daly_interval_s(1.0, job_mtbf_s(0.125, 3)))
    assert "checkpoints: every 50 steps (--checkpoint-every); Daly's interval for 3 node(s)" in out
    assert f"10-15% {daly}," in out
    assert api_server.get("PyTorchJob", "demo", "training") is not None
    code, _, err = _run(capsys, *base)
    assert code == 1 and "PyTorchJob training/demo already exists" in err
    code, _, err = _run(capsys, *base, "--replace")
    assert code == 0, err


def _on_demand_note(workers: int) -> str:
    """What submit says of aks-dev's on-demand rank for `workers` workers, from the price table."""
    from lab.plan.cost import load_prices

    t4 = load_prices()["azure"]["vm"]["eastus"]["Standard_NC4as_T4_v3"]
    per_worker = t4["on_demand"] - t4["spot"]
    return (
        "The on-demand rank 3 (gpuondemand, Standard_NC4as_T4_v3), kept until the job ends or the worker is moved, "
        f"costs over rank 1: +{per_worker:.3f} USD/h a worker, +{workers * per_worker:.3f} USD/h at {workers} "
        f"worker(s), +{workers * per_worker * 24 * 7:.2f} USD a week of the job's life."
    )


def test_a_dry_run_with_a_burst_shows_the_core_and_the_borrowed_part(capsys):
    code, out, err = _run(capsys, "submit", "--stack", "byo", "--dry-run", "--core", "2", "--burst", "1")
    assert code == 0, err
    jobs = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "PyTorchJob"]
    assert [j["metadata"]["name"] for j in jobs] == ["elastic-demo", "elastic-demo-burst"]
    workers = [j["spec"]["pytorchReplicaSpecs"]["Worker"] for j in jobs]
    assert [w["replicas"] for w in workers] == [2, 1]
    assert [w["template"]["spec"]["priorityClassName"] for w in workers] == ["elastic-preemptible", "elastic-borrowed"]
    assert jobs[0]["spec"]["elasticPolicy"] == jobs[1]["spec"]["elasticPolicy"]


def test_submit_prices_the_on_demand_rank_for_the_job_s_whole_life(api_server, kubeconfig, capsys):
    """A job that can land on the stack's on-demand GPU rank is told that a worker there keeps
    its node until the job ends or it is moved, and what that costs for its workers."""
    sized = ("--min-nodes", "1", "--max-nodes", "2")
    code, out, err = _run(capsys, *AKS_DRY_RUN, *sized)
    assert code == 0, err
    assert "this job's workers land on its on-demand rank" in err and _on_demand_note(2) in err
    strays = [d for d in yaml.safe_load_all(out) if d and not (isinstance(d, dict) and d.get("kind"))]
    assert strays == []  # stdout stays the YAML alone
    code, out, err = _run(capsys, "submit", "--stack", "aks-dev", "--image", TRAINER_IMAGE, "--kubeconfig", kubeconfig)
    assert code == 0, err
    assert "created PyTorchJob/" in out and _on_demand_note(3) in out
    # No on-demand rank (byo has no GPU ranks of ours): nothing said.
    code, out, err = _run(capsys, "submit", "--stack", "byo", "--dry-run", "--image", TRAINER_IMAGE)
    assert code == 0 and "on-demand" not in err


def test_submit_with_an_hpa_needs_the_metrics_api(api_server, kubeconfig, capsys):
    """`--autoscale-cpu` on a cluster whose discovery lists no metrics.k8s.io: exit 2, nothing
    created; once metrics-server serves it (EKS's add-on, AKS's built-in one), the job goes in."""
    base = ("submit", "--stack", "byo", "--kubeconfig", kubeconfig, "--name", "demo", "--autoscale-cpu", "70")
    code, _, err = _run(capsys, *base)
    assert code == 2
    assert "--autoscale-cpu=70 is invalid: expected a cluster that serves the metrics.k8s.io API" in err
    assert api_server.calls("POST") == []
    api_server.api_groups.append("metrics.k8s.io/v1beta1")
    code, out, err = _run(capsys, *base)
    assert code == 0, err
    assert "created PyTorchJob/demo" in out
    assert api_server.get("PyTorchJob", "demo", "training")["spec"]["elasticPolicy"]["metrics"]


def test_submit_a_per_step_job_creates_its_lighthouse(api_server, kubeconfig, capsys):
    base = ("submit", "--stack", "byo", "--kubeconfig", kubeconfig, "--name", "demo", "--fault-tolerance", "per-step")
    code, out, err = _run(capsys, *base)
    assert code == 0, err
    assert (
        "created Deployment/demo-lighthouse, PodDisruptionBudget/demo-lighthouse, Service/demo-lighthouse, "
        "NetworkPolicy/demo-lighthouse, PyTorchJob/demo in namespace training "
        "(lighthouse demo-lighthouse.training.svc.cluster.local:29510)"
    ) in out
    assert "Per-step PyTorchJob demo in namespace training: 2 to 3 replica groups" in out  # NOTES.txt
    job = api_server.get("PyTorchJob", "demo", "training")
    assert "elasticPolicy" not in job["spec"]
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "--standalone"
    lighthouse = api_server.get("Deployment", "demo-lighthouse", "training")
    assert lighthouse["spec"]["template"]["spec"]["containers"][0]["command"] == ["torchft_lighthouse"]
    assert api_server.get("Deployment", "demo-rdzv-store", "training") is None
    conn = ("--stack", "byo", "--kubeconfig", kubeconfig)
    code, out, _ = _run(capsys, "status", *conn, "--job", "demo")
    assert code == 0 and "(per-step 2..3)" in out
    code, out, _ = _run(capsys, "delete", *conn, "--job", "demo")
    assert code == 0 and "Deployment/demo-lighthouse" in out
    assert api_server.get("Deployment", "demo-lighthouse", "training") is None


def test_submit_dry_run_shows_the_per_step_job(capsys):
    code, out, err = _run(
        capsys,
        *AKS_DRY_RUN,
        "--name",
        "ft",
        "--fault-tolerance",
        "per-step",
        "--min-nodes",
        "1",
        "--backend",
        "c10d",
    )
    assert code == 0, err
    assert (
        "# per-step (TorchFT): lighthouse at ft-lighthouse.training.svc.cluster.local:29510, quorum of at least 1 "
        "of up to 3 replica groups"
    ) in out
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == [
        ("Deployment", "ft-lighthouse"),
        ("NetworkPolicy", "ft-lighthouse"),
        ("PodDisruptionBudget", "ft-lighthouse"),
        ("PyTorchJob", "ft"),
        ("Service", "ft-lighthouse"),
    ]
    lighthouse = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert "--min_replicas=1" in lighthouse["containers"][0]["args"]
    assert lighthouse["priorityClassName"] == "elastic-preserved"


@pytest.mark.parametrize(
    "stack,flags,message",
    [
        (
            "aks-dev",
            ["--min-nodes", "4", "--max-nodes", "5"],
            "--min-nodes=4 is invalid: expected <= 3, the GPU spot pool's maximum",
        ),
        ("aks-dev", ["--gpus", "2"], "--gpus=2 is invalid: expected 0..1"),
        ("byo", ["--gpus", "1"], "--gpus=1 is invalid: expected 0: the stack's platform has no GPUs"),
        ("byo", ["--cpu", "four"], "--cpu='four' is invalid: expected a Kubernetes quantity"),
        ("byo", ["--memory", "0Gi"], "--memory='0Gi' is invalid"),
        ("byo", ["--replicas", "5"], "--replicas=5 is invalid: expected between --min-nodes (2) and --max-nodes (3)"),
        (
            "aks-dev",
            ["--max-nodes", "50"],
            "--max-nodes=50 is invalid: expected <= 3, the GPU spot pool's maximum: the job starts --max-nodes pods",
        ),
        ("aks-dev", ["--image", "UPPER/Case:latest"], "--image='UPPER/Case:latest' is invalid: expected a container"),
        ("byo", ["--autoscale-cpu", "0"], "--autoscale-cpu=0 is invalid: expected a CPU utilisation in percent"),
        (
            "byo",
            ["--autoscale-cpu", "70", "--fault-tolerance", "per-step"],
            "--autoscale-cpu=70 is invalid: expected no HPA for a per-step job",
        ),
        (
            "byo",
            ["--autoscale-cpu", "70", "--min-nodes", "3", "--max-nodes", "3"],
            "expected --min-nodes below --max-nodes (both 3): the HPA has no room to move",
        ),
    ],
    ids=[
        "min-above-pool",
        "gpus-above-node",
        "gpus-on-cpu-platform",
        "cpu-not-a-quantity",
        "zero-memory",
        "replicas",
        "max-above-pool",
        "image-reference",
        "autoscale-percent",
        "autoscale-per-step",
        "autoscale-no-room",
    ],
)
def test_sizing_is_checked_against_the_stack_before_anything_starts(capsys, stack, flags, message):
    image = ["--image", TRAINER_IMAGE] if "--image" not in flags else []
    code, _, err = _run(capsys, "submit", "--stack", stack, "--dry-run", *image, *flags)
    assert code == 2 and message in err, err


@pytest.fixture
def no_cluster(monkeypatch):
    """Every way to a cluster fails the test: a command must refuse its input before it asks."""
    import lab.cluster.kube

    def connect(*args, **kwargs):
        pytest.fail("a connection to the cluster was attempted")

    monkeypatch.setattr(lab.cluster.kube, "connect", connect)


@pytest.mark.parametrize(
    "argv,said",
    [
        (["delete", "BAD NAME", "-s", "byo"], "JOB='BAD NAME' is invalid: expected a PyTorchJob's name, a DNS-1035"),
        (["delete", "--job", "x" * 64, "-s", "byo"], "--job='" + "x" * 64 + "' is invalid"),
        (["scale", "demo", "--nodes", "0", "-s", "byo"], "--nodes=0 is invalid"),
        (["scale", "demo", "--nodes", "3000000000"], "--nodes=3000000000 is invalid"),
        (["status", "--namespace", "Bad NS"], "--namespace='Bad NS' is invalid: expected a namespace name"),
        (["status", "demo", "--job", "other"], "--job='other' is invalid: expected the same job as JOB ('demo')"),
        (["logs", "demo", "--worker", "-1"], "--worker=-1 is invalid"),
        (["logs", "--tail", "5"], "JOB=None is invalid: expected the job's name"),
        (["submit", "-s", "byo", "--image", "registry.example.com/t:1", "--namespace", "Bad NS"], "--namespace="),
        (["submit", "-s", "byo", "--image", "registry.example.com/t:1", "--", "--model", "big"], "after --="),
        (["submit", "-s", "byo", "--kubeconfig", "/nonexistent", "--cpu", "0"], "--kubeconfig='/nonexistent'"),
    ],
)
def test_a_job_commands_input_is_refused_before_the_cluster_is_asked(capsys, no_cluster, argv, said):
    code, _, err = _run(capsys, *argv)
    assert code == 2 and said in err, err


def test_every_problem_of_a_job_command_comes_at_once(capsys, no_cluster):
    code, _, err = _run(capsys, "delete", "BAD NAME", "--job", "other", "--namespace", "Bad NS", "-s", "byo")
    assert code == 2 and "(3 problem(s))" in err, err
    assert all(key in err for key in ("JOB='BAD NAME'", "--job='other'", "--namespace='Bad NS'"))
    code, _, err = _run(
        capsys,
        "submit",
        "-s",
        "aks-dev",
        "--image",
        TRAINER_IMAGE,
        "--cpu",
        "4000",
        "--memory",
        "16",
        "--module",
        "my_train.py",
        "--max-restarts",
        "1000000000000",
        "--namespace",
        "Bad NS",
        "--name",
        "a",
        "--job",
        "b",
    )
    assert code == 2 and "(6 problem(s))" in err, err
    for key in ("--cpu=", "--memory=", "--module=", "--max-restarts=", "--namespace=", "--job="):
        assert f"  - {key}" in err


def test_a_namespace_other_than_the_platforms_is_refused_and_the_dry_run_names_the_one_used(capsys):
    code, _, err = _run(capsys, *AKS_DRY_RUN, "--namespace", "other")
    assert code == 2
    assert "--namespace='other' is invalid: expected the stack's training namespace 'training', or none" in err
    code, out, err = _run(capsys, *AKS_DRY_RUN, "--namespace", "training")
    assert code == 0, err
    assert out.startswith("# elastic-lab submit --stack aks-dev: job elastic-demo on aks, namespace training\n")
    job = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "PyTorchJob")
    assert job["metadata"]["namespace"] == "training"


def test_the_demo_trainers_arguments_pass_its_own_parser_and_a_scripts_pass_untouched(capsys):
    code, out, err = _run(capsys, *AKS_DRY_RUN, "--", "--steps", "500", "--model", "gpt-small")
    assert code == 0, err
    code, out, err = _run(capsys, *AKS_DRY_RUN, "--script", "/app/mine.py", "--", "--steps", "-100", "--anything")
    assert code == 0, err
    job = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "PyTorchJob")
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["/app/mine.py", "--steps", "-100", "--anything"]


def test_the_demos_model_is_a_typed_flag_of_submit_as_of_the_drill(capsys):
    code, out, err = _run(capsys, *AKS_DRY_RUN, "--model", "gpt-100m", "--parallel", "ddp", "--", "--steps", "50")
    assert code == 0, err
    job = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "PyTorchJob")
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["args"][-6:] == ["--model", "gpt-100m", "--parallel", "ddp", "--steps", "50"]
    with pytest.raises(SystemExit) as refused:
        _run(capsys, *AKS_DRY_RUN, "--model", "gpt-huge")
    assert refused.value.code == 2 and "invalid choice: 'gpt-huge'" in capsys.readouterr().err
    # A script of one's own builds its own model: the flag is refused, naming what to do.
    code, out, err = _run(capsys, *AKS_DRY_RUN, "--script", "/app/mine.py", "--model", "gpt-small")
    assert code == 2 and out == ""
    assert "--model='gpt-small' is invalid: expected tiny (the default) with --script" in err
    # ... said with every other problem of the job at once
    code, out, err = _run(
        capsys, *AKS_DRY_RUN, "--script", "/app/mine.py", "--model", "gpt-small", "--min-nodes", "5", "--max-nodes", "2"
    )
    assert code == 2 and "--model='gpt-small' is invalid" in err and "--min-nodes=5 is invalid" in err
    # A running job's model is its own: the cluster drill attached to it refuses the flag.
    code, out, err = _run(capsys, "drill", "--stack", "byo", "--dry-run", "--job", "j", "--model", "gpt-small")
    assert code == 2 and "--model='gpt-small' is invalid: expected tiny (the default) with --job" in err


def test_sizing_lands_in_the_rendered_job(capsys):
    code, out, err = _run(
        capsys,
        *AKS_DRY_RUN,
        "--cpu",
        "3500m",
        "--memory",
        "20Gi",
        "--replicas",
        "2",
    )
    assert code == 0, err
    job = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "PyTorchJob")
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    container = worker["template"]["spec"]["containers"][0]
    assert worker["replicas"] == 2
    assert container["resources"]["requests"] == {"cpu": "3500m", "memory": "20Gi"}
    # The memory limit is the request: a worker past it is OOMKilled in its own container.
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1, "memory": "20Gi"}


def test_status_logs_delete(api_server, kubeconfig, capsys):
    assert _run(capsys, "submit", "--stack", "byo", "--kubeconfig", kubeconfig, "--name", "demo")[0] == 0
    labels = {JOB_NAME_LABEL: "demo", REPLICA_INDEX_LABEL: "0"}
    api_server.put(pod("demo-worker-0", NS, labels, "gpu-0"))
    api_server.add_log(NS, "demo-worker-0", "hello", close=True)
    conn = ("--stack", "byo", "--kubeconfig", kubeconfig)
    code, out, _ = _run(capsys, "status", *conn)
    assert code == 0 and "PyTorchJobs in training: demo" in out
    code, out, _ = _run(capsys, "status", *conn, "--job", "demo")
    assert code == 0 and "pod demo-worker-0 (worker 0): Running ready on gpu-0" in out
    code, out, _ = _run(capsys, "status", *conn, "--job", "demo", "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["name"] == "demo" and doc["namespace"] == NS
    assert [(p["name"], p["index"], p["node"]) for p in doc["pods"]] == [("demo-worker-0", 0, "gpu-0")]
    code, out, _ = _run(capsys, "status", *conn, "-o", "json")
    assert code == 0 and json.loads(out) == {"namespace": NS, "jobs": ["demo"]}
    code, out, _ = _run(capsys, "logs", *conn, "--job", "demo", "--worker", "0")
    assert code == 0 and out == "[demo-worker-0] hello\n"
    code, out, _ = _run(capsys, "logs", *conn, "demo", "--tail", "1")  # the job as JOB, or --job
    assert code == 0 and out == "[demo-worker-0] hello\n"
    code, _, err = _run(capsys, "logs", *conn, "demo", "--job", "other")
    assert code == 2 and "--job='other' is invalid: expected the same job as JOB ('demo')" in err
    code, _, err = _run(capsys, "delete", *conn)
    assert code == 2 and "JOB=None is invalid: expected the job's name (as JOB or --job)" in err
    code, out, _ = _run(capsys, "scale", *conn, "demo", "--nodes", "2")
    assert code == 0 and "training/demo: Worker replicas 3 -> 2 (range 2..3)" in out
    code, _, err = _run(capsys, "scale", *conn, "demo", "--nodes", "9")
    assert code == 2 and "--nodes=9 is invalid: expected 2..3: the job's range" in err
    code, out, _ = _run(capsys, "delete", "-s", "byo", "--kubeconfig", kubeconfig, "demo")
    assert code == 0 and "deleted PyTorchJob/demo" in out
    code, _, err = _run(capsys, "status", *conn, "--job", "demo")
    assert code == 1 and "no PyTorchJob training/demo" in err


def test_logs_show_the_tail_a_time_window_or_the_previous_container(api_server, kubeconfig, capsys):
    assert _run(capsys, "submit", "--stack", "byo", "--kubeconfig", kubeconfig, "--name", "demo")[0] == 0
    api_server.put(pod("demo-worker-0", NS, {JOB_NAME_LABEL: "demo", REPLICA_INDEX_LABEL: "0"}, "gpu-0"))
    api_server.add_log(NS, "demo-worker-0", "one", "two", "three", close=True)
    api_server.previous_logs[(NS, "demo-worker-0")] = ["Traceback (most recent call last):", "OSError: boom"]
    base = ("logs", "--stack", "byo", "--kubeconfig", kubeconfig, "--job", "demo")
    code, out, _ = _run(capsys, *base, "--tail", "2")
    assert code == 0 and out == "[demo-worker-0] two\n[demo-worker-0] three\n"
    code, out, _ = _run(capsys, *base, "--previous", "--since", "10m")
    assert code == 0 and out.endswith("[demo-worker-0] OSError: boom\n")
    assert api_server.log_queries[-1]["sinceSeconds"] == ["600"] and api_server.log_queries[-1]["previous"] == ["True"]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--tail", "-1"], "--tail=-1 is invalid: expected a number of lines >= 0"),
        (["--since", "yesterday"], "--since='yesterday' is invalid: expected a duration such as 30s, 10m or 2h"),
        (["--previous", "--follow"], "--previous=True is invalid: expected without --follow"),
    ],
)
def test_a_bad_log_window_is_refused_before_the_cluster_is_asked(capsys, flags, said):
    code, _, err = _run(capsys, "logs", "--kubeconfig", "/nonexistent", "--job", "demo", *flags)
    assert code == 2 and said in err


def test_context_and_kubeconfig_env(api_server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", str(api_server.kubeconfig(tmp_path, context="lab", namespace="training")))
    code, out, err = _run(capsys, "status", "--context", "lab")
    assert code == 0 and "PyTorchJobs in training: none" in out, err
    code, _, err = _run(capsys, "status", "--context", "other")
    assert code == 1 and "--context 'other': no such context" in err


def test_drill_dry_run_prints_every_call_and_makes_none_that_changes(api_server, kubeconfig, capsys):
    api_server.put(node("gpu-0", GPU, "azure:///x"))
    code, out, err = _run(capsys, "drill", "--stack", "byo", "--kubeconfig", kubeconfig, "--dry-run", "--name", "demo")
    assert code == 0, err
    assert "kubeflow-training: TrainingClient.create_job(PyTorchJob training/demo)" in out
    assert "kubernetes: patch_node(name='gpu-0'" in out and "create_namespaced_pod_eviction" in out
    assert [m for m, *_ in api_server.requests if m != "GET"] == []


def test_drill_on_the_cluster_end_to_end(api_server, kubeconfig, capsys, tmp_path):
    sim = SimulatedJob(api_server)
    threading.Thread(target=sim.run, daemon=True).start()
    try:
        code, out, err = _run(
            capsys,
            "drill",
            "--stack",
            "byo",
            "--kubeconfig",
            kubeconfig,
            "--name",
            "demo",
            "--steps",
            "100",
            "--evict-at-step",
            "20",
            "--workdir",
            str(tmp_path / "run"),
            "--deadline",
            "60",
        )
    finally:
        sim.stop.set()
    assert code == 0, out + err
    assert "Drill PASSED" in out and "eviction of demo-worker-2 (hard)" in out and "requested through kubernetes" in out
    assert (tmp_path / "run" / "report.json").is_file() and (tmp_path / "run" / "timeline.png").is_file()


def test_a_reclaim_drill_on_the_cluster_end_to_end(api_server, kubeconfig, capsys, tmp_path):
    """The burst taken back by the scheduler's preemption of the owners' pod, and given back."""
    job = ("--name", "demo", "--core", "2", "--burst", "1", "--steps", "100", "--evict-at-step", "20")
    with running(api_server):
        code, out, err = _run(
            capsys,
            *("drill", "--stack", "byo", "--kubeconfig", kubeconfig, *job, "--fault", "reclaim", "--reclaim-for", "1"),
            *("--workdir", str(tmp_path / "run"), "--deadline", "60"),
        )
    assert code == 0, out + err
    assert "Drill PASSED" in out and "taken back by its owners' work (notice)" in out, out
    assert "the owners' work took back 1 borrowed node(s) (a grace of 3 s); the job's core: 2 of 3" in out
    assert "taking the burst back by preemption" in err
    assert not [p for p in api_server.of_kind("Pod") if p["metadata"]["name"].startswith("demo-reclaim")]


def test_local_drill_options_are_refused_with_a_stack_never_ignored(capsys):
    code, out, err = _run(capsys, "drill", "--stack", "byo", "--dry-run", "--nodes", "5", "--eviction", "notice")
    assert code == 2 and out == ""
    assert err.startswith("elastic-lab drill: --nodes, --eviction apply to the local drill only")
    code, _, err = _run(capsys, "drill", "--stack", "byo", "--dry-run", "--timeout", "99")
    assert code == 2 and "--timeout applies to the local drill only" in err


def test_cluster_options_need_a_stack(capsys):
    code, _, err = _run(capsys, "drill", "--node", "gpu-0", "--force")
    assert code == 2 and "--node, --force need(s) --stack" in err
    code, _, err = _run(capsys, "drill", "--image", "registry.example.com/trainer:1")
    assert code == 2 and "--image need(s) --stack" in err


def test_teardown_of_a_stack_cleans_the_cluster_then_needs_the_pulumi_cli(api_server, kubeconfig, capsys, monkeypatch):
    assert _run(capsys, "submit", "--stack", "byo", "--kubeconfig", kubeconfig, "--name", "demo")[0] == 0
    base = ("teardown", "--stack", "byo", "--kubeconfig", kubeconfig)
    code, out, err = _run(capsys, *base, "--dry-run")
    assert code == 0, err
    assert "on the cluster, in namespace training: 1 to delete" in out and "- PyTorchJob demo (a training job)" in out
    assert "would call kubernetes" in out and "then: pulumi destroy of stack 'byo'" in out
    assert api_server.get("PyTorchJob", "demo", "training") is not None  # a dry run deletes nothing
    monkeypatch.setenv("PATH", "/nonexistent")  # no Pulumi CLI here
    code, out, err = _run(capsys, *base, "--yes")
    assert api_server.get("PyTorchJob", "demo", "training") is None  # jobs first, while the cluster runs
    assert code == 1 and "✗ Pulumi CLI: not on PATH" in err


def test_teardown_of_a_local_run_removes_it_and_a_second_run_finds_nothing(tmp_path, capsys):
    run = tmp_path / "drill-x"
    (run / "nodes").mkdir(parents=True)
    (run / "events.jsonl").write_text("")
    code, out, _ = _run(capsys, "teardown", "--local", "--workdir", str(run), "--dry-run")
    assert code == 0 and f"directory {run}" in out and run.is_dir()
    code, out, _ = _run(capsys, "teardown", "--local", "--workdir", str(run), "--yes")
    assert code == 0 and not run.exists()
    code, out, _ = _run(capsys, "teardown", "--local", "--workdir", str(run), "--yes")
    assert code == 0 and out.startswith(f"local run {run}: no such directory, nothing to tear down")


def test_teardown_refuses_a_directory_that_is_not_a_run(tmp_path, capsys):
    (tmp_path / "precious.txt").write_text("keep me")
    code, _, err = _run(capsys, "teardown", "--local", "--workdir", str(tmp_path), "--yes")
    assert code == 1 and "refusing to remove it" in err and (tmp_path / "precious.txt").is_file()


def test_submit_names_its_job_with_job_as_status_logs_and_delete_do(capsys):
    from lab.cli import main

    argv = ["submit", "-s", "byo", "--dry-run", "--image", "registry.example.com/trainer:1"]
    assert main([*argv, "--job", "my-run"]) == 0
    by_job = capsys.readouterr().out
    assert main([*argv, "--name", "my-run"]) == 0
    assert "name: my-run" in by_job and by_job.count("my-run") == capsys.readouterr().out.count("my-run")


def test_an_hpa_lands_in_the_elastic_policy_as_kubeflow_documents_it(capsys):
    """`--autoscale-cpu`: elasticPolicy.metrics, from which the training operator makes an HPA
    over the job's scale subresource; the rendered job passes the CRD and the guardrails."""
    code, out, err = _run(capsys, *AKS_DRY_RUN, "--cpu", "3", "--autoscale-cpu", "70")
    assert code == 0, err
    job = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "PyTorchJob")
    assert job["spec"]["elasticPolicy"]["metrics"] == [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}
    ]
    code, out, err = _run(capsys, *AKS_DRY_RUN)
    job = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "PyTorchJob")
    assert code == 0 and "metrics" not in job["spec"]["elasticPolicy"]


def test_submit_warns_where_the_cluster_runs_kueue(api_server, kubeconfig, capsys):
    """Kueue suspends and requeues a job whose worker count changes, and preempts a PyTorchJob
    whole: where the cluster serves its API, submit says how to keep the job out of its queues."""
    base = ("submit", "--stack", "byo", "--kubeconfig", kubeconfig, "--name", "demo")
    code, _, err = _run(capsys, *base)
    assert code == 0 and "Kueue" not in err
    api_server.api_groups.append("kueue.x-k8s.io/v1beta2")
    code, _, err = _run(capsys, *base, "--replace")
    assert code == 0, err
    assert "warning: this cluster runs Kueue (kueue.x-k8s.io)" in err
    assert "Leave namespace training out of its queues: no kueue.x-k8s.io/queue-name label on the job" in err

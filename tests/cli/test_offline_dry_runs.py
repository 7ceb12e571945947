"""`drill -s STACK --dry-run` and `teardown -s STACK --dry-run` on a machine with nothing: no
Pulumi CLI, no az or aws, no credentials of either cloud, no kubeconfig and no network. They say
what a real run would do, in order, from the stack's offline plan, every value only the deployed
stack knows a placeholder, and what a real run needs besides."""

from __future__ import annotations

import socket
import threading

import pytest

from lab.cli import main
from lab.program.harness import run_program
from lab.stacks.outputs import StackOutputs

IMAGE = "registry.example.com/elastic-spot-lab/trainer:1"
CLOUD_STACKS = ("aks-dev", "eks-dev")


@pytest.fixture
def nothing_here(monkeypatch, tmp_path):
    """No tool on PATH, no cloud credentials, no kubeconfig; every connection refused and
    recorded (the list of addresses asked for)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AZURE_CLIENT_ID",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_SUBSCRIPTION_ID",
        "ARM_SUBSCRIPTION_ID",
        "IDENTITY_ENDPOINT",
        "KUBECONFIG",
        "PULUMI_ACCESS_TOKEN",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    asked: list[object] = []
    # Threads already running are another test's leftovers in this worker process (a server's
    # health poll): theirs pass; this test's thread, and any it starts, are refused and recorded.
    before = {t.ident for t in threading.enumerate() if t is not threading.current_thread()}
    connect = socket.socket.connect

    def refused(self, address):
        if threading.get_ident() in before:
            return connect(self, address)
        asked.append(address)
        raise ConnectionRefusedError(f"no network in this test ({address})")

    monkeypatch.setattr(socket.socket, "connect", refused)
    return asked


def _ok(capsys, *argv: str) -> list[str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, (out, err)
    assert "Traceback" not in out + err
    return out.splitlines()


def _in_order(lines: list[str], *expected: str) -> None:
    """Each expected text is in a line, each after the one before."""
    at = -1
    for text in expected:
        found = [i for i, line in enumerate(lines) if text in line and i > at]
        assert found, f"{text!r} not after line {at}:\n" + "\n".join(lines)
        at = found[0]


def _mocked_ids(stack: str) -> list[str]:
    """What the offline plan's mocks made up for the cloud's ids: never shown as real."""
    outputs = run_program(stack).outputs
    return [str(outputs[k]) for k in ("vpcId", "fisTemplateId", "fisRoleArn", "checkpointBucket") if k in outputs]


EVICTION = {
    "aks-dev": (
        'azure-mgmt-compute: virtual_machine_scale_sets.get(subscription_id="<the node\'s subscription>", '
        "resource_group_name='MC_esl-aks-dev-rg_esl-aks-dev_eastus', vm_scale_set_name=\"<the scale set of the "
        "node's pool, one of gpuspot, gpuspot2>\")  [read]",
        "azure-mgmt-compute: virtual_machine_scale_set_vms.simulate_eviction(",
    ),
    "eks-dev": (
        'aws ec2: describe_instances(InstanceIds=["<the node\'s instance id>"])  [read]',
        "aws fis: get_experiment_template(id='<fisTemplateId of eks-dev: known once deployed>')  [read]",
        "aws fis: start_experiment(",
    ),
    "byo": (
        "kubernetes: patch_node(name='<a Ready node of the GPU spot pool, found when the drill runs>'",
        "kubernetes: create_namespaced_pod_eviction(",
    ),
}
ACCESS = {
    "aks-dev": "Azure credentials (`az login`) allowed Microsoft.Compute/virtualMachineScaleSets/read",
    "eks-dev": "AWS credentials (`aws configure` or `aws sso login`) allowed the ec2 and fis calls above",
    "byo": "the cluster reachable with the stack's kubeconfig",
}


@pytest.mark.parametrize("stack", [*CLOUD_STACKS, "byo"])
def test_the_drill_says_every_call_from_the_offline_plan(nothing_here, capsys, stack):
    lines = _ok(capsys, "drill", "-s", stack, "--dry-run", "--image", IMAGE, "--name", "demo")
    _in_order(
        lines,
        f"dry run of the drill of stack {stack!r} from its offline plan, reaching nothing",
        "values in <angle brackets> are placeholders",
        f"run the job demo (2..3 nodes) from the image {IMAGE}",
        "kubeflow-training: TrainingClient.create_job(PyTorchJob training/demo)",
        "kubernetes: read_node(<a Ready node of the GPU spot pool, found when the drill runs>)",
        *EVICTION[stack],
        "kubernetes: poll as above until the job succeeds or fails",
        "a real run also needs:",
        ACCESS[stack],
        f"`elastic-lab check -s {stack}` says which of them are missing here",
    )
    if stack in CLOUD_STACKS:
        assert nothing_here == []  # nothing was even tried
        assert "the Pulumi CLI, which is not installed here" in lines[0]
        assert not any(made_up in line for made_up in _mocked_ids(stack) for line in lines)


def test_an_eviction_drill_of_a_job_with_a_burst_is_refused_on_a_cluster_before_anything(nothing_here, capsys):
    """It would follow the core's PyTorchJob alone and wait for a full size it never sees."""
    code = main(["drill", "-s", "byo", "--dry-run", "--image", IMAGE, "--core", "2", "--burst", "1"])
    _, err = capsys.readouterr()
    assert code == 2 and "--burst=1 is invalid: expected 0 for an eviction drill on a cluster" in err
    assert "drilled with --fault reclaim" in err and nothing_here == []


def test_a_reclaim_on_a_cluster_shows_the_owners_pod_that_preempts_the_burst(nothing_here, capsys):
    job = ["drill", "-s", "byo", "--dry-run", "--image", IMAGE]
    burst = [*job, "--core", "2", "--burst", "1", "--fault", "reclaim"]
    lines = _ok(capsys, *burst, "--reclaim-for", "120")
    _in_order(
        lines,
        "take the burst back by preemption for 120 s",
        "kubeflow-training: TrainingClient.create_job(PyTorchJob training/elastic-demo)",
        "kubeflow-training: TrainingClient.create_job(PyTorchJob training/elastic-demo-burst)",
        "get PyTorchJob training/elastic-demo and elastic-demo-burst, list their pods",
        "kubernetes: list_priority_class()  [read]",
        "kubernetes: read_node(name='<the node of a burst worker, found when the drill runs>')  [read]",
        "kubernetes: create_namespaced_pod(name='elastic-demo-reclaim-0'",
        "kubernetes: delete_namespaced_pod(name='elastic-demo-reclaim-0', grace_period_seconds=0)",
    )
    tried = len(nothing_here)  # byo's example kubeconfig was tried, on loopback
    refused = {
        (*job, "--fault", "reclaim"): "--burst=0 is invalid: expected at least 1 with --fault reclaim",
        (*burst, "--evict-with", "kubernetes"): "--evict-with='kubernetes' is invalid: expected none with --fault",
        (*burst, "--reclaim-for", "-1"): "--reclaim-for=-1.0 is invalid: expected seconds in [0, 3600]",
        (*job, "--fault", "scale"): "--fault='scale' is invalid: expected node",
        (*job, "--owners-class", "x"): "--owners-class='x' is invalid: expected none without --fault reclaim",
    }
    for argv, expected in refused.items():
        code = main(list(argv))
        _, err = capsys.readouterr()
        assert code == 2 and expected in err, (argv, err)
    assert len(nothing_here) == tried  # each refused before it tried to reach anything


def test_the_drill_names_the_node_it_is_given(nothing_here, capsys):
    lines = _ok(capsys, "drill", "-s", "eks-dev", "--dry-run", "--image", IMAGE, "--node", "ip-10-0-1-7")
    _in_order(lines, "kubernetes: read_node(ip-10-0-1-7)", "'elastic-spot-lab/node': 'ip-10-0-1-7'")


@pytest.mark.parametrize("stack", CLOUD_STACKS)
@pytest.mark.parametrize("delete_checkpoints", [False, True], ids=["checkpoints-kept", "checkpoints-deleted"])
def test_the_teardown_says_each_step_from_the_offline_plan(nothing_here, capsys, stack, delete_checkpoints):
    flags = ["--delete-checkpoints"] if delete_checkpoints else []
    lines = _ok(capsys, "teardown", "-s", stack, "--dry-run", *flags)
    cloud = {"aks-dev": "aks", "eks-dev": "eks"}[stack]
    sweep = {
        "aks-dev": (
            "would call azure-mgmt-resource: resource_groups.list(subscription_id=\"<the stack's subscription: "
            '--subscription or $AZURE_SUBSCRIPTION_ID>"',
            "would call azure-mgmt-compute: disks.begin_delete(",
            "would call azure-mgmt-resource: resource_groups.begin_delete(",
        ),
        "eks-dev": (
            "would call aws ec2: describe_network_interfaces(Filters=[{'Name': 'vpc-id', 'Values': ['<vpcId of "
            "eks-dev: known once deployed>']}])",
            "would call aws ec2: delete_security_group(GroupId='<each security group found>')",
            *(
                ["would call aws s3: delete_bucket(Bucket='<checkpointBucket of eks-dev: known once deployed>')"]
                if delete_checkpoints
                else []
            ),
        ),
    }[stack]
    _in_order(
        lines,
        f"dry run of the teardown of stack {stack!r} from its offline plan, reaching nothing",
        "1. on the cluster, in namespace training: delete the training jobs and LoadBalancer Services",
        "would call kubernetes: delete_namespaced_custom_object(group='kubeflow.org', version='v1', "
        "plural='pytorchjobs', namespace='training', name='<each PyTorchJob found>'",
        *(["delete_namespaced_persistent_volume_claim(name='<each PersistentVolumeClaim found>'"] * delete_checkpoints),
        f"2. pulumi destroy of stack {stack!r}",
        f"3. delete what the cluster's controllers left in the cloud ({cloud})",
        *sweep,
        "a real run also needs:",
        "a person to answer yes before anything is deleted (or --yes)",
        f"`elastic-lab check -s {stack}` says which of them are missing here",
    )
    kept = any("keeping the checkpoint" in line for line in lines)
    assert kept is not delete_checkpoints
    assert nothing_here == []
    assert not any(made_up in line for made_up in _mocked_ids(stack) for line in lines)


def test_the_planned_outputs_keep_the_names_the_config_gives_and_hold_places_for_the_rest():
    outputs = run_program("eks-dev").outputs
    planned = StackOutputs.planned("eks-dev", outputs)
    assert (planned.cluster_name, planned.region) == ("esl-eks-dev", "us-east-1")
    assert planned.node_group_names == outputs["nodeGroupNames"] and planned.gpu_ranks
    assert planned.vpc_id == "<vpcId of eks-dev: known once deployed>"
    assert planned.fis_role_arn == "<fisRoleArn of eks-dev: known once deployed>"
    assert planned.kubeconfig is None  # the cluster's secret: never made up


def test_the_drill_replays_a_trace_window_on_a_cluster_with_the_local_replays_flags(nothing_here, capsys):
    """--trace, --window, --speedup and --notice mean on a cluster what they mean locally; the
    window's slots are the job's workers (--max-nodes)."""
    trace = ["--trace", "bamboo-p3-32", "--window", "7800:18600", "--speedup", "600", "--notice", "aws"]
    lines = _ok(capsys, "drill", "-s", "byo", "--dry-run", "--image", IMAGE, "--name", "demo", *trace)
    replay = [line for line in lines if "replay bamboo-p3-32" in line]
    assert replay and "7800-18600 s at 600x (18 s from the first step at full size)" in replay[0]
    losses = [line.strip() for line in lines if line.strip().startswith("at +")]
    assert losses and all(line.split(": slot ")[1] in ("0", "1", "2") for line in losses)
    _in_order(
        lines, "evict the nodes a trace window loses", "replay bamboo-p3-32", "at +", "create_namespaced_pod_eviction("
    )


def test_a_bad_trace_window_is_refused_on_a_cluster_before_anything(nothing_here, capsys):
    code = main(["drill", "-s", "byo", "--dry-run", "--image", IMAGE, "--trace", "bamboo-p3-32", "--window", "5h"])
    out, err = capsys.readouterr()
    assert code == 2 and "--window='5h' is invalid: expected A:B" in err, (out, err)
    assert nothing_here == []

"""A catalogue of bad command-line inputs beyond `plan` (tests/plan/test_bad_inputs.py): each
command refuses them with exit 2 before anything starts, naming the input, the value and what
is expected, with no traceback and no hint the command does not take."""

from __future__ import annotations

import pytest

from lab.cli import main

IMAGE = ["--image", "registry.example.com/trainer:1"]
CASES = {
    "kubeconfig-missing": (["status", "-s", "byo", "--kubeconfig", "/nonexistent"], "--kubeconfig='/nonexistent'"),
    "build-arg-not-key-value": (["image", "-s", "eks-dev", "--build-arg", "nokv", "--dry-run"], "--build-arg='nokv'"),
    "drill-unknown-stack": (["drill", "-s", "nope", "--dry-run"], "stack 'nope' has no config file"),
    "submit-unknown-stack": (["submit", "-s", "nope", "--dry-run", *IMAGE], "stack 'nope' has no config file"),
    "no-stack-at-all": (["up"], "no stack: give -s STACK"),
    "logs-since": (["logs", "x", "-s", "byo", "--since", "5q"], "--since='5q'"),
    "logs-tail": (["logs", "x", "-s", "byo", "--tail", "-3"], "--tail=-3"),
    "submit-cpu": (["submit", "-s", "byo", "--dry-run", *IMAGE, "--cpu", "lots"], "--cpu='lots'"),
    "submit-memory": (["submit", "-s", "byo", "--dry-run", *IMAGE, "--memory", "12XB"], "--memory='12XB'"),
    "submit-name": (["submit", "-s", "byo", "--dry-run", *IMAGE, "--job", "UPPER"], "--name='UPPER'"),
    "submit-nodes": (["submit", "-s", "byo", "--dry-run", *IMAGE, "--max-nodes", "0"], "--max-nodes=0"),
    "submit-image": (["submit", "-s", "byo", "--dry-run", "--image", "UPPER/Case:latest"], "--image="),
    "drill-steps": (["drill", "--steps", "0"], "--steps=0"),
    "drill-image-locally": (["drill", *IMAGE], "--image need(s) --stack"),
    "select-unknown-stack": (["stack", "select", "nope"], "stack 'nope' has no config file"),
    # A job no node of the stack's GPU pool (Standard_NC4as_T4_v3: 4 vCPUs, 28 GiB) could hold.
    "submit-beyond-the-node": (
        ["submit", "-s", "aks-dev", "--dry-run", *IMAGE, "--cpu", "4000", "--memory", "1000Gi"],
        (
            "--cpu='4000' is invalid: expected at most 3860m: what a Standard_NC4as_T4_v3 node of the GPU spot pool "
            "leaves to pods",
            "--memory='1000Gi' is invalid: expected at most 23522Mi: what a Standard_NC4as_T4_v3 node",
        ),
    ),
    "submit-memory-in-bytes": (
        ["submit", "-s", "byo", "--dry-run", *IMAGE, "--memory", "16"],
        "--memory='16' is invalid: expected at least 512Mi, e.g. 16Gi (a number without a unit is bytes)",
    ),
    "submit-module-a-file": (
        ["submit", "-s", "byo", "--dry-run", *IMAGE, "--module", "my_train.py"],
        "--module='my_train.py' is invalid: expected a module name, not a file: my_train",
    ),
    "submit-module-empty": (
        ["submit", "-s", "byo", "--dry-run", *IMAGE, "--module", ""],
        "--module='' is invalid: expected a Python module name",
    ),
    "submit-script-not-python": (
        ["submit", "-s", "byo", "--dry-run", *IMAGE, "--script", "train.sh"],
        "--script='train.sh' is invalid: expected a Python file's path ending in .py",
    ),
    "submit-trainer-arguments": (
        ["submit", "-s", "byo", "--dry-run", *IMAGE, "--", "--steps", "-100"],
        "after --='--steps -100' is invalid: expected arguments lab.runtime.train takes (its --help): "
        "--steps=-100 is invalid: expected >= 1",
    ),
    "submit-namespace": (
        ["submit", "-s", "byo", "--dry-run", *IMAGE, "--namespace", "Bad NS"],
        "--namespace='Bad NS' is invalid: expected a namespace name, a DNS-1123 label",
    ),
    "submit-max-restarts-beyond-int32": (
        ["submit", "-s", "byo", "--dry-run", *IMAGE, "--max-restarts", "1000000000000"],
        "--max-restarts=1000000000000 is invalid: expected at most 2147483647: spec.elasticPolicy.maxRestarts is "
        "an int32",
    ),
    "submit-name-and-job": (
        ["submit", "-s", "byo", "--dry-run", *IMAGE, "--name", "a", "--job", "b"],
        "--job='b' is invalid: expected the same name as --name ('a')",
    ),
    "submit-byo-max-nodes": (
        ["submit", "-s", "byo", "--dry-run", *IMAGE, "--max-nodes", "100000"],
        "--max-nodes=100000 is invalid: expected at most 5000: the most nodes Kubernetes supports in one cluster",
    ),
    "drill-workdir-empty": (["drill", "--workdir", ""], "--workdir='' is invalid: expected a folder's path"),
    "drill-workdir-a-project": (
        ["drill", "--workdir", "."],
        "--workdir='.' is invalid: expected a new or empty folder",
    ),
    "drill-resume-nothing": (["drill", "--resume"], "--resume=True is invalid: expected with --workdir"),
    "plan-stack-and-all-stacks": (["plan", "-s", "aks-dev", "--all-stacks"], "-s aks-dev and --all-stacks: give one"),
    "plan-infinite-price": (
        ["plan", "-s", "aks-dev", "--set", "gpuSpotMaxPrice=inf"],
        "elastic-spot-lab:gpuSpotMaxPrice='inf' is invalid: expected a finite number",
    ),
    "plan-misspelt-stack": (["plan", "-s", "aks-dve"], "did you mean 'aks-dev'?"),
    "delete-bad-name": (["delete", "BAD NAME", "-s", "byo"], "JOB='BAD NAME' is invalid: expected a PyTorchJob's name"),
    "scale-to-no-nodes": (["scale", "demo", "-s", "byo", "--nodes", "0"], "--nodes=0 is invalid: expected a number"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_command_line_input_is_refused(capsys, case):
    argv, said = CASES[case]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert all(part in err for part in ([said] if isinstance(said, str) else said)), err
    assert "Traceback" not in out + err
    if argv[0] in ("status", "logs", "delete", "scale"):  # they have no --dry-run to suggest
        assert "--dry-run" not in err

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
}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_command_line_input_is_refused(capsys, case):
    argv, said = CASES[case]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert said in err and "Traceback" not in out + err
    if argv[0] in ("status", "logs", "delete"):  # they have no --dry-run to suggest
        assert "--dry-run" not in err

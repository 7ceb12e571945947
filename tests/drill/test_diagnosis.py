"""Reading workers' error files and telling a crash loop from an eviction's failures."""

import json
import os
from pathlib import Path

import pytest

from lab.drill import diagnosis
from lab.drill.diagnosis import (
    WorkerError,
    crash_loop,
    describe,
    diagnose,
    failed_at_first_start,
    read_error_file,
    worker_errors,
)


def _error_file(root, node, attempt, message, t, rank=0, traceback='Traceback...\n  File "s.py", line 1\n'):
    """An error file where the local target's agents write them: a folder per round (each attempt
    here is a round of its own)."""
    path = root / node / "torchelastic" / "run_x" / f"round_{attempt + 1}" / f"attempt_{attempt}" / str(rank)
    path = path / "error.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"message": {"message": message, "extraInfo": {"py_callstack": traceback + message, "timestamp": str(t)}}}
    path.write_text(json.dumps(body))
    os.utime(path, (t, t))  # when the worker died
    return path


def _errors(root, nodes=("node-0", "node-1")):
    return worker_errors((n, root / n / "torchelastic") for n in nodes)


def test_the_same_error_in_three_attempts_in_a_row_is_a_crash_loop(tmp_path):
    for attempt in range(3):
        _error_file(tmp_path, "node-0", attempt, "ModuleNotFoundError: No module named 'x'", 100 + attempt)
    error, attempts = crash_loop(_errors(tmp_path), steps=[])
    assert (error.node, error.attempt, attempts) == ("node-0", 2, 3)
    text = describe(error, script=None)
    assert "No module named 'x'" in text and "pip install x" in text and 's.py", line 1' in text


def test_two_attempts_or_different_errors_or_progress_between_are_not(tmp_path):
    _error_file(tmp_path, "node-0", 0, "RuntimeError: a", 100)
    _error_file(tmp_path, "node-0", 1, "RuntimeError: a", 101)
    assert crash_loop(_errors(tmp_path), []) is None  # two only
    _error_file(tmp_path, "node-0", 2, "RuntimeError: b", 102)
    assert crash_loop(_errors(tmp_path), []) is None  # not the same error
    _error_file(tmp_path, "node-1", 0, "RuntimeError: c", 100)
    _error_file(tmp_path, "node-1", 1, "RuntimeError: c", 101)
    _error_file(tmp_path, "node-1", 3, "RuntimeError: c", 103)
    assert crash_loop(_errors(tmp_path), []) is None  # attempts 0, 1, 3: not in a row
    _error_file(tmp_path, "node-1", 4, "RuntimeError: c", 104)
    _error_file(tmp_path, "node-1", 5, "RuntimeError: c", 105)
    assert crash_loop(_errors(tmp_path), [(103.5, 10)]) is None  # it got further in between
    assert crash_loop(_errors(tmp_path), [(99.0, 10)])[0].attempt == 5  # steps before: no progress


def test_failing_at_the_same_step_again_and_again_is_a_crash_loop(tmp_path):
    """Every checkpoint save fails (a full disk): each attempt resumes and trains to the same
    step, then fails the same way."""
    for attempt in range(3):
        _error_file(tmp_path, "node-0", attempt, "OSError: [Errno 28] No space left on device", 10 * attempt + 10)
    steps = [(10 * a + s / 10, s) for a in range(3) for s in range(1, 51)]  # 1..50 in every attempt
    error, _ = crash_loop(_errors(tmp_path), steps)
    assert "disk is full" in describe(error, script=None)


def test_hints_name_what_the_message_means(tmp_path):
    cases = {
        "OSError: [Errno 28] No space left on device": "disk is full",
        "OSError: [Errno 30] Read-only file system: '/ckpt/x'": "read-only",
        "PermissionError: [Errno 13] Permission denied: '/ckpt/x'": "not writable",
        "ValueError: something else": None,
    }
    for i, (message, hint) in enumerate(cases.items()):
        e = read_error_file(_error_file(tmp_path, f"n{i}", 0, message, 1), f"n{i}")
        assert (hint in e.hint) if hint else e.hint is None, (message, e.hint)


def test_unreadable_files_are_skipped(tmp_path):
    bad = tmp_path / "node-0" / "torchelastic" / "r" / "attempt_0" / "0" / "error.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    assert _errors(tmp_path, ["node-0"]) == []
    assert read_error_file(tmp_path / "missing.json", "n") is None


def test_the_failure_that_can_have_ended_a_job_is_the_last_one_not_recovered_from():
    """An eviction's collective error is followed by new workers on its node: it is not why a
    job hung later. A failure after which its node started nothing is."""
    from lab.drill.agent_events import AgentEvent
    from lab.drill.diagnosis import WorkerError, last_unrecovered

    def error(node, t, message):
        return WorkerError(node=node, attempt=0, rank="0", t=t, message=message, traceback="")

    peer_gone = error("node-1", 10.0, "RuntimeError: Connection closed by peer")
    restarted = [AgentEvent(t=12.0, node="node-1", kind="started")]
    assert last_unrecovered([peer_gone], restarted) is None
    assert last_unrecovered([peer_gone], []) == peer_gone
    crash = error("node-0", 30.0, "ValueError: bad batch")
    assert (
        last_unrecovered([peer_gone, crash], [*restarted, AgentEvent(t=20.0, node="node-0", kind="started")]) == crash
    )


def test_error_files_in_torchs_own_layout_are_read_too(tmp_path):
    """A torchrun without our logs spec (a cluster's, a user's): <run>/attempt_<n>/<rank>/error.json."""
    path = tmp_path / "node-0" / "torchelastic" / "run_x" / "attempt_2" / "0" / "error.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "tb"}}}))
    (error,) = _errors(tmp_path, ["node-0"])
    assert (error.node, error.attempt, error.message) == ("node-0", 2, "ValueError: x")


# Error files torch's @record wrote around real runs of small scripts (real torch: the CPU build
# 2.13 here, and "cuda_build_no_gpu_*" a CUDA build 2.11+cu130 with no GPU visible), their
# scripts' folder renamed to RECORDED_ROOT, a virtual environment inside it (.venv), as many
# projects keep one; tests/drill/scripts holds the scripts the drills run.
RECORDED = Path(__file__).parent / "error_files"
RECORDED_ROOT = "/home/user/project"


def _recorded(tmp_path, name, node="node-0", round_=1, attempt=0, rank=0) -> Path:
    """Recorded error file `name` where a node's agent writes it, its scripts' folder moved
    to tmp_path/project."""
    text = (RECORDED / f"{name}.json").read_text().replace(RECORDED_ROOT, str(tmp_path / "project"))
    folder = tmp_path / node / "torchelastic" / "run_x" / f"round_{round_}" / f"attempt_{attempt}" / str(rank)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "error.json").write_text(text)
    return folder / "error.json"


def _cause(tmp_path, name, script):
    error = read_error_file(_recorded(tmp_path, name), "node-0")
    return diagnose(error, str(tmp_path / "project" / script)).cause


GPU = "this script needs a GPU (CUDA)"
NO_CUDA_BUILD = "and the installed torch has no CUDA"
CAUSES = {
    "cuda_set_device": (
        "cuda_set_device.py",
        f"{GPU}: it calls torch.cuda.set_device at cuda_set_device.py:13 {NO_CUDA_BUILD}",
    ),
    "cuda_to": ("cuda_to.py", f'{GPU}: it calls model.to("cuda") at cuda_to.py:11 {NO_CUDA_BUILD}'),
    "cuda_method": ("cuda_method.py", f"{GPU}: it calls model.cuda() at cuda_method.py:4 {NO_CUDA_BUILD}"),
    "cuda_tensor": (
        "cuda_tensor.py",
        f'{GPU}: it calls torch.rand(64, 20, device="cuda") at cuda_tensor.py:3 {NO_CUDA_BUILD}',
    ),
    "nccl_without_gpu": (
        "nccl_without_gpu.py",
        f'{GPU}: it calls init_process_group("nccl") at nccl_without_gpu.py:9 {NO_CUDA_BUILD}',
    ),
    "nccl_device_id": (
        "nccl_device_id.py",
        f"{GPU}: it calls init_process_group(device_id=...) at nccl_device_id.py:6 {NO_CUDA_BUILD}",
    ),
    "cuda_build_no_gpu_dot_cuda": (
        "dot_cuda.py",
        f"{GPU}: it calls .cuda() at dot_cuda.py:2 and this machine has no GPU",
    ),
    "cuda_build_no_gpu_nccl": (
        "nccl.py",
        f'{GPU}: it calls init_process_group("nccl") at nccl.py:2 and this machine has no GPU',
    ),
    "import_error": (
        "import_error.py",
        "the script imports cv2 at import_error.py:3, which is not installed here: pip install opencv-python",
    ),
    "cannot_import": (
        "cannot_import.py",
        "the script imports NoSuchLoader from torch.utils.data at cannot_import.py:1, and the installed "
        "torch.utils.data has no NoSuchLoader",
    ),
    # The innermost frame of the script's own: torch's frames below it are in the project's .venv.
    "crash_in_script": (
        "crash_in_script.py",
        "the script fails at crash_in_script.py:16 in forward: RuntimeError: mat1 and mat2 shapes cannot be "
        "multiplied (64x32 and 64x1)",
    ),
    # ... in a module of its own folder
    "uses_helper": (
        "uses_helper.py",
        "the script fails at models/net.py:11 in forward: RuntimeError: mat1 and mat2 shapes cannot be multiplied "
        "(4x32 and 64x1)",
    ),
    # ... of the exception raised last, not of the one it was raised from
    "chained": ("chained.py", "the script fails at chained.py:9 in load: RuntimeError: no config at config.json"),
    "train": ("train.sh", "the script is not Python (SyntaxError: invalid syntax (train.sh, line 2) at train.sh:2)"),
}


@pytest.mark.parametrize("name", CAUSES)
def test_each_recorded_failure_is_said_in_the_scripts_terms(tmp_path, name):
    script, cause = CAUSES[name]
    assert _cause(tmp_path, name, script) == cause


@pytest.mark.parametrize("cuda_build", [False, True], ids=["cpu-build", "cuda-build"])
def test_an_assertion_on_torch_cuda_needs_a_gpu(tmp_path, monkeypatch, cuda_build):
    """`assert torch.cuda.is_available()` and `assert torch.cuda.device_count() > 0` say only
    AssertionError: what is missing comes from the installed torch."""
    monkeypatch.setattr(diagnosis, "torch_has_cuda", lambda: cuda_build)
    missing = "this machine has no GPU" if cuda_build else "the installed torch has no CUDA"
    assert _cause(tmp_path, "cuda_assert", "cuda_assert.py") == (
        f"{GPU}: it checks torch.cuda.is_available() at cuda_assert.py:8 and {missing}"
    )
    assert _cause(tmp_path, "device_count", "device_count.py") == (
        f"{GPU}: it checks torch.cuda.device_count() at device_count.py:3 and {missing}"
    )


def test_the_installed_torch_is_told_from_its_libraries():
    import torch

    assert diagnosis.torch_has_cuda() == (torch.version.cuda is not None)


def test_a_missing_module_of_the_scripts_own_folder_is_not_a_pip_install(tmp_path):
    (tmp_path / "project" / "models").mkdir(parents=True)
    assert _cause(tmp_path, "import_submodule", "import_submodule.py") == (
        "the script imports models.no_such_sub at import_submodule.py:1, and its folder's models has no no_such_sub"
    )


def test_import_names_map_to_their_distributions(tmp_path):
    for module, install in {
        "yaml": "pyyaml",
        "PIL": "pillow",
        "sklearn": "scikit-learn",
        "nosuch_pkg": "nosuch_pkg",
    }.items():
        error = WorkerError("n", 0, "0", 1.0, f"ModuleNotFoundError: No module named '{module}'", "")
        assert diagnose(error, None).cause.endswith(f"which is not installed here: pip install {install}")


def test_a_failure_outside_the_scripts_files_is_said_as_it_is(tmp_path):
    """No frame of the script's own (a worker of a library's, or the script unknown)."""
    error = read_error_file(_recorded(tmp_path, "crash_in_script"), "node-0")
    assert diagnose(error, None).cause == (
        "workers fail with RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x32 and 64x1)"
    )
    assert diagnose(error, "/elsewhere/train.py").cause.startswith("workers fail with RuntimeError")


def test_the_report_shows_the_scripts_frame_above_the_tracebacks_end(tmp_path):
    error = read_error_file(_recorded(tmp_path, "crash_in_script"), "node-0")
    script = str(tmp_path / "project" / "crash_in_script.py")
    lines = describe(error, script, "every worker failed so").splitlines()
    assert lines[0].startswith("the script fails at crash_in_script.py:16 in forward")
    assert lines[1] == "    every worker failed so"
    assert lines[2] == "    error: RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x32 and 64x1) (on node-0)"
    frame = lines.index("    traceback (last lines):") + 1
    assert lines[frame : frame + 3] == [
        f'        File "{script}", line 16, in forward',
        "          return self.out(x)",
        "        ...",
    ]
    assert lines[-1] == "      RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x32 and 64x1)"


def _stderr_log(root, node, text, round_=1, attempt=0):
    folder = root / node / "torchelastic" / "run_x" / f"round_{round_}" / f"attempt_{attempt}" / "0"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stderr.log").write_text(text)
    return folder


def test_a_usage_error_is_read_from_the_workers_stderr(tmp_path):
    """argparse refused the arguments and exited 2: no error file (SystemExit is not recorded),
    its usage and error lines end the worker's stderr (recorded from the script's run)."""
    _stderr_log(tmp_path, "node-0", (RECORDED / "usage_error.stderr.log").read_text())
    (error,) = _errors(tmp_path, ["node-0"])
    assert (error.round, error.attempt, error.traceback) == (1, 0, "")
    script = "/somewhere/usage_error.py"
    assert diagnose(error, script).cause == (
        "the script refused its arguments (argparse, exit code 2): the following arguments are required: --data"
    )
    assert describe(error, script).splitlines()[1:] == [
        "    usage: usage_error.py [-h] --data DATA [--epochs EPOCHS]",
        "    usage_error.py: error: the following arguments are required: --data",
        "    change: give the script's arguments after `--`: elastic-lab drill --script usage_error.py -- ARGS",
    ]


def test_stderr_without_a_usage_error_and_workers_with_an_error_file_are_not_read_so(tmp_path):
    _stderr_log(tmp_path, "node-0", "epoch 3: loss 0.2\nwarning: x: error: y\n")  # no usage line
    _stderr_log(tmp_path, "node-1", "usage: t.py [-h]\nt.py: error: bad\nTraceback ...\nValueError: v\n")
    assert _errors(tmp_path, ["node-0", "node-1"]) == []
    folder = _stderr_log(tmp_path, "node-2", (RECORDED / "usage_error.stderr.log").read_text())
    (folder / "error.json").write_text(json.dumps({"message": {"message": "ValueError: v", "extraInfo": {}}}))
    assert [e.message for e in _errors(tmp_path, ["node-2"])] == ["ValueError: v"]


def test_every_node_failing_the_same_way_at_its_first_start_is_the_scripts_failure(tmp_path):
    nodes = ["node-0", "node-1", "node-2"]
    for node in nodes:
        _recorded(tmp_path, "crash_in_script", node)
    error = failed_at_first_start(_errors(tmp_path, nodes), nodes)
    assert error is not None and error.message.startswith("RuntimeError: mat1 and mat2")


def test_a_first_start_failure_needs_every_node_the_same_failure_and_not_a_peers(tmp_path):
    nodes = ["node-0", "node-1", "node-2"]
    _recorded(tmp_path, "crash_in_script", "node-0")
    _recorded(tmp_path, "crash_in_script", "node-1")
    assert failed_at_first_start(_errors(tmp_path, nodes), nodes) is None  # node-2 has not failed (yet)
    _recorded(tmp_path, "uses_helper", "node-2")  # another message, another place
    assert failed_at_first_start(_errors(tmp_path, nodes), nodes) is None
    # An eviction: the evicted node's workers killed (no error file), the survivors' failing
    # on its closed connections, the same way.
    peers = tmp_path / "evicted"
    for node in nodes[:2]:
        _error_file(peers, node, 0, "RuntimeError: Connection closed by peer [127.0.0.1]:4242", 10)
    assert failed_at_first_start(_errors(peers, nodes), nodes) is None
    for node in nodes[2:]:
        _error_file(peers, node, 0, "RuntimeError: Connection closed by peer [127.0.0.1]:4242", 10)
    assert failed_at_first_start(_errors(peers, nodes), nodes) is None  # a peer's failure, on every node


def test_a_first_start_is_known_only_from_a_folder_per_round(tmp_path):
    """torch's own layout reuses attempt_0 for every round of a membership change."""
    for node in ("node-0", "node-1"):
        path = tmp_path / node / "torchelastic" / "run_x" / "attempt_0" / "0" / "error.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "tb"}}}))
    assert failed_at_first_start(_errors(tmp_path), ["node-0", "node-1"]) is None
    later = _error_file(tmp_path / "later", "node-0", 1, "ValueError: x", 10)  # the node's 2nd start
    assert later.parent.parent.parent.name == "round_2"
    assert failed_at_first_start(_errors(tmp_path / "later", ["node-0"]), ["node-0"]) is None


def test_nccl_missing_on_every_node_at_its_first_start_is_the_scripts_failure(tmp_path):
    """NCCL in a message is what a peer's failure says, except where NCCL is not there at all."""
    nodes = ["node-0", "node-1"]
    for node in nodes:
        _recorded(tmp_path, "nccl_without_gpu", node)
    error = failed_at_first_start(_errors(tmp_path, nodes), nodes)
    assert error is not None and error.message == "RuntimeError: Distributed package doesn't have NCCL built in"
    others = tmp_path / "collective"
    for node in nodes:
        _error_file(others, node, 0, "torch.distributed.DistBackendError: NCCL error in: ..., remote process exited", 1)
    assert failed_at_first_start(_errors(others, nodes), nodes) is None

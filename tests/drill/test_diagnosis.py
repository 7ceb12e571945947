"""Reading workers' error files and telling a crash loop from an eviction's failures."""

import json
import os

from lab.drill.diagnosis import crash_loop, describe, read_error_file, worker_errors


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
    text = describe(error, attempts)
    assert "No module named 'x'" in text and "not installed" in text and 's.py", line 1' in text


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
    assert "disk is full" in describe(error)


def test_hints_name_what_the_message_means(tmp_path):
    cases = {
        "AssertionError: Torch not compiled with CUDA enabled": "no GPU",
        "OSError: [Errno 28] No space left on device": "disk is full",
        "OSError: [Errno 30] Read-only file system: '/ckpt/x'": "read-only",
        "SyntaxError: invalid syntax (train.sh, line 2)": "not Python",
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
    from lab.drill.diagnosis import WorkerError
    from lab.drill.run import last_unrecovered

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

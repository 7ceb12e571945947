"""Worker logs per rendezvous round (lab/runtime/round_logs.py): torch's layout, a folder per
start of the workers, none emptied by the next; torchrun finds the spec by its entry point."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

from torch.distributed.elastic.multiprocessing.api import Std

from lab.runtime.round_logs import RoundLogsSpecs
from lab.vocab.job import ROUND_LOGS_SPECS


def _envs(restart: int) -> dict[int, dict[str, str]]:
    return {r: {"TORCHELASTIC_RUN_ID": "job-1", "TORCHELASTIC_RESTART_COUNT": str(restart)} for r in range(2)}


def test_each_start_of_the_workers_keeps_its_own_logs(tmp_path):
    specs = RoundLogsSpecs(log_dir=str(tmp_path), tee=Std.ALL)
    first = specs.reify(_envs(0))
    Path(first.stdouts[1]).write_text("epoch 7\n")
    second = specs.reify(_envs(0))  # a membership change: the same restart count
    third = specs.reify(_envs(1))  # a failure: the next
    run = Path(first.stdouts[0]).parents[3]
    assert [Path(d.stdouts[1]).relative_to(run).parts for d in (first, second, third)] == [
        ("round_1", "attempt_0", "1", "stdout.log"),
        ("round_2", "attempt_0", "1", "stdout.log"),
        ("round_3", "attempt_1", "1", "stdout.log"),
    ]
    assert Path(first.stdouts[1]).read_text() == "epoch 7\n"  # torch's own spec emptied it
    assert Path(third.error_files[0]).name == "error.json" and run.name.startswith("job-1_")


def test_torchrun_finds_it_by_name():
    (found,) = entry_points(group="torchrun.logs_specs").select(name=ROUND_LOGS_SPECS)
    assert found.load() is RoundLogsSpecs

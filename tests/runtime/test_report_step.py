"""A script's one line to report its steps (lab/runtime/report_step.py): where each worker
started, then rank 0's steps, as the project's trainer emits them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.patience import within

pytestmark = pytest.mark.processes


def _run(tmp_path, rank: str, steps: str) -> list[dict]:
    events = tmp_path / f"events-{rank}.jsonl"
    code = f"from lab.runtime.report_step import report_step\nfor s in {steps}: report_step(s, loss=0.5)\n"
    env = {**os.environ, "LAB_EVENTS_FILE": str(events), "RANK": rank, "WORLD_SIZE": "2"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=within(60))
    return [json.loads(line) for line in events.read_text().splitlines()]


def test_rank_0_reports_where_it_resumed_then_each_step(tmp_path):
    found = [(e["event"], e.get("step"), e.get("loss")) for e in _run(tmp_path, "0", "range(41, 44)")]
    assert found == [("resume", 40, None), ("step", 41, 0.5), ("step", 42, 0.5), ("step", 43, 0.5)]


def test_other_ranks_report_only_where_they_started(tmp_path):
    found = [(e["event"], e.get("step"), e.get("world_size")) for e in _run(tmp_path, "1", "range(1, 4)")]
    assert found == [("fresh", 0, 2)]

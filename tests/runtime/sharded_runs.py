"""Runs of tests/runtime/sharded_job.py under the agent every target runs (torchrun through
lab.runtime.launch), on loopback."""

import json
import os
import subprocess
from pathlib import Path

JOB = Path(__file__).with_name("sharded_job.py")


def run_job(python: str, nproc: int, *args: str, env: dict | None = None, timeout: float = 120) -> list[dict]:
    """The job's JSON line of each rank, rank 0 first; the run must succeed."""
    proc = subprocess.run(
        [python, "-m", "lab.runtime.launch", "--standalone", f"--nproc-per-node={nproc}", str(JOB), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return sorted((x for x in lines if "world" in x), key=lambda x: x["rank"])

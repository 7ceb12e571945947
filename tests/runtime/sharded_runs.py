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


def run_nodes(python: str, nodes: list[dict], *args: str, timeout: float = 180) -> list[dict]:
    """The job on `len(nodes)` agents of one worker each (a node each, meeting through a c10d
    rendezvous on loopback), agent i with the environment `nodes[i]` added: every rank's JSON
    line, rank 0 first; every agent must succeed."""
    from lab.local.procs import free_port

    endpoint = f"127.0.0.1:{free_port()}"
    flags = [
        f"--nnodes={len(nodes)}",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        "--rdzv-id=sharded-job",
    ]
    procs = [
        subprocess.Popen(
            [python, "-m", "lab.runtime.launch", *flags, str(JOB), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        for env in nodes
    ]
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, err[-3000:]
            outputs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    lines = [json.loads(line) for out in outputs for line in out.splitlines() if line.startswith("{")]
    return sorted((x for x in lines if "world" in x), key=lambda x: x["rank"])

"""What a node costs to start on the local target: a new `python -m lab.runtime.launch` for
each node against a fork of the node forker (lab.local.node_forker), which imported torch and
what the agent and its workers import once. Each node runs a job of its own (one worker, one
step, `--standalone`), one after another. CPU is that of every process of the node (its agent,
forkserver and worker): this process adopts what a node leaves (a child subreaper, as the local
target is) and reads what its children and the forker's used; wall time is from its start to
its exit.

Run: .venv/bin/python benchmarks/node_start.py [--nodes 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from lab.local import procs
from lab.local.node_forker import NodeForker


def children_cpu(forker: NodeForker | None = None) -> float:
    """CPU of every descendant collected so far: ours (a node's orphans included, once they
    are gone) and, with a forker, the nodes it collected."""
    deadline = time.monotonic() + 10
    others = [p for p in psutil.Process().children() if forker is None or p.pid != forker.proc_pid]
    while others and time.monotonic() < deadline:  # an agent's forkserver dies with it, a moment later
        procs.reap()
        time.sleep(0.05)
        others = [p for p in psutil.Process().children() if forker is None or p.pid != forker.proc_pid]
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    forked = 0.0
    if forker is not None:
        times = psutil.Process(forker.proc_pid).cpu_times()
        forked = times.children_user + times.children_system
    return used.ru_utime + used.ru_stime + forked


def node_command(home: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "lab.runtime.launch",
        "--standalone",
        "--nproc-per-node=1",
        "-m",
        "lab.runtime.train",
        "--steps",
        "1",
        "--checkpoint-dir",
        str(home / "ckpt"),
    ]


def node_env(home: Path) -> dict[str, str]:
    # One thread per worker, as the local target gives each of several nodes on few cores.
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "LAB_EVENTS_FILE": str(home / "ev.jsonl")}


def measure(
    nodes: int, start: Callable[[Path], int], forker: NodeForker | None = None
) -> tuple[list[float], list[float]]:
    """(CPU seconds, wall seconds) of each node, `start(home)` returning its exit code."""
    cpu, wall = [], []
    for _ in range(nodes):
        home = Path(tempfile.mkdtemp(prefix="bench-node-"))
        before, began = children_cpu(forker), time.monotonic()
        code = start(home)
        if code != 0:
            raise SystemExit(f"a node failed (exit {code}); its output is in {home / 'log'}")
        wall.append(time.monotonic() - began)
        cpu.append(children_cpu(forker) - before)
    return cpu, wall


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, parsed and checked before anything starts (`argv`: sys.argv's by default)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=5, help="nodes started each way, one after another (default 5)")
    args = p.parse_args(argv)
    return args


def main() -> int:
    args = arguments()
    was_subreaper = procs.is_subreaper()
    procs.set_subreaper(True)
    try:
        return run(args.nodes)
    finally:
        procs.set_subreaper(was_subreaper)


def run(nodes: int) -> int:
    def fresh(home: Path) -> int:
        with open(home / "log", "ab") as log:
            return subprocess.run(node_command(home), env=node_env(home), cwd=home, stdout=log, stderr=log).returncode

    fresh_cpu, fresh_wall = measure(nodes, fresh)

    root = Path(tempfile.mkdtemp(prefix="bench-forker-"))
    began = time.monotonic()
    forker = NodeForker(node_env(root), root, root / "forker.log")
    forker.start()
    forker.wait_until_ready(300)
    own = psutil.Process(forker.proc_pid).cpu_times()
    forker_cpu, forker_wall = own.user + own.system, time.monotonic() - began
    try:
        forked_cpu, forked_wall = measure(
            nodes, lambda home: forker.fork(node_command(home), node_env(home), home, home / "log").wait(300), forker
        )
    finally:
        forker.close()

    print(f"{nodes} nodes each way, one after another; median per node (min-max)")
    for label, cpu, wall in (("new Python", fresh_cpu, fresh_wall), ("forked", forked_cpu, forked_wall)):
        print(
            f"  {label:<10}  CPU {statistics.median(cpu):.2f} s ({min(cpu):.2f}-{max(cpu):.2f})"
            f"  wall {statistics.median(wall):.2f} s ({min(wall):.2f}-{max(wall):.2f})"
        )
    print(f"  the forker's own imports, once per local target: CPU {forker_cpu:.2f} s, wall {forker_wall:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How a node's launcher exits: a spot notice leaves its container with a retryable exit code,
a deterministic crash with a failing one after a few attempts."""

import os
import signal
import subprocess
import sys
import time

import pytest

from lab.local import procs
from lab.local.etcd import EtcdServer
from lab.vocab import events
from lab.vocab.job import ENV_K8S_NODE, ENV_NODE, JobSpec
from tests.patience import within


def _node(spec: JobSpec, workdir, **env_vars: str) -> subprocess.Popen:
    """One node's launcher for `spec`, in a session of its own, its events in workdir/events.jsonl."""
    env = {**os.environ, **spec.worker_env(), "LAB_EVENTS_FILE": str(workdir / "events.jsonl"), **env_vars}
    return subprocess.Popen(
        [*spec.launcher(sys.executable), *spec.torchrun_args(local_addr="127.0.0.1"), *spec.entrypoint()],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_to_the_launcher_exits_143(workdir):
    etcd = EtcdServer(workdir).start()
    try:
        spec = JobSpec(
            min_nodes=1,
            max_nodes=1,
            rdzv_endpoint=etcd.endpoint,
            checkpoint_dir=str(workdir / "ckpt"),
            script_args=("--steps", "100000", "--step-time", "0.05"),
        )
        proc = _node(spec, workdir)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
            e["event"] == "step" for e in events.read(workdir / "events.jsonl")
        ):
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGTERM)  # the node's whole process group, as a drain does
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
        ev = events.read(workdir / "events.jsonl")
        assert any(e["event"] == "checkpoint_saved" and e["reason"] == "notice" for e in ev)
    finally:
        etcd.stop()


def test_a_script_that_fails_the_same_way_ends_the_agent_after_a_few_attempts(workdir):
    """A deterministic crash is restarted CRASH_LOOP_ATTEMPTS times, not max_restarts (100)
    times inside the pod: torchrun then exits 1, which fails the PyTorchJob, and its last
    lines (the pod's termination message on a cluster) name the exception."""
    from lab.runtime.launch import CRASH_LOOP_ATTEMPTS

    script = workdir / "broken.py"
    script.write_text("raise FileNotFoundError(2, 'No such file or directory', '/data/train.bin')\n")
    etcd = EtcdServer(workdir).start()
    try:
        spec = JobSpec(
            min_nodes=1,
            max_nodes=1,
            module=None,
            script=str(script),
            rdzv_endpoint=etcd.endpoint,
            checkpoint_dir=str(workdir / "ckpt"),
        )
        assert spec.max_restarts > CRASH_LOOP_ATTEMPTS
        proc = _node(spec, workdir)
        try:
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:  # it hung: nothing of it may outlive the test
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 1, err[-2000:]
        (loop,) = [e for e in events.read(workdir / "events.jsonl") if e["event"] == "workers_crash_loop"]
        assert loop["attempts"] == CRASH_LOOP_ATTEMPTS and "/data/train.bin" in loop["error"]
        tail = "\n".join(err.splitlines()[-40:])
        assert "crash loop" in err and "FileNotFoundError" in tail
    finally:
        etcd.stop()


# A worker that the kernel's OOM killer takes, as its agent and its peers see it: its last rank
# dies of SIGKILL once every rank is in the process group, and the others' collective breaks on it.
KILLED_FOR_MEMORY = """
import os, signal, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == dist.get_world_size() - 1:
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGKILL)
dist.all_reduce(torch.zeros(1))
time.sleep(120)
"""


@pytest.mark.parametrize("warm", ["1", "0"], ids=["warm-workers", "torchrun-workers"])
def test_a_worker_killed_for_memory_is_its_nodes_crash_loop_not_its_peers_errors(workdir, warm):
    """torch reports the first worker its poll finds dead, most often the peer whose collective broke
    on the killed one: without the kill, the agent would restart the group max_restarts times (each
    a peer's failure, no crash loop). The kill is the node's own failure: CRASH_LOOP_ATTEMPTS, then 1."""
    from lab.runtime.launch import CRASH_LOOP_ATTEMPTS

    script = workdir / "killed_for_memory.py"
    script.write_text(KILLED_FOR_MEMORY)
    etcd = EtcdServer(workdir).start()
    try:
        spec = JobSpec(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=2,
            module=None,
            script=str(script),
            rdzv_endpoint=etcd.endpoint,
            checkpoint_dir=str(workdir / "ckpt"),
            max_restarts=12,
        )
        proc = _node(spec, workdir, LAB_WARM_WORKERS=warm)
        try:
            _, err = proc.communicate(timeout=240)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 1, err[-2000:]
        (loop,) = [e for e in events.read(workdir / "events.jsonl") if e["event"] == "workers_crash_loop"]
        assert (loop["attempts"], loop["error"], loop["rank"]) == (CRASH_LOOP_ATTEMPTS, "Signal 9 (SIGKILL)", 1)
        assert "the kernel's OOM killer, most likely" in err
    finally:
        etcd.stop()


# A trainer that starts and trains on, marking that its workers run.
RUNS = """
import os, pathlib, sys, time
pathlib.Path(sys.argv[1], f"running-{os.getpid()}").touch()
time.sleep(300)
"""


def _killed_whole(spec: JobSpec, workdir, node: str) -> None:
    """One container of pod demo-worker-0 on Kubernetes node `node`, killed whole once its workers
    run: the agent with its workers, as the OOM killer kills a container with memory.oom.group."""
    for marker in workdir.glob("running-*"):
        marker.unlink()
    proc = _node(spec, workdir, **{ENV_NODE: "demo-worker-0", ENV_K8S_NODE: node})
    try:
        assert procs.wait_until(lambda: any(workdir.glob("running-*")), 90), "the workers did not start"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_a_pod_whose_containers_are_killed_on_their_node_ends_the_job(workdir):
    """The training operator recreates a pod that exits 137 without limit; its containers count each
    other's kills in the rendezvous store, and the one after CONTAINER_KILLS in a row on one node
    exits 1 (the PyTorchJob fails) with the reason. A kill on another node counts nothing, and an
    agent that ends by its own way (here SIGTERM) clears the count."""
    from lab.vocab.job import CONTAINER_KILLS

    script = workdir / "runs.py"
    script.write_text(RUNS)
    etcd = EtcdServer(workdir).start()
    try:
        spec = JobSpec(
            min_nodes=1,
            max_nodes=1,
            module=None,
            script=str(script),
            script_args=(str(workdir),),
            rdzv_endpoint=etcd.endpoint,
            checkpoint_dir=str(workdir / "ckpt"),
        )
        _killed_whole(spec, workdir, "gpu-0")
        for _ in range(CONTAINER_KILLS):  # the first counts nothing: its node may have gone
            _killed_whole(spec, workdir, "gpu-1")
        for marker in workdir.glob("running-*"):
            marker.unlink()
        proc = _node(spec, workdir, **{ENV_NODE: "demo-worker-0", ENV_K8S_NODE: "gpu-1"})
        try:
            _, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 1, err[-2000:]
        assert f"the containers of pod demo-worker-0 were killed {CONTAINER_KILLS} times in a row on node gpu-1" in err
        assert not any(workdir.glob("running-*")), "its workers started"
        (loop,) = [e for e in events.read(workdir / "events.jsonl") if e["event"] == "containers_kill_loop"]
        assert (loop["pod"], loop["k8s_node"], loop["kills"]) == ("demo-worker-0", "gpu-1", CONTAINER_KILLS)
        # After that refusal, and after an agent that ends its own way, the count starts again.
        for _ in range(CONTAINER_KILLS - 1):
            _killed_whole(spec, workdir, "gpu-1")
        for marker in workdir.glob("running-*"):
            marker.unlink()
        proc = _node(spec, workdir, **{ENV_NODE: "demo-worker-0", ENV_K8S_NODE: "gpu-1"})
        try:
            assert procs.wait_until(lambda: any(workdir.glob("running-*")), 90), "the workers did not start"
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM
        for _ in range(CONTAINER_KILLS - 1):
            _killed_whole(spec, workdir, "gpu-1")  # each runs: the SIGTERM's agent checked out
    finally:
        etcd.stop()


ENDS_BADLY_ON_NODE_1 = """\
import os
import time
import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
if os.environ["LAB_NODE"] == "node-1":
    raise RuntimeError("writing this node's final metrics failed")
time.sleep(3)  # node-0 finishes later: its agent sees node-1's restarts first and restarts too
"""


@pytest.mark.timeout(200)
def test_an_agent_that_gives_up_lets_the_finished_agents_go(workdir):
    """node-1's workers fail at the very end of every attempt, node-0's finish a moment later:
    node-1's agent restarts them (and node-0's, which see it waiting) until it gives up on the
    crash loop (exit 1). It then counts itself in to its last round's exit barrier, where
    node-0's agent waits for every agent of the round; without that, node-0's agent waits out
    the barrier's 300 s for one that has gone."""
    script = workdir / "ends_badly.py"
    script.write_text(ENDS_BADLY_ON_NODE_1)
    etcd = EtcdServer(workdir).start()
    nodes = []
    try:
        spec = JobSpec(
            min_nodes=2,
            max_nodes=2,
            module=None,
            script=str(script),
            rdzv_endpoint=etcd.endpoint,
            checkpoint_dir=str(workdir / "ckpt"),
        )
        nodes = [_node(spec, workdir, **{ENV_NODE: f"node-{i}"}) for i in range(2)]
        codes = [node.wait(within(120)) for node in nodes]
        assert codes == [0, 1], codes
    finally:
        for node in nodes:
            if node.poll() is None:  # it waited in the barrier: nothing of it may outlive the test
                os.killpg(node.pid, signal.SIGKILL)
                node.wait()
        etcd.stop()

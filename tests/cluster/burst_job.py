"""A job with a burst on a simulated cluster where preemption is real (the fake API server's
scheduler): the platform's PriorityClasses, three GPU nodes of one GPU, and the operator and
workers of job `demo` (a core of two at the workers' class, a burst `demo-burst` of one at the
borrowed class, a GPU each). When the scheduler preempts the burst's worker (its pod marked
DisruptionTarget and deleted with its grace), the worker saves on the notice and leaves, its
kubelet confirms it gone and the job trains at its core; once the owners' pod is deleted, the
operator recreates the burst's worker on the freed node and the job grows back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from components.platform.settings import Priorities
from lab.cluster.jobs import JOB_NAME_LABEL, REPLICA_INDEX_LABEL
from lab.cluster.reclaim import RECLAIM_OF_LABEL
from lab.vocab.job_parts import PART_BURST, PART_CORE, PART_LABEL
from lab.vocab.platform_facts import GPU

from .fake_kube import FakeKube, node, pod
from .test_drill import GPU as GPU_LABELS
from .test_drill import NS, SimulatedJob

CLASSES = Priorities()
GRACE_S = 3


def with_preemption(api_server: FakeKube) -> FakeKube:
    """The API server with the platform's PriorityClasses, its scheduler, and three GPU nodes of
    one GPU each."""
    api_server.scheduling = True
    for _, spec, policy in CLASSES.items():
        api_server.put(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": spec.name},
                "value": spec.value,
                "preemptionPolicy": policy,
            }
        )
    for i in range(3):
        gpu_node = node(f"gpu-{i}", GPU_LABELS, f"azure:///vmss/{i}")
        gpu_node["status"]["allocatable"] = {GPU: "1"}
        api_server.put(gpu_node)
    return api_server


class SimulatedBurstJob(SimulatedJob):
    """The operator and the workers of job `demo` with a burst (`demo-burst`)."""

    def _start(self, job: str, index: int, on: str, part: str, priority_class: str) -> str:
        name = f"{job}-worker-{index}"
        labels = {JOB_NAME_LABEL: job, REPLICA_INDEX_LABEL: str(index), PART_LABEL: part}
        self.api_server.logs.pop((NS, name), None)
        self.api_server.closed_logs.discard((NS, name))
        worker = pod(name, NS, labels, on)
        worker["spec"].update(priorityClassName=priority_class, terminationGracePeriodSeconds=GRACE_S)
        worker["spec"]["containers"][0]["resources"] = {"requests": {GPU: "1"}, "limits": {GPU: "1"}}
        self.api_server.put(worker)
        return name

    def _train_on(self, lead: str, world: int) -> None:
        """One more step of the round that runs: no worker restarted, no resume said."""
        self.step += 1
        self._line(lead, "step", step=self.step, world_size=world, loss=1.0 / self.step)
        if self.step % 10 == 0:
            self._line(lead, "checkpoint_saved", step=self.step, reason="interval", seconds=0.01)
        time.sleep(self.dt)

    def _owners_pods(self) -> list[dict]:
        return [p for p in self.api_server.of_kind("Pod") if RECLAIM_OF_LABEL in p["metadata"].get("labels", {})]

    def run(self) -> None:
        server = self.api_server
        while server.get("PyTorchJob", "demo-burst", NS) is None and not self.stop.is_set():
            time.sleep(0.02)
        core = [self._start("demo", i, f"gpu-{i}", PART_CORE, CLASSES.preemptible.name) for i in range(2)]
        burst = self._start("demo-burst", 0, "gpu-2", PART_BURST, CLASSES.borrowed.name)
        time.sleep(0.3)  # the drill sees the pods run before they train (a worker's start takes seconds)
        self._train([*core, burst], 30, 3, 1)
        taken = server.get("Pod", burst, NS)
        while taken and "deletionTimestamp" not in taken["metadata"] and not self.stop.is_set():
            if self.step < 45:  # trains on until the scheduler preempts it (a drill that polls slowly: later)
                self._train_on(core[0], 3)
            else:
                time.sleep(0.02)
            taken = server.get("Pod", burst, NS)
        if self.stop.is_set() or taken is None:
            return
        # Its SIGTERM: the burst's worker saves on the notice and leaves; its kubelet confirms it gone.
        self._line(burst, "checkpoint_saved", step=self.step, reason="notice", seconds=0.01)
        self._line(burst, "exit", reason="notice", step=self.step, notice_to_exit_s=0.05, saved=True)
        server.closed_logs.add((NS, burst))
        with server.lock:
            server.objects.pop(f"api/v1/{NS}/pods/{burst}", None)
        time.sleep(0.1)  # the core's agents see it leave and form a round of two
        self._train(core, self.step + 10, 2, 2)
        while self._owners_pods() and not self.stop.is_set():
            if self.step < 85:  # the job trains at its core while the owners hold the GPU
                self._train_on(core[0], 2)
            else:
                time.sleep(0.02)
        if self.stop.is_set():
            return
        burst = self._start("demo-burst", 0, "gpu-2", PART_BURST, CLASSES.borrowed.name)  # recreated
        time.sleep(0.3)
        self._train([*core, burst], 100, 3, 3)
        self._finish([*core, burst])


@contextmanager
def running(api_server: FakeKube) -> Iterator[SimulatedBurstJob]:
    """The simulated job with a burst, run on `api_server` (made ready for preemption) while
    the block runs, stopped after it."""
    sim = SimulatedBurstJob(with_preemption(api_server))
    threading.Thread(target=sim.run, daemon=True).start()
    try:
        yield sim
    finally:
        sim.stop.set()

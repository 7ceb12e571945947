"""The cluster drill replaying a window of a spot trace, against the loopback API server: the
drill evicts (here through the Kubernetes drain backend, as the cloud backends are driven) the
node of each slot the window loses, at its time, several at once and the whole pool included;
capacity comes back when the simulated cloud gives a node, not when the trace says."""

from __future__ import annotations

import json
import threading
import time

import pytest

from lab.cluster.drain import KubernetesDrainEvictor
from lab.cluster.drill import ClusterDrill, ClusterDrillConfig
from lab.cluster.jobs import JOB_NAME_LABEL, REPLICA_INDEX_LABEL
from lab.vocab.pools import CAPACITY_LABEL, POOL_LABEL
from lab.vocab.replay_schedule import BACK, LOST, ReplaySchedule, SlotChange

from .fake_kube import node, pod

NS = "training"
GPU = {POOL_LABEL: "gpu-spot", CAPACITY_LABEL: "spot"}
# The window: slot 2 lost alone, then slots 0 and 1 at once while slot 2 has no node yet (the
# whole pool gone), then every slot offered back.
WINDOW = ReplaySchedule(
    source="a test window",
    window_s=(1000.0, 1300.0),
    speedup=100.0,
    slots=3,
    rule="three slots",
    alive_at_start=frozenset({0, 1, 2}),
    changes=(
        SlotChange(0.3, 2, LOST, None),
        SlotChange(0.6, 0, LOST, 1.2),
        SlotChange(0.6, 1, LOST, 1.2),
        SlotChange(1.5, 0, BACK),
        SlotChange(1.5, 1, BACK),
        SlotChange(1.5, 2, BACK),
    ),
    duration_s=2.0,
)


class CloudAndJob:
    """The cloud (a lost node's capacity back after `back_after_s`), the operator (a deleted
    worker pod recreated on the new node) and an elastic job of three workers that trains at the
    size it has, none while every pod is gone, and finishes 20 steps after it is whole again."""

    def __init__(self, api_server, back_after_s: float) -> None:
        self.api_server, self.back_after_s = api_server, back_after_s
        self.stop = threading.Event()
        self.step, self.nodes = 0, 0

    def _line(self, p: str, event: str, **fields) -> None:
        self.api_server.add_log(NS, p, json.dumps({"t": round(time.time(), 4), "event": event, **fields}))

    def _worker(self, index: int) -> str:
        name, self.nodes = f"gpu-{self.nodes}", self.nodes + 1
        self.api_server.put(node(name, GPU, f"azure:///vmss/{name}"))
        p = f"demo-worker-{index}"
        self.api_server.logs.pop((NS, p), None)
        self.api_server.closed_logs.discard((NS, p))
        self.api_server.put(pod(p, NS, {JOB_NAME_LABEL: "demo", REPLICA_INDEX_LABEL: str(index)}, name))
        self._line(p, "resume" if self.step else "fresh", step=self.step)
        return name

    def run(self) -> None:
        while self.api_server.get("PyTorchJob", "demo", NS) is None and not self.stop.is_set():
            time.sleep(0.02)
        on = {i: self._worker(i) for i in range(3)}
        back_at: dict[int, float] = {}
        whole_since: int | None = None
        while not self.stop.is_set():
            for i, name in list(on.items()):
                if self.api_server.get("Pod", f"demo-worker-{i}", NS) is None:  # evicted: its VM goes
                    self.api_server.closed_logs.add((NS, f"demo-worker-{i}"))
                    self.api_server.objects.pop(f"api/v1//nodes/{name}", None)
                    del on[i]
                    back_at[i] = time.monotonic() + self.back_after_s
            for i, due in list(back_at.items()):
                if time.monotonic() >= due:
                    on[i] = self._worker(i)
                    del back_at[i]
            if on:
                self.step += 1
                self._line(
                    f"demo-worker-{min(on)}",
                    "step",
                    step=self.step,
                    world_size=len(on),
                    samples=8 * len(on),
                    loss=1.0 / self.step,
                )
                if self.step % 10 == 0:
                    self._line(f"demo-worker-{min(on)}", "checkpoint_saved", step=self.step, reason="interval")
            whole_since = (whole_since or self.step) if len(on) == 3 and self.step > 300 else None
            if whole_since is not None and self.step - whole_since >= 20:
                break
            time.sleep(0.01)
        for i in on:
            self._line(f"demo-worker-{i}", "exit", reason="done", step=self.step)
            obj = self.api_server.get("Pod", f"demo-worker-{i}", NS)
            obj["status"]["phase"] = "Succeeded"
            self.api_server.closed_logs.add((NS, f"demo-worker-{i}"))
        job = self.api_server.get("PyTorchJob", "demo", NS)
        job["status"] = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"}]}


@pytest.fixture
def cloud(api_server):
    sim = CloudAndJob(api_server, back_after_s=0.8)
    threading.Thread(target=sim.run, daemon=True).start()
    yield sim
    sim.stop.set()


def test_the_drill_evicts_each_slot_the_window_loses_and_counts_the_capacity_the_cloud_gave(
    api_server, kube, rendered, cloud, tmp_path
):
    cfg = ClusterDrillConfig(
        namespace=NS,
        job="demo",
        evictor=KubernetesDrainEvictor(kube, drain_timeout_s=5),
        gpu_labels={POOL_LABEL: "gpu-spot"},
        workdir=tmp_path / "drill",
        objects=rendered[1],
        evict_at_step=20,
        full_world=3,
        checkpoint_every=10,
        timeout_s=60,
        poll_s=0.05,
        replay=WINDOW,
    )
    report = ClusterDrill(cfg, kube).run()
    evictions = [c for c in api_server.calls("POST") if c.endswith("/eviction")]
    assert evictions == [f"POST /api/v1/namespaces/{NS}/pods/demo-worker-{i}/eviction" for i in (2, 0, 1)]
    # Slots 0 and 1 go together: the report places each eviction at the first sign the drill saw
    # of it (its pod leaving Running at a poll, a peer's world shrinking), in either order.
    assert report.evictions[0].node == "demo-worker-2"
    assert sorted(e.node for e in report.evictions[1:]) == ["demo-worker-0", "demo-worker-1"]
    recorded = [json.loads(line) for line in (tmp_path / "drill" / "events.jsonl").read_text().splitlines()]
    capacity = [(e["change"], e["alive"]) for e in recorded if e["event"] == "capacity"]
    # Lost as the window says; back only when the cloud gave a node (three times), whenever that was.
    assert [c for c in capacity if c[0] != "back"] == [("start", 3), ("lost", 2), ("lost", 1), ("lost", 0), ("end", 3)]
    assert sum(1 for c in capacity if c[0] == "back") == 3
    assert [e["slot"] for e in recorded if e.get("change") == "lost"] == [2, 0, 1]
    assert [e.get("notice_s") for e in recorded if e.get("change") == "lost"] == [None, 1.2, 1.2]
    assert report.replay is not None and (report.replay.wipeouts, report.replay.wipeouts_resumed) == (1, 1)
    assert report.finished and report.passed, report.summary()

"""The cluster drill replaying a window of a spot trace through the cloud backends, offline: AKS
(azure-mgmt-compute's real client on a recorded ARM transport, as tests/cluster/test_aks_eviction.py
drives it) and EKS (EC2 and FIS clients of botocore's real service models under Stubber, as
tests/cluster/test_eks_eviction.py drives them), against the loopback API server.

The cloud, the training operator and the job are simulated step by step on the drill's injected
clock: each wait of the drill (or of the FIS backend) is one step, so every request is made at a
time of the replay's own clock, exactly, and nothing sleeps. The window loses two slots at once,
then the last one (the whole pool), then, once the cloud gave two back, a slot whose worker runs
again and one whose worker has no node yet, and last a slot whose node the cloud was asked to
evict and has not taken yet.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.stub import Stubber

from lab.cluster.aks_eviction import AksVmssEvictor
from lab.cluster.drill import ClusterDrill, ClusterDrillConfig
from lab.cluster.eks_eviction import FisEvictor
from lab.cluster.jobs import JOB_NAME_LABEL, REPLICA_INDEX_LABEL
from lab.drill.report import DrillReport
from lab.vocab.events import Event
from lab.vocab.pools import CAPACITY_LABEL, POOL_LABEL
from lab.vocab.replay_schedule import BACK, LOST, ReplaySchedule, SlotChange

from .fake_kube import node, pod
from .test_aks_eviction import (
    API_VERSION,
    GET_SCALE_SET,
    GPU_POOL,
    NODE_RG,
    SCALE_SET_PATH,
    VMSS,
    Answer,
    ArmTransport,
    FakeCredential,
    provider_id,
    scale_set_body,
)
from .test_eks_eviction import (
    CLUSTER,
    GPU_GROUP,
    REGION,
    STACK_ROLE,
    TEMPLATE,
    _instance,
    _one_off_request,
    _stack_template,
    _tokens,
)

NS = "training"
GPU = {POOL_LABEL: "gpu-spot", CAPACITY_LABEL: "spot"}
SLOTS = 3
POLL_S = 0.25  # every time below is a multiple of it: the simulated clock adds them up exactly
GONE_AFTER_S = 1.5  # the cloud's notice: a VM it was asked to evict is gone this long after the request
BACK_AFTER_S = 3.0  # and its slot's capacity comes back this long after that, on a new VM
AWS_NOTICE = 2.0  # AWS's 120 s at 60x
WINDOW = ReplaySchedule(
    source="a test window",
    window_s=(3600.0, 4200.0),
    speedup=60.0,
    slots=SLOTS,
    rule="three slots",
    alive_at_start=frozenset({0, 1, 2}),
    changes=(
        SlotChange(2.0, 0, LOST, AWS_NOTICE),  # two slots at once
        SlotChange(2.0, 1, LOST, AWS_NOTICE),
        SlotChange(4.0, 2, LOST, None),  # the whole pool
        SlotChange(6.0, 0, BACK),
        SlotChange(6.0, 1, BACK),
        SlotChange(6.0, 2, BACK),
        SlotChange(7.0, 0, LOST, None),  # the cloud gave slot 0 back at 6.5: its new node
        SlotChange(7.0, 2, LOST, None),  # slot 2 is not back before 8.5: missed
        SlotChange(7.5, 0, BACK),
        SlotChange(8.0, 0, LOST, None),  # the node asked for at 7.0 is not gone before 8.5: missed
    ),
    duration_s=10.0,
)
# (seconds into the window, slot) of each eviction the window makes, in order.
EVICTIONS = [(2.0, 0), (2.0, 1), (4.0, 2), (7.0, 0)]


def window_t(t_s: float) -> float:
    return WINDOW.window_s[0] + t_s * WINDOW.speedup


# What the capacity records say: (change, alive, slot, notice_s, window_t), the cloud's slots
# back when the drill saw them (6.5 s into the window for slots 0 and 1, 8.5 s for slot 2).
CAPACITY = [
    ("start", 3, None, None, window_t(0.0)),
    ("lost", 2, 0, AWS_NOTICE, window_t(2.0)),
    ("lost", 1, 1, AWS_NOTICE, window_t(2.0)),
    ("lost", 0, 2, None, window_t(4.0)),
    ("back", 1, 0, None, window_t(6.5)),
    ("back", 2, 1, None, window_t(6.5)),
    ("lost", 1, 0, None, window_t(7.0)),
    ("missed", 1, 2, None, window_t(7.0)),
    ("missed", 1, 0, None, window_t(8.0)),
    ("back", 2, 2, None, window_t(8.5)),
    ("end", 2, None, None, window_t(10.0)),
]


class SpotCloud:
    """The cloud, the training operator and an elastic job of three workers, stepped at each
    look the drill takes (its injected `sleep`): a VM the cloud was asked to evict is gone (its
    node and its worker pod) GONE_AFTER_S after the request, and its slot's capacity is back
    BACK_AFTER_S later on a new VM, where the operator's worker pod runs at once. The job trains
    one step per look at the size it has (none while every pod is gone) and finishes at the
    first look at full size once the window is over.

    `vm(n)` is the cloud's n-th VM: (node name, providerID, the id a request names it by)."""

    def __init__(self, api_server: Any, vm: Callable[[int], tuple[str, str, str]]) -> None:
        self.api_server, self.vm = api_server, vm
        self.now = 0.0
        self.vms = 0
        self.started = self.done = False
        self.step = 0
        self.on: dict[int, str] = {}  # slot -> node its worker runs on
        self.node_of_vm: dict[str, str] = {}
        self.going: dict[str, float] = {}  # node -> when it is gone
        self.back_at: dict[int, float] = {}  # slot -> when its capacity is back
        self.asked: list[tuple[float, str]] = []  # (when, node) of each eviction the cloud was asked for
        self.window_start: float | None = None

    # the drill's clock and sleep
    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.advance()

    def evict(self, vm_id: str) -> None:
        """The cloud accepted a request to evict VM `vm_id`."""
        name = self.node_of_vm[vm_id]
        self.asked.append((self.now, name))
        self.going.setdefault(name, self.now + GONE_AFTER_S)

    def advance(self) -> None:
        if not self.started and self.api_server.get("PyTorchJob", "demo", NS) is not None:
            self.started = True
            for slot in range(SLOTS):
                self._worker(slot)
        for name, when in sorted(self.going.items()):
            if self.now >= when:
                self._gone(name)
        for slot, when in sorted(self.back_at.items()):
            if self.now >= when:
                del self.back_at[slot]
                self._worker(slot)
        if self.on and not self.done:
            self._train()

    def _worker(self, slot: int) -> None:
        name, pid, vm_id = self.vm(self.vms)
        self.vms += 1
        self.node_of_vm[vm_id] = name
        self.on[slot] = name
        p = f"demo-worker-{slot}"
        with self.api_server.lock:
            self.api_server.logs.pop((NS, p), None)
            self.api_server.closed_logs.discard((NS, p))
        self.api_server.put(node(name, GPU, pid))
        self.api_server.put(pod(p, NS, {JOB_NAME_LABEL: "demo", REPLICA_INDEX_LABEL: str(slot)}, name))
        self._line(p, "resume" if self.step else "fresh", step=self.step)

    def _gone(self, name: str) -> None:
        del self.going[name]
        slot = next(s for s, n in self.on.items() if n == name)
        del self.on[slot]
        self.back_at[slot] = self.now + BACK_AFTER_S
        with self.api_server.lock:
            self.api_server.closed_logs.add((NS, f"demo-worker-{slot}"))
            self.api_server.objects.pop(f"api/v1//nodes/{name}", None)
            self.api_server.objects.pop(f"api/v1/{NS}/pods/demo-worker-{slot}", None)

    def _train(self) -> None:
        self.step += 1
        lead = f"demo-worker-{min(self.on)}"
        size = len(self.on)
        self._line(lead, "step", step=self.step, world_size=size, samples=8 * size, loss=1.0 / self.step)
        if self.step % 10 == 0:
            self._line(lead, "checkpoint_saved", step=self.step, reason="interval")
        if size == SLOTS and self.window_start is not None and self.now >= self.window_start + WINDOW.duration_s:
            self._finish()

    def _finish(self) -> None:
        self.done = True
        for slot in self.on:
            p = f"demo-worker-{slot}"
            self._line(p, "exit", reason="done", step=self.step)
            obj = self.api_server.get("Pod", p, NS)
            obj["status"]["phase"] = "Succeeded"
            self.api_server.closed_logs.add((NS, p))
        job = self.api_server.get("PyTorchJob", "demo", NS)
        job["status"] = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"}]}

    def _line(self, p: str, event: str, **fields: Any) -> None:
        # The wall clock, as the drill stamps its own events: the replay's order is the same on both.
        self.api_server.add_log(NS, p, json.dumps({"t": round(time.time(), 6), "event": event, **fields}))


def run_drill(cloud: SpotCloud, kube: Any, evictor: Any, rendered: Any, tmp_path: Any, monkeypatch) -> DrillReport:
    """The drill of WINDOW on the simulated cloud; the cloud learns from the drill's own start
    record when the window started (its clock then)."""
    cfg = ClusterDrillConfig(
        namespace=NS,
        job="demo",
        evictor=evictor,
        gpu_labels={POOL_LABEL: "gpu-spot"},
        workdir=tmp_path / "drill",
        objects=rendered[1],
        evict_at_step=5,
        full_world=SLOTS,
        checkpoint_every=10,
        timeout_s=3600,
        poll_s=POLL_S,
        replay=WINDOW,
    )
    drill = ClusterDrill(cfg, kube, sleep=cloud.sleep, clock=cloud.clock)
    emit = drill.emit

    def seen(name: str, **fields: Any) -> None:
        if name == Event.CAPACITY and fields["change"] == "start":
            cloud.window_start = cloud.now
        emit(name, **fields)

    monkeypatch.setattr(drill, "emit", seen)
    return drill.run()


def capacity_records(tmp_path: Any) -> list[tuple[Any, ...]]:
    recorded = [json.loads(line) for line in (tmp_path / "drill" / "events.jsonl").read_text().splitlines()]
    return [
        (e["change"], e["alive"], e.get("slot"), e.get("notice_s"), e.get("window_t"))
        for e in recorded
        if e["event"] == Event.CAPACITY
    ]


def assert_replayed(cloud: SpotCloud, report: DrillReport, tmp_path: Any) -> None:
    """What every backend's replay of WINDOW does: each eviction asked of the cloud at its time
    of the window, on the node the lost slot's worker ran on then, and the capacity records."""
    start = cloud.window_start
    assert start is not None
    nodes = [cloud.vm(n)[0] for n in (0, 1, 2, 3)]  # slots 0, 1, 2 at the start; slot 0's node back at 6.5
    assert cloud.asked == [(start + t, name) for (t, _), name in zip(EVICTIONS, nodes, strict=True)]
    assert capacity_records(tmp_path) == CAPACITY
    assert [e.node for e in report.evictions] == [f"demo-worker-{slot}" for _, slot in EVICTIONS]
    assert report.replay is not None and (report.replay.wipeouts, report.replay.wipeouts_resumed) == (1, 1)
    assert report.finished and report.passed, report.summary()


# ------------------------------------------------------------------ AKS: VMSS simulateEviction


def aks_vm(n: int) -> tuple[str, str, str]:
    """The AKS pool's n-th VM: instance n of the GPU spot scale set."""
    return f"{VMSS}{n:06d}", provider_id(instance=str(n)), str(n)


EVICTION = re.compile(re.escape(SCALE_SET_PATH) + r"/virtualMachines/(\d+)/simulateEviction")


class CloudArm(ArmTransport):
    """ARM for the GPU spot pool's scale set: its GET, and simulateEviction (204) of an instance
    the cloud made, which it then evicts (any other request fails the test)."""

    def __init__(self, cloud: SpotCloud) -> None:
        super().__init__({GET_SCALE_SET: Answer(200, scale_set_body())})
        self.cloud = cloud

    def send(self, request: Any, **kwargs: Any) -> Any:
        evicted = EVICTION.fullmatch(urlsplit(request.url).path)
        if request.method == "POST" and evicted and evicted.group(1) in self.cloud.node_of_vm:
            self.answers[("POST", evicted.group(0))] = Answer(204)
        response = super().send(request, **kwargs)
        if evicted:
            self.cloud.evict(evicted.group(1))
        return response


def test_an_aks_replay_asks_a_simulated_eviction_of_each_lost_node_at_its_time(
    api_server, kube, rendered, tmp_path, monkeypatch
):
    cloud = SpotCloud(api_server, aks_vm)
    transport = CloudArm(cloud)
    evictor = AksVmssEvictor(NODE_RG, GPU_POOL, credential=FakeCredential(), client_kwargs={"transport": transport})
    report = run_drill(cloud, kube, evictor, rendered, tmp_path, monkeypatch)
    assert_replayed(cloud, report, tmp_path)
    posts = [s for s in transport.sent if s.method == "POST"]
    assert [s.path for s in posts] == [f"{SCALE_SET_PATH}/virtualMachines/{n}/simulateEviction" for n in (0, 1, 2, 3)]
    # Each eviction checked first: the scale set read before the lost nodes' POSTs of one time.
    assert [s.method for s in transport.sent] == ["GET", "GET", "POST", "POST", "GET", "POST", "GET", "POST"]
    assert all(s.api_version and API_VERSION.match(s.api_version) for s in transport.sent)
    assert len({s.api_version for s in posts}) == 1


# ------------------------------------------------------------------ EKS: FIS spot interruptions


def eks_vm(n: int) -> tuple[str, str, str]:
    """The EKS node group's n-th instance."""
    instance = f"i-{n + 1:017x}"
    return f"ip-10-0-1-{10 + n}.ec2.internal", f"aws:///us-east-1a/{instance}", instance


@pytest.fixture
def aws_clients() -> Iterator[tuple[Any, Stubber, Any, Stubber]]:
    session = boto3.session.Session(region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
    ec2, fis = session.client("ec2"), session.client("fis")
    with Stubber(ec2) as ec2_stub, Stubber(fis) as fis_stub:
        yield ec2, ec2_stub, fis, fis_stub
        ec2_stub.assert_no_pending_responses()
        fis_stub.assert_no_pending_responses()


def experiment(n: int, status: str) -> dict[str, Any]:
    state = {"status": status, "reason": f"Experiment is {status}"}
    return {"experiment": {"id": f"EXP{n}", "experimentTemplateId": f"EXT{n}", "roleArn": STACK_ROLE, "state": state}}


def queue_fis(ec2_stub: Stubber, fis_stub: Stubber, groups: list[list[int]], first_look: str) -> None:
    """Every request of the replay's evictions, one group of VMs lost at one time after another:
    each VM's instance read, then for each an experiment started from a one-off template aimed
    at it, then each experiment looked at until it runs (the first look at each group's first
    finds it `first_look`); the one-off templates deleted when the drill ends."""
    token = _tokens()  # the evictor's own sequence
    for group in groups:
        for n in group:
            instance = eks_vm(n)[2]
            ec2_stub.add_response("describe_instances", _instance(instance_id=instance), {"InstanceIds": [instance]})
        for n in group:
            name, _, instance = eks_vm(n)
            fis_stub.add_response("get_experiment_template", _stack_template(), {"id": TEMPLATE})
            created = {"experimentTemplate": {"id": f"EXT{n}"}}
            one_off = _one_off_request(token=token(), node=name, iid=instance)
            fis_stub.add_response("create_experiment_template", created, one_off)
            started = experiment(n, "initiating")
            fis_stub.add_response(
                "start_experiment", started, {"experimentTemplateId": f"EXT{n}", "clientToken": token()}
            )
        for i, n in enumerate(group):
            if i == 0 and first_look != "running":
                fis_stub.add_response("get_experiment", experiment(n, first_look), {"id": f"EXP{n}"})
            fis_stub.add_response("get_experiment", experiment(n, "running"), {"id": f"EXP{n}"})
    for group in groups:
        for n in group:
            fis_stub.add_response(
                "delete_experiment_template", {"experimentTemplate": {"id": f"EXT{n}"}}, {"id": f"EXT{n}"}
            )


def interrupt_on_start(fis: Any, cloud: SpotCloud) -> list[tuple[float, str]]:
    """The cloud interrupts the instances of each experiment's template when FIS starts it:
    the ARNs of each template created, read from the request; (when, template) of each start."""
    arns: dict[str, list[str]] = {}
    asked: list[list[str]] = []
    starts: list[tuple[float, str]] = []

    def created(params: dict[str, Any], **_: Any) -> None:
        asked.append([a for t in params["targets"].values() for a in t["resourceArns"]])

    def named(parsed: dict[str, Any], **_: Any) -> None:
        arns[parsed["experimentTemplate"]["id"]] = asked.pop()

    def started(params: dict[str, Any], **_: Any) -> None:
        starts.append((cloud.now, params["experimentTemplateId"]))
        for arn in arns[params["experimentTemplateId"]]:
            cloud.evict(arn.rsplit("/", 1)[1])

    fis.meta.events.register("before-parameter-build.fis.CreateExperimentTemplate", created)
    fis.meta.events.register("after-call.fis.CreateExperimentTemplate", named)
    fis.meta.events.register("before-parameter-build.fis.StartExperiment", started)
    return starts


@pytest.mark.parametrize("first_look", ["running", "initiating"])
def test_an_eks_replay_starts_a_spot_interruption_of_each_lost_node_at_its_time(
    api_server, kube, rendered, tmp_path, monkeypatch, aws_clients, first_look
):
    """Two slots lost at once: two experiments, each of a one-off template aimed at one node's
    instance (FIS allows one target per action and five ARNs per target), both started before
    either is waited for, so an experiment slow to run does not hold back the other."""
    ec2, ec2_stub, fis, fis_stub = aws_clients
    cloud = SpotCloud(api_server, eks_vm)
    starts = interrupt_on_start(fis, cloud)
    queue_fis(ec2_stub, fis_stub, [[0, 1], [2], [3]], first_look)
    evictor = FisEvictor(
        REGION,
        CLUSTER,
        GPU_GROUP,
        TEMPLATE,
        clients={"ec2": ec2, "fis": fis},
        client_token=_tokens(),
        poll_s=POLL_S,
        sleep=cloud.sleep,
        clock=cloud.clock,
    )
    report = run_drill(cloud, kube, evictor, rendered, tmp_path, monkeypatch)
    assert_replayed(cloud, report, tmp_path)
    assert starts == [(cloud.window_start + t, f"EXT{n}") for (t, _), n in zip(EVICTIONS, (0, 1, 2, 3), strict=True)]
    assert evictor.one_off_templates == []

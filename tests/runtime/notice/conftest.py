"""Fixtures of the handler's tests: the fake IMDS and API server, and a handler running
against them in a thread, stopped (and every server closed) after each test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from lab.runtime.notice.drain import Drainer
from lab.runtime.notice.handler import Handler
from lab.runtime.notice.imds import Imds
from tests.patience import within
from tests.runtime.notice.fakes import FakeImds, FakeKube, pod, wait_for

NODE = "aks-gpuspot-12345678-vmss000003"
VM = "aks-gpuspot-12345678-vmss_3"
POLL_S = 0.1


def node_pods() -> list[dict[str, Any]]:
    """Pods of NODE: two to evict, four to leave alone; one pod of another node."""
    return [
        pod("train-0", NODE, grace=60, owner="PyTorchJob"),
        pod("train-1", NODE, grace=10, owner="PyTorchJob"),
        pod("spot-notice-handler-x", NODE, namespace="kube-system", owner="DaemonSet"),
        pod("kube-proxy-static", NODE, namespace="kube-system", owner="Node", mirror=True),
        pod("leaving", NODE, terminating=True),
        pod("done", NODE) | {"status": {"phase": "Succeeded"}},
        pod("train-2", "aks-gpuspot-12345678-vmss000004"),
    ]


@dataclass
class Running:
    imds: FakeImds
    kube: FakeKube
    handler: Handler
    lines: list[dict[str, Any]] = field(default_factory=list)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in list(self.lines) if line["event"] == name]

    def wait_polls(self, n: int) -> None:
        """Wait until `n` more polls have been answered."""
        target = self.imds.polls() + n
        assert wait_for(lambda: self.imds.polls() >= target, timeout=within(5)), "the handler stopped polling"


@pytest.fixture
def fakes() -> Iterator[tuple[FakeImds, FakeKube]]:
    with FakeImds(VM) as imds, FakeKube(node_pods()) as kube:
        yield imds, kube


@pytest.fixture
def start(fakes):
    """start(**handler kwargs) -> Running: a handler polling the fakes from a thread."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def _start(act_on=("Preempt", "Terminate"), retry_interval_s: float = 0.05, margin_s: float = 5.0) -> Running:
        imds, kube = fakes
        lines: list[dict[str, Any]] = []

        def log(event: str, **fields: Any) -> None:
            lines.append({"event": event, **fields})

        drainer = Drainer(kube.core_api(), NODE, log, margin_s=margin_s, retry_interval_s=retry_interval_s, stop=stop)
        handler = Handler(Imds(imds.url, timeout_s=1.0), drainer, log, act_on=act_on, poll_interval_s=POLL_S)
        thread = threading.Thread(target=handler.run, daemon=True)
        thread.start()
        threads.append(thread)
        running = Running(imds, kube, handler, lines)
        running.wait_polls(1)
        return running

    yield _start
    stop.set()
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive(), "the handler did not stop"

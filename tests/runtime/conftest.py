"""Fixtures of the runtime's tests: the launcher installed in the test's own process, and
taken out again after it (torch's tables as they were)."""

from __future__ import annotations

import pytest

from lab.runtime import launch


@pytest.fixture
def installed(monkeypatch):
    """lab.runtime.launch's rendezvous handlers and agent monitor in torch's tables, for
    this test only."""
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry as registry

    for backend in ("etcd-v2", "c10d"):
        monkeypatch.setitem(registry._registry, backend, registry._registry[backend])
    monkeypatch.setattr(dynamic_rendezvous, "_delay", dynamic_rendezvous._delay)
    monkeypatch.setattr(LocalElasticAgent, "_monitor_workers", LocalElasticAgent._monitor_workers)
    monkeypatch.setattr(SimpleElasticAgent, "_exit_barrier", SimpleElasticAgent._exit_barrier)
    monkeypatch.setattr(dynamic_rendezvous, "get_method_name", dynamic_rendezvous.get_method_name)
    from torch.distributed.elastic.multiprocessing import api

    monkeypatch.setattr(api, "_terminate_process_handler", api._terminate_process_handler)
    monkeypatch.setattr(launch, "_STOP", None)
    from torch._logging._internal import TorchLogsFormatter

    monkeypatch.setattr(TorchLogsFormatter, "format", TorchLogsFormatter.format)
    launch.install()

"""lab.runtime.container_ledger: a pod's containers killed on their node, counted in the rendezvous store."""

import json

import pytest

from lab.runtime.container_ledger import ContainerKillLoop, ContainerLedger


def test_a_containers_kills_count_only_on_its_node_and_not_after_a_rendezvous_outage(monkeypatch):
    """The ledger of a worker pod's containers (lab.runtime.ContainerLedger), in a real store:
    each check-in finds the one before still checked in (killed without a word) or not."""
    from torch.distributed import HashStore

    from lab.vocab.job import CONTAINER_KILLS, ENV_K8S_NODE, ENV_NODE

    store = HashStore()
    monkeypatch.delenv(ENV_K8S_NODE, raising=False)
    monkeypatch.setenv(ENV_NODE, "node-0")
    assert ContainerLedger.of_this_pod(store, "run") is None  # the local target: no machine named
    monkeypatch.setenv(ENV_NODE, "demo-worker-0")
    monkeypatch.setenv(ENV_K8S_NODE, "gpu-0")
    ledger = ContainerLedger.of_this_pod(store, "run")
    assert ledger is not None
    for _ in range(CONTAINER_KILLS):
        ledger.check_in(server_was_down=False)  # each container killed after it checked in
    ledger.check_in(server_was_down=True)  # its predecessor may have left on the outage: no count
    for _ in range(CONTAINER_KILLS - 1):
        ledger.check_in(server_was_down=False)
    with pytest.raises(ContainerKillLoop, match=r"killed 3 times in a row on node gpu-0"):
        ledger.check_in(server_was_down=False)
    ledger.check_in(server_was_down=False)  # the refusal checked the pod out: it starts afresh
    other_pod = ContainerLedger(store, "run", "demo-worker-1", "gpu-0")
    other_pod.check_in(server_was_down=False)  # its own entry
    assert json.loads(store.get("lab/run/containers/demo-worker-1"))["killed"] == 0

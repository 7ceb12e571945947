"""A worker pod's containers, counted in the job's rendezvous store: a container killed again
and again on its node without a word from its agent (the OOM killer at the memory limit) ends
the job instead of being recreated for ever (see ContainerLedger)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterable
from typing import Any

from lab.runtime import events, torch_seam
from lab.vocab.events import Event
from lab.vocab.job import CONTAINER_KILLS, ENV_K8S_NODE, ENV_NODE, LAUNCH_MODULE

log = logging.getLogger(LAUNCH_MODULE)  # the launcher's one log


class ContainerKillLoop(Exception):
    """This worker pod's containers were killed again and again on its node, each time without a
    word from its agent (see ContainerLedger): the job should fail rather than be recreated."""


@dataclasses.dataclass(frozen=True)
class ContainerEntry:
    """What the rendezvous store keeps of a worker pod's latest container: the Kubernetes node it
    ran on, whether it is still running as far as anyone knows (its agent checked in and not out
    yet), and how many of the pod's containers before it were killed in a row on that node."""

    node: str
    running: bool
    killed: int


class ContainerLedger:
    """A worker pod's containers, one entry in the job's rendezvous store (which outlives them).

    A container whose memory limit is reached is killed whole: with cgroup v2, Kubernetes (1.28+)
    sets memory.oom.group, so the kernel's OOM killer takes the agent with its workers, the pod
    ends with exit 137 (reason OOMKilled), and nothing in it can say so. The training operator
    (v1.9, restartPolicy ExitCode) recreates a pod that exits with 128 or more under the same name,
    with no limit: runPolicy.backoffLimit sums the restarts of containers of running pods, and the
    pods it recreates have none. So each container checks in when its agent starts and out when
    the agent ends, however it ends. A container that finds the previous one of its pod checked in
    on its own node knows that one was killed without a word (the OOM killer, or a hard eviction of
    the kubelet: the node is up, it did not vanish); after CONTAINER_KILLS in a row, the agent
    exits 1 and the job fails, its pod's termination message saying why. One recreated on another
    node (its node was evicted, or vanished) counts nothing, nor one that had to wait for the
    rendezvous server (its predecessor may have left on the server's outage, unable to check out)."""

    def __init__(self, store: Any, run_id: str, pod: str, node: str) -> None:
        self.store, self.pod, self.node = store, pod, node
        self.key = f"lab/{run_id}/containers/{pod}"

    @classmethod
    def of_this_pod(cls, store: Any, run_id: str) -> ContainerLedger | None:
        """The ledger of the pod this agent runs in; None off a cluster (the pod's own fields
        LAB_NODE and LAB_K8S_NODE unset: the local target names no machine)."""
        pod, node = os.environ.get(ENV_NODE), os.environ.get(ENV_K8S_NODE)
        return cls(store, run_id, pod, node) if pod and node else None

    def _read(self) -> ContainerEntry | None:
        if not self.store.check([self.key]):
            return None
        try:
            values = json.loads(self.store.get(self.key))
            return ContainerEntry(str(values["node"]), bool(values["running"]), int(values["killed"]))
        except (ValueError, KeyError, TypeError):
            return None  # unreadable: start counting again

    def _write(self, entry: ContainerEntry) -> None:
        self.store.set(self.key, json.dumps(dataclasses.asdict(entry)))

    def check_in(self, *, server_was_down: bool) -> None:
        """This container starts: count the previous one if it was killed without a word on this
        node, and raise ContainerKillLoop at CONTAINER_KILLS in a row."""
        previous = self._read()
        killed_before = previous is not None and previous.running and previous.node == self.node
        killed = previous.killed + 1 if previous is not None and killed_before and not server_was_down else 0
        if killed < CONTAINER_KILLS:
            self._write(ContainerEntry(self.node, True, killed))
            return
        self._write(ContainerEntry(self.node, False, 0))
        events.emit(Event.CONTAINERS_KILL_LOOP, pod=self.pod, k8s_node=self.node, kills=killed, source="agent")
        raise ContainerKillLoop(
            f"the containers of pod {self.pod} were killed {killed} times in a row on node {self.node}, each "
            "without a word from its agent: OOMKilled (exit 137), most likely, at the container's memory limit "
            "(`elastic-lab status` shows it); giving up (exit 1, the job fails) instead of being recreated for ever"
        )

    def check_out(self) -> None:
        """This container's agent ends, whatever the reason: not a kill."""
        self._write(ContainerEntry(self.node, False, 0))


def check_in(handler: Any) -> None:
    """The container ledger of the pod this agent runs in, checked in (best effort: a store
    that cannot be reached or read leaves the count alone, never the start)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    store = torch_seam.rendezvous_store(handler)
    store = getattr(store, "inner", store)  # the store itself, not the round's waits (RoundStore)
    ledger = ContainerLedger.of_this_pod(store, handler.get_run_id())
    if ledger is None:
        return
    try:
        ledger.check_in(server_was_down=handler.waited_for_server)
    except (ContainerKillLoop, SignalException):
        raise
    except Exception as exc:  # noqa: BLE001 - etcd's and the c10d store's clients raise anything
        log.warning("could not check this container in to the rendezvous store (%s)", exc)
        return
    handler.ledger = ledger


def check_out(handlers: Iterable[Any]) -> None:
    """Every container ledger of `handlers` (this agent's) checked in, checked out: its agent
    ends (best effort)."""
    for handler in handlers:
        if handler.ledger is None:
            continue
        try:
            handler.ledger.check_out()
        except Exception as exc:  # noqa: BLE001 - the next container of the pod counts this one killed
            log.warning("could not check this container out of the rendezvous store (%s)", exc)

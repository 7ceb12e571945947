"""What every eviction backend shares: the node it is aimed at, the API calls it makes (a
dry run prints them), what it reports when an eviction has started, and the refusal to
touch a node outside the stack's GPU spot pool.

A backend (Azure VMSS simulateEviction, an AWS FIS experiment, a Kubernetes drain) is an
`Evictor`: `calls(node)` lists the requests `evict(node)` would make, in order, without
making any; `check(node)` makes only read requests and raises `EvictionRefused` when the
cloud says the node is not a spot instance of the stack's GPU pool; `evict(node)` starts
the eviction and returns once the cloud accepted it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from lab.vocab.errors import LabError
from lab.vocab.placeholders import is_placeholder, placeholder
from lab.vocab.pools import CAPACITY_LABEL, CAPACITY_SPOT


class EvictionError(LabError):
    """An eviction cannot be made; the message says why and what to do (missing
    credentials, a node the cloud does not know, a call the cloud refused)."""


class EvictionRefused(EvictionError):
    """The node is not one this stack may evict (not in its GPU spot pool, not of its
    cluster); `--force` overrides the label check, never the cloud's own answer that a
    node belongs to another cluster."""


@dataclass(frozen=True)
class Node:
    """A Kubernetes node as the eviction backends need it."""

    name: str
    provider_id: str  # spec.providerID: azure:///subscriptions/.../virtualMachines/3, aws:///us-east-1a/i-0abc...
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = True
    unschedulable: bool = False

    @classmethod
    def from_k8s(cls, node: Any) -> Node:
        """From a kubernetes.client V1Node."""
        conditions = (node.status.conditions if node.status else None) or []
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        return cls(
            name=node.metadata.name,
            provider_id=(node.spec.provider_id if node.spec else None) or "",
            labels=dict(node.metadata.labels or {}),
            ready=ready,
            unschedulable=bool(node.spec and node.spec.unschedulable),
        )

    @classmethod
    def to_be_found(cls, name: str) -> Node:
        """A node a dry run cannot look up (no cluster to ask), by its name or a placeholder
        for it: its providerID is a placeholder, and a backend shows its calls for it with
        placeholders for what only the providerID tells."""
        return cls(name=name, provider_id=placeholder("its providerID"))

    @property
    def known(self) -> bool:
        """Whether this is a node of a cluster, not one a dry run stands in for."""
        return not is_placeholder(self.provider_id)


@dataclass(frozen=True)
class ApiCall:
    """One request a backend makes: which API, which operation, on what, with what."""

    api: str  # "azure-mgmt-compute", "aws fis", "kubernetes"
    operation: str  # the SDK's method: "virtual_machine_scale_set_vms.simulate_eviction"
    params: Mapping[str, Any] = field(default_factory=dict)
    reads_only: bool = False

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{self.api}: {self.operation}({args})"


@dataclass(frozen=True)
class EvictionStarted:
    """The cloud accepted the eviction of `node` at `at` (unix seconds)."""

    node: str
    backend: str
    at: float = field(default_factory=time.time)
    detail: str = ""  # what the cloud answered: an experiment id, a request id


class Evictor(Protocol):
    name: str

    def calls(self, node: Node) -> list[ApiCall]: ...

    def check(self, node: Node) -> None: ...

    def evict(self, node: Node) -> EvictionStarted: ...


def pool_refusal(node: Node, gpu_labels: Mapping[str, str]) -> str | None:
    """Why `node` is not in the GPU spot pool by its labels (None: it is): every GPU pool
    label and our spot capacity label must be on it."""
    wanted = {**gpu_labels, CAPACITY_LABEL: CAPACITY_SPOT}
    wrong = {k: node.labels.get(k) for k, v in wanted.items() if node.labels.get(k) != v}
    if not wrong:
        return None
    found = ", ".join(f"{k}={v!r}" for k, v in sorted(wrong.items()))
    expected = ", ".join(f"{k}={v}" for k, v in sorted(wanted.items()))
    return f"node {node.name} is not in the stack's GPU spot pool (it has {found}; the pool's nodes carry {expected})"

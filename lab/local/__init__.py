"""The local target: the same job on one machine, with torchrun agents standing in for
spot nodes and a real rendezvous server (etcd v2 API, or a standalone c10d store)."""

from lab.local.target import LocalTarget, LocalTargetError, Node

__all__ = ["LocalTarget", "LocalTargetError", "Node"]

"""The local target: the same job on one machine, with torchrun agents standing in for
spot nodes and a real rendezvous server (etcd v2 API, a standalone c10d store, or TorchFT's
lighthouse in per-step mode).

  target.py     LocalTarget: the server and the nodes, added and evicted while the job runs
  node_forker.py   starts each node as a fork of one process that imported torch once
  etcd.py, lighthouse.py   the local rendezvous servers
  procs.py      process plumbing: free ports, whole-tree signals, no orphans
  watchdog.py   stops a run's processes when the process that started them dies
  workdir.py    a run's work directory: held by one run at a time, what an earlier one left
  thread_dumps.py  asks a node's processes for their thread dumps
"""

from lab.local.target import Agent, LocalTarget, LocalTargetError

__all__ = ["Agent", "LocalTarget", "LocalTargetError"]

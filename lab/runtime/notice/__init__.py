"""Spot-eviction notice handler for AKS: `python -m lab.runtime.notice`.

Nothing delivers Azure's 30 s spot notice to pods: AKS's own node drain on a Scheduled Events
`Preempt` is best effort and is reported not to drain spot nodes (Azure/AKS#3528), so workers
would vanish without SIGTERM. A DaemonSet on the spot GPU pool runs this handler on every node.
It polls the Instance Metadata Service (IMDS) for Scheduled Events and, on a `Preempt` or
`Terminate` for its own VM, cordons its node and evicts the node's pods through the Eviction API
(policy/v1) at once, each with a grace period that ends before the VM goes away.

Modules, one job each: `imds` (Scheduled Events and the VM's name), `drain` (cordon and
evictions), `handler` (the polling loop), `log` (one JSON line per action), `cli` (flags).
They import the standard library, `kubernetes` and `lab.vocab` only: the handler runs from the
training image, which has neither the infrastructure tooling nor a need for it.
"""

"""elastic-spot-lab: elastic PyTorch training on spot GPUs.

Two halves share one vocabulary (`vocab/`, standard library only):
  runtime/   what runs inside the training image: the launcher, both training modes,
             checkpoints, events, warm workers, the c10d store, the spot-notice handler
  infrastructure: `components/` (Pulumi), `program/` (the Pulumi program run offline and
             recorded), `k8s/` (charts, schemas, guardrails, a job rendered), `plan/` (what
             `plan` checks and shows)
and the tools that drive them:
  local/     the local target (real etcd or lighthouse, torchrun agents standing in for nodes)
  drill/     the eviction drill and its verdict
  stacks/    a stack: the Pulumi Automation API, its outputs, a stack as a job sees it
  cluster/   a live cluster: jobs, evictions, the cluster drill, teardown
  cli/       `elastic-lab`: every command, one module per noun
  notebooks/ the lab notebooks' Python side
"""

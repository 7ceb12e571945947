"""elastic-spot-lab: elastic PyTorch training on spot GPUs.

Two halves share one vocabulary (`vocab/`, standard library only):
  runtime/   what runs inside the training image: the launcher, both training modes,
             checkpoints, events, warm workers, the c10d store, the spot-notice handler
  infrastructure: `components/` (Pulumi), `k8s/` (charts, schemas, guardrails), `plan/`
             (the program offline, checked), `submit/` (a job rendered for a stack)
and the tools that drive them:
  local/     the local target (real etcd or lighthouse, torchrun nodes on this machine)
  drill/     the eviction drill and its report
  stacks/    deployed stacks through the Pulumi Automation API, and their outputs
  ops/       operations on a live cluster: jobs, evictions, the cluster drill, teardown
  cli.py     `elastic-lab`, one command line
"""

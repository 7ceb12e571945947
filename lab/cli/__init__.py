"""`elastic-lab`: every command of the lab, one module per noun, and the one place where an
error of the lab becomes a message and an exit status (main.py).

  main.py           the parser of every command, the current stack, the exit status
  common.py         what commands that reach a cluster share: their flags, the connection, a confirmation
  stack.py          check, image, up, preview, destroy; `stack` (list, select, unselect)
  plan.py           plan: the offline plan of a stack
  submit.py         submit: a job rendered for a stack's platform and created on its cluster
  job.py            status, logs, delete, scale, rebalance of a job on a cluster
  drill.py          drill: one grammar for the local drill and, with --stack, the cluster drill
  drill_cluster.py  the cluster drill's options and run
  teardown.py       teardown: a stack and what it left, or a local run
  reference.py      docs/cli.md, written from the parsers

To add a command: a `register(subparsers)` in the module of its noun (or a new module in
SUBCOMMANDS of main.py), a function that raises a LabError on failure, and `make docs`.
"""

from lab.cli.main import build_parser, main

__all__ = ["build_parser", "main"]

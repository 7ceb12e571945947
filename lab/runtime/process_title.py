"""Process titles `ps` and `top` can tell apart: the local target's nodes are forks of one
process and the warm workers forks of another, so by their command lines every agent, worker
and forkserver of a job would look the same. Each names itself instead: what it is, its node,
and (a worker) its rank, e.g. `elastic-lab worker rank 2/3 [node-1] train.py`.

setproctitle rewrites the command line `ps` shows and sets the short name (`comm`) `top` and
`ps -e` show; the environment `ps e` shows is not touched.
"""

from __future__ import annotations

import os

import setproctitle

from lab.vocab.job import ENV_NODE

PREFIX = "elastic-lab"


def where() -> str:
    """`[node]` of this process's node (the pod's name on a cluster), or nothing."""
    node = os.environ.get(ENV_NODE, "")
    return f" [{node}]" if node else ""


def set_title(what: str) -> None:
    """Name this process `elastic-lab <what>`."""
    setproctitle.setproctitle(f"{PREFIX} {what}")


def title() -> str:
    return str(setproctitle.getproctitle())

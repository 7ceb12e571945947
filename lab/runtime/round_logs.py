"""Worker logs kept per rendezvous round: torchrun's `--logs-specs lab-rounds`.

torch's DefaultLogsSpecs writes each worker's stdout, stderr and error file under
`<log-dir>/<run>/attempt_<restart count>/<local rank>/`, and empties that folder when a worker
group starts. A membership change (a node lost or added) restarts the workers without raising
the restart count, so each round's logs replace the last's: what a worker printed before an
eviction, and the error it died of, are gone once the survivors restart. This spec gives every
start of the node's workers a folder of its own, `<log-dir>/<run>/round_<n>/attempt_<restart
count>/<local rank>/`, n counting from 1 in the agent's order, and leaves the layout below it as
torch makes it. Registered as the `lab-rounds` entry point (ROUND_LOGS_SPECS) of the group `torchrun.logs_specs`
(pyproject.toml), torch's own way to name a LogsSpecs on torchrun's command line.
"""

from __future__ import annotations

import os
from typing import Any

from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, LogsDest

from lab.vocab.job import ROUND_DIR_PREFIX


class RoundLogsSpecs(DefaultLogsSpecs):
    """DefaultLogsSpecs with a folder per start of the node's workers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rounds = 0
        self._run_dir: str | None = None

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        if self.root_log_dir == os.devnull:
            return super().reify(envs)
        if self._run_dir is None:
            run_id = (envs.get(0) or {}).get("TORCHELASTIC_RUN_ID", "run")
            self._run_dir = self._make_log_dir(self.root_log_dir, run_id)
        self._rounds += 1
        # torch builds attempt_<n> under its run folder, made once: point it at this round's.
        round_dir = os.path.join(self._run_dir, f"{ROUND_DIR_PREFIX}{self._rounds}")
        os.makedirs(round_dir, exist_ok=True)
        self._run_log_dir = round_dir  # type: ignore[assignment]  # torch's attribute, typed as None
        return super().reify(envs)

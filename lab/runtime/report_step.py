"""One line for a script of one's own to tell the drill where it is:

    from lab.runtime.report_step import report_step
    report_step(step, loss=loss.item())   # after each optimizer step, on every rank

Each worker's first call says where it started (step - 1: 0 for a fresh start, the resumed step
otherwise); rank 0's calls say each step done, its loss and the world size. They are the same
events the project's own trainer emits (lab.vocab.events): the drill then counts the steps lost
at each eviction, the recovery to the first step at the new world size and the loss curve, as it
does for the demo. Written to $LAB_EVENTS_FILE (the local drill), else to stdout, where the
cluster drill reads them from the pod's log; a script run by nothing of ours prints a line of
JSON per step.
"""

from __future__ import annotations

import os
from typing import Any

from lab.runtime.events import emit
from lab.vocab.events import Event

_started_at: list[int] = []  # this process's first step, once it reported one


def report_step(step: int, *, loss: float | None = None, samples: int | None = None) -> None:
    """Step `step` (counting from 1) is done on this rank."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if not _started_at:
        _started_at.append(step)
        emit(Event.FRESH if step <= 1 else Event.RESUME, step=step - 1, world_size=world)
    if os.environ.get("RANK", "0") != "0":
        return
    fields: dict[str, Any] = {"step": step, "world_size": world}
    if loss is not None:
        fields["loss"] = float(loss)
    if samples is not None:
        fields["samples"] = int(samples)
    emit(Event.STEP, **fields)

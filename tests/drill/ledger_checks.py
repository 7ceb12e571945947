"""What every drill test of the demo trainer asserts of its sample ledger (lab.drill.ledger)."""

from __future__ import annotations

import dataclasses
from typing import Any

from lab.drill.ledger import SampleLedger


def assert_every_sample_trained_once(ledger: SampleLedger | dict[str, Any] | None, full_epochs: int) -> None:
    """The ledger was kept (the drill had the demo trainer record its samples), covers at least
    `full_epochs` whole epochs, and no sample of any epoch, the partial last one included, was
    trained twice or never. `ledger`: a report's, or its JSON's."""
    assert ledger is not None, "no sample ledger in the report"
    kept = ledger if isinstance(ledger, dict) else dataclasses.asdict(ledger)
    assert kept["kept"], kept["why_not"]
    assert (kept["lost"], kept["doubled"]) == (0, 0), kept["epochs"]
    assert kept["full_epochs"] >= full_epochs and kept["once"] > 0, kept

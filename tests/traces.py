"""Spot trace files for the tests: the public ones in ../shared/traces (a test that needs one is
skipped where the checkout has none beside it), and small files of each shape written on the
spot."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from lab.vocab.layout import ROOT
from lab.vocab.spot_trace import SpotTrace
from lab.vocab.trace_files import read_trace

# The public traces the project may not carry (no licence), beside the checkout when present.
SHARED_TRACES_DIR = ROOT.parent / "shared" / "traces"
FOUR_NODE = "spot-traces-preemption-4node-aws-us-west-2c-v100.json"
SIXTEEN_NODE = "spot-traces-availability-16node-aws-us-east-2b-v100.json"
ONE_NODE_PRICES = "spot-traces-preemption-1node-aws-us-west-2c-v100-prices.json"


def shared_trace(name: str) -> Path:
    """The public trace `name` in ../shared/traces; the test is skipped where it is absent."""
    path = SHARED_TRACES_DIR / name
    if not path.is_file():
        pytest.skip(f"no {path}: ../shared/traces is not beside this checkout")
    return path


def events_file(folder: Path, lines: list[str], name: str = "events.csv") -> Path:
    """Instance events, one `ms,add|remove,instance` line each."""
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def ticks_file(folder: Path, data: list[int], gap_s: float = 100, prices: list[float] | None = None) -> Path:
    """Counts per tick, spot-traces' JSON."""
    doc: dict[str, object] = {"metadata": {"gap_seconds": gap_s}, "data": data}
    if prices is not None:
        doc["prices"] = prices
    path = folder / "ticks.json"
    path.write_text(json.dumps(doc))
    return path


def rounds_file(folder: Path, counts: list[int], of: int = 16, gap_s: float = 600) -> Path:
    """Counts per probe round, SkyNomad's CSV, rounds `gap_s` apart with a UTC offset of -7 h."""
    first = datetime(2025, 10, 3, 17, 10, tzinfo=timezone(timedelta(hours=-7)))
    lines = [f"scheduled_at,instances_created_of_{of}"]
    lines += [f"{(first + timedelta(seconds=i * gap_s)).isoformat()},{n}" for i, n in enumerate(counts)]
    path = folder / "rounds.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def counts(folder: Path, data: list[int], gap_s: float = 100) -> SpotTrace:
    """A trace of counts per tick, read back from its file."""
    return read_trace(ticks_file(folder, data, gap_s))


def events(folder: Path, lines: list[str]) -> SpotTrace:
    """A trace of instance events, read back from its file."""
    return read_trace(events_file(folder, lines))

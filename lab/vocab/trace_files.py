"""Reading spot capacity traces: the three shapes of file public traces come in, told apart by
their content (traces/README.md names the ones the project carries):

- instance events (Bamboo, NSDI'23): CSV lines `ms_since_start,add|remove,instance`, one per
  instance launched or lost, in time order;
- counts per tick (spot-traces, NSDI'24): JSON `{"metadata": {"gap_seconds": S}, "data": [n,
  ...]}`: the instances running at each tick of S seconds; optionally `"prices"`, the spot price
  in $/h at each tick;
- counts per probe round (SkyNomad): CSV `scheduled_at,instances_created_of_N`, then a line per
  round: an ISO 8601 time (UTC where it has no offset) and how many of the N instances it asked
  for launched. A round's count holds until the next round.

Every bad line is reported at once, naming the file and its line (or the JSON member) and what
fits there, before anything uses the trace. The project carries the traces whose licences allow
it, in traces/ (its README.md names each one's source and licence); `load_trace` takes a path or
the name of one of them.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import accumulate, pairwise
from pathlib import Path
from typing import Any, Literal

from lab.vocab.layout import TRACES_DIR
from lab.vocab.problems import InvalidInput, Problem, Problems
from lab.vocab.spot_trace import (
    INSTANCE_EVENTS,
    ROUND_COUNTS,
    TICK_COUNTS,
    InstanceEvent,
    SpotTrace,
    V,
    finite_number,
)

SHAPES = {
    INSTANCE_EVENTS: "instance events (CSV lines `ms_since_start,add|remove,instance`, as bamboo-*.csv)",
    TICK_COUNTS: 'counts per tick (JSON {"metadata": {"gap_seconds": S}, "data": [count, ...]}, as spot-traces)',
    ROUND_COUNTS: "counts per probe round (CSV `scheduled_at,instances_created_of_N`, then `ISO time,count` lines, "
    "as skynomad-*.csv)",
}

_EVENT_LINE = re.compile(r"(\d+),(add|remove),([^,\s]+)")
_ROUND_HEADER = re.compile(r"scheduled_at,instances_created_of_(\d+)")


@dataclass(frozen=True)
class CarriedTrace:
    """A trace the project carries in traces/: its file and where it came from."""

    file: str
    origin: str  # repository @ commit, path, licence (as traces/README.md gives them)


CARRIED_TRACES: dict[str, CarriedTrace] = {
    "bamboo-p3-32": CarriedTrace("bamboo-p3-32.csv", "uclasystem/bamboo @ 8080929, traces/p3-trace.csv, MIT"),
    "bamboo-g4dn-24": CarriedTrace("bamboo-g4dn-24.csv", "uclasystem/bamboo @ 8080929, traces/g4dn-trace.csv, MIT"),
    "skynomad-gcp-h100-16-us-east4-a": CarriedTrace(
        "skynomad-gcp-h100-16-us-east4-a.csv",
        "andylizf/skynomad-artifact @ 62b9aaa, data/h100_16_runs/*.json, zone us-east4-a, Apache-2.0",
    ),
}


def resolve_trace(argument: str | Path) -> tuple[Path, str]:
    """A trace argument as (the file to read, its source): a path to a file, or the name of a
    trace the project carries (`bamboo-p3-32`, with or without its suffix)."""
    path = Path(argument)
    if path.is_file():
        return path, str(argument)
    name = str(argument).removesuffix(".csv")
    if name in CARRIED_TRACES:
        return TRACES_DIR / CARRIED_TRACES[name].file, f"{name} ({CARRIED_TRACES[name].origin})"
    names = ", ".join(CARRIED_TRACES)
    raise InvalidInput([Problem("trace", str(argument), f"a trace file, or the name of a carried trace: {names}")])


def load_trace(argument: str | Path) -> SpotTrace:
    """The trace a path or a carried trace's name names (see resolve_trace), read whole."""
    path, source = resolve_trace(argument)
    return read_trace(path, source)


def read_trace(path: Path, source: str | None = None) -> SpotTrace:
    """The trace in `path`, of whichever shape its content has; `source` names it (the path by
    default). InvalidInput names every bad line."""
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidInput([Problem("trace", where, f"a readable file ({error.strerror})")]) from None
    except UnicodeDecodeError:
        raise InvalidInput([Problem("trace", where, "a text file (UTF-8): " + "; ".join(SHAPES.values()))]) from None
    shape = shape_of(text)
    if shape is None:
        number, line = (_lines(text) or [(1, "")])[0]
        raise InvalidInput(
            [Problem(f"{where}:{number}", line[:80], "a spot trace, one of: " + "; ".join(SHAPES.values()))]
        )
    read = {INSTANCE_EVENTS: _instance_events, TICK_COUNTS: _tick_counts, ROUND_COUNTS: _round_counts}[shape]
    return read(text, where, source or where)


def shape_of(text: str) -> str | None:
    """The trace shape a file's first line shows (one of SHAPES), None for none of them."""
    first = (_lines(text) or [(1, "")])[0][1]
    if first.startswith("{"):
        return TICK_COUNTS
    if _ROUND_HEADER.fullmatch(first):
        return ROUND_COUNTS
    if _EVENT_LINE.fullmatch(first):
        return INSTANCE_EVENTS
    return None


def _lines(text: str) -> list[tuple[int, str]]:
    """The file's non-blank lines, stripped, with their numbers from 1."""
    return [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1) if line.strip()]


def _steps(points: Iterable[tuple[float, V]], start: V) -> tuple[tuple[float, V], ...]:
    """A step series from (t, value) points in time order: `start` at t=0, then a step where
    the value changes (the last value of points at the same time)."""
    out: list[tuple[float, V]] = [(0.0, start)]
    for t, value in points:
        if out and out[-1][0] == t:
            out.pop()
        if not out or out[-1][1] != value:
            out.append((float(t), value))
    return tuple(out)


def _instance_events(text: str, where: str, source: str) -> SpotTrace:
    events = _checked_events(text, where)
    running = accumulate(1 if event.kind == "add" else -1 for event in events)
    capacity = _steps(zip((event.t_s for event in events), running, strict=True), 0)
    resolution_s = math.gcd(*(round(event.t_s * 1000) for event in events)) / 1000
    # The last events hold for one step of the trace, as a tick's count does.
    span_s = events[-1].t_s + resolution_s
    pool = max(n for _, n in capacity)
    return SpotTrace(source, INSTANCE_EVENTS, pool, resolution_s, span_s, capacity, tuple(events))


def _checked_events(text: str, where: str) -> list[InstanceEvent]:
    """The file's instance events, or InvalidInput naming every line that is not one, out of
    time order, or adds a running instance or removes one that is not."""
    found = Problems()
    events: list[InstanceEvent] = []
    running: dict[str, int] = {}  # instance -> the line that added it
    last_ms = 0
    for number, line in _lines(text):
        key = f"{where}:{number}"
        matched = _EVENT_LINE.fullmatch(line)
        if matched is None:
            found.add(key, line, "ms_since_start,add|remove,instance: whole milliseconds, add or remove, a name")
            continue
        ms, instance = int(matched[1]), matched[3]
        kind: Literal["add", "remove"] = "add" if matched[2] == "add" else "remove"
        if ms < last_ms:
            found.add(key, line, f"a time >= the line before's, {last_ms} ms (the lines in time order)")
        elif kind == "add" and instance in running:
            found.add(
                key, line, f"the add of an instance not running ({instance} was added on line {running[instance]})"
            )
        elif kind == "remove" and instance not in running:
            found.add(key, line, f"the remove of a running instance ({instance} is not running)")
        else:
            if kind == "add":
                running[instance] = number
            else:
                del running[instance]
            events.append(InstanceEvent(ms / 1000, kind, instance))
        last_ms = max(last_ms, ms)
    if not found and last_ms == 0:
        found.add(where, "every event at 0 ms", "a trace that spans some time")
    found.raise_if_any()
    return events


def _tick_counts(text: str, where: str, source: str) -> SpotTrace:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as error:
        lines = error.doc.splitlines()
        line = lines[error.lineno - 1] if error.lineno <= len(lines) else ""
        raise InvalidInput(
            [Problem(f"{where}:{error.lineno}", line[:80], f"JSON ({error.msg}, column {error.colno})")]
        ) from None
    found = Problems()
    metadata = doc.get("metadata")
    gap = metadata.get("gap_seconds") if isinstance(metadata, dict) else None
    gap_s = float(gap) if finite_number(gap) else 0.0
    if not gap_s > 0:
        found.add(f"{where}:metadata.gap_seconds", gap, "the seconds between ticks, a number > 0")
    data = doc.get("data")
    if not isinstance(data, list) or not data:
        found.add(f"{where}:data", data if not isinstance(data, list) else [], "a list of counts, one per tick")
        data = []
    for index, count in enumerate(data):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            found.add(f"{where}:data[{index}]", count, "a count of running instances, a whole number >= 0")
    if data and not found and max(data) == 0:
        found.add(f"{where}:data", "0 at every tick", "a count above 0 at some tick (a pool that never ran)")
    prices = doc.get("prices")
    if prices is not None and data:
        found.extend(_price_problems(prices, len(data), where))
    found.raise_if_any()
    capacity = _steps(((i * gap_s, count) for i, count in enumerate(data)), data[0])
    price_steps = (
        None if prices is None else _steps(((i * gap_s, float(p)) for i, p in enumerate(prices)), float(prices[0]))
    )
    return SpotTrace(source, TICK_COUNTS, max(data), gap_s, len(data) * gap_s, capacity, (), price_steps)


def _price_problems(prices: Any, ticks: int, where: str) -> list[Problem]:
    """A problem unless `prices` is a list of one spot price in $/h per tick."""
    if not isinstance(prices, list) or len(prices) != ticks:
        return [Problem(f"{where}:prices", _size(prices), f"a list of prices in $/h, one per tick ({ticks})")]
    return [
        Problem(f"{where}:prices[{index}]", price, "a spot price in $/h, a number >= 0")
        for index, price in enumerate(prices)
        if not (finite_number(price) and price >= 0)
    ]


def _size(value: Any) -> str:
    return f"a list of {len(value)}" if isinstance(value, list) else type(value).__name__


def _iso_time(text: str) -> datetime | None:
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _round_counts(text: str, where: str, source: str) -> SpotTrace:
    (_, header), *rows = _lines(text)
    matched = _ROUND_HEADER.fullmatch(header)
    pool = int(matched[1]) if matched else 0
    found = Problems()
    if pool < 1:
        found.add(f"{where}:1", header, "instances_created_of_N with N >= 1, the instances each round asked for")
    times: list[datetime] = []
    counts: list[int] = []
    for number, line in rows:
        at_text, _, count_text = line.partition(",")
        at, count_text = _iso_time(at_text), count_text.strip()
        if at is None or not count_text.isdecimal() or int(count_text) > pool:
            found.add(
                f"{where}:{number}", line, f"scheduled_at,count: an ISO 8601 time, then instances launched, 0 to {pool}"
            )
        elif times and at <= times[-1]:
            found.add(f"{where}:{number}", line, f"a time after the line before's, {times[-1].isoformat()}")
        else:
            times.append(at)
            counts.append(int(count_text))
    if not found and len(times) < 2:
        found.add(where, f"{len(times)} round(s)", "at least two rounds (their spacing is the trace's resolution)")
    if not found and max(counts) == 0:
        found.add(where, "0 in every round", "a round that launched an instance (a pool that never ran)")
    found.raise_if_any()
    offsets = [(at - times[0]).total_seconds() for at in times]
    # The rounds' own spacing, to the millisecond: their start times jitter by microseconds.
    resolution = round(statistics.median(b - a for a, b in pairwise(offsets)), 3)
    capacity = _steps(zip(offsets, counts, strict=True), counts[0])
    return SpotTrace(source, ROUND_COUNTS, pool, resolution, offsets[-1] + resolution, capacity)

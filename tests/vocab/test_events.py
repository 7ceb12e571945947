"""The events' vocabulary: every name has its fields, the line format round-trips, readers
skip what is not an event, and a field no event declares is caught."""

from __future__ import annotations

import json

import pytest

from lab.vocab.events import FIELDS, Event, Tail, parse_line, read, to_line, unknown_fields


def test_every_event_declares_its_fields():
    assert set(FIELDS) == set(Event)


def test_an_event_is_written_as_its_name():
    line = to_line({"t": 1.5, "event": Event.STEP, "step": 3})
    assert json.loads(line) == {"t": 1.5, "event": "step", "step": 3}
    assert parse_line(line.decode()) == {"t": 1.5, "event": "step", "step": 3}
    assert Event("step") is Event.STEP and parse_line(line.decode())["event"] == Event.STEP


@pytest.mark.parametrize(
    "line",
    ["plain log text", "{not json", '{"t": 1}', '{"event": "step"}', "[1, 2]", ""],
    ids=["text", "torn", "no-event", "no-time", "list", "empty"],
)
def test_what_is_not_an_event_is_skipped(line):
    assert parse_line(line) is None


def test_a_file_reads_in_time_order_and_a_tail_waits_for_whole_lines(tmp_path):
    path = tmp_path / "events.jsonl"
    tail = Tail(path)
    assert tail.poll() == [] and read(path) == []
    path.write_bytes(to_line({"t": 2.0, "event": "step", "step": 2}) + to_line({"t": 1.0, "event": "fresh", "step": 0}))
    with path.open("ab") as f:
        f.write(b'{"t": 3.0, "event": "st')  # a line being written
    assert [e["t"] for e in read(path)] == [1.0, 2.0]
    assert [e["event"] for e in tail.poll()] == ["step", "fresh"]
    with path.open("ab") as f:
        f.write(b'ep", "step": 3}\n')
    assert [e["step"] for e in tail.poll()] == [3]


def test_fields_an_event_does_not_declare_are_named():
    ok = {"t": 1.0, "event": "step", "pid": 7, "rank": 0, "round": 29500, "step": 1, "loss": 0.5}
    assert unknown_fields(ok) == set()
    assert unknown_fields({**ok, "lossy": 1}) == {"lossy"}
    assert unknown_fields({"t": 1.0, "event": "evict", "source": "cluster", "node": "node-2", "kind": "hard"}) == set()
    assert unknown_fields({"t": 1.0, "event": "made_up", "x": 1}) == {"x"}

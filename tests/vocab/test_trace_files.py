"""Reading spot traces: each shape from the public files, with the figures their README states;
the shape told from the content; the carried copies and their sources; every bad file named by
its line or JSON member and what fits there."""

from __future__ import annotations

import json
import re

import pytest

from lab.vocab.layout import TRACES_DIR
from lab.vocab.problems import InvalidInput
from lab.vocab.spot_trace import INSTANCE_EVENTS, ROUND_COUNTS, TICK_COUNTS
from lab.vocab.trace_files import CARRIED_TRACES, load_trace, read_trace, resolve_trace, shape_of
from tests.traces import (
    FOUR_NODE,
    ONE_NODE_PRICES,
    SHARED_TRACES_DIR,
    SIXTEEN_NODE,
    events_file,
    rounds_file,
    shared_trace,
    ticks_file,
)


def _problems(error: pytest.ExceptionInfo[InvalidInput]) -> dict[str, str]:
    return {p.key: p.expected for p in error.value.problems}


# ------------------------------------------------------------------ the public files


@pytest.mark.parametrize(
    ("name", "pool", "hours", "adds", "removes"),
    [("bamboo-p3-32.csv", 32, 11.4, 177, 167), ("bamboo-g4dn-24.csv", 24, 10.8, 79, 74)],
)
def test_bamboo_instance_events_have_the_readmes_adds_removes_and_span(name, pool, hours, adds, removes):
    trace = read_trace(shared_trace(name))
    assert trace.shape == INSTANCE_EVENTS
    assert (trace.pool, trace.resolution_s, round(trace.span_s / 3600, 1)) == (pool, 60.0, hours)
    kinds = [e.kind for e in trace.events]
    assert (kinds.count("add"), kinds.count("remove")) == (adds, removes)
    assert trace.capacity[-1][1] == adds - removes


@pytest.mark.parametrize(
    ("name", "pool", "gap_s", "hours"),
    [(FOUR_NODE, 4, 300, 428), (SIXTEEN_NODE, 16, 300, 271), (ONE_NODE_PRICES, 1, 32, 177)],
)
def test_spot_traces_counts_per_tick_have_the_readmes_gap_and_span(name, pool, gap_s, hours):
    path = shared_trace(name)
    trace = read_trace(path)
    ticks = json.loads(path.read_text())["data"]
    assert (trace.shape, trace.pool, trace.resolution_s) == (TICK_COUNTS, pool, gap_s)
    assert round(trace.span_s / 3600) == hours
    assert [trace.alive_at(i * gap_s) for i in range(0, len(ticks), 97)] == ticks[::97]


def test_the_one_node_trace_carries_its_spot_prices():
    trace = read_trace(shared_trace(ONE_NODE_PRICES))
    assert trace.prices is not None
    assert trace.price_at(0) == trace.price_at(trace.span_s) == 0.918
    assert read_trace(shared_trace(FOUR_NODE)).price_at(0) is None


def test_the_h100_rounds_have_16_instances_10_minutes_apart_over_14_days():
    trace = read_trace(shared_trace("skynomad-gcp-h100-16-us-east4-a.csv"))
    assert (trace.shape, trace.pool, trace.resolution_s) == (ROUND_COUNTS, 16, 600.0)
    assert int(trace.span_s / 86400) == 14
    assert trace.alive_at(0) == 16 and trace.alive_at(3 * 600 + 60) == 14  # the file's 1st and 4th rounds


# ------------------------------------------------------------------ the carried traces


def test_the_carried_traces_are_the_shared_ones_unchanged():
    for carried in CARRIED_TRACES.values():
        assert (TRACES_DIR / carried.file).read_bytes() == shared_trace(carried.file).read_bytes()


def test_the_traces_folder_holds_only_carried_traces_each_named_with_its_source_and_licence():
    readme = (TRACES_DIR / "README.md").read_text()
    files = {p.name for p in TRACES_DIR.iterdir()} - {"README.md"}
    assert files == {c.file for c in CARRIED_TRACES.values()}
    for carried in CARRIED_TRACES.values():
        repo, commit = re.match(r"([\w./-]+) @ (\w+)", carried.origin).groups()  # type: ignore[union-attr]
        licence = carried.origin.rsplit(", ", 1)[1]
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{carried.file}` |"))
        assert f"{repo} @ {commit}" in row and f"| {licence} |" in row


def test_a_carried_trace_is_loaded_by_its_name_with_its_origin():
    trace = load_trace("bamboo-p3-32")
    assert trace.source == "bamboo-p3-32 (uclasystem/bamboo @ 8080929, traces/p3-trace.csv, MIT)"
    assert resolve_trace("bamboo-p3-32.csv")[0] == TRACES_DIR / "bamboo-p3-32.csv"
    assert len(trace.events) == 344


def test_a_path_is_read_as_given_and_named_by_it(tmp_path):
    path = events_file(tmp_path, ["0,add,a", "60000,remove,a"])
    assert load_trace(path).source == str(path)
    assert load_trace(str(path)).pool == 1


def test_an_argument_that_is_neither_a_file_nor_a_carried_name_lists_the_carried_ones(tmp_path):
    with pytest.raises(InvalidInput) as error:
        resolve_trace(str(tmp_path / "nowhere.csv"))
    assert error.value.problems[0].key == "trace"
    assert all(name in error.value.problems[0].expected for name in CARRIED_TRACES)


def test_the_spot_traces_files_are_not_carried():
    assert not list(TRACES_DIR.glob("spot-traces-*"))
    assert SHARED_TRACES_DIR.name == "traces" and SHARED_TRACES_DIR.parent.name == "shared"


# ------------------------------------------------------------------ shapes, told from the content


def test_each_shape_is_told_from_the_content_not_the_name(tmp_path):
    json_named_csv = tmp_path / "looks.csv"
    json_named_csv.write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [2, 1, 2]}))
    assert read_trace(json_named_csv).shape == TICK_COUNTS
    assert shape_of("\r\n0,add,node1\r\n") == INSTANCE_EVENTS
    assert shape_of("scheduled_at,instances_created_of_8\n") == ROUND_COUNTS
    assert shape_of("time,count\n0,3\n") is None


def test_instance_events_become_the_pools_capacity_and_step(tmp_path):
    trace = read_trace(events_file(tmp_path, ["120000,add,a", "120000,add,b", "240000,remove,a", "360000,add,c"]))
    assert trace.capacity == ((0.0, 0), (120.0, 2), (240.0, 1), (360.0, 2))
    assert (trace.pool, trace.resolution_s, trace.span_s) == (2, 120.0, 480.0)  # the last step held for one step


def test_counts_per_round_hold_until_the_next_round(tmp_path):
    trace = read_trace(rounds_file(tmp_path, [4, 4, 0, 2], of=4))
    assert trace.capacity == ((0.0, 4), (1200.0, 0), (1800.0, 2))
    assert (trace.pool, trace.resolution_s, trace.span_s) == (4, 600.0, 2400.0)


def test_a_round_without_an_offset_is_read_as_utc(tmp_path):
    path = tmp_path / "naive.csv"
    path.write_text("scheduled_at,instances_created_of_2\n2025-10-03T17:10:00,2\n2025-10-03T17:20:00+00:00,1\n")
    assert read_trace(path).capacity == ((0.0, 2), (600.0, 1))


# ------------------------------------------------------------------ bad files, named


def test_a_file_of_no_known_shape_names_its_first_line_and_the_three_shapes(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("\n\ntime,count\n0,3\n")
    with pytest.raises(InvalidInput) as error:
        read_trace(path)
    (problem,) = error.value.problems
    assert (problem.key, problem.value) == (f"{path}:3", "time,count")
    assert all(shape in problem.expected for shape in ("instance events", "counts per tick", "counts per probe round"))


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b"", "a spot trace, one of"), (b"\xff\xfe\x00", "a text file (UTF-8)")],
    ids=["empty", "binary"],
)
def test_an_empty_or_binary_file_is_refused(tmp_path, content, expected):
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    with pytest.raises(InvalidInput, match=re.escape(expected)):
        read_trace(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(InvalidInput) as error:
        read_trace(tmp_path / "gone.csv")
    assert _problems(error) == {"trace": "a readable file (No such file or directory)"}


def test_every_bad_instance_event_line_is_named_at_once(tmp_path):
    path = events_file(
        tmp_path,
        [
            "0,add,a",
            "0,add,b",
            "60000,add,a",
            "30000,remove,b",
            "60000,remove,z",
            "9x,add,c",
            "120000,drop,b",
            "",
            "180000,remove,b",
        ],
    )
    with pytest.raises(InvalidInput) as error:
        read_trace(path)
    found = _problems(error)
    assert sorted(found) == [f"{path}:{n}" for n in (3, 4, 5, 6, 7)]
    assert "not running (a was added on line 1)" in found[f"{path}:3"]
    assert "in time order" in found[f"{path}:4"]
    assert found[f"{path}:5"] == "the remove of a running instance (z is not running)"
    assert found[f"{path}:6"].startswith("ms_since_start,add|remove,instance")
    assert found[f"{path}:7"] == found[f"{path}:6"]


def test_instance_events_all_at_zero_span_no_time(tmp_path):
    with pytest.raises(InvalidInput, match="a trace that spans some time"):
        read_trace(events_file(tmp_path, ["0,add,a", "0,add,b"]))


@pytest.mark.parametrize(
    ("doc", "key", "expected"),
    [
        ([1, 2], ":1", "counts per tick (JSON"),
        ({"data": [1]}, ":metadata.gap_seconds", "the seconds between ticks, a number > 0"),
        ({"metadata": {"gap_seconds": 0}, "data": [1]}, ":metadata.gap_seconds", "a number > 0"),
        ({"metadata": {"gap_seconds": True}, "data": [1]}, ":metadata.gap_seconds", "a number > 0"),
        ({"metadata": {"gap_seconds": 60}, "data": []}, ":data", "a list of counts, one per tick"),
        ({"metadata": {"gap_seconds": 60}, "data": {"0": 1}}, ":data", "a list of counts, one per tick"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, -1]}, ":data[1]", "a whole number >= 0"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, 1.5]}, ":data[1]", "a whole number >= 0"),
        ({"metadata": {"gap_seconds": 60}, "data": [True]}, ":data[0]", "a whole number >= 0"),
        ({"metadata": {"gap_seconds": 60}, "data": [0, 0]}, ":data", "a count above 0 at some tick"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, 1], "prices": [0.9]}, ":prices", "one per tick (2)"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, 1], "prices": [0.9, -1]}, ":prices[1]", "a number >= 0"),
    ],
    ids=lambda v: None if isinstance(v, (dict, list)) else str(v),
)
def test_every_bad_member_of_a_counts_per_tick_file_is_named(tmp_path, doc, key, expected):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InvalidInput) as error:
        read_trace(path)
    assert expected in _problems(error)[f"{path}{key}"]


def test_a_json_syntax_error_names_its_line_and_column(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"metadata": {"gap_seconds": 300},\n "data": [4, 4,, 3]}')
    with pytest.raises(InvalidInput) as error:
        read_trace(path)
    (problem,) = error.value.problems
    assert (problem.key, problem.value) == (f"{path}:2", ' "data": [4, 4,, 3]}')
    assert problem.expected == "JSON (Expecting value, column 16)"


def test_every_bad_probe_round_is_named(tmp_path):
    path = tmp_path / "r.csv"
    lines = [
        "scheduled_at,instances_created_of_4",
        "2025-10-03T17:10:00-07:00,4",
        "2025-10-03T17:20:00-07:00,5",
        "yesterday,1",
        "2025-10-03T17:05:00-07:00,2",
        "2025-10-03T17:30:00-07:00",
    ]
    path.write_text("\n".join(lines))
    with pytest.raises(InvalidInput) as error:
        read_trace(path)
    found = _problems(error)
    assert sorted(found) == [f"{path}:{n}" for n in (3, 4, 5, 6)]
    assert found[f"{path}:3"] == "scheduled_at,count: an ISO 8601 time, then instances launched, 0 to 4"
    assert found[f"{path}:5"] == "a time after the line before's, 2025-10-03T17:10:00-07:00"


@pytest.mark.parametrize(
    ("header", "counts", "expected"),
    [
        ("scheduled_at,instances_created_of_4", ["2025-10-03T17:10:00Z,4"], "at least two rounds"),
        (
            "scheduled_at,instances_created_of_4",
            ["2025-10-03T17:10:00Z,0", "2025-10-03T17:20:00Z,0"],
            "launched an instance",
        ),
        ("scheduled_at,instances_created_of_0", ["2025-10-03T17:10:00Z,0", "2025-10-03T17:20:00Z,0"], "with N >= 1"),
    ],
    ids=["one round", "never launched", "of 0"],
)
def test_a_probe_round_file_that_says_nothing_is_refused(tmp_path, header, counts, expected):
    path = tmp_path / "r.csv"
    path.write_text("\n".join([header, *counts]))
    with pytest.raises(InvalidInput, match=re.escape(expected)):
        read_trace(path)


def test_ticks_and_rounds_written_by_the_tests_helpers_read_back(tmp_path):
    assert read_trace(ticks_file(tmp_path, [1, 0, 1], gap_s=30, prices=[0.5, 0.5, 0.7])).prices == (
        (0.0, 0.5),
        (60.0, 0.7),
    )
    assert read_trace(rounds_file(tmp_path, [2, 1], of=2)).capacity == ((0.0, 2), (600.0, 1))


def test_prices_are_not_measured_against_data_that_is_not_there(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 60}, "prices": [0.9, 0.9]}))
    with pytest.raises(InvalidInput) as error:
        read_trace(path)
    assert list(_problems(error)) == [f"{path}:data"]

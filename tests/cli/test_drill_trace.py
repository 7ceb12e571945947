"""`elastic-lab drill --trace`: a window of a carried spot trace replayed through the command
line (a real run), and every bad trace option named before anything starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lab.cli import build_parser
from lab.cli import drill as drill_cli
from lab.vocab.problems import InvalidInput
from tests.patience import within


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default workdir is created under ./runs


def problems(*argv: str) -> dict[str, str]:
    with pytest.raises(InvalidInput) as caught:
        drill_cli.build(build_parser().parse_args(["drill", *argv]))
    return {p.key: str(p) for p in caught.value.problems}


@pytest.mark.parametrize(
    ("argv", "option", "shown"),
    [
        (["--trace", "no-such-trace"], "--trace", "--trace='no-such-trace' is invalid: expected a trace file"),
        (["--trace", "bamboo-p3-32", "--window", "5h"], "--window", "--window='5h' is invalid: expected A:B"),
        (["--trace", "bamboo-p3-32", "--speedup", "0"], "--speedup", "--speedup=0.0 is invalid"),
        (["--trace", "bamboo-p3-32", "--notice", "soon"], "--notice", "--notice='soon' is invalid"),
        (["--trace", "bamboo-p3-32", "--eviction", "notice"], "--eviction", "hard or silent"),
        (["--trace", "bamboo-p3-32", "--fault", "scale"], "--fault", "none with --trace"),
        (["--trace", "bamboo-p3-32", "--nodes", "4"], "--max-nodes", "at least the replayed window's slots (4)"),
        # The whole trace at 60x is 683 s of replay: the default 240 s would end it part-way.
        (
            ["--trace", "bamboo-p3-32"],
            "--timeout",
            "--timeout=240.0 is invalid: expected more seconds than the replayed window's 683 s",
        ),
    ],
)
def test_a_bad_trace_option_is_named_before_anything_starts(tmp_path, argv, option, shown):
    found = problems(*argv)
    assert option in found and shown in found[option], found
    assert not (tmp_path / "runs").exists()


def test_notice_takes_a_clouds_name_for_an_eviction_too():
    cfg = drill_cli.build(build_parser().parse_args(["drill", "--eviction", "notice", "--notice", "aws"]))
    assert cfg.notice_s == 120.0 and cfg.replay is None
    assert "--notice" in problems("--eviction", "notice", "--notice", "none")


def test_a_trace_window_becomes_the_drills_schedule():
    argv = ["--trace", "bamboo-p3-32", "--window", "7800:18600", "--speedup", "600", "--notice", "aws"]
    cfg = drill_cli.build(build_parser().parse_args(["drill", "--min-nodes", "1", *argv]))
    assert cfg.fault == "trace" and cfg.replay is not None
    assert (cfg.replay.window_s, cfg.replay.slots, cfg.replay.duration_s) == ((7800.0, 18600.0), 3, 18.0)
    losses = [c for c in cfg.replay.changes if c.kind == "lost"]
    assert losses and all(c.notice_s == pytest.approx(0.2) for c in losses)  # 120 s at 600x


@pytest.mark.processes
@pytest.mark.long
@pytest.mark.timeout(300)
def test_the_cli_replays_a_carried_traces_window_and_reports_its_goodput(tmp_path):
    flags = (
        "--trace bamboo-p3-32 --window 7800:18600 --speedup 600 --notice aws --min-nodes 1"
        " --steps 500 --step-time 0.03 --checkpoint-every 20 --json --quiet"
    )
    workdir = tmp_path / "replay"
    out = subprocess.run(
        [sys.executable, "-m", "lab.cli", "drill", "--workdir", str(workdir), *flags.split()],
        capture_output=True,
        text=True,
        timeout=within(240),
    )
    report = json.loads(out.stdout) if out.stdout.strip().startswith("{") else {}
    assert out.returncode == 0, (report.get("problems"), out.stderr[-3000:])
    assert report["passed"] and report["finished"], report["problems"]
    replay = report["replay"]
    assert replay["capacity_node_s"] > 0 and replay["useful_samples"] > 0 and replay["ratio"] > 0
    assert report["ledger"]["lost"] == 0 and report["ledger"]["doubled"] == 0
    changes = [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]
    capacity = [e for e in changes if e["event"] == "capacity"]
    assert capacity[0]["change"] == "start" and capacity[-1]["change"] == "end"
    assert sum(e["change"] == "lost" for e in capacity) == 5
    evicted = [e for e in changes if e["event"] == "evict"]
    assert len(evicted) == 5 and all(e["kind"] == "notice" for e in evicted)

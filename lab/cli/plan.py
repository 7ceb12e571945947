"""`elastic-lab plan`: the stack's resources, outputs, hourly cost and checks, offline.

Exit status: 0 when every check passes (warnings allowed), 1 when a check reports an
error, 2 when the input is refused and nothing is planned (unknown stack, invalid config,
unknown --check).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from lab.cli.common import attempt, command_with_text
from lab.vocab.checkpoint_interval import BAND_NAMES
from lab.vocab.command_flags import add_output
from lab.vocab.current_stack import STACK_DEFAULT, STACK_REQUIRED
from lab.vocab.errors import LabError
from lab.vocab.models import MODELS, TINY
from lab.vocab.problems import InvalidInput

if TYPE_CHECKING:
    from lab.plan.trace_saving import TraceChoice


def register(sub: Any) -> None:
    p = command_with_text(
        sub, "plan", "offline plan of a Pulumi stack: resources, outputs, cost, conformance checks", __doc__
    )
    p.add_argument("-s", "--stack", help=f"stack name: stacks/Pulumi.<stack>.yaml {STACK_DEFAULT}")
    p.add_argument("--all-stacks", action="store_true", help="plan every stacks/Pulumi.*.yaml in turn")
    add_output(p, "the plan")
    p.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override a config key for this plan (e.g. --set gpuMaxNodes=5); repeatable",
    )
    p.add_argument("--prices", metavar="FILE", help="price table to use [lab/plan/prices.yaml]")
    p.add_argument(
        "--save-cost",
        metavar="SECONDS",
        type=float,
        default=1.0,
        help="what a checkpoint save costs training, for the checkpoint interval at each eviction band "
        "(`elastic-lab drill` reports a job's) [1]",
    )
    p.add_argument(
        "--band",
        choices=BAND_NAMES,
        help="also show what spot saves against on demand at this monthly eviction band, per fault-tolerance "
        "mode (goodput from measured drills)",
    )
    p.add_argument(
        "--trace",
        metavar="FILE|NAME",
        help="also show the goodput and cost per fault-tolerance mode over a window of a spot capacity trace: a file "
        "of one of the three shapes (traces/README.md), or a carried trace's name (bamboo-p3-32, bamboo-g4dn-24, "
        "skynomad-gcp-h100-16-us-east4-a); its pool's counts are scaled to the spot pool at its largest",
    )
    p.add_argument(
        "--window",
        metavar="A:B",
        help="--trace: the window, in the trace's seconds (or with m, h, d: 100h:103h); an empty side is the "
        "trace's start or end [the whole trace]",
    )
    p.add_argument(
        "--notice",
        metavar="aws|gcp|azure|none|SECONDS",
        help="--trace: the notice each loss gets (aws 120 s, gcp 30 s, azure 5 s) [the stack's cloud's]",
    )
    p.add_argument(
        "--model",
        metavar="{" + ",".join(MODELS) + "}",
        help="--trace: the model size whose measured recovery costs the goodput counts (a size not measured counts "
        f"those of the largest measured size below it) [{TINY}]",
    )
    p.add_argument("--check", metavar="NAME", action="append", help="run only this check (repeatable)")
    p.add_argument("--show-secrets", action="store_true", help="print secret values (mock values offline)")
    p.set_defaults(func=run, stack_default=STACK_REQUIRED)


def _overrides(pairs: list[str]) -> dict[str, str]:
    from lab.vocab.problems import InvalidInput, Problem

    out: dict[str, str] = {}
    problems: list[Problem] = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            problems.append(Problem("--set", pair, "KEY=VALUE, e.g. --set gpuMaxNodes=5"))
            continue
        out[key.strip()] = value
    if problems:
        raise InvalidInput(problems)
    return out


def trace_choice(args: argparse.Namespace) -> TraceChoice | None:
    """The trace window of --trace, --window and --notice, read and checked (None without
    --trace), or InvalidInput naming each bad one by its option."""
    from lab.plan.trace_saving import TraceChoice
    from lab.vocab.problems import Problem, Problems
    from lab.vocab.spot_trace import parse_window
    from lab.vocab.trace_files import load_trace
    from lab.vocab.trace_schedule import notice_seconds

    found = Problems()
    if args.trace is None:
        for option, value in (("--window", args.window), ("--notice", args.notice), ("--model", args.model)):
            if value is not None:
                found.add(option, value, "--trace too: the trace whose window is priced")
        found.raise_if_any()
        return None
    choice = None
    try:
        trace = load_trace(args.trace)
        window = None if args.window is None else parse_window(args.window)
        choice = TraceChoice(trace, trace.checked_window(window) if window else None, args.notice, args.model or TINY)
    except InvalidInput as error:
        options = {"trace": "--trace", "window": "--window"}  # a bad line of the file keeps its file:line
        found.extend(Problem(options.get(p.key, p.key), p.value, p.expected) for p in error.problems)
    if args.notice is not None:
        try:
            notice_seconds(args.notice)
        except InvalidInput as error:
            found.extend(Problem("--notice", p.value, p.expected) for p in error.problems)
    if args.model is not None and args.model not in MODELS:
        found.add("--model", args.model, f"one of {', '.join(MODELS)}")
    found.raise_if_any()
    return choice


def plan_one(stack: str, args: argparse.Namespace) -> tuple[int, dict[str, Any] | None, str]:
    """(exit status, JSON dict or None, text) for one stack."""
    from lab.plan import arm, cost, display
    from lab.plan.check_list import findings_of, run_checks
    from lab.plan.findings import errors
    from lab.program.harness import run_program

    def planned() -> Any:
        cost.load_prices(args.prices)  # a bad --prices file is refused before planning
        plan = run_program(stack, _overrides(args.set))
        plan.prices = args.prices
        return plan

    plan = attempt(planned)  # one stack's error is its row: --all-stacks goes on with the next
    if isinstance(plan, LabError):
        return plan.exit_code, {"stack": stack, "ok": False, "error": str(plan)}, f"elastic-lab plan: {plan}"
    runs = run_checks(plan, args.check)
    estimate = cost.estimate(plan, args.prices)
    api = arm.api_versions() if arm.checked_resources(plan) else None
    status = 1 if errors(findings_of(runs)) else 0
    shown: dict[str, Any] = {
        "show_secrets": args.show_secrets,
        "api": api,
        "save_cost_s": args.save_cost,
        "band": args.band,
        "trace": args.trace_choice,
    }
    if args.output == "json":
        return status, display.json_dict(plan, runs, estimate, **shown), ""
    return status, None, display.text(plan, runs, estimate, **shown)


def run(args: argparse.Namespace) -> int:
    from lab.plan.check_list import UnknownCheck, check_unknown
    from lab.program.stack_files import list_stacks

    if not args.save_cost > 0 or args.save_cost == float("inf"):
        print(f"elastic-lab plan: --save-cost={args.save_cost:g} is invalid: expected seconds > 0", file=sys.stderr)
        return 2
    try:
        args.trace_choice = trace_choice(args)  # a trace read and checked before planning anything
    except InvalidInput as exc:
        print(f"elastic-lab plan: {exc}", file=sys.stderr)
        return exc.exit_code
    try:
        check_unknown(args.check)  # before planning anything
    except UnknownCheck as exc:
        if args.output == "json":
            print(json.dumps({"ok": False, "error": f"--check: {exc}"}, indent=2))
        else:
            print(f"elastic-lab plan: --check: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.all_stacks and args.stack:
        print(
            f"elastic-lab plan: -s {args.stack} and --all-stacks: give one (--all-stacks plans every stack)",
            file=sys.stderr,
        )
        return 2
    stacks = list_stacks() if args.all_stacks else [args.stack]
    worst = 0
    docs = []
    for stack in stacks:
        status, doc, text = plan_one(stack, args)
        worst = max(worst, status)
        if args.output == "json":
            docs.append(doc)
        else:
            print(text, file=sys.stdout if status != 2 else sys.stderr)
            if len(stacks) > 1:
                print()
    if args.output == "json":
        print(json.dumps(docs if args.all_stacks else docs[0], indent=2, sort_keys=False, default=str))
    return worst

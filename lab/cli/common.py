"""What the commands that reach a cluster share: the flags that name the stack, kubeconfig,
context and namespace, their checks, the connection, and asking a person to confirm.

Only argparse and the vocabulary are imported here; the clients when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TypeVar

from lab.vocab.command_flags import add_namespace, add_team
from lab.vocab.current_stack import (
    STACK_DEFAULT,
    STACK_OPTIONAL,
    STACK_REQUIRED,
)
from lab.vocab.errors import LabError
from lab.vocab.job import JobSpec
from lab.vocab.names import DNS_LABEL_RULE, is_dns_label
from lab.vocab.problems import InvalidInput, Problem, Problems

T = TypeVar("T")


def connection_arguments(p: argparse.ArgumentParser, *, stack_required: bool) -> None:
    p.add_argument(
        "-s", "--stack", help=f"stack name (stacks/Pulumi.<stack>.yaml): its platform and cluster {STACK_DEFAULT}"
    )
    p.set_defaults(stack_default=STACK_REQUIRED if stack_required else STACK_OPTIONAL)
    p.add_argument("--kubeconfig", help="kubeconfig file [the stack's, else $KUBECONFIG]")
    p.add_argument("--context", help="kubeconfig context [the current one]")
    add_namespace(p, "namespace [the stack's training namespace (a team's: --team), else the context's]")
    add_team(p)


def connection_problems(args: argparse.Namespace) -> list[Problem]:
    """--namespace and --kubeconfig, as every command that reaches a cluster takes them."""
    from lab.cluster.kube import kubeconfig_problems

    found = Problems()
    if args.namespace is not None and not is_dns_label(args.namespace):
        found.add("--namespace", args.namespace, f"a namespace name, {DNS_LABEL_RULE}")
    found.extend(kubeconfig_problems(args.kubeconfig))
    return found.items


def stack_target_of(stack: str | None) -> Any:
    from lab.stacks.target import stack_target

    return stack_target(stack) if stack else None


def target_of(args: argparse.Namespace) -> Any:
    """The stack a command's --stack names, as the jobs of its --team see it (a --namespace
    that is a team's names that team too); None without a stack."""
    return for_team(args, stack_target_of(args.stack))


def for_team(args: argparse.Namespace, target: Any) -> Any:
    """`target` as the jobs of the command's team see it: its namespace, quotas and checkpoint
    folder; `target` itself without a team. Refused: a team without a stack, one the stack
    does not have, a --namespace that is not the team's."""
    team, namespace = getattr(args, "team", None), getattr(args, "namespace", None)
    if target is None:
        if team is not None:
            raise InvalidInput([Problem("--team", team, "a team of a stack: pass --stack (its platform.teams)")])
        return None
    facts = target.facts
    if team is None and namespace:
        team = facts.team_of_namespace(namespace)
    if team is None:
        return target
    teams = facts.teams
    if team not in teams:
        expected = (
            f"one of stack {target.stack!r}'s teams: {', '.join(sorted(teams))}"
            if teams
            else f"no team: stack {target.stack!r} has none (platform.teams)"
        )
        raise InvalidInput([Problem("--team", team, expected)])
    if namespace and namespace != teams[team].namespace:
        raise InvalidInput(
            [Problem("--namespace", namespace, f"team {team!r}'s namespace {teams[team].namespace!r}, or none")]
        )
    return replace(target, facts=facts.for_team(team))


def namespace_of(args: argparse.Namespace, target: Any, kube: Any) -> str:
    if args.namespace:
        return str(args.namespace)
    return str(target.facts.namespace) if target is not None else str(kube.namespace)


@contextmanager
def connected(args: argparse.Namespace, target: Any = None) -> Iterator[tuple[Any, str]]:
    """(cluster, namespace) for a command's --stack, --kubeconfig, --context and --namespace."""
    from lab.stacks.target import connect_to_stack

    with connect_to_stack(target, args.kubeconfig, args.context) as kube:
        yield kube, namespace_of(args, target, kube)


def confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        print(f"{question} (not a terminal: pass --yes)", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def attempt(call: Callable[[], T]) -> T | LabError:
    """What `call` returns, or the LabError it raised: the one place where the lab's errors are
    caught (`main` makes one the command's message and exit status; `plan --all-stacks` a stack's
    row, and goes on with the next)."""
    try:
        return call()
    except LabError as exc:
        return exc


def command_with_text(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str, summary: str, text: str
) -> argparse.ArgumentParser:
    """A command whose --help shows `text` as written (its paragraphs and lists kept), `summary`
    in `elastic-lab --help`."""
    return subparsers.add_parser(
        name, help=summary, description=text, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def said(report: Any, output: str, where: dict[str, str]) -> int:
    """A drill's report said: its JSON, or its summary and where its records are (`where`: label ->
    path); the exit status of its verdict."""
    if output == "json":
        print(report.to_json())
    else:
        print(report.summary())
        print("\n".join(f"  {label + ':':<10}{path}" for label, path in where.items()))
    return 0 if report.passed else 1


def spec_or_problems(problems: list[Problem], spec: Callable[[], JobSpec]) -> JobSpec:
    """The JobSpec `spec` makes, or `problems` (of flags beside the JobSpec's) and the JobSpec's
    own together: every problem at once (one InvalidInput)."""
    try:
        made = spec()
    except InvalidInput as exc:
        raise InvalidInput([*problems, *exc.problems]) from None
    if problems:
        raise InvalidInput(problems)
    return made

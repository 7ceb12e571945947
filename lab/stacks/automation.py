"""`elastic-lab up | preview | destroy --stack S`: the stack's `pulumi up`, through the Pulumi
Automation API, after the same checks `elastic-lab plan` makes.

Before the CLI is touched: the stack's config is validated and its program is planned offline
with every check of lab/plan/check_list.py; an error stops here, with nothing created. Then
every prerequisite of the stack is checked at once (lab.stacks.prerequisites, `elastic-lab
check`: the Pulumi CLI, its login, the cloud's credentials and account), so that a missing
`az login` is one clear line among all that is missing rather than a provider's stack trace
minutes into an update. `up` and `preview`
also pass the policy pack in policy/ (`--policy-pack`), which runs the same checks on the
real values during the update. Progress is the CLI's own output, line by line.

Asked (a `confirm` callback, the command line's default), `up` first previews: the CLI's diff,
a count of what it would create, update, replace and delete, and the stack's hourly cost from
the offline plan; only a yes starts the update. `destroy` likewise previews what it deletes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lab.plan.quota_needs import StackQuota
from lab.stacks import kept_storage, prerequisites
from lab.stacks.prerequisites import PULUMI_INSTALL
from lab.vocab.errors import LabError, Refused
from lab.vocab.layout import ROOT
from lab.vocab.problems import InvalidInput

POLICY_DIR = ROOT / "policy"
__all__ = ["PULUMI_INSTALL", "StackError", "run"]


class StackError(LabError):
    """A stack operation cannot start or failed; the message says why and what to do."""


class NotConfirmed(StackError):
    """The person asked said no (or could not be asked): nothing was changed."""


@dataclass(frozen=True)
class Prechecked:
    stack: str
    cloud: str
    errors: list[str]
    warnings: list[str]
    cost: list[str] = field(default_factory=list)  # the offline plan's hourly cost, as `plan` prints it
    quota: StackQuota | None = None  # the vCPUs the plan needs of its cloud's quotas


def precheck(stack: str) -> Prechecked:
    """Validate the stack's config and run `plan`'s checks offline (raises InvalidInput or
    StackNotFound for a stack that cannot be planned)."""
    from lab.plan import cost, display
    from lab.plan.check_list import findings_of, run_checks
    from lab.plan.findings import ERROR
    from lab.plan.quota_needs import stack_quota
    from lab.program.harness import run_program

    plan = run_program(stack)
    findings = findings_of(run_checks(plan))
    return Prechecked(
        stack=stack,
        cloud=str(plan.cloud),
        errors=[str(f) for f in findings if f.severity == ERROR],
        warnings=[str(f) for f in findings if f.severity != ERROR],
        cost=display.cost_lines(cost.estimate(plan, None)),
        quota=stack_quota(plan),
    )


# How a preview's counts are said, in this order; the rest (same, read, refresh) change nothing.
CHANGES = (
    ("create", "to create"),
    ("update", "to update"),
    ("replace", "to replace"),
    ("import", "to import"),
    ("delete", "to delete"),
)


def changes_of(preview: Any) -> str:
    """'3 to create, 1 to delete' from a PreviewResult's change summary ('no changes')."""
    counts: dict[str, int] = {}
    for op, n in (getattr(preview, "change_summary", None) or {}).items():
        key = str(getattr(op, "value", op))
        counts[key] = counts.get(key, 0) + int(n)
    said = [f"{counts[key]} {words}" for key, words in CHANGES if counts.get(key)]
    return ", ".join(said) if said else "no changes"


def configured_cloud(stack: str) -> str:
    """The `cloud` key of the stack's file as written (valid or not); "" when absent."""
    from lab.program.stack_files import read_stack_config
    from lab.vocab.names import PROJECT

    values, _ = read_stack_config(stack, ROOT)
    return str(values.get(f"{PROJECT}:cloud", ""))


def stack_prerequisites(
    cloud: str, stack: str, quota: StackQuota | None = None, *, with_quota: bool = True
) -> list[prerequisites.Prerequisite]:
    """`elastic-lab check --stack <stack>`: every prerequisite of deploying it from here, the
    cloud's quota for what its plan needs included (`quota`, else planned here offline; none
    when `with_quota` is False or the stack does not plan)."""
    from lab.program.stack_files import read_stack_config
    from lab.vocab.names import PROJECT

    if with_quota and quota is None and cloud in ("aks", "eks"):
        quota = _planned_quota(stack)

    values, _ = read_stack_config(stack, ROOT)
    kubeconfig = values.get(f"{PROJECT}:kubeconfig")
    if kubeconfig and not os.path.isabs(str(kubeconfig)):
        kubeconfig = str(ROOT / str(kubeconfig))
    return prerequisites.check(
        cloud, values, kubeconfig=str(kubeconfig) if kubeconfig else None, quota=quota if with_quota else None
    )


def _planned_quota(stack: str) -> StackQuota | None:
    """The quota the stack's offline plan needs; None when it does not plan (its config says why
    elsewhere)."""
    from lab.plan.quota_needs import stack_quota
    from lab.program.harness import run_program

    try:
        return stack_quota(run_program(stack))
    except Refused:  # an invalid config (InvalidInput) among them
        return None


def missing_prerequisites(
    cloud: str,
    stack: str,
    quota: StackQuota | None = None,
    *,
    with_quota: bool = True,
    say: Callable[[str], None] | None = None,
) -> str | None:
    """Every required prerequisite of `stack` that does not hold, one per line with its fix
    (None: all hold). Given `say`, what a later step needs and is missing is said as a warning."""
    found = stack_prerequisites(cloud, stack, quota, with_quota=with_quota)
    if say is not None:
        for later in prerequisites.later_needs(found):
            say(f"warning: {later.line()}")
    missing = prerequisites.problems(found)
    return "\n".join(f"  {p.line()}" for p in missing) if missing else None


def _stack(stack: str, *, create: bool) -> Any:
    from pulumi import automation

    try:
        if create:
            return automation.create_or_select_stack(stack_name=stack, work_dir=str(ROOT))
        return automation.select_stack(stack_name=stack, work_dir=str(ROOT))
    except FileNotFoundError:
        raise StackError(
            f"the Pulumi CLI is not installed here ({PULUMI_INSTALL}); `elastic-lab plan --stack {stack}` "
            "works without it"
        ) from None
    except automation.errors.StackNotFoundError:
        raise StackError(f"stack {stack!r} does not exist in the Pulumi backend: `elastic-lab up` creates it") from None
    except automation.errors.CommandError as exc:
        raise StackError(f"stack {stack!r}: {_last_line(exc)} (is `pulumi login` done?)") from None


def _preview_and_ask(
    operation: str,
    stack: str,
    selected: Any,
    pre: Prechecked,
    policy: list[str],
    say: Callable[[str], None],
    on_output: Callable[[str], None],
    confirm: Callable[[str], bool],
) -> None:
    """The preview of `operation` (streamed), its counts and the hourly cost, then the question."""
    if operation == "up":
        preview = selected.preview(on_output=on_output, policy_packs=policy, color="never")
    else:
        preview = selected.preview_destroy(on_output=on_output, color="never")
    changes = changes_of(preview)
    say(f"preview of {operation} for stack {stack!r}: {changes}")
    if operation == "up":
        for line in pre.cost:
            say(line)
    if not confirm(f"{operation} stack {stack!r} ({changes})?"):
        raise NotConfirmed(f"{operation} of stack {stack!r} not confirmed: nothing was changed")


def _last_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def run(
    operation: str,
    stack: str,
    *,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    on_output: Callable[[str], None] = lambda line: print(line, end="" if line.endswith("\n") else "\n", flush=True),
    checks: bool = True,
    remember_kept: bool = True,
    confirm: Callable[[str], bool] | None = None,
) -> Any:
    """`operation` (up, preview, destroy) of `stack`, after the offline checks and the
    credential check; returns the Automation API's result. Raises StackError (or
    InvalidInput for a stack whose config is invalid) before anything starts. A destroy
    writes the ids of the checkpoint storage it keeps to the stack's config for the next `up`
    (lab.stacks.kept_storage), unless `remember_kept` is False (a teardown that deletes it).
    With `confirm`, `up` and `destroy` preview first and go on only if it answers yes to a
    question naming the changes (NotConfirmed otherwise, with nothing changed)."""
    if operation not in ("up", "preview", "destroy"):
        raise ValueError(f"operation={operation!r}: expected up, preview or destroy")
    from pulumi import automation

    pre = _checked(operation, stack, checks=checks, say=say)
    selected = _stack(stack, create=operation == "up")
    policy = [str(POLICY_DIR)] if (POLICY_DIR / "PulumiPolicy.yaml").is_file() else []
    say(
        f"{operation} of stack {stack!r} ({pre.cloud}) through the Pulumi CLI"
        + (", policy pack policy/" if policy else "")
    )
    try:
        if confirm is not None and operation in ("up", "destroy"):
            _preview_and_ask(operation, stack, selected, pre, policy, say, on_output, confirm)
        if operation == "up":
            return _up(selected, policy, say, on_output)
        if operation == "preview":
            return selected.preview(on_output=on_output, policy_packs=policy, color="never")
        return _destroy(selected, stack, say, on_output, remember_kept=remember_kept)
    except automation.errors.CommandError as exc:
        raise StackError(f"pulumi {operation} of stack {stack!r} failed: {_last_line(exc)}") from None


def _checked(operation: str, stack: str, *, checks: bool, say: Callable[[str], None]) -> Prechecked:
    """The offline checks and the prerequisites of `operation` on `stack`, its warnings said;
    StackError (or InvalidInput) when it cannot start."""
    try:
        pre = precheck(stack)
    except InvalidInput as exc:
        if operation != "destroy":
            raise
        # Destroying works from the stack's state, not its program: a config that no longer
        # validates (a key renamed, a value now refused) must not keep its resources alive.
        pre = Prechecked(
            stack=stack,
            cloud=configured_cloud(stack),
            errors=[],
            warnings=[f"the stack's config no longer validates; destroying from its state anyway:\n{exc}"],
        )
    for warning in pre.warnings:
        say(f"warning: {warning}")
    if checks and pre.errors and operation != "destroy":
        raise StackError(
            f"stack {stack!r} fails {len(pre.errors)} check(s) of `elastic-lab plan`; nothing was started:\n  - "
            + "\n  - ".join(pre.errors)
        )
    # The quota a destroy frees is no reason to keep it from starting.
    missing = missing_prerequisites(
        pre.cloud, stack, pre.quota, with_quota=operation != "destroy", say=say if operation == "up" else None
    )
    if missing:
        raise StackError(f"{operation} of stack {stack!r} ({pre.cloud}) cannot start here; missing:\n{missing}")
    return pre


def _up(selected: Any, policy: list[str], say: Callable[[str], None], on_output: Callable[[str], None]) -> Any:
    """`pulumi up`; then storage kept by an earlier destroy is the stack's again."""
    result = selected.up(on_output=on_output, policy_packs=policy, color="never")
    if kept_storage.forget_after_up(selected):
        say("the kept checkpoint storage is the stack's again (adoptCheckpoints removed from its config)")
    return result


def _destroy(
    selected: Any, stack: str, say: Callable[[str], None], on_output: Callable[[str], None], *, remember_kept: bool
) -> Any:
    """`pulumi destroy`; the checkpoint storage it keeps is written to the stack's config for the
    next `up` (unless not `remember_kept`)."""
    kept = kept_storage.remember_before_destroy(selected) if remember_kept else {}
    result = selected.destroy(on_output=on_output, color="never")
    if kept:
        kept_storage.write_for_the_next_up(selected, kept)
        say(
            "kept in the cloud: the checkpoint storage ("
            + ", ".join(f"{role} {rid}" for role, rid in sorted(kept.items()))
            + f"); the next `elastic-lab up --stack {stack}` takes it back (adoptCheckpoints in the stack's config)"
        )
    return result

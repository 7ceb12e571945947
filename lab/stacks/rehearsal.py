"""Dry runs that need nothing: `drill -s S --dry-run` and `teardown -s S --dry-run` where the
deployed stack cannot be read (no Pulumi CLI or login, no credentials, no cluster).

They say what a real run would do, in order, from the stack's offline plan (lab.program.harness,
the program run under mocks): the names its config fixes are the plan's; what only the deployed
stack or its cluster knows (the ids the cloud assigns, the node to evict, what is found to
delete) is a placeholder in angle brackets (lab.vocab.placeholders); and they end with what a
real run needs besides, which `elastic-lab check` checks.
"""

from __future__ import annotations

from lab.stacks.outputs import StackOutputs


def planned_outputs(stack: str) -> StackOutputs:
    """The stack's outputs as its offline plan has them, placeholders for what it cannot know."""
    from lab.program.harness import run_program

    return StackOutputs.planned(stack, run_program(stack).outputs)


def header(what: str, stack: str, why: str) -> list[str]:
    """The first lines: whose dry run this is, why it is the offline one, how to read it."""
    return [
        f"dry run of {what} of stack {stack!r} from its offline plan, reaching nothing: the deployed stack or "
        f"its cluster cannot be read here ({why})",
        "values in <angle brackets> are placeholders: a real run reads them from the deployed stack and its "
        "cluster; in this order, a real run would:",
    ]


def needs(cloud: str, stack: str, *more: str | None) -> list[str]:
    """The last lines: what a real run needs besides: the deployed stack, its cluster, and
    `more` (the cloud calls' credentials, ...; None: nothing)."""
    tokens = {"eks": " (its tokens come from `aws eks get-token`: the aws CLI and AWS credentials)"}
    lines = ["a real run also needs:"]
    if cloud == "byo":
        lines.append(
            "  - the cluster reachable with the stack's kubeconfig (elastic-spot-lab:kubeconfig) or --kubeconfig"
        )
    else:
        lines += [
            f"  - the stack deployed (`elastic-lab up -s {stack}`) and its outputs readable here: the Pulumi CLI, "
            "logged in to the stack's backend",
            f"  - its cluster reachable with the kubeconfig of its outputs{tokens.get(cloud, '')}",
        ]
    lines += [f"  - {need}" for need in more if need]
    lines.append(f"`elastic-lab check -s {stack}` says which of them are missing here")
    return lines

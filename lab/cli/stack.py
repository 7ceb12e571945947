"""A stack: `elastic-lab check | image | up | preview | destroy` and `elastic-lab stack` (the
project's stacks and the current one: the stack a command uses when it is given no --stack;
`stack select STACK` chooses it, `stack unselect` forgets it).

Only argparse and the vocabulary are imported here; Pulumi and the clouds' clients when a command runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re

from lab.cli.common import confirm
from lab.vocab.command_flags import add_output, add_yes
from lab.vocab.current_stack import (
    ENV_STACK,
    STACK_DEFAULT,
    STACK_OPTIONAL,
    STACK_REQUIRED,
    current_stack,
    select_stack,
    unselect_stack,
)
from lab.vocab.problems import InvalidInput, Problem


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    register_deploy(subparsers)
    register_select(subparsers)


def register_deploy(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """check, image, up, preview, destroy."""
    q = subparsers.add_parser(
        "check",
        help="every prerequisite of deploying a stack from here, each with its fix",
        description="Every prerequisite at once, each with its fix: the Pulumi CLI and its version, the "
        "backend login (and a self-managed backend's passphrase), the cloud's credentials, subscription or "
        "account, resource providers, the aws CLI for EKS, a byo cluster's API server, Docker for the image. "
        "Without --stack: the Pulumi and cloud checks of every cloud. `up` runs the stack's checks first.",
    )
    q.add_argument(
        "-s",
        "--stack",
        help="stack name (stacks/Pulumi.<stack>.yaml) [the current stack: `elastic-lab stack`; without one, "
        "every cloud's checks]",
    )
    add_output(q)
    q.set_defaults(func=check_main, stack_default=STACK_OPTIONAL)

    q = subparsers.add_parser(
        "image",
        help="build the training image, push it to the stack's registry, make it the stack's trainerImage",
        description="Build the Dockerfile for linux/amd64, log Docker in to the stack's registry (its imageRegistry "
        "output: az acr login on AKS, an ECR token on EKS), push, and set elastic-spot-lab:trainerImage: the next "
        "`up` installs the spot-notice handler from it and jobs run it by default.",
    )
    q.add_argument("-s", "--stack", help=f"a deployed aks or eks stack {STACK_DEFAULT}")
    q.add_argument(
        "--tag",
        help="the image's tag, one the registry does not hold yet on EKS (ECR's tags are immutable) [the checkout's "
        "commit; with changes -dirty-<their hash>; with --build-arg -args-<their hash>]",
    )
    q.add_argument(
        "--build-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed to docker build, e.g. TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128",
    )
    q.add_argument("--dry-run", action="store_true", help="say every step, run none")
    q.set_defaults(func=image_main, stack_default=STACK_REQUIRED)

    for name, helptext in (
        ("up", "check the stack offline, then `pulumi up` through the Automation API (with the policy pack)"),
        ("preview", "check the stack offline, then `pulumi preview` (with the policy pack)"),
        ("destroy", "`pulumi destroy` of the stack (see `teardown` for jobs, volumes and leftovers too)"),
    ):
        q = subparsers.add_parser(name, help=helptext, description=helptext)
        q.add_argument("-s", "--stack", help=f"stack name (stacks/Pulumi.<stack>.yaml) {STACK_DEFAULT}")
        if name != "preview":
            add_yes(q, "skip the preview and the question (for scripts)")
        q.set_defaults(func=stack_main, operation=name, stack_default=STACK_REQUIRED)


def check_main(args: argparse.Namespace) -> int:
    from lab.stacks import prerequisites
    from lab.stacks.automation import configured_cloud, stack_prerequisites

    if args.stack:
        cloud = configured_cloud(args.stack)
        found = stack_prerequisites(cloud, args.stack)
        if args.output != "json":
            print(f"stack {args.stack!r} ({cloud}):")
    else:
        found = prerequisites.check(None)
    missing = prerequisites.problems(found)
    if args.output == "json":
        print(json.dumps({"stack": args.stack, "prerequisites": [dataclasses.asdict(p) for p in found]}, indent=2))
        return 1 if missing else 0
    for item in found:
        print(item.line())
    unchecked = [p for p in found if not p.checked]
    said = [f"{len(missing)} missing" if missing else "everything needed is here"]
    if unchecked:
        said.append(f"{len(unchecked)} not checked until what they need works")
    later = prerequisites.later_needs(found)
    if later:
        said.append(f"{len(later)} needed later ({', '.join(p.name for p in later)})")
    print("; ".join(said))
    return 1 if missing else 0


def image_main(args: argparse.Namespace) -> int:
    from lab.stacks import image
    from lab.stacks.automation import configured_cloud
    from lab.stacks.outputs import read_outputs

    cloud = configured_cloud(args.stack)
    if cloud not in ("aks", "eks"):
        raise InvalidInput(
            [Problem("--stack", args.stack, "an aks or eks stack: a byo cluster has no registry of ours")]
        )
    bad = [b for b in args.build_arg if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", b)]
    if bad:
        raise InvalidInput([Problem("--build-arg", b, "KEY=VALUE, e.g. TORCH_INDEX_URL=...") for b in bad])
    tag = args.tag or image.commit_tag(args.build_arg)
    if not image.TAG.match(tag):
        raise InvalidInput([Problem("--tag", tag, "a Docker tag: letters, digits, '_', '.', '-', at most 128")])
    earlier = None  # the image ECR already holds under this tag
    if args.dry_run:
        registry = f"<imageRegistry of {args.stack}>"
        reference = f"{registry}:{tag}" if cloud == "eks" else f"{registry}/{image.IMAGE_PATH}:{tag}"
        steps = [image.Step("log Docker in to the stack's registry", (f"({cloud} login)",))]
    else:
        outputs = read_outputs(args.stack)
        registry = outputs.need("image_registry")
        reference = image.image_reference(cloud, registry, tag)
        earlier = image.earlier_push(cloud, registry, tag, outputs.region, tag_given=bool(args.tag))
        steps = [] if earlier else image.login_steps(cloud, registry, outputs.region)
    steps += image.build_steps(reference, args.build_arg)
    if args.dry_run:
        if cloud == "eks":
            print(f"would look {tag} up in the stack's ECR repository: an image pushed under it is used as is")
        for step in steps:
            print(f"would {step}")
        print(f"would set {image.TRAINER_IMAGE_KEY}={reference}@<its digest> in stack {args.stack!r}")
        return 0
    if earlier:
        print(f"{reference} is in the stack's registry already (built from the same content): not built again")
        reference = earlier
    else:
        image.run_steps(steps, say=lambda line: print(line, flush=True))
        reference = image.pushed_reference(reference)
    image.remember(args.stack, reference)
    print(f"{image.TRAINER_IMAGE_KEY}={reference}; next: elastic-lab up --stack {args.stack}")
    return 0


def stack_main(args: argparse.Namespace) -> int:
    operation = args.operation

    from lab.stacks.automation import run

    asks = operation != "preview" and not args.yes
    run(operation, args.stack, confirm=confirm if asks else None)  # NotConfirmed exits 1
    return 0


def register_select(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "stack",
        help="the project's stacks and the current one; `stack select STACK` chooses it",
        description=f"The stacks (stacks/Pulumi.<stack>.yaml) with their cloud, the current one marked *. "
        f"Commands given no --stack use the current stack: ${ENV_STACK} if set, else the one chosen with "
        "`elastic-lab stack select STACK` (kept in this checkout, .elastic-lab/stack). `drill` and `teardown` "
        "never use it: they name their target every time.",
    )
    p.add_argument("action", nargs="?", choices=("list", "select", "unselect"), default="list", help="[list]")
    p.add_argument("name", nargs="?", metavar="STACK", help="the stack to select")
    add_output(p, "the list")
    p.set_defaults(func=select_main)


def select_main(args: argparse.Namespace) -> int:
    from lab.program.stack_files import list_stacks, stack_file
    from lab.stacks.automation import configured_cloud

    if args.action == "select":
        if not args.name:
            print("elastic-lab stack select: give the stack's name, e.g. `elastic-lab stack select aks-dev`")
            return 2
        stack_file(args.name)  # an unknown stack is refused, naming those there are
        select_stack(args.name)
        shadowed = current_stack()
        note = (
            f" (${ENV_STACK}={shadowed.name} wins while it is set)" if shadowed and shadowed.name != args.name else ""
        )
        print(f"current stack: {args.name}{note}")
        return 0
    if args.name:
        print(f"elastic-lab stack {args.action}: takes no stack name (did you mean `stack select {args.name}`?)")
        return 2
    if args.action == "unselect":
        print("no stack selected now" if unselect_stack() else "no stack was selected")
        return 0
    current = current_stack()
    rows = [
        {"stack": s, "cloud": configured_cloud(s), "current": bool(current and current.name == s)}
        for s in list_stacks()
    ]
    if args.output == "json":
        print(json.dumps({"current": current.name if current else None, "stacks": rows}, indent=2))
        return 0
    for row in rows:
        print(f"{'*' if row['current'] else ' '} {row['stack']:<20} {row['cloud']}")
    if current is None:
        print("no current stack: `elastic-lab stack select STACK` chooses one")
    elif not any(row["current"] for row in rows):
        print(f"the current stack {current.name!r} (from {current.source}) has no stack file")
    else:
        print(f"current: {current.name} (from {current.source})")
    return 0

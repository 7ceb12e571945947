"""`elastic-lab image --stack S`: the training image built from the Dockerfile, pushed to the
stack's own registry, and made the stack's `trainerImage`.

Steps, each said before it runs (`--dry-run` says them and runs none):
1. the registry: the stack's `imageRegistry` output (an ACR login server on AKS, an ECR
   repository URL on EKS), read through the Automation API;
2. a login Docker can push with: AKS through `az acr login` (your Azure login, no admin
   password exists); EKS through ECR's GetAuthorizationToken (boto3), handed to `docker login`
   on its standard input, never on a command line or in a log;
3. `docker build --platform linux/amd64` (the GPU nodes' architecture, whatever this machine's)
   and `docker push`, tagged with the commit (ECR tags are immutable: a new commit, a new tag);
4. `elastic-spot-lab:trainerImage` set in the stack's config (the Automation API) to the pushed
   image by its digest (`repo:tag@sha256:...`, the digest the registry gave it): the next `up`
   installs the spot-notice handler from it, and jobs run it unless given `--image`, each node
   pulling exactly what was pushed, whatever the tag later names.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lab.stacks.automation import StackError
from lab.vocab.layout import ROOT
from lab.vocab.names import IMAGE_REFERENCE, PROJECT

DOCKER_INSTALL = "https://docs.docker.com/engine/install/"
IMAGE_PATH = "elastic-spot-lab/trainer"  # under an ACR login server
TRAINER_IMAGE_KEY = f"{PROJECT}:trainerImage"
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")


@dataclass(frozen=True)
class Step:
    """One command: what it does, its argv, and what it reads on standard input (a secret,
    never shown)."""

    says: str
    argv: tuple[str, ...]
    stdin: bytes | None = None

    def __str__(self) -> str:
        shown = " ".join(self.argv) + (" < (password from ECR, not shown)" if self.stdin is not None else "")
        return f"{self.says}: {shown}"


def image_reference(cloud: str, registry: str, tag: str) -> str:
    """Where the image goes: an ACR's path elastic-spot-lab/trainer, or the ECR repository itself."""
    image = f"{registry}:{tag}" if cloud == "eks" else f"{registry}/{IMAGE_PATH}:{tag}"
    if not IMAGE_REFERENCE.match(image):
        raise StackError(f"the image reference {image!r} (registry {registry!r}, tag {tag!r}) is not one Docker takes")
    return image


def commit_tag(run: Callable[..., Any] = subprocess.run) -> str:
    """The checkout's short commit, with `-dirty` when it has uncommitted changes."""
    try:
        sha = run(
            ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise StackError(f"cannot name the image after the commit ({exc}); pass --tag") from None
    return str(sha.stdout).strip() + ("-dirty" if str(dirty.stdout).strip() else "")


def login_steps(cloud: str, registry: str, region: str | None, ecr: Any = None) -> list[Step]:
    """How Docker logs in to the registry. `ecr`: a boto3 ECR client (made when None)."""
    if cloud == "aks":
        if shutil.which("az") is None:
            raise StackError(
                "pushing to the stack's ACR needs the Azure CLI (`az acr login`): install it and `az login`"
            )
        return [
            Step(
                "log Docker in to the ACR with your Azure login",
                ("az", "acr", "login", "--name", registry.split(".")[0]),
            )
        ]
    if cloud == "eks":
        import boto3

        client = ecr or boto3.client("ecr", region_name=region)
        data = client.get_authorization_token()["authorizationData"][0]
        user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
        endpoint = str(data["proxyEndpoint"]).removeprefix("https://")
        return [
            Step(
                "log Docker in to ECR with a 12-hour token",
                ("docker", "login", "--username", user, "--password-stdin", endpoint),
                stdin=password.encode(),
            )
        ]
    raise StackError(f"a {cloud} stack has no registry of ours: build the image and load it into the cluster yourself")


def build_steps(image: str, build_args: Sequence[str] = ()) -> list[Step]:
    args = [a for pair in (("--build-arg", b) for b in build_args) for a in pair]
    return [
        Step(
            "build the training image for the GPU nodes",
            ("docker", "build", "--platform", "linux/amd64", *args, "-t", image, str(ROOT)),
        ),
        Step("push it to the stack's registry", ("docker", "push", image)),
    ]


def run_steps(steps: Sequence[Step], say: Callable[[str], None], run: Callable[..., Any] = subprocess.run) -> None:
    """Each step said, then run; the first that fails ends it (StackError naming it)."""
    if shutil.which("docker") is None:
        raise StackError(f"building and pushing the image needs Docker, which is not on PATH ({DOCKER_INSTALL})")
    for step in steps:
        say(str(step))
        try:
            run(list(step.argv), input=step.stdin, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise StackError(f"{step.says} failed: {exc}") from None


def pushed_reference(image: str, run: Callable[..., Any] = subprocess.run) -> str:
    """`image` pinned to the digest the registry gave it on push (Docker records it among the
    image's RepoDigests, `repo@sha256:...`)."""
    repository = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    try:
        found = run(
            ["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", image],
            capture_output=True,
            text=True,
            check=True,
        )
        digests = json.loads(str(found.stdout) or "[]") or []
    except (OSError, subprocess.CalledProcessError, ValueError) as exc:
        raise StackError(f"the digest of the pushed image {image} could not be read ({exc})") from None
    for entry in digests:
        name, _, digest = str(entry).partition("@")
        if name == repository and DIGEST.match(digest):
            return f"{image}@{digest}"
    raise StackError(f"docker knows no digest of {repository} after the push (RepoDigests: {digests})")


def remember(stack: str, image: str) -> None:
    """Set the stack's trainerImage through the Automation API."""
    from pulumi import automation

    selected = automation.select_stack(stack_name=stack, work_dir=str(ROOT))
    selected.set_config(TRAINER_IMAGE_KEY, automation.ConfigValue(value=image))

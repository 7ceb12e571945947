"""`elastic-lab image --stack S`: the training image built from the Dockerfile, pushed to the
stack's own registry, and made the stack's `trainerImage`.

Steps, each said before it runs (`--dry-run` says them and runs none):
1. the registry: the stack's `imageRegistry` output (an ACR login server on AKS, an ECR
   repository URL on EKS), read through the Automation API;
2. a login Docker can push with: AKS through `az acr login` (your Azure login, no admin
   password exists); EKS through ECR's GetAuthorizationToken (boto3), handed to `docker login`
   on its standard input, never on a command line or in a log;
3. `docker build --platform linux/amd64` (the GPU nodes' architecture, whatever this machine's)
   and `docker push`, tagged with what the image is built from: the commit, and for a checkout
   with changes a hash of them (`<commit>-dirty-<hash>`), and of the build arguments given
   (`-args-<hash>`). ECR tags are immutable, so the same content gets the same tag and other
   content another: an EKS stack whose repository already holds the tag reuses that image
   (ECR DescribeImages) instead of a push ECR would refuse;
4. `elastic-spot-lab:trainerImage` set in the stack's config (the Automation API) to the pushed
   image by its digest (`repo:tag@sha256:...`, the digest the registry gave it): the next `up`
   installs the spot-notice handler from it, and jobs run it unless given `--image`, each node
   pulling exactly what was pushed, whatever the tag later names.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lab.stacks.automation import StackError
from lab.vocab.layout import ROOT
from lab.vocab.names import IMAGE_REFERENCE, PROJECT, ImageReference
from lab.vocab.problems import InvalidInput, Problem

DOCKER_INSTALL = "https://docs.docker.com/engine/install/"
IMAGE_PATH = "elastic-spot-lab/trainer"  # under an ACR login server
TRAINER_IMAGE_KEY = f"{PROJECT}:trainerImage"
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


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


def commit_tag(build_args: Sequence[str] = (), run: Callable[..., Any] = subprocess.run) -> str:
    """The image's tag, named after what it is built from: the checkout's short commit; with
    uncommitted changes `-dirty-` and a hash of them (the diff against the commit and every
    untracked file that .gitignore does not exclude, by content); with build arguments
    `-args-` and a hash of them. The same content gives the same tag, other content another:
    ECR refuses to move a tag (immutable tags), so a tag must never name two images."""

    def git(*argv: str) -> bytes:
        return bytes(run(["git", "-C", str(ROOT), *argv], capture_output=True, check=True).stdout)

    try:
        tag = git("rev-parse", "--short=12", "HEAD").decode().strip()
        if git("status", "--porcelain", "--untracked-files=all").strip():
            tag += f"-dirty-{_short_hash(_changes(git))}"
    except (OSError, subprocess.CalledProcessError) as exc:
        raise StackError(f"cannot name the image after the commit ({exc}); pass --tag") from None
    if build_args:
        tag += f"-args-{_short_hash(chr(0).join(build_args).encode())}"
    return tag


def _changes(git: Callable[..., bytes]) -> bytes:
    """The checkout's changes as bytes: the binary diff of every tracked file against the
    commit (staged or not), then each untracked file's path and its blob id (its content's
    hash, as `git hash-object` computes it without writing anything). A repository nested in
    the checkout is listed as its folder (`name/`) and counts by its name."""
    diff = git("diff", "HEAD", "--binary", "--no-ext-diff", "--no-color", "--no-textconv")
    paths = [p for p in git("ls-files", "-z", "--others", "--exclude-standard").split(b"\0") if p]
    files = [os.fsdecode(p) for p in paths if not p.endswith(b"/")]
    blobs = git("hash-object", "--no-filters", "--", *files) if files else b""
    return diff + b"\0" + b"\0".join(paths) + b"\0" + blobs


def _short_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def earlier_push(
    cloud: str, registry: str, tag: str, region: str | None, *, tag_given: bool, ecr: Any = None
) -> str | None:
    """The image already pushed under `tag` to an EKS stack's ECR repository, pinned to its
    digest, to use instead of building (None: build and push). ECR tags are immutable, so a
    push would fail; a tag named after the content (`commit_tag`) names the same image, but a
    tag given with --tag may not: that is refused, naming the image that holds it."""
    if cloud != "eks":
        return None  # an ACR's tags move on push
    earlier = pushed_before(registry, tag, region, ecr)
    if earlier is not None and tag_given:
        raise InvalidInput(
            [
                Problem(
                    "--tag",
                    tag,
                    f"a tag the stack's ECR repository does not hold yet (its tags are immutable: {earlier} has it); "
                    "or no --tag, to name the image after the checkout's commit and changes",
                )
            ]
        )
    return earlier


def pushed_before(registry: str, tag: str, region: str | None, ecr: Any = None) -> str | None:
    """`registry:tag@sha256:...` when the stack's ECR repository already holds `tag` (None: it
    does not yet), through ECR's DescribeImages. `ecr`: a boto3 ECR client (made when None)."""
    import boto3

    client = ecr or boto3.client("ecr", region_name=region)
    host, _, repository = registry.partition("/")  # <account>.dkr.ecr.<region>.amazonaws.com/<repository>
    registry_id = host.split(".", 1)[0]
    try:
        found = client.describe_images(registryId=registry_id, repositoryName=repository, imageIds=[{"imageTag": tag}])[
            "imageDetails"
        ]
    except client.exceptions.ImageNotFoundException:
        return None
    except client.exceptions.RepositoryNotFoundException:
        raise StackError(
            f"the stack's ECR repository {repository} does not exist in account {registry_id}: is the stack "
            "deployed (`elastic-lab up`)?"
        ) from None
    digests = {d.get("imageDigest") for d in found} - {None}
    if len(digests) != 1:
        raise StackError(f"ECR answered {len(digests)} images for the tag {tag} of {repository}, expected one")
    return f"{registry}:{tag}@{digests.pop()}"


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
    image's RepoDigests, `repo@sha256:...`): `repo:tag@sha256:...`."""
    pushed = ImageReference.parse(image)
    if pushed is None:
        raise StackError(f"the image reference {image!r} is not one Docker takes")
    repository = pushed.repository
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
        found = ImageReference.parse(entry)
        if found is not None and found.repository == repository and found.digest and found.tag is None:
            return str(replace(pushed, digest=found.digest))
    raise StackError(f"docker knows no digest of {repository} after the push (RepoDigests: {digests})")


def remember(stack: str, image: str) -> None:
    """Set the stack's trainerImage through the Automation API."""
    from pulumi import automation

    selected = automation.select_stack(stack_name=stack, work_dir=str(ROOT))
    selected.set_config(TRAINER_IMAGE_KEY, automation.ConfigValue(value=image))

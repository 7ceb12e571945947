"""What the lab notebooks (notebooks/Step0..Step5) share, so that each notebook shows only
its own step: the target they run on, a run's own work directory, `elastic-lab` run as a
user would type it, the check that a local run left no process behind, the plots, and the
offline plan's hourly cost drawn as a chart.

Paths a notebook prints or passes to the command line are relative to the project root
(the notebooks' and the command's working directory) where they can be: a stored output
then reads the same on every machine and names no user's home.
"""

from __future__ import annotations

import io
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from lab.vocab.errors import LabError, Refused
from lab.vocab.layout import ROOT
from lab.vocab.names import PROJECT, image_repository
from lab.vocab.problems import InvalidInput, Problem
from lab.vocab.versions import PROJECT_IMAGE, PROJECT_IMAGE_TAG

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LOCAL = "local"
# The notebooks name their work directories step<N>-<date>-<time>-<random>.
RUN_NAME = re.compile(r"step\d-\d{8}-\d{6}-[0-9a-f]{6}")
# Plots are drawn at this resolution: sharp on a screen, small enough to be stored with the notebooks.
DPI = 80
# A job on a cluster must outlast Step 3's wait for GPU nodes (minutes from zero) and a
# reader's pause before Step 4, whose drill evicts a node while the job trains.
MIN_CLOUD_TRAINING_S = 600.0


class MissingPrerequisite(Refused, RuntimeError):
    """Something the target needs is not on this machine (a RuntimeError too, as it always was)."""


class CommandFailed(LabError, RuntimeError):
    """`elastic-lab` exited with a status other than 0; the message ends with its last lines."""

    def __init__(self, run: CliRun):
        self.run = run
        super().__init__(
            f"`{run.command}` exited with {run.returncode}; its last lines:\n{run.tail()}"
            if run.output.strip() or run.errors.strip()
            else f"`{run.command}` exited with {run.returncode} and printed nothing"
        )


class ProcessesLeft(LabError, RuntimeError):
    """Processes of a local run are still running after it ended."""


# ------------------------------------------------------------------ the target
@dataclass(frozen=True)
class Target:
    """Where a notebook works: this machine, or a stack's cluster."""

    name: str  # "local", or the stack's name (stacks/Pulumi.<name>.yaml)
    cloud: str | None  # the stack's cloud (aks, eks, byo); None on the local target
    trainer_image: str | None = None  # the stack's trainerImage: what its jobs run unless told otherwise

    @property
    def local(self) -> bool:
        return self.cloud is None

    def describe(self) -> str:
        if self.local:
            return "local (this machine: a local etcd and torchrun agents as the nodes)"
        return f"stack {self.name!r} (cloud {self.cloud}, stacks/Pulumi.{self.name}.yaml)"


def choose_target(name: object) -> Target:
    """The target a notebook's `target` parameter names: "local", or a stack with a file in
    stacks/ (refused with the stacks there are)."""
    from lab.program.stack_files import read_stack_config

    if not isinstance(name, str) or not name:
        raise InvalidInput([Problem("target", name, f"{LOCAL!r} or a stack name such as 'aks-dev'")])
    if name == LOCAL:
        return Target(LOCAL, None)
    config, _ = read_stack_config(name)  # StackNotFound lists the stacks there are
    cloud = config.get(f"{PROJECT}:cloud", "")
    if not cloud:
        raise InvalidInput([Problem("target", name, f"a stack whose file sets {PROJECT}:cloud")])
    return Target(name, cloud, config.get(f"{PROJECT}:trainerImage") or None)


def check_image(target: Target, image: str | None) -> str:
    """The image a job on the target's cluster runs: `image` when given, else the stack's
    trainerImage. A cloud's nodes pull it from a registry, so a cloud stack without one, or the
    Dockerfile's own name (which nothing publishes), stops here with the fix. A byo cluster
    may hold a local build under the Dockerfile's name (`kind load docker-image`)."""
    chosen = image or target.trainer_image
    if target.local or target.cloud == "byo":
        return chosen or f"{PROJECT_IMAGE}:{PROJECT_IMAGE_TAG}"
    fix = (
        f"`elastic-lab image --stack {target.name}` (Step 1: once the stack is up; it needs Docker) builds the "
        "Dockerfile, pushes it to the stack's registry and makes it the stack's trainerImage; or set `image` to "
        "an image in a registry the nodes pull from"
    )
    if not chosen:
        raise MissingPrerequisite(f"stack {target.name!r} has no trainerImage yet: {fix}")
    if image_repository(chosen) == PROJECT_IMAGE:
        raise MissingPrerequisite(f"{chosen} is the Dockerfile's name, which nothing publishes: {fix}")
    return chosen


def missing_prerequisites(target: Target, *, show: bool = False) -> list[str]:
    """What deploying and using the target's stack needs and this machine lacks, one line
    each with its fix (`elastic-lab check --stack <stack>`); each check's line is printed
    with `show`. The local target needs none of it."""
    if target.local:
        return []
    from lab.stacks import prerequisites
    from lab.stacks.automation import stack_prerequisites

    found = stack_prerequisites(str(target.cloud), target.name)
    if show:
        for item in found:
            print(item.line())
    return [f"{p.name}: {p.found} (fix: {p.fix})" for p in prerequisites.problems(found)]


def stop_if_missing(missing: Sequence[str], what: str) -> None:
    """One error that lists everything missing, so it is all fixed in one go."""
    if missing:
        raise MissingPrerequisite(f"{what}; missing:\n  - " + "\n  - ".join(missing))


# ------------------------------------------------------------------ work directories and paths
def shown(path: str | Path) -> str:
    """`path` as a notebook shows it: relative to the project root when inside it, under `~`
    when inside the home directory, else as it is."""
    path = Path(path)
    if not path.is_absolute():
        return str(path)
    for base, prefix in ((ROOT, ""), (Path.home(), "~/")):
        if path == base:
            return "." if not prefix else "~"
        if path.is_relative_to(base):
            return prefix + str(path.relative_to(base))
    return str(path)


def runs_dir(work_root: str | Path) -> Path:
    """The notebooks' work root as an absolute path (relative: to the project root)."""
    path = Path(work_root).expanduser()
    return path if path.is_absolute() else ROOT / path


def new_run_dir(work_root: str | Path, step: int) -> Path:
    """A new directory for one run of Step `step`: two runs never share logs or checkpoints."""
    if not 0 <= step <= 9:
        raise ValueError(f"step {step}: the notebooks are Steps 0 to 9")
    path = runs_dir(work_root) / f"step{step}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    path.mkdir(parents=True)
    print(f"work directory: {shown(path)}")
    return path


def run_dirs(work_root: str | Path) -> list[Path]:
    """The notebooks' work directories in the work root (nothing else in it), oldest first."""
    root = runs_dir(work_root)
    if not root.is_dir():
        return []
    return sorted(d for d in root.iterdir() if d.is_dir() and RUN_NAME.fullmatch(d.name))


# ------------------------------------------------------------------ the command line
@dataclass(frozen=True, repr=False)
class CliRun:
    """One `elastic-lab` run: its arguments, exit status and what it printed."""

    args: tuple[str, ...]
    returncode: int
    output: str  # stdout, and stderr too when it was shown as it came
    errors: str = ""  # stderr of a quiet run

    @property
    def command(self) -> str:
        return shlex.join(["elastic-lab", *self.args])

    def __repr__(self) -> str:
        return f"CliRun({self.command!r}, returncode={self.returncode})"

    def tail(self, lines: int = 15) -> str:
        text = self.errors.strip() or self.output.strip()
        return "\n".join(text.splitlines()[-lines:])


def cli_args(args: Iterable[object]) -> list[str]:
    """Arguments as the command gets them: paths relative to the project root, its working
    directory, where they are inside it."""
    return [shown(a) if isinstance(a, Path) else str(a) for a in args]


def elastic_lab(*args: object, quiet: bool = False, check: bool = True) -> CliRun:
    """`elastic-lab ARGS` from the project root with this kernel's Python (the project's
    .venv), as a user would type it: the command line is printed first, then its output as it
    comes (stderr with stdout), or with `quiet` nothing of it (both kept in the CliRun). With
    `check` an exit status other than 0 raises CommandFailed. An interrupted kernel passes the
    interrupt on, so that the command stops what it started before the notebook goes on."""
    argv = cli_args(args)
    run_argv = [sys.executable, "-m", "lab.cli", *argv]
    print("$ " + shlex.join(["elastic-lab", *argv]), flush=True)
    if quiet:
        done = subprocess.run(run_argv, cwd=ROOT, capture_output=True, text=True, check=False)
        run = CliRun(tuple(argv), done.returncode, done.stdout, done.stderr)
    else:
        lines: list[str] = []
        with subprocess.Popen(run_argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            assert proc.stdout is not None
            try:
                for line in proc.stdout:
                    print(line, end="", flush=True)
                    lines.append(line)
            except KeyboardInterrupt:
                proc.send_signal(signal.SIGINT)  # the commands stop what they started on it
                proc.wait()
                raise
        run = CliRun(tuple(argv), proc.returncode, "".join(lines))
    if check and run.returncode != 0:
        raise CommandFailed(run)
    return run


def submit_args(
    stack: str,
    job: str,
    *,
    steps: int,
    step_time: float,
    image: str | None = None,
    kubeconfig: str | None = None,
    dry_run: bool = False,
) -> list[str]:
    """`elastic-lab submit` of the demo job on a stack: `--replace`, so that submitting again
    (a second run of the notebook) replaces the job instead of failing on its name; no
    `--image` unless one is given, so the job runs the stack's trainerImage (`elastic-lab
    image --stack <stack>` builds, pushes and sets it). The job trains `steps` steps of at
    least `step_time` seconds: long enough that Step 4 evicts a node while it trains."""
    found = []
    if steps < 1:
        found.append(Problem("steps", steps, "a whole number of steps >= 1"))
    if not step_time >= 0:
        found.append(Problem("step_time", step_time, "a number of seconds >= 0"))
    elif steps * step_time < MIN_CLOUD_TRAINING_S:
        found.append(
            Problem(
                "steps * step_time",
                round(steps * step_time, 3),
                f">= {MIN_CLOUD_TRAINING_S:g} s of training: on GPUs the demo model's step takes milliseconds, "
                "and a job that ends before Step 4's drill leaves it nothing to evict",
            )
        )
    if found:
        raise InvalidInput(found)
    return [
        *("submit", "--stack", stack, "--name", job, "--replace"),
        *(["--image", image] if image else []),
        *(["--kubeconfig", kubeconfig] if kubeconfig else []),
        *(["--dry-run"] if dry_run else []),
        *("--", "--steps", str(steps), "--step-time", f"{step_time:g}"),
    ]


def cluster_drill_args(
    stack: str,
    job: str,
    *,
    evict_at_step: int,
    deadline_s: float,
    workdir: Path | None = None,
    kubeconfig: str | None = None,
    dry_run: bool = False,
) -> list[object]:
    """`elastic-lab drill --stack` attached to the running job `job` (`--job`: the one Step 3
    submitted, never a second job of the same name): it evicts a GPU spot node of it once it
    trains at full size past `evict_at_step`, and follows it until it ends or `deadline_s`."""
    return [
        *("drill", "--stack", stack, "--job", job),
        *("--evict-at-step", str(evict_at_step), "--deadline", f"{deadline_s:g}"),
        *(["--kubeconfig", kubeconfig] if kubeconfig else []),
        *(["--workdir", workdir] if workdir is not None else []),
        *(["--dry-run"] if dry_run else []),
    ]


# ------------------------------------------------------------------ processes of a local run
def processes_of(directory: Path) -> list[psutil.Process]:
    """Processes of a local run in `directory`: its nodes (their LAB_* environment names it),
    its etcd (--data-dir in it), anything working in it. This process is not one of them."""
    found = []
    here = os.getpid()
    for p in psutil.process_iter(["pid", "cmdline", "cwd", "environ", "status"]):
        info = p.info
        if p.pid == here or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        places = [info["cwd"] or "", *(info["cmdline"] or []), *(info["environ"] or {}).values()]
        if any(str(directory) in place for place in places):
            found.append(p)
    return found


def check_nothing_left(directory: Path, then: str) -> None:
    """Raise ProcessesLeft naming every process of the run in `directory` still running;
    else say so, and what comes next."""
    left = processes_of(directory)
    if left:
        raise ProcessesLeft(f"processes of this run are still running: {[(p.pid, p.info['cmdline']) for p in left]}")
    print(f"no process of this run is left. Next: {then}")


# ------------------------------------------------------------------ plots
def _display_png(png: bytes) -> None:
    from IPython.display import Image, display

    display(Image(data=png, format="png"))  # type: ignore[no-untyped-call]  # unannotated in IPython


def show_png(path: str | Path) -> None:
    """Show a PNG file in the notebook."""
    _display_png(Path(path).read_bytes())


def show_figure(fig: Figure, path: Path | None = None, dpi: int = DPI) -> bytes:
    """Show `fig` in the notebook as a PNG, saved at `path` too when one is given (kept with
    the run); the PNG's bytes are returned."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    png = buffer.getvalue()
    if path is not None:
        path.write_bytes(png)
    _display_png(png)
    return png


# What the chart of a plan's cost compares: each pool's hourly cost at these sizes (the keys
# of a pool in `elastic-lab plan --json`'s "cost").
COST_CASES = (
    ("at_min", "idle\n(every pool at its minimum)"),
    ("at_max", "full size,\nspot GPUs"),
    ("at_max_on_demand", "full size,\non-demand GPUs"),
)


def cost_chart(cost: Mapping[str, Any], title: str) -> Figure:
    """The hourly cost of a plan (`elastic-lab plan --json`'s "cost"), idle, full on spot GPUs
    and full on on-demand GPUs: one bar each, stacked by pool and the cluster's fixed price
    (control plane, NAT), with each bar's total above it. A pool without a price is left out
    and said in the legend."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.2))
    ax = fig.subplots()
    x = list(range(len(COST_CASES)))
    bottoms = [0.0] * len(COST_CASES)
    fixed = (cost.get("control_plane") or {}).get("price")
    layers: list[tuple[str, list[float | None]]] = []
    if fixed:
        layers.append((str(cost["control_plane"].get("label", "cluster")), [float(fixed)] * len(COST_CASES)))
    for pool in cost.get("pools") or []:
        if (pool.get("rank") or 0) > 1:  # a fallback GPU rank: in place of rank 1, not beside it
            continue
        kind = "spot" if pool.get("spot") else "on-demand"
        label = f"pool {pool['pool']}: {pool['min_nodes']}..{pool['max_nodes']} x {pool['vm_size']} ({kind})"
        layers.append((label, [pool.get(key) for key, _ in COST_CASES]))
    for label, values in layers:
        if any(v is None for v in values):
            label += ", no price: not counted"
        heights = [v or 0.0 for v in values]
        ax.bar(x, heights, bottom=bottoms, width=0.55, label=label)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    currency = cost.get("currency", "")
    for i, total in enumerate(bottoms):
        ax.annotate(f"{total:.2f}", (i, total), ha="center", va="bottom", xytext=(0, 3), textcoords="offset points")
    ax.set_xticks(x, [text for _, text in COST_CASES])
    ax.set_ylabel(f"{currency} per hour")
    ax.set_ylim(0, max(bottoms, default=0) * 1.25 or 1)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig

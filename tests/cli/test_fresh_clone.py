"""A user's clone has the repository and nothing beside it: `submit --dry-run` renders and
checks a job there, the PyTorchJob CRD included, from what the project carries."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from lab.vocab.layout import ROOT


@pytest.mark.processes
def test_submit_dry_run_in_a_clone_with_nothing_beside_it(tmp_path):
    files = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
        .stdout.decode()
        .split("\0")
    )
    clone = tmp_path / "clone"
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    assert not (tmp_path / "shared").exists()
    env = {k: v for k, v in os.environ.items() if k != "ELASTIC_LAB_SCHEMAS"}
    env["PYTHONPATH"] = str(clone)  # this clone's code, not the checkout the tests run from
    where = subprocess.run(
        [sys.executable, "-c", "import lab.vocab.layout as l; print(l.ROOT)"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.strip() == str(clone)
    proc = subprocess.run(
        [sys.executable, "-m", "lab.cli", "submit", "--stack", "byo", "--dry-run", "--image", "registry.example/t:1"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert "skipped" not in proc.stderr and "shared" not in proc.stderr, proc.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(proc.stdout) if d}
    assert "PyTorchJob" in kinds

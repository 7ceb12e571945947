"""The layers of ../shared/DESIGN.md hold, and breaking one of them fails the checks.

`make test` runs `lint-imports` on the project (the contracts in pyproject.toml). Here each
rule is broken on purpose in a copy of the sources, and the contract that guards it must
report it. Two rules import-linter cannot state are checked on the syntax trees: the
vocabulary imports only the standard library, and no project module is imported by a name
computed at run time.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab.vocab.layout import ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PROJECT_PACKAGES = ("lab", "components")


# ------------------------------------------------------------------ import-linter's contracts
@dataclass(frozen=True)
class Violation:
    """A line added to a module of a copy of the sources, and the contract it must break."""

    module: str  # path relative to the project root
    line: str
    contract: str


LAYERS = "Infrastructure layers, cli down to the vocabulary"
RUNTIME_LAYERS = "Runtime layers, cli down to the vocabulary"
COMPONENTS = "Components import nothing of lab but the vocabulary"
RUNTIME = "The runtime imports no Pulumi, no YAML, no components, no infrastructure tooling"
LOCAL = "The local target and the drill import no infrastructure tooling"
VOCABULARY = "The vocabulary imports nothing above it"
CLUSTER = "A live cluster's code reads no stack and renders nothing"
CYCLES = "No import cycles between the packages of lab and of components"
CONTRACTS = 8

VIOLATIONS = {
    "vocabulary-imports-a-component": Violation("lab/vocab/names.py", "import components.config", VOCABULARY),
    "vocabulary-imports-yaml": Violation("lab/vocab/pools.py", "import yaml", VOCABULARY),
    "component-reaches-up-to-the-program-runner": Violation(
        "components/program.py", "import lab.program.harness", LAYERS
    ),
    "the-program-runner-imports-the-plans-checks": Violation(
        "lab/program/harness.py", "import lab.plan.check_list", LAYERS
    ),
    "the-program-runner-imports-the-k8s-checks": Violation(
        "lab/program/recording.py", "import lab.k8s.schemas", LAYERS
    ),
    "component-imports-the-runtime": Violation("components/platform/values.py", "import lab.runtime.train", COMPONENTS),
    "k8s-imports-the-plan": Violation("lab/k8s/helm.py", "from lab.plan import findings", LAYERS),
    "runtime-imports-pulumi": Violation("lab/runtime/checkpoint.py", "import pulumi", RUNTIME),
    "runtime-imports-a-component-lazily": Violation(
        "lab/runtime/train.py", "def f():\n    import components.charts", RUNTIME
    ),
    # A module added to the runtime's folder is under the runtime's rules at once.
    "a-new-runtime-module-imports-yaml": Violation("lab/runtime/notice/log.py", "import yaml", RUNTIME),
    "runtime-imports-the-local-target": Violation("lab/runtime/launch.py", "import lab.local.procs", RUNTIME_LAYERS),
    "local-target-imports-the-drill": Violation("lab/local/procs.py", "import lab.drill.report", RUNTIME_LAYERS),
    "stacks-reach-up-to-the-commands": Violation("lab/stacks/target.py", "import lab.cli.job", LAYERS),
    "the-program-runner-imports-the-cluster": Violation("lab/program/harness.py", "import lab.cluster.kube", LAYERS),
    "cluster-reads-a-stack": Violation("lab/cluster/jobs.py", "import lab.stacks.target", CLUSTER),
    "cluster-renders-a-job": Violation("lab/cluster/drill.py", "def f():\n    import lab.k8s.job", CLUSTER),
    "cluster-runs-the-program": Violation("lab/cluster/kube.py", "import lab.program.harness", CLUSTER),
    "commands-import-the-notebooks": Violation("lab/cli/job.py", "import lab.notebooks.shared", LAYERS),
    "drill-imports-the-cluster-backends": Violation("lab/drill/report.py", "import lab.cluster.eviction", LOCAL),
    "local-target-imports-a-cloud-sdk": Violation("lab/local/etcd.py", "import boto3", LOCAL),
}


def _lint_copy(tmp_path: Path, violation: Violation | None) -> subprocess.CompletedProcess[str]:
    for name in (*PROJECT_PACKAGES, "pyproject.toml"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, tmp_path / name)
    if violation is not None:
        module = tmp_path / violation.module
        module.write_text(module.read_text() + f"\n{violation.line}\n")
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tmp_path / "pyproject.toml")],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


# "<name> BROKEN", or "<name>BROKEN (2 ignored imports)" for a contract with ignored imports.
_STATUS_LINE = re.compile(r"^(?P<name>.*?)\s*(?P<status>KEPT|BROKEN)(?: \(\d+ ignored imports?\))?$")


def _broken(output: str) -> set[str]:
    statuses = (_STATUS_LINE.match(line.strip()) for line in output.splitlines())
    return {found["name"] for found in statuses if found and found["status"] == "BROKEN"}


@pytest.mark.processes
def test_the_copy_keeps_every_contract(tmp_path):
    """The sources as they are: every contract kept (the checks below start from here)."""
    result = _lint_copy(tmp_path, None)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"Contracts: {CONTRACTS} kept, 0 broken." in result.stdout


@pytest.mark.parametrize("case", VIOLATIONS)
@pytest.mark.processes
def test_breaking_a_rule_breaks_its_contract(tmp_path, case):
    violation = VIOLATIONS[case]
    result = _lint_copy(tmp_path, violation)
    assert result.returncode != 0
    assert violation.contract in _broken(result.stdout), result.stdout[-3000:]


# ------------------------------------------------------------------ rules on the syntax trees
def imported_modules(tree: ast.AST, module: str) -> Iterator[tuple[int, str]]:
    """(line, module name) of every import in `tree`, function-level ones included;
    relative imports resolved against `module`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.rsplit(".", node.level)[0]
                yield node.lineno, f"{base}.{node.module}" if node.module else base
            elif node.module:
                yield node.lineno, node.module


def outside_the_standard_library(source: str, module: str) -> list[str]:
    """Imports of `source` that are neither the standard library nor lab.vocab."""
    found = []
    for line, name in imported_modules(ast.parse(source), module):
        top = name.split(".")[0]
        # _typeshed: the standard library's type stubs (imported for type checking only).
        if top in (*sys.stdlib_module_names, "__future__", "_typeshed") or name.startswith("lab.vocab"):
            continue
        found.append(f"{module}:{line} imports {name}")
    return found


def imports_by_computed_name(source: str, module: str) -> list[str]:
    """Calls that import a project module by a name given at run time (importlib,
    __import__, runpy): edges no reader or linter sees."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func)
        if func not in ("importlib.import_module", "import_module", "__import__") and not func.startswith("runpy."):
            continue
        first = node.args[0] if node.args else None
        if isinstance(first, ast.JoinedStr):
            parts = first.values
            first = parts[0] if parts and isinstance(parts[0], ast.Constant) else None
        named = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
        if not named or named.split(".")[0] in PROJECT_PACKAGES or func.startswith("runpy."):
            found.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    return found


def project_modules(*packages: str) -> Iterator[tuple[str, str]]:
    for package in packages:
        for path in sorted((ROOT / package.replace(".", "/")).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            yield name, path.read_text()


def test_the_vocabulary_imports_only_the_standard_library():
    assert [
        v for name, source in project_modules("lab.vocab") for v in outside_the_standard_library(source, name)
    ] == []


# The one module that runs code by a name given at run time: the user's training script
# (`torchrun [-m] script`), in a warm worker; never a module of the project by computed name.
RUNS_THE_USERS_SCRIPT = {"lab.runtime.warm"}


def test_no_project_module_is_imported_by_a_computed_name():
    modules = [(n, s) for n, s in project_modules(*PROJECT_PACKAGES) if n not in RUNS_THE_USERS_SCRIPT]
    assert [v for name, source in modules for v in imports_by_computed_name(source, name)] == []


IMPORTLIB = "import importlib\n"
RULE_BREAKERS = {
    "vocabulary-imports-torch": (outside_the_standard_library, "def f():\n    import torch\n"),
    "vocabulary-imports-the-runtime": (outside_the_standard_library, "from lab.runtime.train import make_model\n"),
    "vocabulary-imports-relatively-upward": (outside_the_standard_library, "from ..k8s import helm\n"),
    "importlib-of-a-project-module": (
        imports_by_computed_name,
        "import importlib\nimportlib.import_module('lab.plan.arm')\n",
    ),
    "importlib-of-a-computed-name": (imports_by_computed_name, IMPORTLIB + "importlib.import_module(name)\n"),
    "runpy-of-the-program": (imports_by_computed_name, "import runpy\nrunpy.run_path('__main__.py')\n"),
}


@pytest.mark.parametrize("case", RULE_BREAKERS)
def test_the_syntax_rules_catch_a_deliberate_violation(case):
    rule, source = RULE_BREAKERS[case]
    assert rule(source, "lab.vocab.example")
    assert not rule("import json\nfrom lab.vocab.names import PROJECT\n", "lab.vocab.example")

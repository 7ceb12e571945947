"""The lab notebooks, executed end to end with nbclient in a kernel of this interpreter.

Local target: each notebook runs with its parameters cell replaced (target "local", a work
root of this test module's own under runs/notebooks/), and its outputs must show that the
work happened: torch 2.13.0 found, the plan printed, the drills passed with their plots.
After each one no process of the lab may be left, and after Step 5 the work directories are
gone. A cloud target must stop at once with an error that names what is missing here.
"""

from __future__ import annotations

import ast
import os
import secrets
import shutil
import socket
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tests.conftest import node_log_tails

pytestmark = pytest.mark.processes  # every notebook runs in a kernel of its own

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
ORDER = [
    "Step0_environment",
    "Step1_provision",
    "Step2_make_it_elastic",
    "Step3_run_the_job",
    "Step4_evict_and_recover",
    "Step5_teardown",
]
CELL_TIMEOUT_S = 600


def parameters_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The first code cell, which must carry the "parameters" tag."""
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "parameters" in first.metadata.get("tags", []), "the first code cell is not tagged 'parameters'"
    return first


def defaults(cell: nbformat.NotebookNode) -> dict[str, object]:
    """The parameters a cell sets: plain `name = literal` assignments."""
    values = {}
    for node in ast.parse(cell.source).body:
        assert isinstance(node, ast.Assign) and len(node.targets) == 1, ast.unparse(node)
        values[node.targets[0].id] = ast.literal_eval(node.value)
    return values


def execute(name: str, **params: object) -> nbformat.NotebookNode:
    """Run notebook `name` from the project root with `params` replacing its defaults; the
    executed notebook (with outputs) is returned, CellExecutionError raised on a failed cell."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    cell = parameters_cell(nb)
    values = defaults(cell)
    unknown = set(params) - set(values)
    assert not unknown, f"{name} has no parameter {unknown}"
    values.update(params)
    cell.source = "\n".join(f"{key} = {value!r}" for key, value in values.items())
    client = NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    try:
        client.execute()
    except CellExecutionError as exc:
        tails = node_log_tails(Path(str(values.get("work_root", ""))))
        if not tails:
            raise
        raise CellExecutionError(f"{exc.traceback}\n{tails}", exc.ename, exc.evalue) from None
    return nb


def text_of(nb: nbformat.NotebookNode) -> str:
    """Everything the cells printed or displayed as text."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                parts.append(out.text)
            elif out.output_type in ("execute_result", "display_data"):
                parts += [out.data.get("text/plain", ""), out.data.get("text/markdown", "")]
            elif out.output_type == "error":
                parts.append("\n".join(out.traceback))
    return "\n".join(parts)


def pngs(nb: nbformat.NotebookNode) -> list[str]:
    return [
        out.data["image/png"]
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if out.output_type in ("display_data", "execute_result") and "image/png" in out.data
    ]


def lab_processes(root: Path) -> list[psutil.Process]:
    """Live processes whose working directory, command line or environment mention `root`."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "cwd", "environ", "status"]):
        info = p.info
        if p.pid == os.getpid() or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        places = [info["cwd"] or "", *(info["cmdline"] or []), *(info["environ"] or {}).values()]
        if any(str(root) in place for place in places):
            found.append(p)
    return found


def assert_nothing_left(root: Path) -> None:
    deadline = time.monotonic() + 10
    while (left := lab_processes(root)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for p in left:
        p.kill()  # so one failure does not leak into the next test
    assert not left, f"processes of the notebooks' runs survived: {[(p.pid, p.info['cmdline']) for p in left]}"


@pytest.fixture
def work_root():
    """A work root of this test's own under runs/notebooks/: other runs (another test's, in
    whatever order they ran) are never touched or counted."""
    root = ROOT / "runs" / "notebooks" / f"pytest-{secrets.token_hex(4)}"
    yield root
    for p in lab_processes(root):
        p.kill()
    shutil.rmtree(root, ignore_errors=True)


def run_dirs(root: Path, step: str) -> list[Path]:
    return sorted(root.glob(f"{step}-*")) if root.is_dir() else []


# ------------------------------------------------------------------ the local target
@pytest.mark.timeout(300)
def test_step0_finds_what_the_local_target_needs():
    nb = execute("Step0_environment", target="local")
    out = text_of(nb)
    assert "python 3.11" in out and sys.executable in out  # the kernel runs this interpreter
    assert "torch 2.13.0" in out
    assert "ok       lab.runtime.launch" in out and "ok       components.program" in out
    assert "etcd 3.5 at" in out
    assert "Everything target 'local' needs is here." in out


@pytest.mark.timeout(300)
def test_step1_shows_the_offline_plan_and_its_cost():
    out = text_of(execute("Step1_provision", target="local"))
    assert "Plan of stack 'aks-dev' (cloud: aks)" in out
    assert "azure-native:containerservice:AgentPool aks-gpu-spot" in out
    assert "0 error(s)" in out
    assert "idle (GPU pool at zero):" in out and "spot saves about" in out


@pytest.mark.timeout(600)
def test_step2_shows_the_contract_and_drills_a_script_of_its_own(work_root):
    nb = execute("Step2_make_it_elastic", target="local", work_root=str(work_root))
    out = text_of(nb)
    # excerpts read from lab/runtime/train.py
    assert "class SpotNotice" in out and "dist.init_process_group(backend" in out and "def peer_lost" in out
    assert "LAB_CHECKPOINT_DIR=/checkpoints" in out
    (run,) = run_dirs(work_root, "step2")
    assert (run / "my_train.py").is_file()
    assert "Drill PASSED" in out
    assert "eviction of node-2 (notice)" in out
    # the script's own lines: a save on SIGTERM, and workers resuming from a checkpoint
    assert "(SIGTERM)" in out and "resumed from step" in out
    assert "no process of this run is left" in out
    assert_nothing_left(work_root)


@pytest.mark.timeout(600)
def test_step3_trains_the_demo_job_on_three_nodes_and_plots_the_loss(work_root):
    nb = execute("Step3_run_the_job", target="local", work_root=str(work_root), steps=150)
    out = text_of(nb)
    assert "final step: 150 of 150  (finished)" in out
    assert "node exit codes: {'node-0': 0, 'node-1': 0, 'node-2': 0}" in out
    assert len(pngs(nb)) == 1
    (run,) = run_dirs(work_root, "step3")
    assert (run / "loss.png").stat().st_size > 10_000
    assert "no process of this run is left" in out
    assert_nothing_left(work_root)


@pytest.mark.timeout(600)
def test_step4_evicts_a_node_silently_and_recovers(work_root):
    nb = execute("Step4_evict_and_recover", target="local", work_root=str(work_root))
    out = text_of(nb)
    assert "Drill PASSED" in out
    assert "final step: 300 of 300  (finished)" in out
    assert "eviction of node-2 (silent)" in out and "recovery:" in out
    assert len(pngs(nb)) == 1
    (run,) = run_dirs(work_root, "step4")
    assert (run / "timeline.png").is_file() and (run / "report.json").is_file()
    assert "no process of this run is left" in out
    assert_nothing_left(work_root)


@pytest.mark.timeout(300)
def test_step5_stops_what_is_left_and_removes_the_work_directories(work_root):
    """A run cut short leaves its etcd behind: Step 5 stops it and removes every run."""
    from lab.local.etcd import EtcdServer

    cut_short = work_root / "step4-20000101-000000-abcdef"
    (cut_short / "nodes").mkdir(parents=True)  # what a local run makes before its etcd
    (cut_short / "events.jsonl").write_text("")
    etcd = EtcdServer(cut_short).start()
    try:
        nb = execute("Step5_teardown", target="local", work_root=str(work_root))
        etcd.proc.wait(10)  # stopped by the notebook; collected here, its parent
    finally:
        if etcd.proc.poll() is None:
            etcd.proc.kill()
            etcd.proc.wait()
    out = text_of(nb)
    assert f"process {etcd.proc.pid} (the rendezvous server (etcd, --data-dir" in out
    assert f"directory {cut_short} (the local run's work directory)" in out
    assert not work_root.exists()  # every run removed, and the emptied root too
    assert_nothing_left(work_root)


# ------------------------------------------------------------------ a cloud target
def _missing_for_aks() -> list:
    from lab.stacks.automation import stack_prerequisites
    from lab.stacks.prerequisites import problems

    return problems(stack_prerequisites("aks", "aks-dev"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["Step0_environment", "Step1_provision"])
def test_a_cloud_target_stops_naming_what_is_missing(name):
    missing = _missing_for_aks()
    if not missing:
        pytest.skip("this machine has every prerequisite of aks-dev: nothing is missing")
    with pytest.raises(CellExecutionError) as failed:
        execute(name, target="aks-dev")
    message = str(failed.value)
    assert "MissingPrerequisite" in message
    for item in missing:  # every one, each with its fix
        assert f"{item.name}: {item.found} (fix: {item.fix})" in message


def _kubernetes_api_on_the_example_port() -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", 6443)) == 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["Step3_run_the_job", "Step4_evict_and_recover"])
def test_the_byo_target_renders_the_job_then_stops_at_the_unreachable_cluster(name, work_root):
    """stacks/Pulumi.byo.yaml points at an example kubeconfig (127.0.0.1:6443) with nothing
    behind it: the job is rendered and checked offline, and the first call to the cluster fails."""
    if _kubernetes_api_on_the_example_port():
        pytest.skip("something listens on 127.0.0.1:6443: the byo example would reach a real cluster")
    with pytest.raises(CellExecutionError) as failed:
        execute(name, target="byo", work_root=str(work_root))
    assert "no Kubernetes API server reachable" in str(failed.value)


def test_the_committed_notebooks_are_clean():
    """Outputs cleared, the parameters cell first, and the project's kernel named."""
    for name in ORDER:
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.kernelspec.name == "python3"
        assert set(defaults(parameters_cell(nb))) >= {"target"}
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{name}: outputs not cleared"


def test_the_readme_names_every_notebook():
    readme = (NOTEBOOKS / "README.md").read_text()
    assert all(f"{name}.ipynb" in readme for name in ORDER)

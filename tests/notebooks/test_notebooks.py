"""The lab notebooks, executed end to end with nbclient in a kernel of this interpreter.

Local target: each notebook runs with its parameters cell replaced (target "local", a work
root of this test module's own under runs/notebooks/), and its outputs must show that the
work happened: torch 2.13.0 found, the plan and its cost chart, the drills passed with their
plots. After each one no process of the lab may be left, and after Step 5 the work
directories are gone.

Cloud target: a stack that cannot be reached from here stops with an error that names what is
missing; the cloud path itself (Step 3 submits the job and leaves it training, Step 4 evicts a
node of that same job, Step 5 lists what it would tear down) runs in sequence against a
Kubernetes API server on loopback (tests/cluster/fake_kube.py) with a simulated job on it, and
each command line the notebooks run is checked as printed.

The committed notebooks hold the outputs of a successful local run (`make notebooks`): checked
here without running them.
"""

from __future__ import annotations

import ast
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

import tests.cluster.test_drill as cluster_drill
from lab.notebooks.outputs import META_KEY, code_digest
from lab.notebooks.outputs import ORDER as STORED_ORDER
from lab.notebooks.shared import MIN_CLOUD_TRAINING_S, submit_args
from lab.program.stack_files import read_stack_config
from tests.cluster.fake_kube import FakeKube
from tests.conftest import node_log_tails
from tests.patience import within

pytestmark = pytest.mark.processes  # every notebook runs in a kernel of its own

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
ORDER = list(STORED_ORDER)  # the order `make notebooks` runs them in
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


def run_notebook(name: str, **params: object) -> tuple[nbformat.NotebookNode, CellExecutionError | None]:
    """Run notebook `name` from the project root with `params` replacing its defaults: the
    executed notebook (with the outputs of every cell that ran) and the failed cell's error."""
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
    # nbclient hands SIGINT and SIGTERM to its event loop while the kernel runs, and afterwards
    # sets them to Python's defaults, not to what they were: give this process its own back.
    held = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        client.execute()
    except CellExecutionError as exc:
        tails = node_log_tails(Path(str(values.get("work_root", ""))))
        if not tails:
            return nb, exc
        # The nodes' logs first, the cell's error last: a report cut to its end keeps the cause.
        return nb, CellExecutionError(f"{tails}\n{exc.traceback}", exc.ename, exc.evalue)
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
    return nb, None


def execute(name: str, **params: object) -> nbformat.NotebookNode:
    """The notebook run as by run_notebook; CellExecutionError raised on a failed cell."""
    nb, failed = run_notebook(name, **params)
    if failed is not None:
        raise failed
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


def pngs(cells: list[nbformat.NotebookNode]) -> list[str]:
    return [
        out.data["image/png"]
        for cell in cells
        for out in cell.get("outputs", [])
        if out.output_type in ("display_data", "execute_result") and "image/png" in out.data
    ]


def plot_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    """The code cells tagged "plot": each draws one figure."""
    return [c for c in nb.cells if c.cell_type == "code" and "plot" in c.metadata.get("tags", [])]


def commands(nb: nbformat.NotebookNode) -> list[str]:
    """The `elastic-lab` command lines the notebook printed before running them."""
    return [line[2:] for line in text_of(nb).splitlines() if line.startswith("$ elastic-lab ")]


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
    deadline = time.monotonic() + within(10)
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
def test_step1_shows_the_offline_plan_and_its_cost_as_a_chart():
    nb = execute("Step1_provision", target="local")
    out = text_of(nb)
    assert commands(nb) == ["elastic-lab plan --stack aks-dev", "elastic-lab plan --stack aks-dev --json"]
    assert "Plan of stack 'aks-dev' (cloud: aks)" in out
    assert "azure-native:containerservice:AgentPool aks-gpu-spot" in out
    assert "0 error(s)" in out
    assert "idle (GPU pool at zero):" in out and "spot saves about" in out
    (chart,) = plot_cells(nb)
    assert "cost_chart(" in chart.source
    (png,) = pngs([chart])
    assert len(png) > 10_000  # base64 of a PNG with bars in it, not an empty figure
    assert pngs(nb.cells) == [png]


@pytest.mark.timeout(600)
@pytest.mark.long
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
    (plot,) = plot_cells(nb)
    assert len(pngs([plot])) == 1 and len(pngs(nb.cells)) == 1
    (run,) = run_dirs(work_root, "step3")
    assert (run / "loss.png").stat().st_size > 10_000
    assert "no process of this run is left" in out
    assert_nothing_left(work_root)


@pytest.mark.timeout(600)
@pytest.mark.long
def test_step4_evicts_a_node_silently_and_recovers(work_root):
    nb = execute("Step4_evict_and_recover", target="local", work_root=str(work_root))
    out = text_of(nb)
    assert "Drill PASSED" in out
    assert "final step: 300 of 300  (finished)" in out
    assert "eviction of node-2 (silent)" in out and "recovery:" in out
    (plot,) = plot_cells(nb)
    assert len(pngs([plot])) == 1 and len(pngs(nb.cells)) == 1
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
        etcd.proc.wait(within(10))  # stopped by the notebook; collected here, its parent
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


# The cloud job of Steps 3 and 4, as their parameters cells set it.
JOB = defaults(parameters_cell(nbformat.read(NOTEBOOKS / "Step3_run_the_job.ipynb", as_version=4)))
CLOUD_ARGS = f"-- --steps {JOB['cloud_steps']} --step-time {JOB['cloud_step_time']:g}"


def test_steps_3_and_4_name_one_job_that_trains_long_enough_to_be_evicted():
    step4 = defaults(parameters_cell(nbformat.read(NOTEBOOKS / "Step4_evict_and_recover.ipynb", as_version=4)))
    assert JOB["job_name"] == step4["job_name"]
    assert JOB["image"] is None  # the stack's trainerImage, never a name of our own
    assert JOB["cloud_steps"] * JOB["cloud_step_time"] >= MIN_CLOUD_TRAINING_S
    submit_args("aks-dev", JOB["job_name"], steps=JOB["cloud_steps"], step_time=JOB["cloud_step_time"])  # accepted


@pytest.mark.timeout(300)
def test_the_byo_target_renders_the_job_then_stops_at_the_unreachable_cluster(work_root):
    """stacks/Pulumi.byo.yaml points at an example kubeconfig (127.0.0.1:6443) with nothing
    behind it: the job is rendered and checked offline, and the first call to the cluster fails."""
    if _kubernetes_api_on_the_example_port():
        pytest.skip("something listens on 127.0.0.1:6443: the byo example would reach a real cluster")
    nb, failed = run_notebook("Step3_run_the_job", target="byo", work_root=str(work_root))
    assert failed is not None and "no Kubernetes API server reachable" in str(failed)
    submit = f"elastic-lab submit --stack byo --name {JOB['job_name']} --replace"
    assert commands(nb) == [f"{submit} --dry-run {CLOUD_ARGS}", f"{submit} {CLOUD_ARGS}"]
    out = text_of(nb)
    assert f"PyTorchJob/{JOB['job_name']}" in out
    assert f"runs  python -m lab.runtime.launch -m lab.runtime.train {CLOUD_ARGS[3:]}" in out


@pytest.mark.timeout(300)
def test_step4_on_the_byo_target_stops_at_the_unreachable_cluster_before_any_drill(work_root):
    if _kubernetes_api_on_the_example_port():
        pytest.skip("something listens on 127.0.0.1:6443: the byo example would reach a real cluster")
    nb, failed = run_notebook("Step4_evict_and_recover", target="byo", work_root=str(work_root))
    assert failed is not None and "no Kubernetes API server reachable" in str(failed)
    assert "(Step 3 submits it)" in str(failed)
    assert commands(nb) == [f"elastic-lab status --stack byo {JOB['job_name']} --output json"]


@pytest.mark.timeout(300)
def test_step3_on_a_cloud_stack_without_its_image_stops_before_anything(work_root):
    config, _ = read_stack_config("aks-dev")
    if config.get("elastic-spot-lab:trainerImage"):
        pytest.skip("stacks/Pulumi.aks-dev.yaml has a trainerImage: the job would be submitted with it")
    nb, failed = run_notebook("Step3_run_the_job", target="aks-dev", work_root=str(work_root))
    assert failed is not None and failed.ename == "MissingPrerequisite"
    assert "stack 'aks-dev' has no trainerImage yet" in str(failed)
    assert "`elastic-lab image --stack aks-dev`" in str(failed)
    assert commands(nb) == []  # nothing ran, no other image was tried


@pytest.fixture
def api_server():
    with FakeKube() as server:
        yield server


@pytest.mark.timeout(600)
def test_step3_submits_to_a_cloud_stack_and_a_second_run_replaces_the_job(api_server, tmp_path, work_root):
    """aks-dev's job, created through a kubeconfig of a loopback API server: the image given, the
    job long enough. The job of an earlier run is there: the notebook replaces it rather than
    failing on its name. (A first run, with no job yet: the cloud path's test below.)"""
    kubeconfig = str(api_server.kubeconfig(tmp_path))
    image = "eslacr.azurecr.io/elastic-spot-lab/trainer:abc123"
    earlier = {"image": "eslacr.azurecr.io/elastic-spot-lab/trainer:earlier", "name": "pytorch"}
    template = {"spec": {"containers": [earlier]}}
    api_server.put(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "elastic-demo", "namespace": "training"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3, "template": template}}},
        }
    )
    params = {"target": "aks-dev", "work_root": str(work_root), "image": image, "kubeconfig": kubeconfig}
    submit = (
        f"elastic-lab submit --stack aks-dev --name elastic-demo --replace --image {image} --kubeconfig {kubeconfig}"
    )
    nb = execute("Step3_run_the_job", **params, watch_s=1)
    assert commands(nb) == [f"{submit} --dry-run {CLOUD_ARGS}", f"{submit} {CLOUD_ARGS}"]
    out = text_of(nb)
    assert "created PyTorchJob/elastic-demo in namespace training" in out
    assert "after 1 s not every worker of elastic-demo runs" in out  # no node here: it waits for Step 4
    deletes = [path for method, path, *_ in api_server.requests if method == "DELETE" and "pytorchjobs" in path]
    assert len(deletes) == 1  # the earlier run's job, replaced
    job = api_server.get("PyTorchJob", "elastic-demo", "training")
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["image"] == image
    assert worker["args"][-4:] == ["--steps", str(JOB["cloud_steps"]), "--step-time", f"{JOB['cloud_step_time']:g}"]


@pytest.mark.timeout(900)
@pytest.mark.long
def test_the_cloud_path_in_sequence_submits_evicts_a_node_of_that_job_and_lists_its_teardown(
    api_server, tmp_path, work_root
):
    """Steps 3, 4 and 5 on the byo stack, one after the other as a reader runs them, against a
    loopback API server where a simulated operator runs job `demo` on three GPU nodes (the
    cluster drill's own test job): Step 3 submits it and leaves it training, Step 4 evicts a
    node of that same job and follows it to its end, Step 5 lists it for the teardown."""
    kubeconfig = str(api_server.kubeconfig(tmp_path))
    job = cluster_drill.SimulatedJob(api_server)
    threading.Thread(target=job.run, daemon=True).start()
    common = {"target": "byo", "work_root": str(work_root), "kubeconfig": kubeconfig}
    try:
        step3 = execute("Step3_run_the_job", **common, job_name="demo", watch_s=120)
        submit = f"elastic-lab submit --stack byo --name demo --replace --kubeconfig {kubeconfig}"
        assert commands(step3) == [f"{submit} --dry-run {CLOUD_ARGS}", f"{submit} {CLOUD_ARGS}"]
        assert "job demo: every worker runs. Next, while it trains: Step4_evict_and_recover.ipynb" in text_of(step3)

        step4 = execute(
            "Step4_evict_and_recover", **common, job_name="demo", evict_at_step=20, deadline_s=180, dry_run=False
        )
    finally:
        job.stop.set()
    (run,) = run_dirs(work_root, "step4")
    drill = f"elastic-lab drill --stack byo --job demo --evict-at-step 20 --deadline 180 --kubeconfig {kubeconfig}"
    assert commands(step4) == [
        f"elastic-lab status --stack byo demo --output json --kubeconfig {kubeconfig}",
        f"{drill} --dry-run",
        f"{drill} --workdir {run.relative_to(ROOT)}",
    ]
    out = text_of(step4)
    assert "job training/demo: Pending, 3 of 3 workers running" in out
    assert "kubernetes: read_node(gpu-2)" in out  # the dry run: the node of the highest-index worker
    assert "Drill PASSED" in out and "eviction of demo-worker-2" in out
    assert len(pngs(step4.cells)) == 1 and (run / "timeline.png").is_file() and (run / "report.json").is_file()
    assert [m for m, path, *_ in api_server.requests if m == "POST" and "pytorchjobs" in path] == ["POST"]

    step5 = execute("Step5_teardown", **common)
    assert commands(step5) == [f"elastic-lab teardown --stack byo --dry-run --kubeconfig {kubeconfig}"]
    assert "- PyTorchJob demo (a training job)" in text_of(step5)
    assert api_server.get("PyTorchJob", "demo", "training") is not None  # a dry run deletes nothing
    assert not work_root.exists()  # the local work directories removed


# ------------------------------------------------------------------ the committed notebooks
# What a secret or a machine's own path looks like in a stored output.
LEAKS = {
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "AWS access key id": re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    "kubeconfig credentials": re.compile(r"(client-key-data|client-certificate-data|token):\s*\S{20,}"),
    "password or secret value": re.compile(r"(?i)(password|passphrase|secret|api[_-]?key)\s*[=:]\s*[^\s\[(<]{8,}"),
    "a home directory": re.compile(r"(^|[\s'\"(=:])(/home/[^/\s]+|/Users/[^/\s]+|/root)(/|\b)"),
}
# Markers of a successful local run in each notebook's outputs.
SUCCEEDED = {
    "Step0_environment": "Everything target 'local' needs is here.",
    "Step1_provision": "spot saves about",
    "Step2_make_it_elastic": "Drill PASSED",
    "Step3_run_the_job": "(finished)",
    "Step4_evict_and_recover": "Drill PASSED",
    "Step5_teardown": "The lab is over.",
}


def test_the_committed_notebooks_hold_the_outputs_of_a_successful_local_run():
    """`make notebooks` stores them: every code cell ran, in order, none failed, each plot cell
    drew its figure, from the code as it is now; no secret and no path of the machine it ran on."""
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == ORDER  # every notebook is stored
    total = 0
    for name in ORDER:
        path = NOTEBOOKS / f"{name}.ipynb"
        total += path.stat().st_size
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.kernelspec.name == "python3"
        assert defaults(parameters_cell(nb))["target"] == "local"
        stored = nb.metadata.get(META_KEY, {})
        assert stored.get("code_sha256") == code_digest(nb), f"{name}: its code changed since: run `make notebooks`"
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), f"{name}: not run in order"
        for cell in code:
            assert "execution" not in cell.metadata, f"{name}: execution timing stored"
            for out in cell.outputs:
                assert out.output_type != "error", f"{name}: a cell failed: {out.ename}: {out.evalue}"
        out = text_of(nb)
        assert SUCCEEDED[name] in out, f"{name}: no sign of a successful run"
        assert str(ROOT) not in out, f"{name}: the project's absolute path is stored"
        for what, pattern in LEAKS.items():
            found = pattern.search(out)
            assert found is None, f"{name}: {what} in its outputs: {found.group(0) if found else ''}"
        for plot in plot_cells(nb):
            assert len(pngs([plot])) == 1, f"{name}: a plot cell without its figure"
    drawn = {name for name in ORDER if plot_cells(nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4))}
    assert drawn == {"Step1_provision", "Step3_run_the_job", "Step4_evict_and_recover"}
    assert total < 500_000, f"the notebooks take {total / 1000:.0f} kB: lower the plots' dpi"


def test_the_leak_patterns_find_what_they_look_for():
    leaks = {
        "private key": "-----BEGIN RSA PRIVATE KEY-----",
        "AWS access key id": "key AKIAABCDEFGHIJKLMNOP here",
        "kubeconfig credentials": "client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVkt",
        "password or secret value": "PULUMI_CONFIG_PASSPHRASE=hunter2hunter2",
        "a home directory": "python at /home/ada/src/x/.venv/bin/python",
    }
    assert leaks.keys() == LEAKS.keys()
    assert [what for what, text in leaks.items() if not LEAKS[what].search(text)] == []
    clean = "kubeconfig [secret]  (secret)\npassphrase: (not set)\nruns/notebooks/step4-x\n~/x\n/roots/y"
    assert [what for what, pattern in LEAKS.items() if pattern.search(clean)] == []


def test_the_readme_names_every_notebook():
    readme = (NOTEBOOKS / "README.md").read_text()
    assert all(f"{name}.ipynb" in readme for name in ORDER)

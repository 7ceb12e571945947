"""What the lab notebooks share (lab.notebooks.shared) and how their outputs are stored
(lab.notebooks.outputs): the target, work directories, the command lines they run (read
back by the CLI's own parser, and its dry run), the processes check, the plots."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from matplotlib.figure import Figure

from lab.cli import build_parser
from lab.cli import main as cli_main
from lab.cli.drill_cluster import local_only_given
from lab.notebooks import outputs as notebook_outputs
from lab.notebooks import shared as notebook
from lab.notebooks.shared import (
    LOCAL,
    RUN_NAME,
    CliRun,
    CommandFailed,
    MissingPrerequisite,
    ProcessesLeft,
    Target,
    check_image,
    check_nothing_left,
    choose_target,
    cli_args,
    cluster_drill_args,
    cost_chart,
    elastic_lab,
    new_run_dir,
    processes_of,
    run_dirs,
    runs_dir,
    show_figure,
    shown,
    stop_if_missing,
    submit_args,
)
from lab.program.stack_files import StackNotFound, list_stacks, read_stack_config
from lab.vocab.layout import ROOT
from lab.vocab.problems import InvalidInput
from lab.vocab.versions import PROJECT_IMAGE, PROJECT_IMAGE_TAG

PNG = b"\x89PNG\r\n\x1a\n"
AKS = Target("aks-dev", "aks")
REGISTRY_IMAGE = "eslacr.azurecr.io/elastic-spot-lab/trainer:abc123"


# ------------------------------------------------------------------ the target
def test_the_local_target_and_a_stack_are_chosen_by_name():
    assert choose_target(LOCAL) == Target(LOCAL, None) and choose_target(LOCAL).local
    for stack in list_stacks():
        config, _ = read_stack_config(stack)
        chosen = choose_target(stack)
        assert not chosen.local
        assert chosen.cloud == config["elastic-spot-lab:cloud"]
        assert chosen.trainer_image == (config.get("elastic-spot-lab:trainerImage") or None)
        assert f"stack {stack!r} (cloud {chosen.cloud}" in chosen.describe()


@pytest.mark.parametrize(
    ("name", "error", "said"),
    [
        pytest.param("aks-deb", StackNotFound, "stacks here: aks-dev", id="a typo names the stacks there are"),
        pytest.param("", InvalidInput, "target='' is invalid", id="empty"),
        pytest.param(None, InvalidInput, "target=None is invalid", id="not a string"),
    ],
)
def test_an_unknown_target_is_refused_naming_what_is_expected(name, error, said):
    with pytest.raises(error) as refused:
        choose_target(name)
    assert said in str(refused.value)


@pytest.mark.parametrize(
    ("target", "image", "expected"),
    [
        pytest.param(AKS, REGISTRY_IMAGE, REGISTRY_IMAGE, id="given"),
        pytest.param(Target("aks-dev", "aks", REGISTRY_IMAGE), None, REGISTRY_IMAGE, id="the stack's trainerImage"),
        pytest.param(Target("eks-dev", "eks", REGISTRY_IMAGE), "other:1", "other:1", id="given wins"),
        pytest.param(Target("byo", "byo"), None, f"{PROJECT_IMAGE}:{PROJECT_IMAGE_TAG}", id="byo: a local build"),
    ],
)
def test_the_job_image_is_the_given_one_else_the_stacks(target, image, expected):
    assert check_image(target, image) == expected


@pytest.mark.parametrize(
    ("image", "said"),
    [
        pytest.param(None, "stack 'aks-dev' has no trainerImage yet", id="none"),
        pytest.param(f"{PROJECT_IMAGE}:{PROJECT_IMAGE_TAG}", "the Dockerfile's name", id="the placeholder"),
        pytest.param(PROJECT_IMAGE, "the Dockerfile's name", id="the placeholder, no tag"),
        pytest.param(f"{PROJECT_IMAGE}@sha256:{'0' * 64}", "the Dockerfile's name", id="the placeholder, a digest"),
    ],
)
def test_a_cloud_job_without_an_image_of_the_stack_stops_with_the_fix(image, said):
    with pytest.raises(MissingPrerequisite) as stopped:
        check_image(AKS, image)
    assert said in str(stopped.value) and "`elastic-lab image --stack aks-dev`" in str(stopped.value)


def test_missing_prerequisites_are_raised_together():
    stop_if_missing([], "nothing")  # all there: nothing raised
    assert notebook.missing_prerequisites(choose_target(LOCAL)) == []
    with pytest.raises(MissingPrerequisite) as stopped:
        stop_if_missing(["a: absent (fix: get a)", "b: absent (fix: get b)"], "target 'x' cannot run here")
    assert str(stopped.value) == (
        "target 'x' cannot run here; missing:\n  - a: absent (fix: get a)\n  - b: absent (fix: get b)"
    )


# ------------------------------------------------------------------ paths and work directories
def test_paths_are_shown_relative_to_the_project_or_the_home_directory(tmp_path, monkeypatch):
    home = tmp_path / "home" / "ada"
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: home))
    assert shown(ROOT) == "."
    assert shown(ROOT / "runs" / "notebooks") == "runs/notebooks"
    assert shown("runs/notebooks") == "runs/notebooks"  # relative: as given
    assert shown(home) == "~" and shown(home / "elsewhere" / "x") == "~/elsewhere/x"
    assert shown(tmp_path / "x") == str(tmp_path / "x")  # neither: as it is
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: ROOT.parent))
    assert shown(ROOT / "runs") == "runs"  # a project inside the home directory: relative to the project
    assert cli_args(["drill", ROOT / "runs" / "x", 10, 0.5]) == ["drill", "runs/x", "10", "0.5"]


def test_each_run_gets_a_directory_of_its_own(tmp_path, capsys):
    assert runs_dir("runs/notebooks") == ROOT / "runs" / "notebooks"
    assert runs_dir(tmp_path) == tmp_path
    first, second = new_run_dir(tmp_path, 3), new_run_dir(tmp_path, 3)
    assert first != second and first.is_dir() and second.is_dir()
    assert RUN_NAME.fullmatch(first.name) and first.name.startswith("step3-")
    assert f"work directory: {shown(first)}" in capsys.readouterr().out
    (tmp_path / "notes").mkdir()  # not a run of the notebooks
    (tmp_path / "step3-file").write_text("")
    assert run_dirs(tmp_path) == sorted([first, second])
    assert run_dirs(tmp_path / "absent") == []
    with pytest.raises(ValueError):
        new_run_dir(tmp_path, 10)


# ------------------------------------------------------------------ the command lines of the cloud path
def test_submit_replaces_a_job_of_its_name_and_runs_the_stacks_image():
    argv = submit_args("aks-dev", "elastic-demo", steps=15000, step_time=0.1)
    assert argv == [
        *("submit", "--stack", "aks-dev", "--name", "elastic-demo", "--replace"),
        *("--", "--steps", "15000", "--step-time", "0.1"),
    ]
    args = build_parser().parse_args(argv)
    assert args.func.__name__ == "submit_main"
    assert (args.stack, args.name, args.replace, args.dry_run) == ("aks-dev", "elastic-demo", True, False)
    assert args.image is None  # the stack's trainerImage
    assert args.script_args == ["--steps", "15000", "--step-time", "0.1"]

    given = build_parser().parse_args(
        submit_args("byo", "j", steps=6000, step_time=0.1, image="r/i:1", kubeconfig="k.yaml", dry_run=True)
    )
    assert (given.image, given.kubeconfig, given.dry_run, given.replace) == ("r/i:1", "k.yaml", True, True)


def test_a_cloud_job_too_short_to_evict_is_refused_with_every_problem():
    with pytest.raises(InvalidInput) as short:
        submit_args("aks-dev", "elastic-demo", steps=400, step_time=0.05)
    assert "steps * step_time=20.0 is invalid: expected >= 600 s of training" in str(short.value)
    with pytest.raises(InvalidInput) as bad:
        submit_args("aks-dev", "elastic-demo", steps=0, step_time=-1)
    assert "steps=0" in str(bad.value) and "step_time=-1" in str(bad.value)


def test_the_submit_dry_run_renders_the_notebooks_job_as_the_cluster_would_run_it(capsys):
    """The CLI's own dry run of the argv Step 3 runs: the job's name, its length, its image."""
    assert cli_main(submit_args("byo", "elastic-demo", steps=15000, step_time=0.1, dry_run=True)) == 0
    manifest = capsys.readouterr().out
    assert manifest.startswith("# elastic-lab submit --stack byo: job elastic-demo on byo")
    import yaml

    (job,) = [o for o in yaml.safe_load_all(manifest) if o and o["kind"] == "PyTorchJob"]
    assert job["metadata"]["name"] == "elastic-demo"
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["args"][-4:] == ["--steps", "15000", "--step-time", "0.1"]
    assert worker["image"] == f"{PROJECT_IMAGE}:{PROJECT_IMAGE_TAG}"  # byo: the local build's name


def test_the_cluster_drill_attaches_to_the_named_job_and_takes_no_local_option(tmp_path):
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    drill_parser = commands.choices["drill"]
    argv = cluster_drill_args(
        "aks-dev", "elastic-demo", evict_at_step=60, deadline_s=3600, workdir=ROOT / "runs" / "x", dry_run=True
    )
    assert cli_args(argv) == [
        *("drill", "--stack", "aks-dev", "--job", "elastic-demo", "--evict-at-step", "60", "--deadline", "3600"),
        *("--workdir", "runs/x", "--dry-run"),
    ]
    args = parser.parse_args(cli_args(argv))
    assert (args.stack, args.job, args.evict_at_step, args.deadline, args.dry_run) == (
        "aks-dev",
        "elastic-demo",
        60,
        3600.0,
        True,
    )
    assert args.workdir == "runs/x" and args.image is None and not args.replace
    assert local_only_given(drill_parser, args) == []  # the cluster drill refuses local-only options
    with_kubeconfig = parser.parse_args(
        cli_args(cluster_drill_args("byo", "j", evict_at_step=1, deadline_s=60, kubeconfig="k.yaml"))
    )
    assert with_kubeconfig.kubeconfig == "k.yaml" and with_kubeconfig.workdir is None


# ------------------------------------------------------------------ running the command line
@pytest.mark.processes
def test_elastic_lab_prints_the_command_then_its_output_and_raises_on_failure(capsys):
    run = elastic_lab("plan", "--stack", "no-such-stack", check=False)
    out = capsys.readouterr().out
    assert out.startswith("$ elastic-lab plan --stack no-such-stack\n")
    assert run.returncode == 2 and "stack 'no-such-stack' has no config file" in run.output
    assert run.output in out  # shown as it came
    assert repr(run) == "CliRun('elastic-lab plan --stack no-such-stack', returncode=2)"
    with pytest.raises(CommandFailed) as failed:
        elastic_lab("plan", "--stack", "no-such-stack")
    assert "`elastic-lab plan --stack no-such-stack` exited with 2; its last lines:" in str(failed.value)
    assert "has no config file" in str(failed.value)


@pytest.mark.processes
def test_a_quiet_run_keeps_its_output_apart(capsys):
    run = elastic_lab("plan", "--stack", "byo", "--json", quiet=True)
    out = capsys.readouterr().out
    assert out == "$ elastic-lab plan --stack byo --json\n"  # the command line only
    assert json.loads(run.output)["stack"] == "byo"


def test_a_failure_names_the_command_and_its_last_lines():
    lines = "".join(f"line {i}\n" for i in range(30))
    assert CliRun(("x",), 1, lines).tail(3) == "line 27\nline 28\nline 29"
    assert CliRun(("x",), 1, "out\n", errors="the error\n").tail() == "the error"
    assert str(CommandFailed(CliRun(("x", "y z"), 3, ""))) == "`elastic-lab x 'y z'` exited with 3 and printed nothing"
    quiet = CommandFailed(CliRun(("status",), 1, "", errors="elastic-lab status: no PyTorchJob training/demo\n"))
    assert (
        str(quiet)
        == "`elastic-lab status` exited with 1; its last lines:\nelastic-lab status: no PyTorchJob training/demo"
    )


# ------------------------------------------------------------------ processes of a local run
@pytest.mark.processes
def test_a_process_working_in_a_run_is_found_and_named(workdir, capsys):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=workdir)
    try:
        assert [p.pid for p in processes_of(workdir)] == [sleeper.pid]
        with pytest.raises(ProcessesLeft) as left:
            check_nothing_left(workdir, then="Step 5")
        assert str(sleeper.pid) in str(left.value)
    finally:
        sleeper.kill()
        sleeper.wait()
    check_nothing_left(workdir, then="Step5_teardown.ipynb")
    assert capsys.readouterr().out == "no process of this run is left. Next: Step5_teardown.ipynb\n"


# ------------------------------------------------------------------ plots
def test_a_figure_is_shown_as_a_png_and_kept_where_asked(tmp_path, capsys):
    fig = Figure(figsize=(4, 3))
    fig.subplots().plot([0, 1], [1, 0])
    png = show_figure(fig, tmp_path / "plot.png")
    assert png.startswith(PNG) and (tmp_path / "plot.png").read_bytes() == png
    assert "Image" in capsys.readouterr().out  # outside a notebook, IPython prints what it would show
    notebook.show_png(tmp_path / "plot.png")
    assert "Image" in capsys.readouterr().out


def _pool(name: str, size: str, spot: bool, nodes: tuple[int, int], costs: tuple[float | None, ...]) -> dict:
    """A pool as `elastic-lab plan --json` prices it."""
    at = dict(zip(("at_min", "at_max", "at_max_on_demand"), costs, strict=True))
    return {"pool": name, "vm_size": size, "spot": spot, "min_nodes": nodes[0], "max_nodes": nodes[1], **at}


# The EKS stack's estimate, with a pool the price table does not know.
COST = {
    "currency": "USD",
    "control_plane": {"label": "EKS control plane + 1 NAT gateway", "price": 0.145},
    "pools": [
        _pool("cpu", "m6i.xlarge", False, (1, 2), (0.192, 0.384, 0.384)),
        _pool("gpu-spot", "g5.xlarge", True, (0, 3), (0.0, 1.26, 3.018)),
        _pool("odd", "x9", False, (0, 1), (None, None, None)),
    ],
}


def test_the_cost_chart_stacks_each_pool_on_the_fixed_price_per_case():
    fig = cost_chart(COST, "stack 'eks-dev'")
    (ax,) = fig.axes
    layers = ax.containers
    assert [len(bars) for bars in layers] == [3, 3, 3, 3]  # idle, full on spot, full on-demand
    heights = [[round(bar.get_height(), 3) for bar in bars] for bars in layers]
    assert heights == [[0.145] * 3, [0.192, 0.384, 0.384], [0.0, 1.26, 3.018], [0.0, 0.0, 0.0]]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [
        "EKS control plane + 1 NAT gateway",
        "pool cpu: 1..2 x m6i.xlarge (on-demand)",
        "pool gpu-spot: 0..3 x g5.xlarge (spot)",
        "pool odd: 0..1 x x9 (on-demand), no price: not counted",
    ]
    totals = [t.get_text() for t in ax.texts]
    assert totals == ["0.34", "1.79", "3.55"]  # the plan's hourly_min, hourly_max, hourly_max_on_demand
    assert ax.get_ylabel() == "USD per hour" and ax.get_title() == "stack 'eks-dev'"


def test_the_cost_chart_of_a_real_plan_adds_up_to_its_totals(capsys):
    assert cli_main(["plan", "--stack", "aks-dev", "--json"]) == 0
    cost = json.loads(capsys.readouterr().out)["cost"]
    fig = cost_chart(cost, "aks-dev")
    totals = [float(t.get_text()) for t in fig.axes[0].texts]
    assert totals == [round(cost[k], 2) for k in ("hourly_min", "hourly_max", "hourly_max_on_demand")]
    assert show_figure(fig).startswith(PNG)


# ------------------------------------------------------------------ stored outputs
def test_stored_text_names_no_path_or_user_of_this_machine():
    root, home = Path("/home/ada/src/elastic-spot-lab"), Path("/home/ada")
    scrub = notebook_outputs.scrub_text
    text = (
        f"project root: {root}\npython at {root}/.venv/bin/python\n"
        f"cache in {home}/.cache/x\nworkdir /tmp/ada/x and /var/ada/y\n"
    )
    assert scrub(text, root, home, "ada") == (
        "project root: .\npython at .venv/bin/python\ncache in ~/.cache/x\nworkdir /tmp/<user>/x and /var/<user>/y\n"
    )
    assert scrub("an adapter in /srv/adam/", root, home, "ada") == "an adapter in /srv/adam/"  # the name only
    assert scrub("/ab/cd", Path("/"), Path("/"), "ab") == "/ab/cd"  # a name that short is left alone


KERNEL = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def _notebook(*sources: str) -> nbformat.NotebookNode:
    cells = [nbformat.v4.new_markdown_cell("# title")]
    cells += [nbformat.v4.new_code_cell(s) for s in sources]
    return nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": KERNEL})


def test_stored_notebooks_keep_outputs_without_timing_and_record_their_code():
    nb = _notebook("x = 1", "print(x)")
    nb.cells[2].metadata["execution"] = {"iopub.execute_input": "2026-01-01T00:00:00Z"}
    nb.cells[2].metadata["tags"] = ["plot"]
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"{ROOT}/runs/x\n")]
    stored = notebook_outputs.stored(nb, {"kernelspec": KERNEL})
    assert stored.cells[2].metadata == {"tags": ["plot"]}
    assert stored.cells[2].outputs[0].text == "runs/x\n"
    assert stored.metadata["kernelspec"] == KERNEL
    assert stored.metadata[notebook_outputs.META_KEY] == {
        "outputs": "target=local",
        "code_sha256": notebook_outputs.code_digest(nb),
    }
    nbformat.validate(stored)
    digest = notebook_outputs.code_digest
    assert digest(_notebook("x = 1", "print(x)")) == digest(nb)
    assert digest(_notebook("x = 2", "print(x)")) != digest(nb)
    changed_text = _notebook("x = 1", "print(x)")
    changed_text.cells[0].source = "# another title"
    assert digest(changed_text) == digest(nb)  # markdown is not code


def test_storing_outputs_is_refused_while_runs_of_the_notebooks_would_be_removed(tmp_path, monkeypatch, capsys):
    (tmp_path / "step4-20260101-000000-abcdef").mkdir()
    monkeypatch.setattr(notebook_outputs, "WORK_ROOT", str(tmp_path))
    ran = []
    monkeypatch.setattr(notebook_outputs, "execute", lambda path: ran.append(path))
    assert notebook_outputs.main([]) == 2
    assert "step4-20260101-000000-abcdef" in capsys.readouterr().err and ran == []

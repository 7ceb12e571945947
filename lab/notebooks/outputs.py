"""`make notebooks`: run the six lab notebooks on the local target, in order, and store their
outputs in them, so that a reader sees what a run prints and draws (on GitHub too) without
running anything.

The notebooks run as a reader would run them: from the project root, with the defaults of
their parameters cells (target "local", work root runs/notebooks), each cell given up to 10
minutes. Step 5 removes every work directory of the notebooks in that work root, so the run
is refused while one is there (a run of your own: run Step 5, or move it). A notebook is
written only when all six ran without an error; after a failure Step 5 still runs, so that
nothing is left behind.

What is stored is kept free of what would make every regeneration a noisy diff or name this
machine: no execution timing, the notebooks' own metadata (not the kernel's full
`language_info`), streams merged, and the project root, the home directory and this user's
name replaced in every text output (`<root>/x` becomes `x`, the notebooks' working directory;
the home directory `~`). The notebook's metadata records a digest of its code cells: the
tests check that the stored outputs are those of the code as it is.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from lab.notebooks.shared import run_dirs, shown
from lab.vocab.layout import ROOT

NOTEBOOKS = ROOT / "notebooks"
ORDER = (
    "Step0_environment",
    "Step1_provision",
    "Step2_make_it_elastic",
    "Step3_run_the_job",
    "Step4_evict_and_recover",
    "Step5_teardown",
)
WORK_ROOT = "runs/notebooks"  # the notebooks' default work root
CELL_TIMEOUT_S = 600
# The notebook metadata key under which the stored run is described.
META_KEY = "elastic_spot_lab"
STORED_TARGET = "local"


def code_digest(nb: Any) -> str:
    """sha256 of the notebook's code cells, in order: what the stored outputs came from."""
    h = hashlib.sha256()
    for cell in nb.cells:
        if cell.cell_type == "code":
            h.update(cell.source.encode())
            h.update(b"\0")
    return h.hexdigest()


def scrub_text(text: str, root: Path = ROOT, home: Path | None = None, user: str | None = None) -> str:
    """`text` without the machine's paths: the project root's paths relative (the notebooks
    run from it), the home directory as `~`, the user's name as `<user>`."""
    home = home if home is not None else Path.home()
    user = user if user is not None else getpass.getuser()
    for base, short in ((str(root), "."), (str(home), "~")):
        if len(base) <= 1:  # "/": nothing to take away
            continue
        text = text.replace(base + "/", "" if short == "." else short + "/")
        text = text.replace(base, short)
    if len(user) > 2:  # a short name would match inside ordinary words
        text = text.replace(f"/{user}/", "/<user>/")
    return text


def _scrub_output(out: Any, scrub: Any) -> None:
    if out.output_type == "stream":
        out.text = scrub(out.text)
    elif out.output_type in ("display_data", "execute_result"):
        for mime in list(out.data):
            if mime.startswith("text/"):
                out.data[mime] = scrub(out.data[mime])
    elif out.output_type == "error":
        out.evalue = scrub(out.evalue)
        out.traceback = [scrub(line) for line in out.traceback]


def stored(executed: Any, original_metadata: dict[str, Any], scrub: Any = scrub_text) -> Any:
    """The executed notebook as it is stored: cells' execution timing dropped, text outputs
    scrubbed, the notebook's metadata as it was plus the digest of the code that ran."""
    for cell in executed.cells:
        cell.metadata.pop("execution", None)
        for out in cell.get("outputs", []):
            _scrub_output(out, scrub)
    executed.metadata.clear()
    executed.metadata.update(original_metadata)
    executed.metadata[META_KEY] = {"outputs": f"target={STORED_TARGET}", "code_sha256": code_digest(executed)}
    return executed


def read(path: Path) -> Any:
    return nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]  # unannotated in nbformat


def execute(path: Path) -> Any:
    """Run the notebook at `path` from the project root with its own parameters; the executed
    notebook is returned (CellExecutionError on a failed cell)."""
    nb = read(path)
    NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT)}},
        record_timing=False,
        coalesce_streams=True,
    ).execute()
    return nb


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.notebooks.outputs", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    others = run_dirs(WORK_ROOT)
    if others:
        print(
            f"{shown(ROOT / WORK_ROOT)} holds {len(others)} work director{'y' if len(others) == 1 else 'ies'} "
            f"of the notebooks ({', '.join(d.name for d in others)}), which Step 5 would remove: run "
            "Step5_teardown.ipynb (or move them) first",
            file=sys.stderr,
        )
        return 2
    done: dict[str, Any] = {}
    for name in ORDER:
        path = NOTEBOOKS / f"{name}.ipynb"
        print(f"running {shown(path)} ...", flush=True)
        original = dict(read(path).metadata)
        try:
            done[name] = stored(execute(path), original)
        except CellExecutionError as exc:
            print(f"{name} failed; no notebook was written:\n{exc}", file=sys.stderr)
            if name != ORDER[-1]:
                print("running Step5_teardown.ipynb to stop and remove what the runs left ...", file=sys.stderr)
                try:
                    execute(NOTEBOOKS / f"{ORDER[-1]}.ipynb")
                except CellExecutionError as cleanup:
                    print(f"the clean-up failed too:\n{cleanup}", file=sys.stderr)
            return 1
    for name, nb in done.items():
        path = NOTEBOOKS / f"{name}.ipynb"
        nbformat.write(nb, path)  # type: ignore[no-untyped-call]  # unannotated in nbformat
        print(f"stored {shown(path)} ({path.stat().st_size / 1000:.0f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

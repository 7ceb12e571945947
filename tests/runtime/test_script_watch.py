"""A watched script's checkpoint files and end, recorded by its worker
(lab/runtime/script_watch.py), in a process of its own: the wrappers change torch there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.patience import within

pytestmark = pytest.mark.processes

SCRIPT = textwrap.dedent("""
    import io, os, sys
    import torch
    import torch.distributed.checkpoint as dcp
    from lab.runtime import script_watch
    script_watch.install()
    script_watch.install()  # once is enough: no wrapper of a wrapper
    from torch.distributed.checkpoint import save as saved_by_name  # imported after: the wrapper
    d = sys.argv[1]
    torch.save({"w": torch.ones(3)}, os.path.join(d, "a.pt"))
    with open(os.path.join(d, "b.pt"), "wb") as f:
        torch.save({"w": torch.ones(3)}, f)          # a file object that names its file
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(3)}, buffer)         # no file: nothing to record
    assert torch.load(os.path.join(d, "a.pt"))["w"].sum() == 3
    saved_by_name({"w": torch.ones(3)}, checkpoint_id=os.path.join(d, "step-4"))
    state = {"w": torch.zeros(3)}
    dcp.load(state, checkpoint_id=os.path.join(d, "step-4"))
    assert state["w"].sum() == 3                     # what the script asked for, done
    assert torch.save.__wrapped__ is not None
    import datetime
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{d}/rdzv", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=42))
    dist.destroy_process_group()
""")


def _events_of(tmp_path, source: str, name: str, rank: int) -> list[dict]:
    """The events a script of `source`, run as `name` by rank `rank` of node-<rank>, recorded."""
    events = tmp_path / "events.jsonl"
    env = {**os.environ, "LAB_EVENTS_FILE": str(events), "RANK": str(rank), "LAB_NODE": f"node-{rank}"}
    script = tmp_path / name
    script.write_text(source)
    subprocess.run([sys.executable, str(script), str(tmp_path)], env=env, check=True, timeout=within(120))
    return [json.loads(line) for line in events.read_text().splitlines()]


def test_the_files_a_script_saves_and_loads_are_recorded_as_it_sees_them(tmp_path):
    found = _events_of(tmp_path, SCRIPT, "watched.py", 1)
    *files, group = found
    said = [(e["event"], os.path.basename(e["path"]), e["api"], e["rank"], e["node"]) for e in files]
    assert said == [
        ("script_saved", "a.pt", "torch.save", 1, "node-1"),
        ("script_saved", "b.pt", "torch.save", 1, "node-1"),
        ("script_loaded", "a.pt", "torch.load", 1, "node-1"),
        ("script_saved", "step-4", "torch.distributed.checkpoint.save", 1, "node-1"),
        ("script_loaded", "step-4", "torch.distributed.checkpoint.load", 1, "node-1"),
    ]
    a = (tmp_path / "a.pt").stat()
    assert found[0]["bytes"] == a.st_size and found[0]["mtime"] == a.st_mtime
    assert found[3]["bytes"] > 0  # a folder: its files together
    # Where the script called each: its own line, not torch's.
    lines = SCRIPT.splitlines()
    assert [e["at"] for e in files] == [
        f"watched.py:{next(i for i, line in enumerate(lines, 1) if needle in line)}"
        for needle in ('"a.pt"))', "f)", '["w"].sum() == 3', "saved_by_name({", "dcp.load(")
    ]
    assert (group["event"], group["backend"], group["timeout_s"], group["at"]) == (
        "script_group",
        "gloo",
        42.0,
        f"watched.py:{next(i for i, line in enumerate(lines, 1) if 'dist.init_process_group(' in line)}",
    )


def test_nothing_is_recorded_outside_a_drill(tmp_path):
    """run_script installs the watch only where $LAB_WATCH_SCRIPT says so."""
    code = "from lab.runtime import script_watch; print(script_watch.watching())"
    env = {k: v for k, v in os.environ.items() if k != "LAB_WATCH_SCRIPT"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=within(60))
    assert out.stdout.strip() == "False"


def test_a_script_that_ends_its_process_itself_is_recorded_with_its_code(tmp_path):
    """os._exit from a thread (a notice's handler saving and leaving): the process ends there,
    before the script returns to the runner that records how it ended; recorded once."""
    events = tmp_path / "events.jsonl"
    script = tmp_path / "leaves.py"
    script.write_text(
        textwrap.dedent("""
            import os, threading
            from lab.runtime import script_watch
            script_watch.install()
            threading.Thread(target=lambda: os._exit(143)).start()
            threading.Event().wait(60)
        """)
    )
    env = {**os.environ, "LAB_EVENTS_FILE": str(events), "RANK": "0", "LAB_NODE": "node-0"}
    done = subprocess.run([sys.executable, str(script)], env=env, timeout=within(120))
    assert done.returncode == 143
    found = [json.loads(line) for line in events.read_text().splitlines()]
    assert [(e["event"], e["code"]) for e in found] == [("script_ended", 143)]


STEPS = textwrap.dedent("""
    import os, sys
    import torch
    from lab.runtime import script_watch
    script_watch.install()
    d = sys.argv[1]
    model = torch.nn.Linear(2, 1)
    sgd, adam = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.AdamW(model.parameters())
    def train(optimizer, steps):
        for _ in range(steps):
            model(torch.ones(2)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    train(sgd, 3)                                    # the first step recorded, not the others
    torch.save(model.state_dict(), os.path.join(d, "step-3.pt"))
    torch.save(model.state_dict(), os.path.join(d, "step-3.pt"))   # saved again: still no step since
    train(adam, 2)                                   # any optimizer: the first step since the save
    torch.save(model.state_dict(), os.path.join(d, "step-5.pt"))
""")


def test_the_first_optimizer_step_since_the_start_and_since_each_save_is_recorded(tmp_path):
    """Whether a worker trained after the state it last saved: an optimizer's step begun since."""
    found = _events_of(tmp_path, STEPS, "steps.py", 0)
    said = [(e["event"], os.path.basename(e.get("path", ""))) for e in found]
    assert said == [
        ("script_trained", ""),
        ("script_saved", "step-3.pt"),
        ("script_saved", "step-3.pt"),
        ("script_trained", ""),
        ("script_saved", "step-5.pt"),
    ]
    step_line = next(i for i, line in enumerate(STEPS.splitlines(), 1) if "optimizer.step()" in line)
    assert {e["at"] for e in found if e["event"] == "script_trained"} == {f"steps.py:{step_line}"}

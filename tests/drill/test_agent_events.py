"""Reading torch's structured agent events as lab.runtime.launch records them."""

from __future__ import annotations

import json
from pathlib import Path

from lab.drill.agent_events import read_agent_events

# What lab.runtime.launch recorded of torch's events on one node of a drill (paths renamed):
# a script that failed at every start, and one that finished.
RECORDED = Path(__file__).parent / "agent_events"


def _line(t: float, pid: int, source: str, state: str, *, restarts: int = 0, **inner) -> str:
    meta = {"state": state, "agent_restarts": restarts, "metadata": json.dumps(inner)}
    event = {"name": f"torchelastic.worker.status.{state}", "source": source, "metadata": meta}
    return json.dumps({"t": t, "pid": pid, "torch": event})


def test_rounds_take_their_world_size_from_the_workers_they_start(tmp_path):
    path = tmp_path / "agent-events.jsonl"
    lines = [
        _line(1.0, 7, "AGENT", "RENDEZVOUS", group_world_size=None),
        _line(1.1, 7, "AGENT", "ASSIGN_WORKER_RANKS", group_world_size=None),
        _line(2.0, 7, "WORKER", "START", group_world_size=3, local_rank=[0]),
        _line(2.0, 7, "WORKER", "START", group_world_size=3, local_rank=[1]),
        _line(5.0, 7, "AGENT", "RENDEZVOUS", restarts=1, group_world_size=3),
        _line(5.2, 7, "WORKER", "START", restarts=1, group_world_size=2, local_rank=[0]),
        _line(9.0, 7, "WORKER", "SUCCEEDED", restarts=1, group_world_size=2, local_rank=[0]),
        _line(9.0, 7, "WORKER", "SUCCEEDED", restarts=1, group_world_size=2, local_rank=[1]),
        _line(9.0, 7, "AGENT", "SUCCEEDED", restarts=1, group_world_size=2),
        '{"t": 9.5, "pid": 7, "torch": {"name": "torchelas',  # the agent was killed mid-line
    ]
    path.write_text("\n".join(lines))
    events = read_agent_events(path, "node-0")
    assert [(e.t, e.kind, e.group_world_size, e.restart_count) for e in events] == [
        (1.0, "rendezvous", 3, 0),
        (2.0, "started", 3, 0),
        (5.0, "rendezvous", 2, 1),
        (5.2, "started", 2, 1),
        (9.0, "group_succeeded", None, 1),
    ]
    assert {e.node for e in events} == {"node-0"}


def test_a_round_whose_workers_never_started_has_no_world_size(tmp_path):
    path = tmp_path / "agent-events.jsonl"
    path.write_text(
        "\n".join(
            [
                _line(1.0, 7, "AGENT", "RENDEZVOUS"),
                _line(2.0, 7, "AGENT", "RENDEZVOUS", restarts=1),
                _line(2.5, 7, "WORKER", "START", restarts=1, group_world_size=2, local_rank=[0]),
                _line(3.0, 7, "AGENT", "FAILED", restarts=1),
            ]
        )
    )
    kinds = [(e.kind, e.group_world_size) for e in read_agent_events(path, "n")]
    assert kinds == [("rendezvous", None), ("rendezvous", 2), ("started", 2), ("group_failed", None)]


def test_a_node_that_never_recorded_anything_has_no_events(tmp_path):
    assert read_agent_events(tmp_path / "missing.jsonl", "n") == []


def test_an_agent_whose_workers_failed_recorded_no_success_of_theirs():
    """torch records the agent's SUCCEEDED when its run() returns, whatever its workers did
    (torch/distributed/launcher/api.py: "NOT that workers have succeeded"): the workers' own
    final states say how the group ended."""
    failed = read_agent_events(RECORDED / "workers_failed.jsonl", "node-0")
    assert [e.kind for e in failed if e.kind.startswith("group_")] == ["group_failed"]
    finished = read_agent_events(RECORDED / "workers_succeeded.jsonl", "node-0")
    assert [e.kind for e in finished if e.kind.startswith("group_")] == ["group_succeeded"]

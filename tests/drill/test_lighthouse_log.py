"""Why a per-step job's lighthouse left a live group out, read from a real lighthouse's log:
groups played by TorchFT's own lighthouse client, their heartbeats paused or their quorum
requests held back on purpose."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest

from lab.drill import per_step_report
from lab.drill.lighthouse_log import HEARTBEAT, JOIN_WAIT, LeftOut, left_out, read_left_out
from lab.local.lighthouse import Lighthouse
from lab.vocab.per_step import PerStepSettings
from tests.patience import stretch

torchft = pytest.importorskip("torchft._torchft")


class _Groups:
    """Replica groups that heartbeat every 0.05 s from a thread each, unless paused or gone."""

    def __init__(self, address: str, names: str, ask_s: float = 10.0, apart_s: float = 0.2):
        self.client = torchft.LighthouseClient(address, timedelta(seconds=5))
        self.ask_s = ask_s  # how long a quorum request waits
        self.apart_s = apart_s  # between the requests of one quorum
        self.ids = {n: f"node-{n}:{uuid.uuid4()}" for n in names}
        self.silent: set[str] = set()
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._beat, args=(n,), daemon=True) for n in names]
        for t in self.threads:
            t.start()

    def _beat(self, name: str) -> None:
        while not self.done.wait(0.05):
            if name not in self.silent:
                self.client.heartbeat(self.ids[name])

    def quorum(self, names: str) -> set[str]:
        """The members of the quorum that `names`, asking together, are given: each asks a moment
        after the one before it. The lighthouse forms a quorum at once when every member of the
        last one has asked; a group left out of that one asks first, or it would miss the new one."""
        with ThreadPoolExecutor(len(names)) as pool:
            asked = []
            for n in names:
                asked.append(
                    pool.submit(self.client.quorum, self.ids[n], timedelta(seconds=self.ask_s), step=0, world_size=1)
                )
                time.sleep(self.apart_s)
            members = [{m.replica_id for m in f.result().participants} for f in asked]
        assert all(m == members[0] for m in members)
        return {r.split(":")[0].removeprefix("node-") for r in members[0]}

    def stop(self) -> None:
        self.done.set()
        for t in self.threads:
            t.join()


def test_a_live_group_left_out_is_told_apart_by_lapsed_heartbeats_or_a_late_request(workdir):
    # Every wait stretched to the machine's load, and twice what an idle one needs: a heartbeat
    # thread or one of three quorum requests sent together, held back by a busy machine past the
    # timeouts, would be left out for a cause of the test's own.
    k = stretch()
    settings = PerStepSettings(heartbeat_timeout_s=2.0 * k, join_timeout_s=2.0 * k)
    lighthouse = Lighthouse(workdir, settings, min_replicas=2).start()
    groups = _Groups(f"http://{lighthouse.endpoint}", "abc", ask_s=10.0 * k, apart_s=0.2 * k)
    try:
        time.sleep(0.2 * k)
        assert groups.quorum("abc") == set("abc")
        groups.silent.add("a")  # a's process pauses: no heartbeats past the timeout
        time.sleep(3.0 * k)
        assert groups.quorum("bc") == set("bc")
        groups.silent.discard("a")
        time.sleep(0.3 * k)
        assert groups.quorum("abc") == set("abc")
        assert groups.quorum("bc") == set("bc")  # a heartbeats but asks after the join wait
        assert groups.quorum("abc") == set("abc")
        groups.silent.add("c")  # c is killed: it never comes back under its id
        time.sleep(3.0 * k)
        assert groups.quorum("ab") == set("ab")
    finally:
        groups.stop()
        lighthouse.stop()
    found = read_left_out(workdir / "lighthouse.log")
    assert found is not None
    assert [(g.group, g.cause) for g in found] == [("node-a", HEARTBEAT), ("node-a", JOIN_WAIT)]
    assert found[0].lapse_s is not None and 0 < found[0].lapse_s < 8.0 * k
    assert found[1].lapse_s is None


def test_no_lighthouse_log_is_none_and_an_empty_one_leaves_no_one_out(tmp_path):
    assert read_left_out(tmp_path / "lighthouse.log") is None
    assert left_out("") == []


_TURNS = [
    {"t": 1.0, "event": "step", "step": 1, "rank": 0, "replica": g, "participating": True, "participants": 3}
    for g in "abc"
] + [{"t": 2.0 + i, "event": "healed", "rank": 0, "replica": g, "step": 2 + i} for i, g in enumerate("abc")]


def _at(s: float) -> LeftOut:
    return LeftOut(datetime(2026, 1, 1, 0, 0, int(s)), "node-a", HEARTBEAT, 0.4 + s / 10)


def test_turn_taking_names_the_setting_the_lighthouses_log_points_at():
    lapsed = per_step_report.turn_taking(_TURNS, [_at(1), _at(2)])
    assert lapsed is not None and "heartbeats lapsed" in lapsed and "per_step.heartbeat_timeout_s" in lapsed
    assert "up to 0.60 s" in lapsed and "join_timeout_s" not in lapsed
    late = per_step_report.turn_taking(_TURNS, [LeftOut(datetime(2026, 1, 1), "node-b", JOIN_WAIT)])
    assert late is not None and "per_step.join_timeout_s" in late and "heartbeat_timeout_s" not in late
    unread = per_step_report.turn_taking(_TURNS, None)
    assert unread is not None and "heartbeat_timeout_s" in unread and "join_timeout_s" in unread
    none = per_step_report.turn_taking(_TURNS, ())
    assert none is not None and "no live group left out" in none
    assert per_step_report.turn_taking(_TURNS[:4], [_at(1)]) is None  # one heal again: no pattern

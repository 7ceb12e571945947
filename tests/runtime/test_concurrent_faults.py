"""lab.runtime's agents when two events meet, on the local target (real etcd, real agents and
workers): a node that vanishes as a replacement starts, a notice as a node joins, a node killed
as it joins, two nodes that vanish in one keep-alive window. The rendezvous finds each fault
within its keep-alive window (plus one look of the agents'), the job goes on at the size it
should, and no fault uses a restart of the job's budget."""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from typing import Any

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.etcd_rendezvous_backend import create_backend

from lab.local import Agent, LocalTarget
from lab.local.procs import wait_until
from lab.vocab import events
from lab.vocab.events import Event
from lab.vocab.job import JobSpec
from tests.patience import within

pytestmark = [pytest.mark.processes, pytest.mark.long]  # each test runs a job on 3 or 4 nodes

NOTICE_S = 30.0
SPEC = JobSpec()
TIMINGS = SPEC.rdzv_timeouts
# How long a participant that stopped beating is kept (torch drops it past this).
WINDOW_S = TIMINGS.keep_alive_interval_s * TIMINGS.keep_alive_max_attempt
# One look of an agent's at the rendezvous: its monitor's tick over a state read at most a poll ago.
ONE_LOOK_S = SPEC.monitor_interval_s + TIMINGS.poll_interval_s


def _spec(workdir, max_nodes: int) -> JobSpec:
    """A job that trains until the test ends; a vanished peer is found by the rendezvous alone
    (the process group's timeout, 60 s, is past the test's end)."""
    return JobSpec(
        name="t",
        min_nodes=2,
        max_nodes=max_nodes,
        pg_timeout_s=60,
        checkpoint_dir=str(workdir / "ckpt"),
        checkpoint_every_steps=30,
        script_args=("--steps", "100000", "--step-time", "0.03"),
    )


class _Job:
    """A job on the local target as the test sees it: its events so far, and its rendezvous
    state on the server."""

    def __init__(self, local: LocalTarget) -> None:
        self.local = local
        self._tail = events.Tail(local.events_file)
        self.seen: list[dict[str, Any]] = []
        params = RendezvousParameters(
            backend="etcd-v2", endpoint=local.spec.rdzv_endpoint, run_id=local.spec.rdzv_id, min_nodes=1, max_nodes=1
        )
        self._server, _ = create_backend(params)

    def events(self) -> list[dict[str, Any]]:
        self.seen.extend(self._tail.poll())
        return self.seen

    def state(self) -> Any:
        """The rendezvous state the agents last wrote (torch's `_RendezvousState`), or None."""
        got = self._server.get_state()
        return None if got is None else pickle.loads(got[0])

    def on_server(self, node: Agent, where: Callable[[Any], Any]) -> bool:
        """Whether `node`'s agent is in the collection `where(state)` picks (participants,
        wait list) on the server."""
        state = self.state()
        return state is not None and _descriptor(node) in {str(n) for n in where(state)}

    def trains_at(self, world: int, after: float = 0.0) -> Callable[[], bool]:
        return lambda: any(
            e["event"] == Event.STEP and e["world_size"] == world and e["t"] > after for e in self.events()
        )

    def wait_for(self, what: str, predicate: Callable[[], bool], seconds: float = 60) -> None:
        assert wait_until(predicate, within(seconds), interval=0.005), what

    def starts_after(self, t: float) -> dict[str, int]:
        """Each node's worker starts after `t`: its rounds."""
        counts: dict[str, int] = {}
        for e in self.events():
            if e["event"] == Event.SCRIPT_STARTED and e["t"] > t:
                counts[e["node"]] = counts.get(e["node"], 0) + 1
        return counts

    def restarts_used(self) -> set[int]:
        """The restart counts the workers were started with (0: no restart of the budget used)."""
        return {e["restart_count"] for e in self.events() if e["event"] == Event.SCRIPT_STARTED}

    def evicted_at(self, node: Agent) -> float:
        return max(e["t"] for e in self.events() if e["event"] == Event.EVICT and e["node"] == node.name)

    def lost_at(self, node: Agent) -> list[float]:
        """When agents said `node` left their round."""
        return [
            e["t"] for e in self.events() if e["event"] == Event.RDZV_MEMBER_LOST and _descriptor(node) in e["nodes"]
        ]


def _descriptor(node: Agent) -> str:
    """How the rendezvous names a node's agent (torch's `_NodeDesc`: address, agent pid, local id)."""
    return f"127.0.0.1_{node.proc.pid}_0"


def _last_beat(job: _Job, node: Agent) -> float:
    (beat,) = [t for n, t in job.state().last_heartbeats.items() if str(n) == _descriptor(node)]
    return beat.timestamp()


def _assert_found_within_the_window(job: _Job, node: Agent, stopped_at: float, last_beat: float) -> None:
    """The agents found `node` gone by its silence: its last heartbeat dates from before its stop,
    they dropped it once that beat was a keep-alive window old, and no later than a look after."""
    assert last_beat <= stopped_at, f"{node.name}'s heartbeat is dated {last_beat - stopped_at:.2f} s after its stop"
    found = min(job.lost_at(node))
    assert last_beat + WINDOW_S <= found, "found before its heartbeats expired"
    # A look of slack, and more on a loaded machine: its heartbeat dated ahead (above) is what
    # made it late by seconds.
    assert found - stopped_at <= WINDOW_S + within(5 * ONE_LOOK_S), f"found {found - stopped_at:.2f} s after its stop"


@pytest.mark.timeout(90)
def test_a_node_that_vanishes_as_a_replacement_starts_is_found_within_the_keep_alive_window(workdir):
    """The node that vanishes (SIGSTOP of its tree: its sockets stay open) was the first to join
    the rendezvous, and goes in the job's first seconds, as a replacement node starts. The
    survivors' collective waits on it: only its heartbeats tell, and they date from its last
    beat, so the loss is found a keep-alive window after its stop; the replacement takes its
    place in the next round."""
    with LocalTarget(_spec(workdir, max_nodes=3), workdir) as local:
        job = _Job(local)
        victim = local.add_node()
        job.wait_for("the first node did not join", lambda: job.on_server(victim, lambda s: s.participants))
        for _ in range(2):
            local.add_node()
        job.wait_for("the job did not train on 3 nodes", job.trains_at(3))
        local.evict(victim, silent=True)
        last_beat = _last_beat(job, victim)
        replacement = local.add_node()
        stopped_at = job.evicted_at(victim)
        # A step of the old round may end just after the stop: the replacement's own start first.
        job.wait_for(
            "the replacement's workers did not start", lambda: replacement.name in job.starts_after(stopped_at)
        )
        started = max(e["t"] for e in job.events() if e["event"] == Event.SCRIPT_STARTED)
        job.wait_for("the replacement did not take the vanished node's place", job.trains_at(3, after=started))
        job.wait_for("no agent said the node left", lambda: bool(job.lost_at(victim)))
        _assert_found_within_the_window(job, victim, stopped_at, last_beat)
        assert job.restarts_used() == {0}


@pytest.mark.timeout(90)
def test_a_notice_as_a_node_joins_costs_no_restart_and_no_step(workdir):
    """A node joins as another gets a spot notice: the noticed node saves its last step, leaves
    its round and exits 143; the others and the newcomer train on at 3 nodes from that step,
    and neither the join nor the leave uses a restart of the budget."""
    with LocalTarget(_spec(workdir, max_nodes=4), workdir) as local:
        job = _Job(local)
        first, noticed, third = (local.add_node() for _ in range(3))
        job.wait_for("the job did not train on 3 nodes", job.trains_at(3))
        newcomer = local.add_node()
        local.evict(noticed, NOTICE_S)
        noticed_at = job.evicted_at(noticed)
        job.wait_for("the noticed node did not exit", lambda: noticed.exit_code is not None)
        # The old round's last steps at 3 nodes may come after the notice: wait for the next
        # round's resume, then for its steps.
        resumes = lambda: [e for e in job.events() if e["event"] == Event.RESUME and e["t"] > noticed_at]  # noqa: E731
        job.wait_for("no round resumed after the notice", lambda: bool(resumes()))
        resumed = min(resumes(), key=lambda e: e["t"])
        job.wait_for("the job did not train on with the newcomer", job.trains_at(3, after=resumed["t"]))
        seen = job.events()
        assert noticed.exit_code == 143
        assert any(e["event"] == Event.RDZV_LEFT and e["node"] == noticed.name for e in seen)
        (saved,) = [e["step"] for e in seen if e["event"] == Event.EXIT and e["node"] == noticed.name]
        # No step lost: the next round resumes from the noticed node's save or a later one (its
        # peers save theirs too: one step more when the notice came after its share of a step),
        # and from no step before one the job recorded as trained.
        trained = max(e["step"] for e in seen if e["event"] == Event.STEP and e["t"] < resumed["t"])
        assert resumed["step"] >= max(saved, trained), f"saved {saved}, trained {trained}, resumed {resumed['step']}"
        assert set(job.starts_after(noticed_at)) == {first.name, third.name, newcomer.name}
        assert job.restarts_used() == {0}


@pytest.mark.timeout(90)
def test_a_node_killed_as_it_joins_restarts_the_round_once(workdir):
    """A node is SIGKILLed on the wait list, the moment it asked to join: the others stop their
    workers for it (it was alive when they looked) and form the next round without it. torch
    keeps the dead node listed until its heartbeats expire, a keep-alive window later; the
    round that forms meanwhile is not restarted for it again."""
    with LocalTarget(_spec(workdir, max_nodes=4), workdir) as local:
        job = _Job(local)
        training = [local.add_node() for _ in range(3)]
        job.wait_for("the job did not train on 3 nodes", job.trains_at(3))
        joining = local.add_node()
        job.wait_for("the new node did not ask to join", lambda: job.on_server(joining, lambda s: s.wait_list))
        local.evict(joining)
        killed_at = job.evicted_at(joining)
        # Until torch drops the dead node (its heartbeats expired), a round may be restarted
        # for it; once it is gone and the job trains, every restart there was has started.
        job.wait_for("the dead node stayed listed", lambda: not job.on_server(joining, lambda s: s.wait_list))
        job.wait_for("the job did not train on", job.trains_at(3, after=time.time()))
        assert job.starts_after(killed_at) == {n.name: 1 for n in training}
        assert job.restarts_used() == {0}


@pytest.mark.timeout(90)
def test_two_nodes_that_vanish_in_one_window_cost_one_round(workdir):
    """Two of four nodes vanish (SIGSTOP), one after the other, their last heartbeats apart: the
    agents find the first a keep-alive window after its stop, and the two survivors form their
    next round once the second is dropped too (never a round with a vanished participant),
    and train on at 2 nodes."""
    with LocalTarget(_spec(workdir, max_nodes=4), workdir) as local:
        job = _Job(local)
        survivor, first, other, second = (local.add_node() for _ in range(4))
        job.wait_for("the job did not train on 4 nodes", job.trains_at(4))
        local.evict(first, silent=True)
        local.evict(second, silent=True)
        vanished = [(node, _last_beat(job, node), job.evicted_at(node)) for node in (first, second)]
        job.wait_for("the survivors did not train on", job.trains_at(2, after=job.evicted_at(second)))
        job.wait_for("no agent said a node left", lambda: bool(job.lost_at(first) or job.lost_at(second)))
        # The agents' first word names the node (or both) whose heartbeats went silent first.
        said = min((e for e in job.events() if e["event"] == Event.RDZV_MEMBER_LOST), key=lambda e: e["t"])
        for node, last_beat, stopped_at in vanished:
            assert last_beat <= stopped_at, f"{node.name}'s heartbeat is dated after its stop"
            if _descriptor(node) in said["nodes"]:
                _assert_found_within_the_window(job, node, stopped_at, last_beat)
        first_at = job.evicted_at(first)
        next_round = min(e["t"] for e in job.events() if e["event"] == Event.SCRIPT_STARTED and e["t"] > first_at)
        latest_beat = max(last_beat for _, last_beat, _ in vanished)
        assert next_round >= latest_beat + WINDOW_S, "a round formed with a vanished participant"
        assert job.starts_after(first_at) == {survivor.name: 1, other.name: 1}
        assert job.restarts_used() == {0}

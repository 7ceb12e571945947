"""lab.cluster.disruption on recorded event streams: when an eviction the drill asked for reached the
job, and which kind it was."""

from __future__ import annotations

from lab.cluster.disruption import CONSEQUENCE_S, as_observed, observe
from lab.drill.analysis import analyze

REQUEST = {"t": 100.0, "event": "evict", "source": "drill", "node": "w-2", "kind": "aks", "k8s_node": "vm-2"}


def _pod(t: float, phase: str, pod: str = "w-2") -> dict:
    return {"t": t, "event": "k8s_pod", "pod": pod, "phase": phase, "k8s_node": "vm-2"}


def test_a_notice_is_counted_from_the_worker_leaving_on_it():
    stream = [
        REQUEST,
        {"t": 131.0, "event": "checkpoint_saved", "node": "w-2", "reason": "notice", "step": 40, "seconds": 0.2},
        {"t": 131.5, "event": "exit", "node": "w-2", "reason": "notice", "step": 40},
        _pod(133.0, "Failed"),
        {"t": 160.0, "event": "k8s_node_gone", "k8s_node": "vm-2"},
    ]
    seen = observe(stream, REQUEST)
    assert (seen.t, seen.kind, seen.sign) == (131.0, "notice", "the evicted worker's notice")


def test_a_pod_that_ends_without_a_notice_is_hard():
    stream = [REQUEST, _pod(104.0, "Terminating"), _pod(104.5, "Deleted"), _pod(110.0, "Pending")]
    stream.append({"t": 104.2, "event": "collective_failed", "node": "w-0", "step": 12})
    seen = observe(stream, REQUEST)
    assert (seen.t, seen.kind, seen.sign) == (104.0, "hard", "its pod leaving Running")


def test_a_node_that_vanishes_is_silent():
    stream = [
        REQUEST,
        {"t": 100.5, "event": "collective_failed", "node": "w-2", "step": 9},  # the evicted worker's own: not a sign
        {"t": 145.0, "event": "collective_failed", "node": "w-0", "step": 12},
        {"t": 150.0, "event": "k8s_node_gone", "k8s_node": "vm-2"},
        _pod(190.0, "Failed"),
    ]
    seen = observe(stream, REQUEST)
    assert (seen.t, seen.kind, seen.sign) == (145.0 - CONSEQUENCE_S, "silent", "a peer's failed collective")


def test_the_report_counts_from_the_disruption_and_names_the_lead_time():
    base = {"world_size": 3, "loss": 1.0}
    stream = [
        {"t": 90.0, "event": "fresh", "step": 0, "round": 1, "node": "w-0", "world_size": 3},
        *({"t": 90.0 + i * 0.5, "event": "step", "step": i, **base} for i in range(1, 20)),
        REQUEST,
        {"t": 130.0, "event": "exit", "node": "w-2", "reason": "notice", "step": 19, "notice_to_exit_s": 0.4},
        {"t": 140.0, "event": "resume", "step": 19, "round": 2, "node": "w-0", "world_size": 2},
        {"t": 141.0, "event": "step", "step": 20, "world_size": 2, "loss": 0.9},
    ]
    observed = as_observed(stream)
    (evict,) = [e for e in observed if e["event"] == "evict"]
    assert (evict["t"], evict["requested_t"], evict["lead_s"], evict["backend"]) == (130.0, 100.0, 30.0, "aks")
    assert stream[20] is REQUEST and REQUEST["t"] == 100.0, "the recorded stream is left as it was"
    report = analyze(observed, [], target_steps=None, checkpoint_every=10, node_exit_codes={})
    (ev,) = report.evictions
    assert ev.kind == "notice" and round(ev.recovery_s, 1) == 11.0 and ev.notice_to_exit_s == 0.4
    assert "requested through aks; the cloud's lead time 30.0 s, until the evicted worker's notice" in report.summary()


def test_a_request_nothing_followed_keeps_its_time():
    assert observe([REQUEST], REQUEST) is None
    assert as_observed([REQUEST]) == [REQUEST]


def test_a_disruption_seen_late_by_the_drill_is_bounded_by_the_survivors_restart():
    """The drill sees a deleted pod only at its next poll; the survivors' own events carry their
    time. The disruption came no later than their restart."""
    stream = [
        REQUEST,
        {"t": 103.0, "event": "resume", "node": "w-0", "step": 30, "round": 2, "world_size": 2},
        _pod(104.0, "Deleted"),
    ]
    seen = observe(stream, REQUEST)
    assert (seen.t, seen.kind, seen.sign) == (103.0 - CONSEQUENCE_S, "hard", "the survivors' restart")


def test_a_step_at_a_smaller_world_bounds_it_too():
    stream = [
        {"t": 99.0, "event": "step", "step": 29, "world_size": 3, "loss": 1.0},
        REQUEST,
        {"t": 102.0, "event": "step", "step": 31, "world_size": 2, "loss": 0.9},
        _pod(104.0, "Deleted"),
    ]
    assert observe(stream, REQUEST).t == 102.0 - CONSEQUENCE_S


def test_a_consequence_seen_at_once_puts_the_disruption_at_the_request_not_before_it():
    """The survivors restart a moment after a drain deleted the pod (the simulated cluster acts at
    once): the disruption is bounded by the request, with no lead time, not a negative one."""
    stream = [
        {"t": 90.0, "event": "step", "step": 9, "world_size": 3, "loss": 1.0},
        REQUEST,
        {"t": 100.0005, "event": "resume", "step": 9, "round": 2, "node": "w-0", "world_size": 2},
        _pod(100.4, "Terminating"),
    ]
    (evict,) = [e for e in as_observed(stream) if e["event"] == "evict"]
    assert (evict["t"], evict["lead_s"], evict["first_sign"]) == (100.0, 0.0, "the survivors' restart")

"""The handler against a fake IMDS and a fake API server on loopback: what it asks the API,
how soon, and what it leaves alone."""

from __future__ import annotations

import threading
import time

from tests.patience import within
from tests.runtime.notice.conftest import NODE, VM
from tests.runtime.notice.fakes import event, wait_for

EVICTABLE = {"/api/v1/namespaces/training/pods/train-0/eviction", "/api/v1/namespaces/training/pods/train-1/eviction"}


def test_preempt_cordons_and_evicts_every_pod_on_the_poll_that_first_sees_it(start):
    run = start()
    not_before = time.time() + 30
    published = run.imds.publish(event("e-1", VM, "Preempt", not_before))
    assert wait_for(lambda: len(run.kube.evictions()) >= 2)
    evictions = run.kube.evictions()
    patches = run.kube.of("PATCH")

    latency = max(c["t"] for c in evictions) - published
    print(f"event -> last eviction asked: {latency * 1000:.0f} ms")
    # Acted on at once: the first answer that carried the event was the only one before the
    # cordon (the next poll waits for the drain), not the event seen again and again first.
    assert run.imds.answered_with_current(before=patches[0]["t"]) == 1

    # Cordon first, as kubectl cordon sends it.
    assert [c["path"] for c in patches] == [f"/api/v1/nodes/{NODE}"]
    assert patches[0]["body"] == {"spec": {"unschedulable": True}}
    assert patches[0]["content_type"] == "application/strategic-merge-patch+json"
    assert patches[0]["t"] <= min(c["t"] for c in evictions)
    [listing] = run.kube.of("GET")
    assert "fieldSelector=spec.nodeName%3D" + NODE in listing["path"]

    # One eviction per evictable pod; DaemonSet, mirror, terminating and finished pods left alone.
    assert sorted(c["path"] for c in evictions) == sorted(EVICTABLE)
    bodies = {c["path"].split("/")[6]: c["body"] for c in evictions}
    for name, body in bodies.items():
        assert body["apiVersion"] == "policy/v1" and body["kind"] == "Eviction"
        assert body["metadata"] == {"name": name, "namespace": "training"}
    # grace = min(the pod's own, seconds left until NotBefore less the 5 s margin).
    left = int(not_before) - published  # NotBefore has whole seconds
    assert int(left - 5) - 1 <= bodies["train-0"]["deleteOptions"]["gracePeriodSeconds"] <= int(left - 5)
    assert bodies["train-1"]["deleteOptions"]["gracePeriodSeconds"] == 10

    skipped = {line["pod"]: line["reason"] for line in run.events("pod_skipped")}
    assert skipped == {
        "kube-system/spot-notice-handler-x": "daemonset pod",
        "kube-system/kube-proxy-static": "mirror pod",
        "training/leaving": "terminating",
        "training/done": "finished",
    }
    assert run.imds.rejected == 0  # every IMDS request carried Metadata: true


def test_event_without_not_before_uses_each_pods_own_grace(start):
    run = start()
    run.imds.publish(event("e-1", VM, "Terminate", None, status="Started"))
    assert wait_for(lambda: len(run.kube.evictions()) >= 2)
    graces = {c["path"].split("/")[6]: c["body"]["deleteOptions"]["gracePeriodSeconds"] for c in run.kube.evictions()}
    assert graces == {"train-0": 60, "train-1": 10}


def test_evictions_are_asked_at_once_not_one_after_the_other(start):
    run = start()
    # The server answers neither eviction until both are asked: a handler that waits for
    # one answer before asking the next breaks the meeting.
    run.kube.evictions_together = threading.Barrier(2)
    run.imds.publish(event("e-1", VM, "Preempt", time.time() + 30))
    assert wait_for(lambda: run.events("drained"), timeout=within(30))
    assert len(run.kube.evictions()) == 2 and run.kube.evictions_met is True


def test_events_not_for_this_vm_or_not_acted_on_cause_no_call(start):
    run = start()
    run.imds.publish(
        event("other-vm", "aks-gpuspot-12345678-vmss_4", "Preempt", time.time() + 30),
        event("reboot", VM, "Reboot", time.time() + 300),
        event("freeze", VM, "Freeze", time.time() + 15),
    )
    run.wait_polls(4)
    assert run.kube.calls == []
    seen = {line["event_id"]: (line["ours"], line["action"]) for line in run.events("event_seen")}
    assert seen == {"other-vm": (False, "none"), "reboot": (True, "none"), "freeze": (True, "none")}


def test_act_on_is_configurable(start):
    run = start(act_on=("Reboot",))
    run.imds.publish(event("p", VM, "Preempt", time.time() + 30))
    run.wait_polls(3)
    assert run.kube.calls == []
    run.imds.publish(event("r", VM, "Reboot", time.time() + 30))
    assert wait_for(lambda: len(run.kube.evictions()) == 2)


def test_an_event_is_acted_on_once(start):
    run = start()
    first = event("e-1", VM, "Preempt", time.time() + 30)
    run.imds.publish(first)
    assert wait_for(lambda: len(run.kube.evictions()) == 2)
    run.imds.publish(first | {"EventStatus": "Started"})  # a new incarnation, the same event
    run.wait_polls(4)
    assert len(run.kube.evictions()) == 2 and len(run.kube.of("PATCH")) == 1
    run.imds.publish(event("e-2", VM, "Terminate", time.time() + 30))  # a new event is acted on
    assert wait_for(lambda: len(run.kube.evictions()) == 4)


def test_a_refused_eviction_is_asked_again_until_accepted(start):
    run = start()
    run.kube.eviction_script["training/train-0"] = [429, 429]
    run.kube.eviction_script["training/train-1"] = [404]
    run.imds.publish(event("e-1", VM, "Preempt", time.time() + 30))
    assert wait_for(lambda: run.events("drained"))
    paths = [c["path"] for c in run.kube.evictions()]
    assert paths.count("/api/v1/namespaces/training/pods/train-0/eviction") == 3
    assert paths.count("/api/v1/namespaces/training/pods/train-1/eviction") == 1  # gone: not asked again
    assert [line["attempt"] for line in run.events("eviction_refused")] == [1, 2]
    assert "disruption budget" in run.events("eviction_refused")[0]["error"]
    [drained] = run.events("drained")
    assert drained["outcomes"] == {"evicted": 1, "gone": 1}


def test_refusals_stop_at_the_deadline(start):
    run = start(retry_interval_s=0.2, margin_s=0)
    run.kube.eviction_script["training/train-0"] = [429] * 100
    run.imds.publish(event("e-1", VM, "Preempt", time.time() + 2))  # NotBefore within 2 s
    assert wait_for(lambda: run.events("drained"), timeout=within(4))
    [drained] = run.events("drained")
    # Without the deadline train-0 would be asked 100 times, then evicted.
    assert drained["outcomes"] == {"evicted": 1, "refused until deadline": 1}
    assert 2 <= len([c for c in run.kube.evictions() if "train-0" in c["path"]]) <= 12


def test_imds_errors_do_not_stop_the_loop(start):
    run = start()
    run.imds.fail_next(3, status=500)
    run.wait_polls(4)
    run.imds.fail_next(2, status=410)
    run.imds.publish(event("e-1", VM, "Preempt", time.time() + 30))
    assert wait_for(lambda: len(run.kube.evictions()) == 2, timeout=within(3))
    # Each outage is logged once (at its start), and its end.
    assert [e["error"].split(": ")[1][:8] for e in run.events("imds_error")] == ["HTTP 500", "HTTP 410"]
    assert len(run.events("imds_ok")) == 2


def test_an_unreachable_imds_at_start_is_waited_for(fakes, start):
    imds, _ = fakes
    imds.fail_next(3, status=503)  # the VM name cannot be read at first
    run = start()
    run.wait_polls(2)
    run.imds.publish(event("e-1", VM, "Preempt", time.time() + 30))
    assert wait_for(lambda: len(run.kube.evictions()) == 2, timeout=within(3))
    assert [line["name"] for line in run.events("vm")] == [VM]


def test_a_failed_pod_list_is_retried(start):
    run = start()
    run.kube.list_failures = 2
    run.imds.publish(event("e-1", VM, "Preempt", time.time() + 30))
    assert wait_for(lambda: len(run.kube.evictions()) == 2, timeout=within(3))
    assert len(run.kube.of("GET")) == 3
    assert len(run.events("list_pods_failed")) == 2

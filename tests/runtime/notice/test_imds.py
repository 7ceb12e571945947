"""Reading Scheduled Events and the VM's name from IMDS (a fake one on loopback)."""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest

from lab.runtime.notice.imds import EVENTS_PATH, Imds, ImdsError, parse_events, parse_not_before
from tests.runtime.notice.fakes import FakeImds, event

DOC = {
    "DocumentIncarnation": 7,
    "Events": [
        {
            "EventId": "602d9444-d2cd-49c7-8624-8643e7171297",
            "EventType": "Preempt",
            "ResourceType": "VirtualMachine",
            "Resources": ["aks-gpuspot-1-vmss_3"],
            "EventStatus": "Scheduled",
            "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT",
            "Description": "",
            "EventSource": "Platform",
            "DurationInSeconds": -1,
        }
    ],
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mon, 19 Sep 2016 18:29:47 GMT", datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC).timestamp()),
        ("", None),
        ("  ", None),
    ],
    ids=["rfc1123", "empty", "blank"],
)
def test_not_before(text, expected):
    assert parse_not_before(text) == expected


@pytest.mark.parametrize("text", ["tomorrow", "2016-09-19T18:29:47Z", "Mon, 19 Sep 2016 18:29:47 -0000"])
def test_not_before_that_is_no_rfc1123_date_with_a_zone_is_an_error(text):
    with pytest.raises(ImdsError, match="NotBefore"):
        parse_not_before(text)


def test_events_document():
    incarnation, [e] = parse_events(DOC)
    assert incarnation == 7
    assert (e.event_id, e.event_type, e.status, e.resources) == (
        "602d9444-d2cd-49c7-8624-8643e7171297",
        "Preempt",
        "Scheduled",
        ("aks-gpuspot-1-vmss_3",),
    )
    assert e.concerns("AKS-GPUSPOT-1-VMSS_3") and not e.concerns("aks-gpuspot-1-vmss_31")
    assert parse_events({"DocumentIncarnation": 0, "Events": []}) == (0, [])


@pytest.mark.parametrize("doc", [[], {"Events": {}}, {"Events": [{"EventType": "Preempt"}]}], ids=str)
def test_a_document_that_is_not_one_is_an_error(doc):
    with pytest.raises(ImdsError):
        parse_events(doc)


def test_the_client_sends_the_metadata_header_and_reads_both_answers():
    with FakeImds("vm_0") as fake:
        fake.publish(event("e-1", "vm_0"))
        imds = Imds(fake.url)
        assert imds.vm_name() == "vm_0"
        _, [e] = imds.scheduled_events()
        assert e.event_id == "e-1" and e.not_before is None
        assert fake.rejected == 0
        assert [path for _, path, _ in fake.requests] == [
            "/metadata/instance/compute/name?api-version=2021-02-01&format=text",
            "/metadata/scheduledevents?api-version=2020-07-01",
        ]
        # The fake answers as IMDS does without the header: a client that forgot it would fail.
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(fake.url + EVENTS_PATH, timeout=2)
        assert answer.value.code == 400 and fake.rejected == 1


def test_a_proxy_of_the_environment_is_not_used(monkeypatch):
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    with FakeImds("vm_0") as fake:
        assert Imds(fake.url).vm_name() == "vm_0"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda fake: fake.fail_next(1, 500), "HTTP 500"),
        (lambda fake: fake.fail_next(1, 400), "HTTP 400"),
        (lambda fake: fake.close(), "GET /metadata/scheduledevents"),
    ],
    ids=["server-error", "bad-request", "unreachable"],
)
def test_failures_are_imds_errors(setup, message):
    with FakeImds("vm_0") as fake:
        setup(fake)
        with pytest.raises(ImdsError, match=message):
            Imds(fake.url, timeout_s=0.5).scheduled_events()

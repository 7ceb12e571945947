"""The Azure Instance Metadata Service: Scheduled Events and the VM's own name.

https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events
Every request carries `Metadata: true` (IMDS answers 400 without it) and goes straight to the
link-local address, never through a proxy of the environment (a proxy would answer for IMDS or
not at all). Events of the whole scale set are visible to every VM of it: `Resources` names the
VMs an event is for, compared with the name IMDS gives this VM.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from lab.vocab.errors import LabError

DEFAULT_URL = "http://169.254.169.254"
EVENTS_PATH = "/metadata/scheduledevents?api-version=2020-07-01"
NAME_PATH = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
EVENT_TYPES = ("Preempt", "Terminate", "Reboot", "Redeploy", "Freeze")


class ImdsError(LabError):
    """IMDS did not answer, or answered something we cannot read. Transient as a rule: the
    handler logs it and polls again."""


@dataclass(frozen=True)
class ScheduledEvent:
    """One entry of `Events`. `not_before`: when the platform may start it, as Unix time;
    None when IMDS gives no time (`""`: the event has started or starts at once)."""

    event_id: str
    event_type: str
    resources: tuple[str, ...]
    status: str
    not_before: float | None
    description: str = ""
    source: str = ""
    duration_s: int = -1

    def concerns(self, vm_name: str) -> bool:
        """Whether this VM is among the event's resources (Azure names compare without case)."""
        name = vm_name.casefold()
        return any(r.casefold() == name for r in self.resources)


def parse_not_before(text: str) -> float | None:
    """`NotBefore` ("Mon, 19 Sep 2016 18:29:47 GMT", RFC 1123) as Unix time; "" is None."""
    if not text or not text.strip():
        return None
    try:
        when: datetime = parsedate_to_datetime(text)
    except (TypeError, ValueError) as exc:
        raise ImdsError(f"NotBefore={text!r} is not an RFC 1123 date") from exc
    if when.tzinfo is None:  # "-0000" parses naive; IMDS times are GMT
        raise ImdsError(f"NotBefore={text!r} has no time zone")
    return when.timestamp()


def parse_events(document: Any) -> tuple[int, list[ScheduledEvent]]:
    """(DocumentIncarnation, events) of a Scheduled Events answer."""
    if not isinstance(document, dict) or not isinstance(document.get("Events", []), list):
        raise ImdsError(f"not a Scheduled Events document: {str(document)[:200]}")
    events = []
    for raw in document.get("Events") or []:
        if not isinstance(raw, dict) or not raw.get("EventId"):
            raise ImdsError(f"an event without EventId: {str(raw)[:200]}")
        resources = raw.get("Resources") or []
        duration = raw.get("DurationInSeconds", -1)
        events.append(
            ScheduledEvent(
                event_id=str(raw["EventId"]),
                event_type=str(raw.get("EventType", "")),
                resources=tuple(str(r) for r in resources) if isinstance(resources, list) else (),
                status=str(raw.get("EventStatus", "")),
                not_before=parse_not_before(str(raw.get("NotBefore") or "")),
                description=str(raw.get("Description", "")),
                source=str(raw.get("EventSource", "")),
                duration_s=duration if isinstance(duration, int) else -1,
            )
        )
    incarnation = document.get("DocumentIncarnation", 0)
    return incarnation if isinstance(incarnation, int) else 0, events


class Imds:
    """A client of IMDS at `base_url` (the link-local address; a loopback server in tests)."""

    def __init__(self, base_url: str = DEFAULT_URL, timeout_s: float = 2.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        # No proxy, whatever HTTP(S)_PROXY says: IMDS is only reachable directly.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _get(self, path: str) -> bytes:
        request = urllib.request.Request(self.base_url + path, headers={"Metadata": "true"})
        try:
            with self._opener.open(request, timeout=self.timeout_s) as answer:
                return bytes(answer.read())
        except urllib.error.HTTPError as exc:
            body = exc.read()[:200].decode(errors="replace")
            raise ImdsError(f"GET {path}: HTTP {exc.code} {body}".rstrip()) from None
        except (OSError, ValueError) as exc:  # URLError, timeouts, resets, bad URL
            raise ImdsError(f"GET {path}: {exc}") from None

    def vm_name(self) -> str:
        name = self._get(NAME_PATH).decode(errors="replace").strip()
        if not name:
            raise ImdsError("IMDS gave an empty VM name")
        return name

    def scheduled_events(self) -> tuple[int, list[ScheduledEvent]]:
        # The first request of a VM turns Scheduled Events on and may take long to answer
        # (Azure documents up to two minutes); a timed-out poll is simply repeated.
        raw = self._get(EVENTS_PATH)
        try:
            document = json.loads(raw)
        except ValueError as exc:
            raise ImdsError(f"GET {EVENTS_PATH}: not JSON: {raw[:200]!r}") from exc
        return parse_events(document)

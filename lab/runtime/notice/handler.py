"""The loop: poll Scheduled Events, act once on each event for this VM.

Every `poll_interval_s` (Azure asks for about once a second at most) the handler reads the
events; one for this VM of a type in `act_on` is acted on once per EventId: the node is
cordoned and its pods evicted (lab.runtime.notice.drain), retrying refused evictions until the event's
`NotBefore` (or `drain_timeout_s` when IMDS gives no time). Other events are logged once and
left alone. IMDS errors are logged and the next poll goes on: the loop stops only when told.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field

from lab.runtime.notice.drain import Drainer
from lab.runtime.notice.imds import Imds, ImdsError, ScheduledEvent
from lab.runtime.notice.log import Log

DEFAULT_ACT_ON = ("Preempt", "Terminate")
# An IMDS outage is logged on its first failed poll, then once a minute while it lasts.
ERROR_LOG_EVERY_S = 60.0


@dataclass(eq=False)
class Handler:
    imds: Imds
    drainer: Drainer
    log: Log
    _: KW_ONLY
    act_on: Iterable[str] = DEFAULT_ACT_ON
    poll_interval_s: float = 1.0
    drain_timeout_s: float = 120.0
    clock: Callable[[], float] = time.time
    vm_name: str | None = field(default=None, init=False)
    seen: set[str] = field(default_factory=set, init=False)  # EventIds logged
    handled: set[str] = field(default_factory=set, init=False)  # EventIds acted on
    _error_logged_at: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.act_on = frozenset(self.act_on)

    @property
    def stop(self) -> threading.Event:
        """Set to end the loop: the drainer's, so that one event stops both."""
        return self.drainer.stop

    def run(self) -> None:
        """Poll until `stop` is set."""
        self.log(
            "started",
            node=self.drainer.node,
            imds=self.imds.base_url,
            act_on=sorted(self.act_on),
            poll_interval_s=self.poll_interval_s,
        )
        while not self.stop.is_set():
            started = time.monotonic()
            self.poll_once()
            self.stop.wait(max(0.0, self.poll_interval_s - (time.monotonic() - started)))
        self.log("stopped", node=self.drainer.node)

    def poll_once(self) -> None:
        try:
            if self.vm_name is None:
                self.vm_name = self.imds.vm_name()
                self.log("vm", name=self.vm_name, node=self.drainer.node)
            _, events = self.imds.scheduled_events()
        except ImdsError as exc:
            now = time.monotonic()
            if self._error_logged_at is None or now - self._error_logged_at >= ERROR_LOG_EVERY_S:
                self.log("imds_error", error=str(exc))
                self._error_logged_at = now
            return
        if self._error_logged_at is not None:
            self.log("imds_ok")
            self._error_logged_at = None
        for event in events:
            self.consider(event)

    def consider(self, event: ScheduledEvent) -> None:
        assert self.vm_name is not None
        if event.event_id in self.handled:
            return
        ours = event.concerns(self.vm_name)
        acted = ours and event.event_type in self.act_on
        if event.event_id not in self.seen:
            self.seen.add(event.event_id)
            self.log(
                "event_seen",
                event_id=event.event_id,
                type=event.event_type,
                status=event.status,
                not_before=event.not_before,
                resources=list(event.resources),
                ours=ours,
                action="drain" if acted else "none",
            )
        if acted:
            self.handled.add(event.event_id)
            self.act(event)

    def act(self, event: ScheduledEvent) -> None:
        now = self.clock()
        if event.not_before is None:
            deadline = now + self.drain_timeout_s
        else:
            # A NotBefore already past (the event is starting): still retry refusals a moment.
            deadline = max(event.not_before, now + self.drainer.margin_s)
        results = self.drainer.drain(event.not_before, deadline)
        outcomes: dict[str, int] = {}
        for r in results:
            outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
        self.log(
            "drained",
            event_id=event.event_id,
            node=self.drainer.node,
            pods=len(results),
            outcomes=outcomes,
            seconds=round(self.clock() - now, 3),
        )

"""A job's logs: one pod's, a worker's, or all its workers' lines as they come."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from lab.cluster.kube import KubeApi, api_error
from lab.cluster.pytorchjob import JobError, job_pods, replica_index
from lab.vocab.job_parts import burst_job_name


@dataclass(frozen=True)
class LogWindow:
    """Which part of a pod's log: its last `tail` lines, the last `since_s` seconds, or the
    previous container's (a worker that restarted: the crash is there)."""

    tail: int | None = None
    since_s: int | None = None
    previous: bool = False

    def query(self) -> dict[str, Any]:
        """The log request's parameters (the kubernetes client's names)."""
        out: dict[str, Any] = {}
        if self.tail is not None:
            out["tail_lines"] = self.tail
        if self.since_s is not None:
            out["since_seconds"] = self.since_s
        if self.previous:
            out["previous"] = True
        return out


def _pod_lines(kube: KubeApi, pod: str, namespace: str, follow: bool, window: LogWindow | None = None) -> Iterator[str]:
    try:
        response = kube.core.read_namespaced_pod_log(
            pod, namespace, follow=follow, _preload_content=False, **(window or LogWindow()).query()
        )
    except ApiException as exc:
        raise api_error(exc, f"reading the log of pod {namespace}/{pod}") from None
    pending = b""
    try:
        for chunk in response.stream(4096):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")
    finally:
        response.release_conn()


def logs_of_pod(kube: KubeApi, pod: str, namespace: str, *, follow: bool = False) -> Iterator[tuple[str, str]]:
    """(pod, line) of one pod's log; with `follow`, until its container ends."""
    for line in _pod_lines(kube, pod, namespace, follow):
        yield pod, line


def logs(
    kube: KubeApi,
    name: str,
    namespace: str,
    *,
    worker: int | None = None,
    follow: bool = False,
    window: LogWindow | None = None,
) -> Iterator[tuple[str, str]]:
    """(pod, line) of the job's workers (or of one, by replica index); with `follow`, the
    lines of all workers as they come, until every stream ends."""
    # A job with a burst: its borrowed part's workers too (by replica index, the core's alone).
    borrowed = job_pods(kube, burst_job_name(name), namespace) if worker is None else []
    pods = [p for p in job_pods(kube, name, namespace) if worker is None or replica_index(p) == worker] + borrowed
    if not pods:
        which = f"worker {worker} of job" if worker is not None else "job"
        raise JobError(f"{which} {namespace}/{name} has no pods (yet): `elastic-lab status --job {name}`")
    names = [p.metadata.name for p in pods]
    if not follow:
        for pod in names:
            for line in _pod_lines(kube, pod, namespace, follow=False, window=window):
                yield pod, line
        return
    lines: queue.Queue[tuple[str, str | BaseException | None]] = queue.Queue()

    def pump(pod: str) -> None:
        try:
            for line in _pod_lines(kube, pod, namespace, follow=True, window=window):
                lines.put((pod, line))
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, which raises it
            lines.put((pod, exc))
        lines.put((pod, None))

    for pod in names:
        threading.Thread(target=pump, args=(pod,), daemon=True).start()
    open_streams = len(names)
    while open_streams:
        pod, item = lines.get()
        if item is None:
            open_streams -= 1
        elif isinstance(item, BaseException):
            raise item
        else:
            yield pod, item

"""Flags of `python -m lab.runtime.notice`. Every bad value is reported at once, as
`--flag='value' is invalid: expected ...`, with exit status 2, before polling starts."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from kubernetes import client, config
from kubernetes.config import ConfigException

from lab.runtime.notice.drain import Drainer
from lab.runtime.notice.handler import DEFAULT_ACT_ON, Handler
from lab.runtime.notice.imds import DEFAULT_URL, EVENT_TYPES, Imds
from lab.runtime.notice.log import JsonLog
from lab.vocab.names import DNS_SUBDOMAIN
from lab.vocab.problems import InvalidInput, Problems

PROG = "python -m lab.runtime.notice"
ENV_NODE = "NODE_NAME"


@dataclass(frozen=True)
class Settings:
    node: str
    imds_url: str
    poll_interval_s: float
    imds_timeout_s: float
    act_on: tuple[str, ...]
    grace_margin_s: float
    drain_timeout_s: float
    kubeconfig: Path | None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="On an Azure Scheduled Events notice for this VM, cordon its node and evict its pods.",
    )
    # Values are read as text and checked in `settings`, so that each error names its flag.
    p.add_argument("--node", default=None, help=f"this node's name (default ${ENV_NODE})")
    p.add_argument("--imds-url", default=DEFAULT_URL, help=f"IMDS base URL (default {DEFAULT_URL})")
    p.add_argument("--poll-interval", default="1", help="seconds between polls (default 1, as Azure asks)")
    p.add_argument("--imds-timeout", default="2", help="seconds an IMDS request may take (default 2)")
    p.add_argument(
        "--act-on",
        default=",".join(DEFAULT_ACT_ON),
        help=f"event types to drain on, comma-separated, of {', '.join(EVENT_TYPES)} (default %(default)s)",
    )
    p.add_argument(
        "--grace-margin",
        default="5",
        help="seconds each pod's grace period ends before the event's NotBefore (default 5)",
    )
    p.add_argument(
        "--drain-timeout",
        default="120",
        help="seconds to retry refused evictions when an event has no NotBefore (default 120)",
    )
    p.add_argument("--kubeconfig", default=None, help="a kubeconfig file (default: the in-cluster config)")
    return p


def _number(found: Problems, flag: str, text: str, low: float, high: float, expected: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:  # NaN fails too
        found.add(flag, text, expected)
        return low
    return value


def settings(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Settings:
    """The handler's settings from its flags; raises InvalidInput with every bad value."""
    found = Problems()
    node = args.node if args.node is not None else environ.get(ENV_NODE, "")
    if not node:
        found.add("--node", node, f"this node's name, from --node or ${ENV_NODE} (the downward API's spec.nodeName)")
    elif not DNS_SUBDOMAIN.match(node):
        found.add("--node", node, "a Kubernetes node name (lowercase DNS subdomain)")
    url = urllib.parse.urlsplit(args.imds_url)
    if url.scheme != "http" or not url.hostname or url.query or url.fragment:
        found.add("--imds-url", args.imds_url, f"an http:// base URL such as {DEFAULT_URL}")
    poll = _number(found, "--poll-interval", args.poll_interval, 0.1, 60, "seconds between 0.1 and 60 (Azure: ~1)")
    timeout = _number(found, "--imds-timeout", args.imds_timeout, 0.1, 30, "seconds between 0.1 and 30")
    margin = _number(found, "--grace-margin", args.grace_margin, 0, 25, "seconds between 0 and 25 (the notice is 30)")
    drain = _number(found, "--drain-timeout", args.drain_timeout, 1, 3600, "seconds between 1 and 3600")
    act_on = tuple(t.strip() for t in args.act_on.split(",") if t.strip())
    unknown = [t for t in act_on if t not in EVENT_TYPES]
    if not act_on or unknown:
        found.add("--act-on", args.act_on, f"a comma-separated list of {', '.join(EVENT_TYPES)}")
    kubeconfig = Path(args.kubeconfig) if args.kubeconfig else None
    if kubeconfig is not None and not kubeconfig.is_file():
        found.add("--kubeconfig", args.kubeconfig, "an existing kubeconfig file")
    found.raise_if_any()
    return Settings(
        node=node,
        imds_url=args.imds_url,
        poll_interval_s=poll,
        imds_timeout_s=timeout,
        act_on=act_on,
        grace_margin_s=margin,
        drain_timeout_s=drain,
        kubeconfig=kubeconfig,
    )


def core_api(kubeconfig: Path | None) -> client.CoreV1Api:
    """A CoreV1Api from `kubeconfig`, or the in-cluster config (the pod's service account)."""
    if kubeconfig is not None:
        return client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.CoreV1Api(client.ApiClient(configuration))


def main(argv: list[str] | None = None, stop: threading.Event | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        s = settings(args)
    except InvalidInput as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        core = core_api(s.kubeconfig)
    except (ConfigException, OSError, ValueError) as exc:
        where = f"--kubeconfig={str(s.kubeconfig)!r}" if s.kubeconfig else "in-cluster config"
        print(f"{PROG}: {where} cannot be used: {exc} (outside a pod, pass --kubeconfig)", file=sys.stderr)
        return 2
    stop = stop or threading.Event()
    restore = _stop_on_signals(stop)
    log = JsonLog()
    drainer = Drainer(core, s.node, log, margin_s=s.grace_margin_s, stop=stop)
    handler = Handler(
        Imds(s.imds_url, timeout_s=s.imds_timeout_s),
        drainer,
        log,
        act_on=s.act_on,
        poll_interval_s=s.poll_interval_s,
        drain_timeout_s=s.drain_timeout_s,
    )
    try:
        handler.run()
    finally:
        restore()
    return 0


def _stop_on_signals(stop: threading.Event) -> Callable[[], None]:
    """SIGTERM and SIGINT stop the loop (main thread only); returns a function that restores
    the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore

"""Command-line options of a JobSpec, shared by `elastic-lab drill` and `elastic-lab submit`:
the same job is described by the same flags on the local target and on a cluster."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from lab.spec.job import JobSpec, RdzvBackend, RendezvousTimeouts

RDZV_SETTINGS = {"ours": RendezvousTimeouts, "torch-defaults": RendezvousTimeouts.torch_defaults}


def add_job_arguments(group: argparse._ArgumentGroup) -> None:
    d = JobSpec.__dataclass_fields__
    group.add_argument("--name", default=d["name"].default, help=f"job name [{d['name'].default}]")
    group.add_argument(
        "--min-nodes", type=int, default=d["min_nodes"].default, help=f"elastic minimum [{d['min_nodes'].default}]"
    )
    group.add_argument(
        "--max-nodes", type=int, default=d["max_nodes"].default, help=f"elastic maximum [{d['max_nodes'].default}]"
    )
    group.add_argument(
        "--nproc-per-node",
        type=int,
        default=d["nproc_per_node"].default,
        help=f"worker processes per node [{d['nproc_per_node'].default}]",
    )
    group.add_argument(
        "--backend",
        default=RdzvBackend.ETCD_V2.value,
        help="rendezvous backend: etcd-v2 (default) or c10d (a store of its own, never on a worker)",
    )
    group.add_argument(
        "--rdzv-settings",
        choices=list(RDZV_SETTINGS),
        default="ours",
        help="rendezvous timings: ours (fast recovery, default) or torchrun's defaults",
    )
    group.add_argument(
        "--join-timeout",
        type=float,
        default=None,
        help="seconds an agent waits for min-nodes to join before its pod is retried; on a cluster "
        f"it includes GPU spot nodes being provisioned [{RendezvousTimeouts.join_s:g}; torch-defaults "
        f"{RendezvousTimeouts.torch_defaults().join_s:g}]",
    )
    group.add_argument(
        "--max-restarts",
        type=int,
        default=d["max_restarts"].default,
        help=f"restarts per agent, the job's eviction budget [{d['max_restarts'].default}]",
    )
    group.add_argument(
        "--checkpoint-every",
        type=int,
        default=d["checkpoint_every_steps"].default,
        help=f"steps between checkpoints [{d['checkpoint_every_steps'].default}]",
    )
    group.add_argument(
        "--pg-timeout",
        type=float,
        default=d["pg_timeout_s"].default,
        help=f"process-group timeout, seconds: how fast a vanished peer is noticed [{d['pg_timeout_s'].default:g}]",
    )


def _timeouts(args: argparse.Namespace) -> RendezvousTimeouts:
    base = RDZV_SETTINGS[args.rdzv_settings]()
    if args.join_timeout is None:
        return base
    return dataclasses.replace(base, join_s=args.join_timeout)  # checked with the rest of the JobSpec


def job_fields(args: argparse.Namespace) -> dict[str, Any]:
    """JobSpec keyword arguments from the options above."""
    return {
        "name": args.name,
        "min_nodes": args.min_nodes,
        "max_nodes": args.max_nodes,
        "nproc_per_node": args.nproc_per_node,
        "rdzv_backend": args.backend,
        "rdzv_timeouts": _timeouts(args),
        "max_restarts": args.max_restarts,
        "checkpoint_every_steps": args.checkpoint_every,
        "pg_timeout_s": args.pg_timeout,
    }

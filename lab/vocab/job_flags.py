"""Command-line options of a JobSpec, shared by `elastic-lab drill` and `elastic-lab submit`:
the same job is described by the same flags on the local target and on a cluster."""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from lab.vocab.batch_policy import BATCH_POLICIES, BatchPolicy
from lab.vocab.checkpoint_interval import BAND_NAMES
from lab.vocab.job import FaultTolerance, JobSpec, RdzvBackend
from lab.vocab.models import MODELS, PARALLEL, TINY
from lab.vocab.per_step import PerStepSettings
from lab.vocab.problems import InvalidInput, Problem, Problems
from lab.vocab.rendezvous_timeouts import RendezvousTimeouts

RDZV_SETTINGS = {"ours": RendezvousTimeouts, "torch-defaults": RendezvousTimeouts.torch_defaults}
PER_STEP_SETTINGS = {"ours": PerStepSettings, "torch-defaults": PerStepSettings.torchft_defaults}

# The option that sets each JobSpec value, so that a problem names what was typed.
OPTIONS = {
    "name": "--name",
    "min_nodes": "--min-nodes",
    "max_nodes": "--max-nodes",
    "burst_nodes": "--burst",
    "nproc_per_node": "--nproc-per-node",
    "rdzv_backend": "--backend",
    "rdzv_timeouts.join_s": "--join-timeout",
    "max_restarts": "--max-restarts",
    "checkpoint_every_steps": "--checkpoint-every",
    "eviction_band": "--eviction-band",
    "eviction_mtbf_s": "--eviction-mtbf",
    "pg_timeout_s": "--pg-timeout",
    "fault_tolerance": "--fault-tolerance",
    "batch_policy": "--batch-policy",
    "global_batch": "--global-batch",
    "image": "--image",
    "module": "--module",
    "script": "--script",
}


class _NameOption(argparse.Action):
    """Stores the job's name, and remembers it under each spelling given (`--name`, `--job`):
    two spellings of one option with different names is a contradiction, not a choice."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, NAMES_GIVEN, {**(getattr(namespace, NAMES_GIVEN, None) or {}), option: values})


# Where _NameOption keeps the names given, by spelling.
NAMES_GIVEN = "names_given"


def add_job_arguments(group: argparse._ArgumentGroup, *, name_as_job: bool = False) -> None:
    """The JobSpec's options; `name_as_job`: the name is also `--job`, as `status`, `logs` and
    `delete` call it (not where `--job` means another job, as the cluster drill's attach)."""
    d = JobSpec.__dataclass_fields__
    group.add_argument(
        "--name",
        *(["--job"] if name_as_job else []),
        dest="name",
        action=_NameOption,
        default=d["name"].default,
        help=("job name (--job is the same option) " if name_as_job else "job name ") + f"[{d['name'].default}]",
    )
    group.add_argument(
        "--min-nodes", type=int, default=None, help=f"elastic minimum [{d['min_nodes'].default}; --core's]"
    )
    group.add_argument(
        "--max-nodes", type=int, default=None, help=f"elastic maximum [{d['max_nodes'].default}; --core + --burst]"
    )
    group.add_argument(
        "--core",
        type=int,
        default=None,
        help="nodes at the team's own priority: the same as --min-nodes N --max-nodes N+burst [max-nodes - burst]",
    )
    group.add_argument(
        "--burst",
        type=int,
        default=d["burst_nodes"].default,
        help="of --max-nodes, the nodes borrowed from capacity other teams own, at a priority their work preempts "
        f"first; the job shrinks to its core when they take it back [{d['burst_nodes'].default}]",
    )
    group.add_argument(
        "--nproc-per-node",
        type=int,
        default=d["nproc_per_node"].default,
        help=f"worker processes per node [{d['nproc_per_node'].default}]",
    )
    _mode_arguments(group)
    _checkpoint_arguments(group)


def _mode_arguments(group: argparse._ArgumentGroup) -> None:
    """How the job survives a node leaving: its fault-tolerance mode and rendezvous."""
    group.add_argument(
        "--fault-tolerance",
        default=FaultTolerance.ELASTIC.value,
        metavar="{" + ",".join(f.value for f in FaultTolerance) + "}",
        help="elastic: torchrun restarts every worker when a node leaves or joins; per-step: each node is a "
        f"TorchFT replica group, a lighthouse forms a quorum per step and the survivors train on "
        f"[{FaultTolerance.ELASTIC.value}]",
    )
    group.add_argument(
        "--batch-policy",
        default=BatchPolicy.FIXED_GLOBAL.value,
        metavar="{" + ",".join(BATCH_POLICIES) + "}",
        help="fixed-global: the job's global batch and learning rate whatever the world size (the ranks "
        "accumulate micro-batches while nodes are missing: a step at world 2 of 3 takes about 3/2 as long); "
        "per-worker: one micro-batch per worker, the global batch and learning rate follow the world size "
        f"[{BatchPolicy.FIXED_GLOBAL.value}]",
    )
    group.add_argument(
        "--global-batch",
        type=int,
        default=None,
        help="fixed-global: samples per step [the trainer's batch size x max-nodes x nproc-per-node]",
    )
    group.add_argument(
        "--backend",
        default=RdzvBackend.ETCD_V2.value,
        metavar="{" + ",".join(b.value for b in RdzvBackend) + "}",
        help="rendezvous backend: etcd-v2, or c10d (a store of its own, never on a worker) "
        f"[{RdzvBackend.ETCD_V2.value}]",
    )
    group.add_argument(
        "--rdzv-settings",
        choices=list(RDZV_SETTINGS),
        default="ours",
        help="rendezvous timings (the lighthouse's in per-step mode): ours (fast recovery) or torchrun's "
        "(TorchFT's) defaults [ours]",
    )
    group.add_argument(
        "--join-timeout",
        type=float,
        default=None,
        help="seconds an agent waits for min-nodes to join before its pod is retried; on a cluster "
        f"it includes GPU spot nodes being provisioned [{RendezvousTimeouts.join_s:g}; torch-defaults "
        f"{RendezvousTimeouts.torch_defaults().join_s:g}]",
    )


def _checkpoint_arguments(group: argparse._ArgumentGroup) -> None:
    """The job's restart budget, checkpoints and collective timeout."""
    d = JobSpec.__dataclass_fields__
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
        help="steps between checkpoints; 0: derived while the job runs (elastic mode), Daly's interval from "
        "what its saves cost and how often it loses a node (--eviction-band until it has seen two evictions) "
        f"[{d['checkpoint_every_steps'].default}]",
    )
    group.add_argument(
        "--eviction-band",
        default=d["eviction_band"].default,
        metavar="{" + ",".join(BAND_NAMES) + "}",
        # argparse expands % in help texts
        help="the GPU pool's monthly eviction-rate band, for --checkpoint-every 0 "
        + f"[{d['eviction_band'].default}]".replace("%", "%%"),
    )
    group.add_argument(
        "--eviction-mtbf",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the job's mean seconds between evictions when known (a pool's record; `plan --trace` gives a trace "
        "window's, in the trace's own time), for --checkpoint-every 0 in place of --eviction-band's rate [unset; a "
        "local drill with --trace: the window's, in replay time]",
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


def node_counts(args: argparse.Namespace) -> tuple[int, int]:
    """(min_nodes, max_nodes) of --min-nodes and --max-nodes, or of --core and --burst: a core of
    N nodes is elastic from N to N + burst (InvalidInput where the options contradict it)."""
    core, burst = args.core, args.burst if isinstance(args.burst, int) else 0
    if core is None:
        low: int = args.min_nodes if args.min_nodes is not None else JobSpec.min_nodes
        return low, args.max_nodes if args.max_nodes is not None else JobSpec.max_nodes
    found = Problems()
    for option, given, implied in (
        ("--min-nodes", args.min_nodes, core),
        ("--max-nodes", args.max_nodes, core + burst),
    ):
        if given is not None and given != implied:
            found.add(option, given, f"{implied} with --core {core} --burst {burst}, or left out")
    found.raise_if_any()
    return core, core + burst


def job_fields(args: argparse.Namespace) -> dict[str, Any]:
    """JobSpec keyword arguments from the options above."""
    low, high = node_counts(args)
    return {
        "name": args.name,
        "min_nodes": low,
        "max_nodes": high,
        "burst_nodes": args.burst,
        "nproc_per_node": args.nproc_per_node,
        "rdzv_backend": args.backend,
        "rdzv_timeouts": _timeouts(args),
        "max_restarts": args.max_restarts,
        "checkpoint_every_steps": args.checkpoint_every,
        "eviction_band": args.eviction_band,
        "eviction_mtbf_s": args.eviction_mtbf,
        "pg_timeout_s": args.pg_timeout,
        "fault_tolerance": args.fault_tolerance,
        "batch_policy": args.batch_policy,
        "global_batch": args.global_batch,
        "per_step": PER_STEP_SETTINGS[args.rdzv_settings](),
    }


def as_options(problems: Iterable[Problem]) -> list[Problem]:
    """The same problems, keyed by the options that set the values (`pg_timeout_s` -> `--pg-timeout`)."""
    return [Problem(OPTIONS.get(p.key, p.key), p.value, p.expected) for p in problems]


def job_spec(args: argparse.Namespace, **more: Any) -> JobSpec:
    """The JobSpec of the options above and `more` (script, checkpoint_dir, ...). Every bad
    value at once in one InvalidInput, one problem per option, keyed as typed."""
    found = Problems()
    names = getattr(args, NAMES_GIVEN, None) or {}
    if len(set(names.values())) > 1:
        (first, name), *others = names.items()
        for option, other in others:
            if other != name:
                found.add(option, other, f"the same name as {first} ({name!r}): they are one option, give it once")
    for option, value in (("--join-timeout", args.join_timeout), ("--pg-timeout", args.pg_timeout)):
        if value is not None and not (math.isfinite(value) and value > 0):
            found.add(option, value, "a finite number of seconds > 0")
    spec: JobSpec | None = None
    try:
        spec = JobSpec(**job_fields(args), **more)
    except InvalidInput as exc:  # the options' own contradictions, or the JobSpec's values
        flagged = {p.key for p in found}
        found.extend(p for p in as_options(exc.problems) if p.key not in flagged)
    if found or spec is None:
        raise InvalidInput(found.items)
    return spec


def add_model_arguments(group: Any) -> None:
    """--model and --parallel: the demo trainer's model and how it spreads over the ranks, the
    same typed flags on `drill` and `submit` (a script of one's own builds its own model)."""
    group.add_argument(
        "--model",
        choices=MODELS,
        default=TINY,
        help="the demo's model: tiny (quick), gpt-small, gpt-100m (114M parameters, sharded checkpoints; "
        f"seconds per step on a CPU) [{TINY}]",
    )
    group.add_argument(
        "--parallel",
        choices=PARALLEL,
        default="fsdp",
        help="GPT sizes: fsdp shards the state over the ranks, ddp replicates it [fsdp]",
    )


def own_model_problems(args: argparse.Namespace, what: str) -> list[Problem]:
    """--model (or --parallel) given for a job that runs `what` (a script or module of one's own),
    which builds its own model."""
    return [
        Problem(flag, value, f"{default} (the default) with {what}: your script builds its own model")
        for flag, value, default in (("--model", args.model, TINY), ("--parallel", args.parallel, "fsdp"))
        if value != default
    ]

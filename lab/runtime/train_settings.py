"""The demo training script's settings: its flags, their defaults from the launcher's
environment (the LAB_* contract of lab.vocab.job and lab.vocab.batch_policy), and their checks.
`elastic-lab submit` parses a job's script arguments with the same parser before anything starts."""

from __future__ import annotations

import argparse
import math
import os

from lab.runtime.workload import MODELS, PARALLEL, TINY
from lab.vocab.batch_policy import (
    BATCH_POLICIES,
    ENV_BATCH_POLICY,
    ENV_FULL_WORLD_SIZE,
    ENV_GLOBAL_BATCH,
    LR_SCALINGS,
    BatchPolicy,
)
from lab.vocab.checkpoint_interval import BAND_NAMES
from lab.vocab.job import (
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINT_EVERY,
    ENV_CHECKPOINT_WRITES,
    ENV_EVICTION_BAND,
    ENV_EVICTION_MTBF,
    ENV_NOTICE_S,
    ENV_PG_TIMEOUT,
)
from lab.vocab.per_step import ENV_FAULT_TOLERANCE


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Elastic demo training (launch with torchrun).")
    _add_model_args(p)
    _add_recovery_args(p)
    _add_run_args(p)
    args = p.parse_args(argv)
    _fill_defaults(args)
    _check(p, args)
    return args


def _add_model_args(p: argparse.ArgumentParser) -> None:
    """What is trained, on what data."""
    p.add_argument("--steps", type=int, default=300, help="optimizer steps to train in total")
    p.add_argument(
        "--model",
        choices=MODELS,
        default=TINY,
        help="tiny: a small classifier (quick drills); gpt-small, gpt-100m: a GPT-style transformer "
        "on generated tokens, with sharded checkpoints",
    )
    p.add_argument(
        "--parallel",
        choices=PARALLEL,
        default="fsdp",
        help="GPT sizes: fsdp shards parameters, gradients and optimizer state over the ranks (FSDP2); "
        "ddp replicates them (the tiny model always trains with DDP)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="samples one worker puts through one forward and backward (its micro-batch) "
        "[tiny 64, gpt-small 8, gpt-100m 1]",
    )
    p.add_argument(
        "--lr", type=float, default=None, help="learning rate of one micro-batch [tiny 0.05 SGD, GPT 3e-4 AdamW]"
    )
    p.add_argument(
        "--lr-scaling",
        choices=LR_SCALINGS,
        default="linear",
        help="how the learning rate grows with the global batch (in micro-batches)",
    )
    _add_batch_args(p)
    p.add_argument("--dataset-size", type=int, default=None, help="samples in the data set [tiny 8192, GPT 2048]")
    p.add_argument("--seed", type=int, default=0, help="the data set, the initial weights and the sample order")
    p.add_argument(
        "--order-seed",
        type=int,
        default=None,
        help="the order samples are drawn in, alone (default: --seed): runs that differ only in it show how "
        "much the loss depends on incidental choices",
    )


def _add_batch_args(p: argparse.ArgumentParser) -> None:
    """The batch policy (lab.vocab.batch_policy); the defaults come from the launcher's environment."""
    env = os.environ.get
    p.add_argument(
        "--batch-policy",
        choices=BATCH_POLICIES,
        default=env(ENV_BATCH_POLICY, BatchPolicy.FIXED_GLOBAL.value),
        help="fixed-global: a step's samples and learning rate stay the job's whatever the world size, the "
        "ranks accumulating micro-batches when nodes are missing; per-worker: one micro-batch per worker, the "
        "global batch and learning rate following the world size",
    )
    p.add_argument(
        "--global-batch",
        type=int,
        default=int(env(ENV_GLOBAL_BATCH) or 0) or None,
        help="fixed-global: samples per step [--batch-size x --full-world-size]",
    )
    p.add_argument(
        "--full-world-size",
        type=int,
        default=int(env(ENV_FULL_WORLD_SIZE) or 0) or None,
        help="workers at the job's full size (its maximum nodes x workers per node) [the world size at the start]",
    )


def _add_recovery_args(p: argparse.ArgumentParser) -> None:
    """Checkpoints, notices and lost peers; the defaults come from the launcher's environment."""
    env = os.environ.get
    p.add_argument("--checkpoint-dir", default=env(ENV_CHECKPOINT_DIR, "checkpoints"))
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=int(env(ENV_CHECKPOINT_EVERY, "50")),
        help="steps between periodic checkpoints; 0: derived while the job runs (elastic mode: Daly's "
        "interval from the measured save cost and the eviction rate, lab.runtime.checkpoint_pacer)",
    )
    p.add_argument(
        "--eviction-band",
        choices=BAND_NAMES,
        default=env(ENV_EVICTION_BAND, "10-15%"),
        help="the monthly eviction-rate band a derived interval starts from, until the job has seen two evictions",
    )
    p.add_argument(
        "--eviction-mtbf",
        type=float,
        default=env(ENV_EVICTION_MTBF, "0"),  # argparse converts a string default with `type`
        help="the job's mean seconds between evictions when known: a derived interval starts from it instead "
        "of --eviction-band's rate; 0: unknown",
    )
    p.add_argument(
        "--checkpoint-writes", default=env(ENV_CHECKPOINT_WRITES, "rename"), choices=["rename", "write-once"]
    )
    p.add_argument("--keep-checkpoints", type=int, default=3)
    p.add_argument(
        "--pinned-staging",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sharded checkpoints: stage the state into pinned host memory (as much as the rank's state) [on a GPU]",
    )
    p.add_argument(
        "--notice-seconds",
        type=float,
        default=float(env(ENV_NOTICE_S, "30")),
        help="sharded checkpoints: how long a spot notice gives (Azure 30, AWS 120); the emergency save must "
        "start well inside it",
    )
    p.add_argument(
        "--pg-timeout",
        type=float,
        default=float(env(ENV_PG_TIMEOUT, "15")),
        help="seconds before a collective with a vanished peer fails",
    )
    p.add_argument(
        "--save-on-failure",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="when a peer vanishes mid-step, save the last completed step before exiting",
    )


def _add_run_args(p: argparse.ArgumentParser) -> None:
    """How the run behaves: its simulated accelerator, its fault tolerance, its sample log."""
    p.add_argument(
        "--step-time",
        type=float,
        default=0.0,
        help="simulated accelerator seconds per step (the CPU demo model is tiny)",
    )
    p.add_argument(
        "--fault-tolerance",
        choices=["elastic", "per-step"],
        default=os.environ.get(ENV_FAULT_TOLERANCE, "elastic"),
        help="elastic: torchrun restarts every worker on a membership change; per-step: each node is a "
        "TorchFT replica group and the survivors go on (lab.runtime.train_per_step)",
    )
    p.add_argument(
        "--log-samples",
        action="store_true",
        help="emit the sample indices of every step (for tests of the data sharding)",
    )


def _fill_defaults(args: argparse.Namespace) -> None:
    """The model's own defaults, where the flags left them out."""
    tiny = args.model == TINY
    if args.order_seed is None:
        args.order_seed = args.seed
    if args.batch_size is None:
        args.batch_size = 64 if tiny else 8 if args.model == "gpt-small" else 1
    if args.dataset_size is None:
        args.dataset_size = 8192 if tiny else 2048
    if args.lr is None:
        args.lr = 0.05 if tiny else 3e-4


def _check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("steps", "batch_size", "dataset_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)} is invalid: expected >= 1")
    for name in ("global_batch", "full_world_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)} is invalid: expected >= 1")
    if args.checkpoint_every < 0 or (args.checkpoint_every == 0 and args.fault_tolerance == "per-step"):
        p.error(f"--checkpoint-every={args.checkpoint_every} is invalid: expected >= 1, or 0 (derived) in elastic mode")
    if not (math.isfinite(args.eviction_mtbf) and args.eviction_mtbf >= 0):
        p.error(
            f"--eviction-mtbf={args.eviction_mtbf} is invalid: expected a finite number of seconds > 0, or 0: unknown"
        )
    if not args.notice_seconds > 0:
        p.error(f"--notice-seconds={args.notice_seconds} is invalid: expected seconds > 0")

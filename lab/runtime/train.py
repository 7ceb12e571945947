"""An elastic-ready training script, to be launched by torchrun on every node.

Read it top to bottom:
  1. settings: command-line flags, with defaults from the launcher's environment (LAB_*);
  2. the data: a synthetic classification set, sharded by global sample index;
  3. the model and optimizer, with the learning rate scaled to the world size;
  4. resume from the newest valid checkpoint;
  5. the training loop (DistributedDataParallel, torch.optim): checkpoints on a timer of
     steps, an emergency checkpoint on a spot notice (SIGTERM, even while a collective waits
     on a vanished peer), and a save of the last completed step when a peer's loss fails a
     collective;
  6. exit.

Every distributed setting (rank, world size, rendezvous) comes from torchrun's environment.
Structured events (lab.runtime.events) let the eviction drill measure what happened.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from lab.runtime import events
from lab.runtime.checkpoint import CheckpointStore
from lab.vocab.job import ENV_CHECKPOINT_DIR, ENV_CHECKPOINT_EVERY, ENV_CHECKPOINT_WRITES, ENV_PG_TIMEOUT
from lab.vocab.per_step import ENV_FAULT_TOLERANCE

log = logging.getLogger("train")

EXIT_ON_NOTICE = 128 + signal.SIGTERM  # the conventional code for "stopped by SIGTERM"


# --------------------------------------------------------------------------- 1. settings
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description="Elastic demo training (launch with torchrun).")
    p.add_argument("--steps", type=int, default=300, help="optimizer steps to train in total")
    p.add_argument("--batch-size", type=int, default=64, help="samples per worker per step")
    p.add_argument("--lr", type=float, default=0.05, help="learning rate at world size 1")
    p.add_argument(
        "--lr-scaling",
        choices=["linear", "sqrt", "none"],
        default="linear",
        help="how the learning rate grows with the world size (global batch)",
    )
    p.add_argument("--dataset-size", type=int, default=8192)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-dir", default=env(ENV_CHECKPOINT_DIR, "checkpoints"))
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=int(env(ENV_CHECKPOINT_EVERY, "50")),
        help="steps between periodic checkpoints",
    )
    p.add_argument(
        "--checkpoint-writes", default=env(ENV_CHECKPOINT_WRITES, "rename"), choices=["rename", "write-once"]
    )
    p.add_argument("--keep-checkpoints", type=int, default=3)
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
    p.add_argument(
        "--step-time",
        type=float,
        default=0.0,
        help="simulated accelerator seconds per step (the CPU demo model is tiny)",
    )
    p.add_argument(
        "--fault-tolerance",
        choices=["elastic", "per-step"],
        default=env(ENV_FAULT_TOLERANCE, "elastic"),
        help="elastic: torchrun restarts every worker on a membership change; per-step: each node is a "
        "TorchFT replica group and the survivors go on (lab.runtime.train_per_step)",
    )
    p.add_argument(
        "--log-samples",
        action="store_true",
        help="emit the sample indices of every step (for tests of the data sharding)",
    )
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "dataset_size", "checkpoint_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)} is invalid: expected >= 1")
    return args


# ------------------------------------------------------------------------------- 2. data
def make_dataset(size: int, seed: int, features: int = 32, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """Points labelled by a fixed random 'teacher' network: learnable, and the same everywhere."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(size, features, generator=g)
    teacher = torch.randn(features, classes, generator=g)
    y = (torch.tanh(x) @ teacher).argmax(dim=1)
    return x, y


class GlobalSampler:
    """Walks one seeded permutation per epoch by *global* position.

    A step takes the next `batch_size * world_size` positions and gives rank r every
    world_size-th of them. The position is part of the checkpoint, so after a restart at
    another world size training continues at the same place: within an epoch no sample is
    skipped or seen twice. A batch never crosses an epoch boundary (the last one is short).
    """

    def __init__(self, size: int, seed: int, epoch: int = 0, position: int = 0):
        self.size, self.seed, self.epoch, self.position = size, seed, epoch, position
        self._order = self._permutation(epoch)

    def _permutation(self, epoch: int) -> torch.Tensor:
        return torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed * 100003 + epoch))

    def peek(self, batch_size: int, rank: int, world_size: int) -> tuple[torch.Tensor, int]:
        """This rank's indices for the next step, and how many samples the step covers."""
        end = min(self.position + batch_size * world_size, self.size)
        window = self._order[self.position : end]
        return window[rank::world_size], len(window)

    def advance(self, count: int) -> None:
        """Commit a completed step (never before: a failed step must be re-done)."""
        self.position += count
        if self.position >= self.size:
            self.epoch, self.position = self.epoch + 1, 0
            self._order = self._permutation(self.epoch)


# ------------------------------------------------------------------ 3. model, optimizer
def make_model(features: int = 32, classes: int = 10) -> nn.Module:
    return nn.Sequential(nn.Linear(features, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, classes))


def pick_device(local_rank: int) -> tuple[torch.device, str]:
    """This worker's GPU and NCCL where there are GPUs, else the CPU and gloo."""
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return device, "nccl"
    return torch.device("cpu"), "gloo"


def scaled_lr(base_lr: float, world_size: int, scaling: str) -> float:
    return base_lr * {"linear": world_size, "sqrt": math.sqrt(world_size), "none": 1}[scaling]


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The world size may differ from the checkpoint's: every group gets this run's rate."""
    for group in optimizer.param_groups:
        group["lr"] = lr


# ---------------------------------------------------------------------------- RNG state
def rng_state(device: torch.device) -> dict:
    return {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def rng_fingerprint() -> str:
    return hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest()[:12]


def restore_rng(state: dict | None, rank: int, world_size: int, seed: int, step: int, device: torch.device) -> None:
    """Each rank resumes its own RNG stream when the checkpoint has it (saved at the same
    world size); otherwise it starts a fresh stream derived from (seed, rank, step)."""
    saved = (state or {}).get("rng_by_rank", {})
    if state is not None and state.get("world_size") == world_size and rank in saved:
        torch.set_rng_state(saved[rank]["torch"])
        if device.type == "cuda" and saved[rank].get("cuda") is not None:
            torch.cuda.set_rng_state(saved[rank]["cuda"], device)
    else:
        torch.manual_seed(seed * 1_000_003 + step * 1009 + rank)


# ------------------------------------------------------------------------ spot notice
class SpotNotice:
    """SIGTERM (a spot notice, or the agent stopping its workers) while training.

    A Python signal handler runs only between bytecodes of the main thread, and a collective
    waiting on a vanished peer holds the main thread in C++ until the process-group timeout:
    SIGTERM would wait that long. So SIGTERM is blocked in every thread and taken by a
    thread of its own (`sigwait`). It calls `on_notice` at once; the training loop holds
    `consistent` from the optimizer's update to the step counter's, so `on_notice` takes it
    and sees the model, optimizer and step of the last completed step, whatever the main
    thread is waiting on. Until training sets `on_notice` there is nothing newer than the
    checkpoint to save, and the process exits at once. Create it before anything starts
    threads (the mask is inherited).
    """

    def __init__(self) -> None:
        self.received_at: float | None = None
        self.consistent = threading.Lock()
        self.on_notice: Callable[[], None] | None = None
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        threading.Thread(target=self._wait, name="spot-notice", daemon=True).start()

    def _wait(self) -> None:
        signal.sigwait({signal.SIGTERM})
        self.received_at = time.time()
        with self.consistent:
            if self.on_notice is not None:
                self.on_notice()
            logging.shutdown()
            os._exit(EXIT_ON_NOTICE)

    @property
    def received(self) -> bool:
        return self.received_at is not None


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s [rank {os.environ.get('RANK', '?')}] %(levelname)s %(message)s",
    )
    args = parse_args(argv)
    notice = SpotNotice()
    if args.fault_tolerance == "per-step":
        from lab.runtime import train_per_step

        demo = train_per_step.Demo(make_dataset, make_model, GlobalSampler, scaled_lr, set_lr, pick_device)
        return train_per_step.run(args, notice, demo)

    # torchrun's environment
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    device, backend = pick_device(local_rank)
    # A short timeout: a vanished peer is noticed in seconds, not after gloo's 30 minutes.
    dist.init_process_group(backend, timeout=timedelta(seconds=args.pg_timeout))
    events.emit("start", world_size=world_size, restarts=restarts, backend=backend, device=str(device))

    x_all, y_all = make_dataset(args.dataset_size, args.seed)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    net = make_model().to(device)
    lr = scaled_lr(args.lr, world_size, args.lr_scaling)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss(reduction="sum")

    # ------------------------------------------------------------------- 4. resume
    store = CheckpointStore(args.checkpoint_dir, args.checkpoint_writes, keep=args.keep_checkpoints)
    writer = f"r{rank}.{os.getpid()}"
    step, sampler = 0, GlobalSampler(args.dataset_size, args.seed)
    # Rank 0 picks the checkpoint and every rank loads that one file: on storage with cached
    # listings, ranks choosing for themselves could resume at different steps.
    choice = [store.latest() if rank == 0 else None]
    dist.broadcast_object_list(choice, src=0)
    loaded = store.load(choice[0], map_location=device) if choice[0] else None
    if loaded is not None:
        state = loaded.state
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        set_lr(optimizer, lr)
        step = state["step"]
        sampler = GlobalSampler(args.dataset_size, args.seed, state["epoch"], state["position"])
        events.emit(
            "checkpoint_loaded",
            step=step,
            epoch=sampler.epoch,
            position=sampler.position,
            seconds=round(loaded.seconds, 4),
            path=loaded.path.name,
            skipped=list(loaded.skipped),
        )
    restore_rng(loaded.state if loaded else None, rank, world_size, args.seed, step, device)
    events.emit(
        "resume" if loaded else "fresh",
        step=step,
        world_size=world_size,
        lr=lr,
        restarts=restarts,
        rng=rng_fingerprint(),
    )
    if rank == 0:
        log.info(
            "%s at step %d: world size %d, lr %.4g, restart %d",
            "resumed" if loaded else "started fresh",
            step,
            world_size,
            lr,
            restarts,
        )

    # Wrapped after loading: DDP broadcasts rank 0's weights to every rank as it starts, and
    # averages gradients during backward (its all_reduce fails when a peer is gone).
    model = DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)

    def snapshot(rng_by_rank: dict[int, dict]) -> dict:
        return {
            "model": net.state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": step,
            "epoch": sampler.epoch,
            "position": sampler.position,
            "world_size": world_size,
            "rng_by_rank": rng_by_rank,
        }

    def save(reason: str, rng_by_rank: dict[int, dict] | None = None, started: float | None = None) -> None:
        if store.has(step):
            # Another rank (or the periodic timer) already saved this very step: nothing to write.
            events.emit("checkpoint_saved", step=step, reason=reason, seconds=0.0, blocking_s=0.0, already=True)
            return
        saved = store.save(snapshot(rng_by_rank or {rank: rng_state(device)}), step, writer)
        # seconds: writing the files; blocking_s: all the training loop waited (with the RNG gather)
        blocking = time.perf_counter() - started if started is not None else saved.seconds
        events.emit(
            "checkpoint_saved",
            step=step,
            reason=reason,
            seconds=round(saved.seconds, 4),
            blocking_s=round(blocking, 4),
            bytes=saved.nbytes,
            path=saved.path.name,
        )

    def peer_lost(exc: BaseException) -> None:
        """A collective failed: a peer vanished (or timed out). The model and optimizer are
        exactly at `step` (no half-applied update), so save that, then leave at once: the
        agent restarts the group only when every local worker has exited, and an orderly
        interpreter teardown with broken sockets takes about half a second."""
        events.emit("collective_failed", step=step, error=type(exc).__name__, message=str(exc)[:200])
        if args.save_on_failure:
            with notice.consistent:  # not at the same time as a notice's save
                save("failure")
        log.error(
            "after step %d a collective failed (%s: %s); exiting for the agent to restart the group",
            step,
            type(exc).__name__,
            str(exc)[:300],
        )
        logging.shutdown()
        os._exit(1)

    def leave_on_notice() -> None:
        """Spot notice (or the agent restarting the group): save the last completed step and
        exit at once, even from the middle of a collective that waits on a vanished peer."""
        assert notice.received_at is not None
        save("notice")
        log.warning("spot notice: saved step %d, exiting", step)
        events.emit("exit", reason="notice", step=step, notice_to_exit_s=round(time.time() - notice.received_at, 4))

    notice.on_notice = leave_on_notice

    # ------------------------------------------------------------- 5. training loop
    while step < args.steps:
        indices, covered = sampler.peek(args.batch_size, rank, world_size)
        xb, yb = x_all[indices].to(device), y_all[indices].to(device)
        t0 = time.perf_counter()
        if args.step_time:
            time.sleep(args.step_time)  # what an accelerator would spend on a real model
        optimizer.zero_grad()
        # DDP averages gradients over ranks; scaling the summed loss by world/covered makes
        # that average the exact mean over the step's global batch, even for a short one.
        local_loss = loss_fn(model(xb), yb)
        try:
            (local_loss * (world_size / covered)).backward()
        except RuntimeError as exc:  # the gradients' all_reduce failed: a peer vanished or timed out
            peer_lost(exc)
        with notice.consistent:  # a notice saves either before this update or after it
            optimizer.step()
            step += 1
            sampler.advance(covered)
        if rank == 0:
            events.emit(
                "step",
                step=step,
                loss=round(local_loss.item() / max(len(indices), 1), 5),
                world_size=world_size,
                samples=covered,
                epoch=sampler.epoch,
                position=sampler.position,
                seconds=round(time.perf_counter() - t0, 5),
            )
        if args.log_samples:
            events.emit(
                "samples",
                step=step,
                epoch=sampler.epoch if sampler.position else sampler.epoch - 1,
                indices=indices.tolist(),
            )
        if step % args.checkpoint_every == 0:
            # Every rank is at this step: gather their RNG states so each resumes its own.
            started, states = time.perf_counter(), [None] * world_size
            try:
                dist.all_gather_object(states, rng_state(device))
            except RuntimeError as exc:
                peer_lost(exc)
            if rank == 0:
                with notice.consistent:
                    save("interval", dict(enumerate(states)), started)
                log.info(
                    "step %d/%d  loss %.4f  world size %d  (checkpoint saved)",
                    step,
                    args.steps,
                    local_loss.item() / max(len(indices), 1),
                    world_size,
                )

    # ------------------------------------------------------------------------ 6. exit
    states = [None] * world_size
    dist.all_gather_object(states, rng_state(device))
    if rank == 0:
        with notice.consistent:
            save("final", dict(enumerate(states)))
    dist.barrier()  # peers tear down their connections only after rank 0's final save
    events.emit("exit", reason="done", step=step, rng=rng_fingerprint())
    # No destroy_process_group() here. It unregisters the group, so returning would drop its
    # last reference with the DDP model's reducer, on this thread, holding the GIL; the
    # group's destructor joins gloo's worker thread, which may still be freeing the
    # barrier's work and need the GIL to release its tensors: a deadlock after the last step.
    # Left registered, the group lives until the process ends, which it does without tearing
    # Python down (`_exit`).
    return 0


def _exit(code: int) -> None:
    """End the script. A warm worker returns to its runner (lab.runtime.warm), whose process ends
    without tearing Python down. A process of its own ends the same way, once its output is
    flushed: torch's process group, still registered (see the end of main), would otherwise
    be destroyed during Python's finalization, where joining gloo's threads can abort
    ("terminate called without an active exception")."""
    from lab.runtime import warm

    if warm.IN_WARM_WORKER:
        sys.exit(code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())

"""An elastic-ready training script, to be launched by torchrun on every node.

Read `ElasticTraining.run` top to bottom:
  1. start: the process group with a short timeout, the data, the model and optimizer
     (lab.runtime.demo), the learning rate scaled to the world size;
  2. resume from the newest valid checkpoint (rank 0 picks it for everyone);
  3. wrap the model in DistributedDataParallel;
  4. train: a `torch.optim` step per batch, checkpoints on a timer of steps, an emergency
     checkpoint on a spot notice (SIGTERM, even while a collective waits on a vanished peer),
     and a save of the last completed step when a peer's loss fails a collective;
  5. finish: a final checkpoint, then exit.

Every distributed setting (rank, world size, rendezvous) comes from torchrun's environment.
Structured events (lab.runtime.events) let the eviction drill measure what happened. With
`--fault-tolerance per-step` the same script trains in TorchFT's per-step mode instead
(lab.runtime.train_per_step).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from datetime import timedelta
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from lab.runtime import events
from lab.runtime.checkpoint import CheckpointStore, Loaded
from lab.runtime.demo import (
    GlobalSampler,
    make_dataset,
    make_model,
    pick_device,
    restore_rng,
    rng_fingerprint,
    rng_state,
    scaled_lr,
    set_lr,
)
from lab.runtime.snapshot import TrainingSnapshot
from lab.runtime.spot_notice import SpotNotice
from lab.vocab.events import (
    EXIT_DONE,
    EXIT_NOTICE,
    SAVE_FAILURE,
    SAVE_FINAL,
    SAVE_INTERVAL,
    SAVE_NOTICE,
    Event,
)
from lab.vocab.job import ENV_CHECKPOINT_DIR, ENV_CHECKPOINT_EVERY, ENV_CHECKPOINT_WRITES, ENV_PG_TIMEOUT
from lab.vocab.per_step import ENV_FAULT_TOLERANCE

log = logging.getLogger("train")


# --------------------------------------------------------------------------- settings
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


class ElasticTraining:
    """One worker of the elastic job, from its start to its exit (see the module's docstring).
    `step` is the last completed step: what every save writes."""

    def __init__(self, args: argparse.Namespace, notice: SpotNotice) -> None:
        self.args, self.notice = args, notice
        # torchrun's environment
        self.rank, self.world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.writer = f"r{self.rank}.{os.getpid()}"
        self.step = 0
        self.sampler = GlobalSampler(args.dataset_size, args.seed)

    def run(self) -> int:
        self.start()
        self.resume()
        self.wrap()
        self.notice.on_notice = self.leave_on_notice
        while self.step < self.args.steps:
            self.train_step()
            if self.step % self.args.checkpoint_every == 0:
                self.save_interval()
        self.finish()
        return 0

    # --------------------------------------------------------------------- 1. start
    def start(self) -> None:
        args = self.args
        self.device, backend = pick_device(self.local_rank)
        # A short timeout: a vanished peer is noticed in seconds, not after gloo's 30 minutes.
        dist.init_process_group(backend, timeout=timedelta(seconds=args.pg_timeout))
        events.emit(
            Event.START, world_size=self.world_size, restarts=self.restarts, backend=backend, device=str(self.device)
        )
        self.x_all, self.y_all = make_dataset(args.dataset_size, args.seed)
        torch.manual_seed(args.seed)  # the same initial weights on every rank
        self.net = make_model().to(self.device)
        self.lr = scaled_lr(args.lr, self.world_size, args.lr_scaling)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=self.lr, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss(reduction="sum")
        self.store = CheckpointStore(args.checkpoint_dir, args.checkpoint_writes, keep=args.keep_checkpoints)

    # -------------------------------------------------------------------- 2. resume
    def resume(self) -> None:
        """Rank 0 picks the checkpoint and every rank loads that one file: on storage with
        cached listings, ranks choosing for themselves could resume at different steps."""
        choice = [self.store.latest() if self.rank == 0 else None]
        dist.broadcast_object_list(choice, src=0)
        loaded = self.store.load(choice[0], map_location=self.device) if choice[0] else None
        snapshot = TrainingSnapshot.from_payload(loaded.state) if loaded is not None else None
        if loaded is not None and snapshot is not None:
            self._apply(snapshot, loaded)
        restore_rng(
            snapshot.rng_by_rank if snapshot else None,
            snapshot.world_size if snapshot else None,
            rank=self.rank,
            world_size=self.world_size,
            seed=self.args.seed,
            step=self.step,
            device=self.device,
        )
        events.emit(
            Event.RESUME if loaded else Event.FRESH,
            step=self.step,
            world_size=self.world_size,
            lr=self.lr,
            restarts=self.restarts,
            rng=rng_fingerprint(),
        )
        if self.rank == 0:
            log.info(
                "%s at step %d: world size %d, lr %.4g, restart %d",
                "resumed" if loaded else "started fresh",
                self.step,
                self.world_size,
                self.lr,
                self.restarts,
            )

    def _apply(self, snapshot: TrainingSnapshot, loaded: Loaded) -> None:
        """The checkpoint's model, optimizer, step and data position; this run's learning rate
        (the world size may differ from the checkpoint's)."""
        snapshot.apply(self.net, self.optimizer)
        set_lr(self.optimizer, self.lr)
        self.step = snapshot.step
        self.sampler = snapshot.sampler(self.args.dataset_size, self.args.seed)
        events.emit(
            Event.CHECKPOINT_LOADED,
            step=self.step,
            epoch=self.sampler.epoch,
            position=self.sampler.position,
            seconds=round(loaded.seconds, 4),
            path=loaded.path.name,
            skipped=list(loaded.skipped),
        )

    # ---------------------------------------------------------------------- 3. wrap
    def wrap(self) -> None:
        """Wrapped after loading: DDP broadcasts rank 0's weights to every rank as it starts,
        and averages gradients during backward (its all_reduce fails when a peer is gone)."""
        device = self.device
        self.model = DistributedDataParallel(self.net, device_ids=[device.index] if device.type == "cuda" else None)

    # --------------------------------------------------------------------- 4. train
    def train_step(self) -> None:
        args = self.args
        indices, covered = self.sampler.peek(args.batch_size, self.rank, self.world_size)
        xb, yb = self.x_all[indices].to(self.device), self.y_all[indices].to(self.device)
        t0 = time.perf_counter()
        if args.step_time:
            time.sleep(args.step_time)  # what an accelerator would spend on a real model
        self.optimizer.zero_grad()
        # DDP averages gradients over ranks; scaling the summed loss by world/covered makes
        # that average the exact mean over the step's global batch, even for a short one.
        local_loss = self.loss_fn(self.model(xb), yb)
        try:
            (local_loss * (self.world_size / covered)).backward()
        except RuntimeError as exc:  # the gradients' all_reduce failed: a peer vanished or timed out
            self.peer_lost(exc)
        with self.notice.consistent:  # a notice saves either before this update or after it
            self.optimizer.step()
            self.step += 1
            self.sampler.advance(covered)
        self.loss = local_loss.item() / max(len(indices), 1)
        if self.rank == 0:
            events.emit(
                Event.STEP,
                step=self.step,
                loss=round(self.loss, 5),
                world_size=self.world_size,
                samples=covered,
                epoch=self.sampler.epoch,
                position=self.sampler.position,
                seconds=round(time.perf_counter() - t0, 5),
            )
        if args.log_samples:
            events.emit(Event.SAMPLES, step=self.step, epoch=self.sampler.epoch_of_last_step, indices=indices.tolist())

    def save_interval(self) -> None:
        """Every rank is at this step: gather their RNG states so each resumes its own."""
        started = time.perf_counter()
        try:
            states = self._gather_rng()
        except RuntimeError as exc:
            self.peer_lost(exc)
        if self.rank == 0:
            with self.notice.consistent:
                self.save(SAVE_INTERVAL, states, started)
            log.info(
                "step %d/%d  loss %.4f  world size %d  (checkpoint saved)",
                self.step,
                self.args.steps,
                self.loss,
                self.world_size,
            )

    def save(
        self, reason: str, rng_by_rank: dict[int, dict[str, Any]] | None = None, started: float | None = None
    ) -> None:
        if self.store.has(self.step):
            # Another rank (or the periodic timer) already saved this very step: nothing to write.
            events.emit(
                Event.CHECKPOINT_SAVED, step=self.step, reason=reason, seconds=0.0, blocking_s=0.0, already=True
            )
            return
        snapshot = TrainingSnapshot.capture(
            self.net,
            self.optimizer,
            self.sampler,
            step=self.step,
            world_size=self.world_size,
            rng_by_rank=rng_by_rank or {self.rank: rng_state(self.device)},
        )
        saved = self.store.save(snapshot.to_payload(), self.step, self.writer)
        # seconds: writing the files; blocking_s: all the training loop waited (with the RNG gather)
        blocking = time.perf_counter() - started if started is not None else saved.seconds
        events.emit(
            Event.CHECKPOINT_SAVED,
            step=self.step,
            reason=reason,
            seconds=round(saved.seconds, 4),
            blocking_s=round(blocking, 4),
            bytes=saved.nbytes,
            path=saved.path.name,
        )

    def peer_lost(self, exc: BaseException) -> NoReturn:
        """A collective failed: a peer vanished (or timed out). The model and optimizer are
        exactly at `step` (no half-applied update), so save that, then leave at once: the
        agent restarts the group only when every local worker has exited, and an orderly
        interpreter teardown with broken sockets takes about half a second."""
        events.emit(Event.COLLECTIVE_FAILED, step=self.step, error=type(exc).__name__, message=str(exc)[:200])
        if self.args.save_on_failure:
            with self.notice.consistent:  # not at the same time as a notice's save
                self.save(SAVE_FAILURE)
        log.error(
            "after step %d a collective failed (%s: %s); exiting for the agent to restart the group",
            self.step,
            type(exc).__name__,
            str(exc)[:300],
        )
        logging.shutdown()
        os._exit(1)

    def leave_on_notice(self) -> None:
        """Spot notice (or the agent restarting the group): save the last completed step and
        exit at once, even from the middle of a collective that waits on a vanished peer."""
        self.save(SAVE_NOTICE)
        log.warning("spot notice: saved step %d, exiting", self.step)
        events.emit(
            Event.EXIT, reason=EXIT_NOTICE, step=self.step, notice_to_exit_s=round(self.notice.seconds_since(), 4)
        )

    # -------------------------------------------------------------------- 5. finish
    def finish(self) -> None:
        states = self._gather_rng()
        if self.rank == 0:
            with self.notice.consistent:
                self.save(SAVE_FINAL, states)
        dist.barrier()  # peers tear down their connections only after rank 0's final save
        events.emit(Event.EXIT, reason=EXIT_DONE, step=self.step, rng=rng_fingerprint())
        # No destroy_process_group() here. It unregisters the group, so returning would drop
        # its last reference with the DDP model's reducer, on this thread, holding the GIL; the
        # group's destructor joins gloo's worker thread, which may still be freeing the
        # barrier's work and need the GIL to release its tensors: a deadlock after the last
        # step. Left registered, the group lives until the process ends, which it does without
        # tearing Python down (`_exit`).

    def _gather_rng(self) -> dict[int, dict[str, Any]]:
        states: list[Any] = [None] * self.world_size
        dist.all_gather_object(states, rng_state(self.device))
        return dict(enumerate(states))


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

        return train_per_step.PerStepTraining(args, notice).run()
    return ElasticTraining(args, notice).run()


def _exit(code: int) -> None:
    """End the script. A warm worker returns to its runner (lab.runtime.warm), whose process
    ends without tearing Python down. A process of its own ends the same way, once its output
    is flushed: torch's process group, still registered (see ElasticTraining.finish), would
    otherwise be destroyed during Python's finalization, where joining gloo's threads can
    abort ("terminate called without an active exception")."""
    from lab.runtime import warm

    if warm.IN_WARM_WORKER:
        sys.exit(code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())

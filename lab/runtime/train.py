"""An elastic-ready training script, to be launched by torchrun on every node.

Read `ElasticTraining.run` top to bottom:
  1. start: the process group with a short timeout, the data, the model and optimizer
     (lab.runtime.workload: `--model tiny` or a GPT size), the learning rate scaled to the
     world size; a GPT is sharded over the ranks by FSDP2 here (`--parallel fsdp`);
  2. resume from the newest valid checkpoint (rank 0 picks it for everyone);
  3. wrap the model in DistributedDataParallel (unless FSDP2 shards it);
  4. train: a `torch.optim` step per batch, checkpoints on a timer of steps (or at an interval
     derived while the job runs, lab.runtime.checkpoint_pacer), an emergency
     checkpoint on a spot notice (SIGTERM, even while a collective waits on a vanished peer),
     and a save of the last completed step when a peer's loss fails a collective;
  5. finish: a final checkpoint, then exit.

Checkpoints of the tiny model are whole (any rank holds the state, lab.runtime.checkpoint):
a notice or a lost peer saves the last step at once, from the rank that sees it. A GPT's are
sharded (lab.runtime.sharded_checkpoint): saved in the background every `--checkpoint-every`
steps by all ranks together; a notice is agreed on at the next step boundary and saved by all
ranks (the notice's emergency save); a lost peer takes its shards with it, so the job resumes
from the last checkpoint (at most one interval lost).

What both modes share (the start, a resume, saves and their events, a notice) is
lab.runtime.trainer's; the checkpoints' kind is chosen there once and used through one
contract (lab.runtime.checkpointer), never asked about in the loop.

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
from typing import NoReturn

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from lab.runtime import events, job_history
from lab.runtime.checkpoint_pacer import CheckpointPacer
from lab.runtime.checkpointer import PeerLost, Resumed, SaveRecord
from lab.runtime.demo import derive_rng, rng_fingerprint, set_lr
from lab.runtime.elastic_batches import gradient_sync
from lab.runtime.object_store import open_store
from lab.runtime.spot_notice import SpotNotice
from lab.runtime.train_settings import parse_args
from lab.runtime.trainer import Trainer, peak_rss_mb
from lab.vocab.events import EXIT_DONE, SAVE_FAILURE, SAVE_INTERVAL, SAVE_NOTICE, Event
from lab.vocab.job import (
    EXIT_PEER_LOST,
    CheckpointWrites,
)

log = logging.getLogger("train")


class ElasticTraining(Trainer):
    """One worker of the elastic job, from its start to its exit (see the module's docstring).
    `step` is the last completed step: what every save writes."""

    def __init__(self, args: argparse.Namespace, notice: SpotNotice) -> None:
        super().__init__(args, notice)
        self.step = 0
        self.fsdp = self.workload.sharded and args.parallel == "fsdp"
        self.parallel = args.parallel if self.workload.sharded else "ddp"
        self.pacer: CheckpointPacer | None = None  # a derived checkpoint interval (--checkpoint-every 0)

    def run(self) -> int:
        self.start()
        self.resume()
        self.wrap()
        at_boundary = self.arm_notice()  # whole checkpoints: the step's own loss; sharded: agree on a notice
        while self.step < self.args.steps:
            self.train_step()
            at_boundary()
            self.report_save()
            self.save_if_due()
        self.finish()
        return 0

    def current_step(self) -> int:
        return self.step

    def learning_rate(self) -> float:
        """The global batch's (per-worker: it follows the world size)."""
        return self.plan.learning_rate(self.args.lr, self.world_size, self.args.lr_scaling)

    # -------------------------------------------------------------------- 2. resume
    def resume(self) -> None:
        """Rank 0 picks the checkpoint and every rank loads that one: on storage with cached
        listings, ranks choosing for themselves could resume at different steps. A sharded
        checkpoint may come from another world size (DCP reshards it)."""
        resumed = self.load_checkpoint()
        if resumed is not None:
            self._apply(resumed)
        derive_rng(self.args.seed, self.rank, self.step)  # each rank's streams of this step
        loaded = resumed is not None
        if self.args.checkpoint_every == 0:
            nodes = max(self.world_size // int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)
            seen = self._record_start(nodes, loaded)
            self.pacer = CheckpointPacer(
                self.args.eviction_band,
                nodes,
                self.step,
                seen.evictions,
                seen.trained_s,
                known_mtbf_s=self.args.eviction_mtbf or None,
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

    def _apply(self, resumed: Resumed) -> None:
        """The checkpoint's step and data position (its model and optimizer are loaded); this
        run's learning rate (the world size may differ from the checkpoint's)."""
        set_lr(self.optimizer, self.lr)
        self.step = resumed.step
        events.emit(
            Event.CHECKPOINT_LOADED,
            step=self.step,
            epoch=self.sampler.epoch,
            position=self.sampler.position,
            seconds=round(resumed.seconds, 4),
            **resumed.fields,
        )

    def _record_start(self, nodes: int, resumed: bool) -> job_history.Start:
        """What the job has lived through (rank 0 keeps the record; the ranks agree on the
        counts at each save). Storage that refuses the record costs the counts, not the job."""
        if self.rank != 0:
            return job_history.Start(time.time(), nodes, 0, 0.0)
        try:
            return job_history.record_start(
                open_store(self.args.checkpoint_dir, CheckpointWrites(self.args.checkpoint_writes)), nodes, resumed
            )
        except Exception as exc:  # noqa: BLE001 - any store's error (a file system's, S3's, Azure's)
            log.warning("the job's history beside its checkpoints could not be kept (%s): counting from now", exc)
            return job_history.Start(time.time(), nodes, 0, 0.0)

    # ---------------------------------------------------------------------- 3. wrap
    def wrap(self) -> None:
        """Wrapped after loading: DDP broadcasts rank 0's weights to every rank as it starts,
        and averages gradients during backward (its all_reduce fails when a peer is gone).
        FSDP2 has sharded the model already (start): it averages gradients likewise."""
        device = self.device
        if self.fsdp:
            self.model: nn.Module = self.net
            return
        self.model = DistributedDataParallel(self.net, device_ids=[device.index] if device.type == "cuda" else None)

    # --------------------------------------------------------------------- 4. train
    def train_step(self) -> None:
        args, plan = self.args, self.plan
        window = self.sampler.window(plan.step_samples(self.world_size))
        covered = len(window)
        parts = plan.share(window, self.rank, self.world_size)
        indices = torch.cat(list(parts))
        if args.log_samples:
            # Logged before these samples' gradients can enter the all-reduce: an all-reduce can
            # complete on some ranks and fail on others (a peer left in the middle of it), and a
            # rank whose backward failed still contributed its gradients to the ranks whose
            # update went through. A step that no rank completed is redone after a `resume` from
            # before it, which is how a reader of the log tells the two apart.
            events.emit(Event.SAMPLES, step=self.step + 1, epoch=self.sampler.epoch, indices=indices.tolist())
        t0 = time.perf_counter()
        if args.step_time:
            # What an accelerator would spend: a micro-batch's time per micro-batch of the
            # largest share (every rank waits for that one at the gradients' all-reduce).
            time.sleep(args.step_time * -(-covered // self.world_size) / plan.micro_batch)
        self.optimizer.zero_grad()
        try:
            # FSDP2 gathers each block's parameters in the forward pass: a lost peer can fail it
            # there as well as in backward (DDP's gradient all_reduce).
            local_loss = self._accumulate(parts, covered)
        except RuntimeError as exc:  # a collective failed: a peer vanished or timed out
            self.peer_lost(exc)
        self.checkpointer.wait_for_staging()  # a save in flight copies the state this step changes
        computed = time.perf_counter()
        with self.notice.consistent:  # a notice saves either before this update or after it
            self.optimizer.step()
            self.step += 1
            self.sampler.advance(covered)
        derive_rng(args.seed, self.rank, self.step)  # what the next step draws: the step's own
        self.loss = local_loss / max(len(indices), 1)
        self.covered, self.local_loss, self.step_seconds = covered, local_loss, time.perf_counter() - t0
        self.micro_batches = len(parts)
        self.phases = {"compute": computed - t0, "update": time.perf_counter() - computed}

    def _accumulate(self, parts: list[torch.Tensor], covered: int) -> float:
        """Forward and backward over this rank's micro-batches; the gradients are averaged over
        the ranks once, in the last one's backward. DDP (and FSDP) average gradients over
        ranks: scaling each summed loss by world/covered makes that average the exact mean
        over the step's global batch, even for a short one. Returns this rank's summed loss."""
        total = torch.zeros((), device=self.device)
        for i, part in enumerate(parts):
            with gradient_sync(self.model, last=i == len(parts) - 1):
                batch = self.workload.batch(self.data, part, self.device)
                loss = self.workload.loss_sum(self.model, batch)
                (loss * (self.world_size / covered)).backward()  # type: ignore[no-untyped-call]
            total += loss.detach()
        return total.item()

    def boundary_alone(self) -> None:
        """Whole checkpoints: no rank waits at the boundary for a notice (the noticed rank saves
        alone); the ranks sum their losses (one small all_reduce) for the step's mean loss over
        its global batch, which the step's event carries."""
        total = torch.tensor([self.local_loss], dtype=torch.float64, device=self.device)
        try:
            dist.all_reduce(total)
        except RuntimeError as exc:
            self.peer_lost(exc)
        self._record_step(total.item() / max(self.covered, 1))

    def _record_step(self, loss: float) -> None:
        if self.rank == 0:
            events.emit(
                Event.STEP,
                step=self.step,
                loss=round(loss, 5),
                loss_hex=loss.hex(),
                world_size=self.world_size,
                samples=self.covered,
                micro_batches=self.micro_batches,
                epoch=self.sampler.epoch,
                position=self.sampler.position,
                seconds=round(self.step_seconds, 5),
                phases={name: round(seconds, 5) for name, seconds in self.phases.items()},
            )

    def agree_on_notice(self) -> None:
        """Sharded checkpoints: at every step boundary the ranks agree whether any of them got
        a spot notice (one small all_reduce, which also gives the step's mean loss); if one did,
        all of them save this step together (the emergency save), then the noticed ranks go."""
        flags = torch.tensor([float(self.notice.requested.is_set()), self.local_loss], device=self.device)
        try:
            dist.all_reduce(flags)
        except RuntimeError as exc:
            self.peer_lost(exc)
        self._record_step(flags[1].item() / max(self.covered, 1))
        # A step boundary comes within a few steps' time while every peer is there.
        self.notice.boundary_s = max(2.0, 3 * self.step_seconds)
        if flags[0].item() == 0:
            return
        self.notice.acknowledge()
        try:
            # A save in flight finishes first: its wait counts in this one's blocking time.
            self.save(SAVE_NOTICE, blocking=True, since=time.perf_counter())
        except Exception as exc:  # noqa: BLE001 - a peer left during the save: the last checkpoint stands
            self.peer_lost(exc)
        if self.notice.requested.is_set():
            log.warning("spot notice: saved step %d with every rank, exiting", self.step)
            self.hand_over_to_the_notice()

    def save_if_due(self) -> None:
        """A periodic checkpoint: on the timer of steps, or at the interval the pacer derives."""
        if self.pacer is None:
            if self.step % self.args.checkpoint_every == 0:
                self.save_interval()
            return
        self.pacer.step_done(self.step_seconds)
        if self.pacer.due(self.step):
            self.pacer.save_started()
            began = time.perf_counter()
            self.save_interval()
            self.pacer.save_held(time.perf_counter() - began)
            self.next_interval()

    def save_interval(self) -> None:
        """Every rank is at this step: rank 0 writes the whole state (whole checkpoints), or
        every rank starts the background save of its shards."""
        started = time.perf_counter()
        try:
            record = self.save(SAVE_INTERVAL, since=started)
        except PeerLost as lost:
            self.peer_lost(lost.__cause__ or lost)
        if record is not None:  # written already (a whole checkpoint, by rank 0)
            log.info(
                "step %d/%d  loss %.4f  world size %d  (checkpoint saved)",
                self.step,
                self.args.steps,
                self.loss,
                self.world_size,
            )

    def next_interval(self) -> None:
        """A derived interval: the ranks agree on the figures (the largest of each) and all set
        the same next save."""
        assert self.pacer is not None
        figures = torch.tensor(self.pacer.proposal(), dtype=torch.float64, device=self.device)
        try:
            dist.all_reduce(figures, op=dist.ReduceOp.MAX)
        except RuntimeError as exc:
            self.peer_lost(exc)
        chosen = self.pacer.decide(self.step, figures.tolist())
        if self.rank == 0:
            events.emit(
                Event.CHECKPOINT_INTERVAL,
                step=self.step,
                steps=chosen.steps,
                next_step=self.pacer.next_save,
                step_s=round(chosen.step_s, 5),
                cost_s=round(chosen.cost_s, 4),
                mtbf_s=round(chosen.mtbf_s, 1),
                source=chosen.source,
                evictions=chosen.evictions,
                trained_s=round(chosen.trained_s, 1),
            )
            log.info(
                "step %d: next checkpoint in %d steps (a save costs %.3g s, a step %.3g s, a node lost "
                "every %.0f s: %s)",
                self.step,
                chosen.steps,
                chosen.cost_s,
                chosen.step_s,
                chosen.mtbf_s,
                chosen.source,
            )

    def report(self, record: SaveRecord | None) -> None:
        if record is None:
            return
        if record.error is not None:
            log.error("checkpoint of step %d failed: %s", record.step, record.error)
            return
        events.emit(Event.CHECKPOINT_SAVED, **record.fields())
        log.info("step %d/%d  checkpoint %s saved (%s)", record.step, self.args.steps, record.path, record.reason)

    def peer_lost(self, exc: BaseException) -> NoReturn:
        """A collective failed: a peer vanished (or timed out). The model and optimizer are
        exactly at `step` (no half-applied update): with whole checkpoints, save that, then
        leave at once: the agent restarts the group only when every local worker has exited,
        and an orderly interpreter teardown with broken sockets takes about half a second.
        Sharded ones need every rank: the peer took its shards along, and the job resumes
        from the last checkpoint."""
        events.emit(Event.COLLECTIVE_FAILED, step=self.step, error=type(exc).__name__, message=str(exc)[:200])
        if self.args.save_on_failure and self.checkpointer.saves_alone:
            with self.notice.consistent:  # not at the same time as a notice's save
                self.save_alone(SAVE_FAILURE)
        log.error(
            "after step %d a collective failed (%s: %s); exiting for the agent to restart the group",
            self.step,
            type(exc).__name__,
            str(exc)[:300],
        )
        logging.shutdown()
        os._exit(EXIT_PEER_LOST)

    def leave_on_notice(self) -> None:
        """Spot notice (or the agent restarting the group): save the last completed step and
        exit at once, even from the middle of a collective that waits on a vanished peer."""
        self.save_alone(SAVE_NOTICE)
        log.warning("spot notice: saved step %d, exiting", self.step)
        self.emit_notice_exit()

    # -------------------------------------------------------------------- 5. finish
    def finish(self) -> None:
        self.report_save()
        self.save_last()
        dist.barrier()  # peers tear down their connections only after rank 0's final save
        events.emit(Event.EXIT, reason=EXIT_DONE, step=self.step, rng=rng_fingerprint(), peak_rss_mb=peak_rss_mb())
        # No destroy_process_group() here. It unregisters the group, so returning would drop
        # its last reference with the DDP model's reducer, on this thread, holding the GIL; the
        # group's destructor joins gloo's worker thread, which may still be freeing the
        # barrier's work and need the GIL to release its tensors: a deadlock after the last
        # step. Left registered, the group lives until the process ends, which it does without
        # tearing Python down (`_exit`).


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

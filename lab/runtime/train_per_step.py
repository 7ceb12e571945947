"""The demo script's per-step fault-tolerant mode (TorchFT): survivors never stop.

Each node (pod) runs one replica group: torchrun on that node alone starts its workers, and
TorchFT's Manager joins the group to a quorum, step by step, through the lighthouse (the
job's rendezvous service in this mode). Gradients are summed within the group (the group's
own process group) and across the groups of the step's quorum (the manager's). When a group
dies, the survivors' collective fails, the step is discarded (never half-applied) and the
next quorum goes on without it; a group that starts later recovers the weights from a live
peer and trains in the next quorum. Periodic checkpoints are still written: every group can
die at once (a spot pool reclaimed whole), and a new group with no live peer resumes from
the newest one.

Same model, data, sharding by global sample position and checkpoint format as the elastic
mode (lab.runtime.workload, lab.runtime.snapshot, lab.runtime.sharded_checkpoint): a checkpoint
of one mode resumes the other. A GPT size is sharded within its group by FSDP2 when the group
has several workers (HSDP: each group holds a whole replica, sharded over its workers, and the
groups reduce their shards' gradients); a new group heals shard by shard from the peer
TorchFT names, its workers copying what their counterparts hold.

Healing takes as long as copying the state: the step that heals a group waits for that copy
in every group's collective. That step's collective (and TorchFT's transfer, and its commit
lock) gets the heal timeout, derived from the state's size unless the job sets one; every
other step keeps the short collective timeout that finds a lost group in a second.

The manual `manager.allreduce` of one flat gradient is used rather than TorchFT's
DistributedDataParallel wrapper, which fails in the survivors on gloo when a peer dies.
TorchFT's servers (the manager's, the weights' HTTP server) listen on every address by
default; here they listen on the address the group advertises (LAB_FT_ADVERTISE) only.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from lab.runtime import events, heal_state
from lab.runtime.checkpointer import Resumed, SaveRecord, TrainingState
from lab.runtime.demo import GlobalSampler, derive_rng, rng_fingerprint, set_lr
from lab.runtime.elastic_batches import gradient_sync
from lab.runtime.per_step_torchft import (
    COLLECTIVE_SAMPLES,
    derived_collective_timeout,
    heal_timeout,
    heal_transport,
    listen_on,
    quorum_id,
    step_timeout_gloo,
)
from lab.runtime.spot_notice import SpotNotice
from lab.runtime.trainer import Trainer, peak_rss_mb
from lab.vocab.events import EXIT_DONE, SAVE_INTERVAL, SAVE_NOTICE, Event
from lab.vocab.job import ENV_NODE, EXIT_PEER_LOST
from lab.vocab.per_step import (
    ENV_ADVERTISE,
    ENV_CHECKPOINT_PORT,
    ENV_COLLECTIVE_TIMEOUT,
    ENV_CONNECT_TIMEOUT,
    ENV_HEAL_TIMEOUT,
    ENV_MIN_REPLICAS,
    ENV_QUORUM_TIMEOUT,
    ENV_REPLICA_GROUP,
)

log = logging.getLogger("train")
# How often a group waiting for its first quorum looks for the job's last checkpoint.
JOB_END_LOOK_EVERY_S = 0.5


def _seconds(name: str, default: float) -> timedelta:
    return timedelta(seconds=float(os.environ.get(name, default)))


@dataclass
class _Work:
    """A step's computation: for which quorum, on which samples, and its gradients."""

    quorum: tuple[int | None, int]  # (this group's replica rank, participants)
    indices: torch.Tensor  # this worker's samples
    covered: int  # the step's samples, all workers together
    flat: torch.Tensor  # the gradients as one tensor, then the summed loss (reduced with them)
    grads: list[torch.Tensor]
    phases: dict[str, float]  # seconds each phase took: quorum, compute, recompute (then reduce, commit)
    ready: float  # time.perf_counter() when the gradients were ready


class PerStepTraining(Trainer):
    """One worker of a replica group, from its start to its exit (see the module's
    docstring). Read `run` top to bottom. Its rank and world size are within its group."""

    def __init__(self, args: argparse.Namespace, notice: SpotNotice) -> None:
        super().__init__(args, notice)
        self.replica = os.environ.get(ENV_REPLICA_GROUP) or os.environ.get(ENV_NODE) or socket.gethostname()
        self.identity = {"replica": self.replica}
        self.writer = f"{self.replica.replace('-', '_')}.r{self.rank}.{os.getpid()}"
        self.advertise = os.environ.get(ENV_ADVERTISE, "")
        # The job's timeout of a step's cross-group collective; None: derived from the
        # durations of the recent ones (`reduce_seconds`).
        configured = float(os.environ.get(ENV_COLLECTIVE_TIMEOUT) or 0)
        self.collective_timeout = timedelta(seconds=configured) if configured > 0 else None
        self.reduce_seconds: deque[float] = deque(maxlen=COLLECTIVE_SAMPLES)
        self.last_quorum_size = 0  # replica groups in the quorum of the step in flight
        self.last_replica_rank: int | None = None  # this group's rank in that quorum (None: sat out)
        self.quorum_seen = -1  # the quorum last logged
        self.quorum_of_last_step = -1
        self.healed_bytes = 0  # what load_user_state received in this step's quorum
        self.healed_at, self.healed_step = 0.0, 0  # when it loaded that state, and its step
        # (replica rank, participants) of the last committed step's quorum: the next step's
        # batch is chosen for it while that step's own quorum runs (None: wait for the quorum).
        self.expected_quorum: tuple[int | None, int] | None = None
        # FSDP2 within the group when it has several workers; a group of one holds the model whole.
        self.fsdp = self.workload.sharded and args.parallel == "fsdp" and self.world_size > 1
        self.parallel = "fsdp" if self.fsdp else "replicated"
        # The quorum runs beside the step's compute, and may read the state for a peer on its
        # own thread meanwhile: FSDP2's state hooks race a forward pass on another thread
        # (torchft #343), so a sharded group waits for its quorum before its step.
        self.async_quorum = not self.fsdp

    def run(self) -> int:
        self.start()
        loaded = self.resume_from_checkpoint()
        self.join(loaded)
        at_boundary = self.arm_notice()  # sharded checkpoints: agree on a notice
        first_quorum = threading.Event()
        threading.Thread(
            target=self.leave_if_the_job_ends_first, args=(first_quorum,), name="job-end", daemon=True
        ).start()
        while self.manager.current_step() < self.args.steps:
            self.train_step()
            first_quorum.set()
            self.report_save()
            at_boundary()
        self.finish()
        return 0

    # --------------------------------------------------------------------- start
    def joined(self) -> None:
        """The group's own process group is up (gradients summed within the node first)."""
        if self.advertise:
            listen_on(self.advertise, int(os.environ.get(ENV_CHECKPOINT_PORT) or 0))

    def start(self) -> None:
        super().start()  # sharded over this group's workers (its process group is the default one)
        self.params = list(self.net.parameters())

    def current_step(self) -> int:
        return int(self.manager.current_step())

    def state(self) -> TrainingState:
        return TrainingState(
            self.net,
            self.optimizer,
            self.sampler,
            self.current_step(),
            self.world_size,
            self.manager.batches_committed(),
        )

    # TorchFT heals a joining group with this state of a live peer (its step comes with it).
    def user_state(self) -> dict[str, Any]:
        return heal_state.state_of(self.net, self.optimizer, self.sampler)

    def load_user_state(self, state: dict[str, Any]) -> None:
        self.healed_bytes = heal_state.copied_bytes(state)
        self.healed_at, self.healed_step = time.perf_counter(), self.manager.current_step()
        heal_state.load_state(state, self.net, self.optimizer)
        self.sampler = GlobalSampler(self.args.dataset_size, self.args.order_seed, state["epoch"], state["position"])

    def resume_from_checkpoint(self) -> Resumed | None:
        """The newest durable checkpoint: a group with live peers is healed to their step by
        the first quorum anyway; with none it goes on from here."""
        resumed = self.load_checkpoint()
        if resumed is not None:
            events.emit(
                Event.CHECKPOINT_LOADED,
                step=resumed.step,
                seconds=round(resumed.seconds, 4),
                **resumed.fields,
                replica=self.replica,
            )
        return resumed

    def full_world_at_start(self) -> int:
        """The job's full size in workers, when the launcher does not say it: this group's
        workers in as many groups as a quorum needs."""
        return self.world_size * max(int(os.environ.get(ENV_MIN_REPLICAS, "1")), 1)

    # ---------------------------------------------------------------------- join
    def join(self, loaded: Resumed | None) -> None:
        """This group's TorchFT manager: the cross-group process group, the quorum's
        timeouts, the addresses peers reach it at."""
        from torchft import Manager

        advertise, timeout = self.advertise, self.collective_timeout
        self.heal_timeout = heal_timeout(
            heal_state.bound_bytes(self.net),
            timeout.total_seconds() if timeout else 0.0,
            float(os.environ.get(ENV_HEAL_TIMEOUT) or 0),
        )
        self.cross_group = step_timeout_gloo(timeout or self.heal_timeout)
        self.manager = Manager(
            pg=self.cross_group,
            load_state_dict=self.load_user_state,
            state_dict=self.user_state,
            min_replica_size=int(os.environ.get(ENV_MIN_REPLICAS, "1")),
            use_async_quorum=self.async_quorum,
            # Every group builds the same weights from the job's seed (build_model), so the first
            # quorum copies nothing: with TorchFT's init_sync every group but one would heal at
            # step 0, and under the asynchronous quorum such a group still counts as a participant
            # (its rank, its share of the batch) while TorchFT zeroes its gradients (healing,
            # is_participating() is False): its samples would be logged as trained, never trained.
            init_sync=False,
            # RPCs, the heal's transfer and the commit lock that waits for it; the step's
            # collective has its own (short) timeout, see step_timeout_gloo.
            timeout=self.heal_timeout,
            quorum_timeout=_seconds(ENV_QUORUM_TIMEOUT, 900),
            connect_timeout=_seconds(ENV_CONNECT_TIMEOUT, 10),
            replica_id=self.replica,
            # Peers reach this group's manager and its store (for the step's process group) at
            # this address: torchrun's own store address ("localhost" alone) is not theirs.
            hostname=advertise or socket.gethostname(),
            store_addr=advertise or None,
            checkpoint_transport=heal_transport(advertise, self.heal_timeout) if advertise else None,
        )
        if self.rank == 0:
            # Where this group serves its peers (TorchFT keeps its servers private).
            server = getattr(self.manager, "_manager", None)
            transport = getattr(self.manager, "_checkpoint_transport", None)
            events.emit(
                Event.REPLICA_GROUP,
                replica=self.replica,
                manager=server.address() if server is not None else None,
                weights=transport.address() if transport is not None else None,
            )
        start_step = loaded.step if loaded is not None else 0
        if loaded is not None:
            self.manager.load_state_dict({"step": start_step, "batches_committed": loaded.batches_committed})
        events.emit(
            Event.RESUME if loaded else Event.FRESH,
            step=start_step,
            world_size=self.world_size,
            replica=self.replica,
        )

    # --------------------------------------------------------------------- train
    def train_step(self) -> None:
        """One step: a quorum, this worker's share of the step's batch, the gradients summed
        within the group and across the quorum, and the update if the quorum commits.

        The quorum runs beside the step's compute (TorchFT's asynchronous quorum) wherever
        the state may be read for a peer on another thread (not under FSDP2): the batch is
        chosen for the quorum of the last committed step, the quorum is waited for once the
        gradients are computed, and if it turned out otherwise (a group joined or left) the
        gradients are computed again for the batch this quorum gives. A step after a
        discarded one, or after a heal, waits for its quorum first (it is rarely the last)."""
        t0 = time.perf_counter()
        self.healed_bytes = 0
        work = self._compute(t0)
        participants = work.quorum[1]
        world = max(participants, 1) * self.world_size
        set_lr(self.optimizer, self.plan.learning_rate(self.args.lr, world, self.args.lr_scaling))
        self.last_quorum_size, self.last_replica_rank = participants, work.quorum[0]
        new_quorum = self._time_the_collective()
        if self.args.log_samples and len(work.indices):
            # Logged before they enter the cross-group reduction, with the quorum: a group killed
            # after the reduction, before its commit, still trained them into its peers' update
            # (the step committed in that quorum is what counts them, lab.drill.ledger).
            events.emit(
                Event.SAMPLES,
                step=self.manager.current_step() + 1,
                epoch=self.sampler.epoch,
                indices=work.indices.tolist(),
                replica=self.replica,
                quorum=quorum_id(self.manager),
            )
        self._reduce(work.flat)
        reduced = time.perf_counter()
        committed, work.covered = self._commit(work.flat, work.grads, work.covered, world)
        self._report_heal(t0)
        # The next step's batch is chosen for this quorum while its own quorum runs, unless
        # this one failed or healed this group (the next quorum then differs).
        self.expected_quorum = work.quorum if committed and not self.healed_bytes else None
        if not committed:
            self._discarded(participants)
            return
        work.phases.update(reduce=reduced - work.ready, commit=time.perf_counter() - reduced)
        self._record_step(work, world, t0)
        if not new_quorum:  # a new quorum's collective may include a heal: not a sample
            self.reduce_seconds.append(work.phases["reduce"])

    def _compute(self, t0: float) -> _Work:
        """The step's gradients for the quorum it turns out to have (see train_step)."""
        manager = self.manager
        manager.start_quorum()  # the asynchronous quorum returns at once
        guess = self.expected_quorum if self.async_quorum else None
        if guess is None:
            guess = (manager.participating_rank(), manager.num_participants())  # waits for the quorum
        waited = time.perf_counter() - t0
        parts, covered = self._batch(*guess)
        computing = time.perf_counter()
        flat, grads = self._gradients(parts, covered, guess[1])
        computed = time.perf_counter()
        quorum = (manager.participating_rank(), manager.num_participants())
        known = time.perf_counter()
        if quorum != guess:  # the batch was another quorum's: this quorum's instead
            parts, covered = self._batch(*quorum)
            flat, grads = self._gradients(parts, covered, quorum[1])
        ready = time.perf_counter()
        phases = {
            "quorum": waited + known - computed,
            "compute": computed - computing,
            "recompute": ready - known if quorum != guess else 0.0,
        }
        return _Work(quorum, torch.cat(list(parts)), covered, flat, grads, phases, ready)

    def _time_the_collective(self) -> bool:
        """The timeout of this step's cross-group collective; whether its quorum is new. A new
        quorum (a group joined, and heals now, or one left): this step's collective may wait
        for a heal's copy of the state, so it gets the heal's timeout."""
        current = quorum_id(self.manager)
        new_quorum = current != self.quorum_of_last_step
        self.cross_group.step_timeout = (
            self.heal_timeout
            if new_quorum
            else self.collective_timeout or derived_collective_timeout(self.reduce_seconds, self.heal_timeout)
        )
        self.quorum_of_last_step = current
        return new_quorum

    def _report_heal(self, t0: float) -> None:
        if self.healed_bytes:  # the quorum copied the state from a peer (load_user_state ran)
            events.emit(
                Event.HEALED,
                step=self.healed_step,
                seconds=round(self.healed_at - t0, 4),
                bytes=self.healed_bytes,
                replica=self.replica,
            )

    def _discarded(self, participants: int) -> None:
        manager = self.manager
        events.emit(
            Event.STEP_DISCARDED,
            step=manager.current_step(),
            participants=participants,
            replica=self.replica,
            quorum=quorum_id(manager),
            error=str(manager.errored())[:200] if manager.errored() else None,
        )

    def _batch(self, replica_rank: int | None, participants: int) -> tuple[list[torch.Tensor], int]:
        """This worker's micro-batches of the step's global batch in a quorum where this group
        has `replica_rank` among `participants` groups (the batch policy's), and how many
        samples the step covers (none for this worker when the group sits the step out:
        healing, or a spare; it still runs as many empty micro-batches as its group)."""
        world = max(participants, 1) * self.world_size
        window = self.sampler.window(self.plan.step_samples(world))
        rank_in_step = (replica_rank or 0) * self.world_size + self.rank
        # The streams this worker draws from in the step, derived from its rank among the
        # step's workers as the elastic mode's are: a job resumed here draws the same.
        derive_rng(self.args.seed, rank_in_step, self.manager.current_step())
        parts = self.plan.share(window, rank_in_step, world)
        return ([p[:0] for p in parts] if replica_rank is None else list(parts)), len(window)

    def _gradients(
        self, parts: list[torch.Tensor], covered: int, participants: int
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(the gradients as one flat tensor, the gradients), over
        its micro-batches in a quorum of `participants` groups. Summed over every worker of
        the step, these gradients are the exact mean over its global batch (the last batch of
        an epoch is short). The flat tensor ends with the loss summed over this worker's
        samples (over its group's, under FSDP2, whose ranks hold shards of one gradient): the
        step's reduction sums it over the whole step, whose mean loss its event then carries."""
        if self.args.step_time:
            # A micro-batch's accelerator time per micro-batch of the step's largest share.
            largest = -(-covered // (max(participants, 1) * self.world_size))
            time.sleep(self.args.step_time * largest / self.plan.micro_batch)
        self.optimizer.zero_grad()
        local_loss = torch.zeros((), device=self.device)
        for i, part in enumerate(parts):
            # Under FSDP2 every worker of the group runs every micro-batch, even with no
            # samples: its forward and backward are the group's collectives; it reduces the
            # gradients after the last one only.
            if len(part) or self.fsdp:
                with gradient_sync(self.net, last=i == len(parts) - 1):
                    local_loss += self._backward(part, covered)
        grads = [
            heal_state.local(p.grad) if p.grad is not None else torch.zeros_like(heal_state.local(p))
            for p in self.params
        ]
        flat = heal_state.flatten(grads)
        loss_sum = local_loss.reshape(1).to(flat.dtype)
        if self.fsdp:
            try:
                dist.all_reduce(loss_sum)
            except RuntimeError as exc:
                self._group_lost(exc)
        return torch.cat([flat, loss_sum]), grads

    def _backward(self, part: torch.Tensor, covered: int) -> torch.Tensor:
        """One micro-batch's forward and backward; its summed loss. FSDP2 averages the
        gradients over the group's workers, so the loss is scaled up by their number to give
        their sum."""
        batch = self.workload.batch(self.data, part, self.device)
        try:
            loss = self.workload.loss_sum(self.net, batch)
            (loss * ((self.world_size if self.fsdp else 1) / covered)).backward()  # type: ignore[no-untyped-call]
        except RuntimeError as exc:  # FSDP2's collectives within the group: a worker of it is gone
            self._group_lost(exc)
        return loss.detach()

    def _reduce(self, flat: torch.Tensor) -> None:
        """Sum within the group (FSDP2 did, in backward), then across the quorum's groups:
        each worker's shard with the same shard of the other groups."""
        if self.world_size > 1 and not self.fsdp:
            try:
                dist.all_reduce(flat)
            except RuntimeError as exc:
                self._group_lost(exc)
        self.manager.allreduce(flat, reduce_op=dist.ReduceOp.SUM).wait()
        if self.manager.errored() is not None:
            # A peer is gone: close this step's connections at once. Gloo's ring fails only
            # the dead peer's neighbours; the others would wait out the collective timeout
            # for data that this group no longer sends. The next quorum connects anew.
            self.cross_group.abort()

    def _group_lost(self, exc: BaseException) -> NoReturn:
        """A worker of this very group is gone: the group is lost; the agent restarts it."""
        events.emit(Event.COLLECTIVE_FAILED, step=self.manager.current_step(), error=type(exc).__name__)
        logging.shutdown()
        os._exit(EXIT_PEER_LOST)

    def _commit(self, flat: torch.Tensor, grads: list[torch.Tensor], covered: int, world: int) -> tuple[bool, int]:
        """Whether the step committed, and the samples it covered. A notice saves either before
        this step's commit or after its update: should_commit moves the manager's step on, the
        update follows (the commit waits at most the collective timeout). A group healed by an
        asynchronous quorum loads its peer's state in should_commit, its sampler's position
        included: the step's batch is counted from there."""
        self.checkpointer.wait_for_staging()  # a save in flight copies the state this step changes
        with self.notice.consistent:
            committed = bool(self.manager.should_commit())
            if committed:
                if self.healed_bytes and self.async_quorum:
                    covered = len(self.sampler.window(self.plan.step_samples(world)))
                for p, g in zip(self.params, heal_state.unflatten(flat[:-1], grads), strict=True):
                    p.grad = heal_state.like(g, p)
                self.optimizer.step()
                self.sampler.advance(covered)
        return committed, covered

    def _record_step(self, work: _Work, world: int, t0: float) -> None:
        """The committed step's events (with where its time went), and its periodic checkpoint."""
        step = self.manager.current_step()
        replica_rank, participants = work.quorum
        if self.rank == 0:
            quorum = quorum_id(self.manager)
            loss = work.flat[-1].item() / max(work.covered, 1)
            events.emit(
                Event.STEP,
                step=step,
                loss=round(loss, 5),
                loss_hex=loss.hex(),
                world_size=world,
                participants=participants,
                participating=replica_rank is not None,
                replica=self.replica,
                quorum=quorum,
                samples=work.covered,
                micro_batches=self.plan.micro_batches(work.covered, world),
                epoch=self.sampler.epoch,
                position=self.sampler.position,
                seconds=round(time.perf_counter() - t0, 5),
                phases={name: round(seconds, 5) for name, seconds in work.phases.items()},
            )
            if quorum != self.quorum_seen:
                self.quorum_seen = quorum
                log.info("step %d: quorum %s of %d replica group(s)", step, quorum, participants)
        if step % self.args.checkpoint_every == 0 and replica_rank == 0:
            self.save(SAVE_INTERVAL)  # every worker of the group: its shards, or rank 0 the whole state

    # ------------------------------------------------------------- saves, notice, end
    def report(self, record: SaveRecord | None) -> None:
        """A save's event (one that failed, or found its step saved already, has none)."""
        if record is None or record.error is not None or record.already:
            return
        events.emit(Event.CHECKPOINT_SAVED, **record.fields(), replica=self.replica)

    def agree_on_notice(self) -> None:
        """Sharded checkpoints: the group's workers agree at every step boundary whether one of
        them got a notice; if so, and the group is the last one standing, they save together;
        then they leave (the peers carry the job on)."""
        flag = torch.tensor([float(self.notice.requested.is_set())], device=self.device)
        if self.world_size > 1:
            dist.all_reduce(flag)
        if flag.item() == 0:
            return
        self.notice.acknowledge()
        if self.saves_on_notice():
            # A save in flight finishes first: its wait counts in this one's blocking time.
            self.save(SAVE_NOTICE, blocking=True, since=time.perf_counter())
        self.hand_over_to_the_notice()

    def leave_on_notice(self) -> None:
        """A spot notice: the peers carry the job on; the group that saves saves first."""
        if self.rank == 0 and self.saves_on_notice():
            self.save_alone(SAVE_NOTICE)
        self.emit_notice_exit()

    def saves_on_notice(self) -> bool:
        """Whether this group saves before it leaves on a notice: when it is the last group
        standing, or the quorum's first group (the one that writes the interval checkpoints).
        A group cannot know whether its peers got notices too: when the whole pool is taken
        back each gets one, and without this save the job would resume from its last interval
        checkpoint. One group per quorum saves, so no two write one step at once; its peers,
        if they carry on, lose nothing by it. From the quorum of the step in flight (asking the
        manager could wait on a quorum)."""
        return self.last_quorum_size <= 1 or self.last_replica_rank == 0

    def leave_if_the_job_ends_first(self, first_quorum: threading.Event) -> None:
        """A group that starts as the others finish (a replacement node that came a moment
        late) would wait for a quorum that never forms (fewer than min_nodes groups are left)
        until TorchFT's quorum timeout, 15 minutes, holding its node and the job open. Until
        its first quorum it looks for the job's last checkpoint; once that is written the job
        is done, and it exits 0 having trained nothing."""
        while not first_quorum.wait(JOB_END_LOOK_EVERY_S):
            try:
                newest = self.checkpointer.newest_step()
            except Exception as exc:  # noqa: BLE001 - storage that fails now is the training's business
                log.debug("could not list the checkpoints: %s", exc)
                continue
            if newest is not None and newest >= self.args.steps:
                log.info("the job ended (checkpoint of step %d) before this group's first quorum: done", newest)
                events.emit(Event.EXIT, reason=EXIT_DONE, step=newest, replica=self.replica, peak_rss_mb=peak_rss_mb())
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)

    def finish(self) -> None:
        """A save in flight reported; the last step saved by the group that ranks first in the
        quorum; then exit."""
        self.save_last(saves=self.manager.participating_rank() == 0)
        events.emit(
            Event.EXIT,
            reason=EXIT_DONE,
            step=self.manager.current_step(),
            replica=self.replica,
            peak_rss_mb=peak_rss_mb(),
            weights=heal_state.weights_digest(self.net),
            rng=rng_fingerprint(),
        )
        self.manager.shutdown(wait=False)

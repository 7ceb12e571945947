"""What both fault-tolerance modes of the demo script do, the same way: one worker's start (the
process group, the data, the model, its optimizer and its checkpoints), its resume from a
checkpoint, its saves and their events, and how it takes a spot notice.

The elastic mode (lab.runtime.train `ElasticTraining`) and the per-step one
(lab.runtime.train_per_step `PerStepTraining`) each add their run, their step and their finish,
as torchtitan's fault-tolerant trainer overrides only what differs from its trainer. The
checkpoints' kind is chosen once, at the start (lab.runtime.workload `open_checkpointer`), and
reached through one contract (lab.runtime.checkpointer): no step asks which kind it is.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from lab.runtime import events
from lab.runtime.checkpointer import Checkpointer, Choice, Resumed, SaveRecord, TrainingState
from lab.runtime.demo import GlobalSampler, pick_device
from lab.runtime.spot_notice import SpotNotice
from lab.runtime.workload import Workload, build_model, open_checkpointer
from lab.vocab.batch_policy import BatchPlan
from lab.vocab.events import EXIT_NOTICE, SAVE_FINAL, SAVE_NOTICE, Event


class Trainer:
    """One worker, from its start to its exit: what both modes share. A mode says what differs:
    its step (`current_step`), what a save holds (`state`), its learning rate, its model's
    parallelism, how a save is reported (`report`) and what it does at a step boundary."""

    fsdp: bool  # the model sharded over the workers by FSDP2 (else held whole by each)
    parallel: str  # how the model_built event names that

    def __init__(self, args: argparse.Namespace, notice: SpotNotice) -> None:
        self.args, self.notice = args, notice
        # torchrun's environment (the per-step mode's: within its replica group)
        self.rank, self.world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.writer = f"r{self.rank}.{os.getpid()}"  # names this rank's checkpoint files
        self.identity: dict[str, Any] = {}  # fields of this worker's events (the per-step mode's replica)
        self.sampler = GlobalSampler(args.dataset_size, args.order_seed)
        self.workload = Workload(args.model, args.dataset_size, args.seed)
        self.plan = BatchPlan(
            args.batch_policy, args.batch_size, args.full_world_size or self.full_world_at_start(), args.global_batch
        )

    # ------------------------------------------------------------ what a mode says
    def current_step(self) -> int:
        """The last completed step: what a save writes."""
        raise NotImplementedError

    def state(self) -> TrainingState:
        """What a save of the last completed step holds."""
        return TrainingState(self.net, self.optimizer, self.sampler, self.current_step(), self.world_size)

    def learning_rate(self) -> float:
        return float(self.args.lr)

    def full_world_at_start(self) -> int:
        """The job's full size in workers, when the launcher does not say it: this world's."""
        return self.world_size

    def joined(self) -> None:
        """Runs once the process group is up, before anything is built."""

    def report(self, record: SaveRecord | None) -> None:
        """A save's event, on the rank that reports it."""
        raise NotImplementedError

    def leave_on_notice(self) -> None:
        """Whole checkpoints: the notice's thread saves what it must and the process ends."""
        raise NotImplementedError

    def agree_on_notice(self) -> None:
        """Sharded checkpoints: the ranks agree at a step boundary whether one got a notice."""
        raise NotImplementedError

    def boundary_alone(self) -> None:
        """Whole checkpoints: what a step boundary does when no rank waits there for a notice."""

    # ----------------------------------------------------------------------- start
    def start(self) -> None:
        args = self.args
        # torch's deterministic kernels wherever it has them: at a world size it was saved at, a
        # job resumed from a checkpoint repeats the uninterrupted run bit for bit (what torch
        # cannot make so: docs/real-size.md). An op that has none warns in the worker's log.
        torch.use_deterministic_algorithms(True, warn_only=True)
        self.device, backend = pick_device(self.local_rank)
        # A short timeout: a vanished peer is noticed in seconds, not after gloo's 30 minutes.
        dist.init_process_group(backend, timeout=timedelta(seconds=args.pg_timeout))
        self.joined()
        events.emit(
            Event.START,
            world_size=self.world_size,
            restarts=self.restarts,
            backend=backend,
            device=str(self.device),
            deterministic=torch.are_deterministic_algorithms_enabled(),
            **self.identity,
        )
        self.data = self.workload.data()
        self.checkpointer: Checkpointer = open_checkpointer(
            self.workload,
            args,
            writer=self.writer,
            device=self.device,
            exclusive=self.notice.consistent,
        )
        # Rank 0 picks the checkpoint before the model is built: a sharded model that one is
        # about to fill is never initialised (build_model), which at real size is most of a build.
        self.choice: Choice | None = self.checkpointer.choose()
        built = time.perf_counter()
        self.net, parameters = build_model(
            self.workload, self.device, args.seed, sharded=self.fsdp, initialise=self.choice is None
        )
        self.lr = self.learning_rate()
        self.optimizer = self.workload.optimizer(self.net.parameters(), self.lr)
        events.emit(
            Event.MODEL_BUILT,
            model=args.model,
            parameters=parameters,
            parallel=self.parallel,
            seconds=round(time.perf_counter() - built, 4),
            **self.identity,
        )

    def load_checkpoint(self) -> Resumed | None:
        """The newest valid checkpoint (rank 0 chose it for every rank as the job started),
        loaded into the model, the optimizer and the sampler; None when there is none."""
        if self.choice is None:
            return None
        resumed = self.checkpointer.load(self.choice, self.net, self.optimizer)
        self.sampler = resumed.sampler(self.args.dataset_size, self.args.order_seed)
        return resumed

    # --------------------------------------------------------------------- notices
    def arm_notice(self) -> Callable[[], None]:
        """How a spot notice is saved, settled once by the checkpoints' kind; what each step
        boundary runs. Whole checkpoints: the noticed rank saves alone, at once, even from
        the middle of a collective that waits on a vanished peer. Sharded ones need every
        rank: a notice is agreed on at the next step boundary and saved by all of them."""
        if self.checkpointer.saves_alone:
            self.notice.on_notice = self.leave_on_notice
            self.notice.save_now = lambda: self.save_alone(SAVE_NOTICE)
            return self.timed(self.boundary_alone)
        self.notice.cooperate(max(self.args.notice_seconds - 3, 1), on_timeout=self.notice_not_saved)
        return self.timed(self.agree_on_notice)

    def timed(self, boundary: Callable[[], None]) -> Callable[[], None]:
        """`boundary`, telling the notice each step's time first (a notice trained through
        leaves two of them)."""
        last = time.perf_counter()

        def at_boundary() -> None:
            nonlocal last
            now = time.perf_counter()
            self.notice.step_s, last = now - last, now
            boundary()

        return at_boundary

    def notice_not_saved(self) -> None:
        """The notice's deadline passed with the main thread stuck (a vanished peer): leave."""
        self.emit_notice_exit(saved=False)

    def emit_notice_exit(self, **extra: Any) -> None:
        events.emit(
            Event.EXIT,
            reason=EXIT_NOTICE,
            step=self.current_step(),
            notice_to_exit_s=round(self.notice.seconds_since(), 4),
            **self.identity,
            **self.trained_on(),
            **extra,
        )

    def trained_on(self) -> dict[str, Any]:
        """How long this rank trained on through its notice, where it did."""
        return {"trained_on_s": self.notice.trained_on_s} if self.notice.trained_on_s else {}

    def hand_over_to_the_notice(self) -> None:
        """The notice's save is done (or not this group's to make): its thread ends the process."""
        self.emit_notice_exit()
        self.notice.handled()
        time.sleep(3600)

    # ----------------------------------------------------------------------- saves
    def save(self, reason: str, *, blocking: bool = False, since: float | None = None) -> SaveRecord | None:
        """A save by every rank of the group together; its record, where this rank reports it."""
        started = time.perf_counter()
        record = self.checkpointer.save(self.state(), reason, blocking=blocking, since=since)
        if blocking:
            self.notice.saved(time.perf_counter() - started)
        self.report(self.timed_save(record))
        return record

    def save_alone(self, reason: str) -> None:
        """A save from this rank alone (whole checkpoints; its caller holds the notice's lock)."""
        self.report(self.timed_save(self.checkpointer.save_alone(self.state(), reason)))

    def report_save(self) -> None:
        """A background save that committed (or failed) since the last step: its event."""
        self.report(self.timed_save(self.checkpointer.finished()))

    def timed_save(self, record: SaveRecord | None) -> SaveRecord | None:
        """A save's time, told to the notice (one trained through keeps time for two saves)."""
        if record is not None and not record.already:
            self.notice.saved(record.seconds)
        return record

    def save_last(self, *, saves: bool = True) -> None:
        """The end of training: a save in flight reported, the last step saved (where `saves`),
        the checkpoints closed."""
        self.report(self.checkpointer.wait())
        if saves:
            self.save(SAVE_FINAL, blocking=True)
        self.checkpointer.close()
        self.notice.finish()  # a notice from now on has nothing newer to save


def peak_rss_mb() -> float:
    """This process's peak resident memory, in MiB (Linux reports KiB)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

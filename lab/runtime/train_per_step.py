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
mode (lab.runtime.demo, lab.runtime.snapshot): a checkpoint of one mode resumes the other.

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
import time
from datetime import timedelta
from http.server import ThreadingHTTPServer
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from lab.runtime import events
from lab.runtime.checkpoint import CheckpointStore
from lab.runtime.demo import GlobalSampler, make_dataset, make_model, pick_device, scaled_lr, set_lr
from lab.runtime.snapshot import TrainingSnapshot
from lab.runtime.spot_notice import SpotNotice
from lab.vocab.events import EXIT_DONE, EXIT_NOTICE, SAVE_FINAL, SAVE_INTERVAL, SAVE_NOTICE, Event
from lab.vocab.job import ENV_NODE
from lab.vocab.per_step import (
    ENV_ADVERTISE,
    ENV_CHECKPOINT_PORT,
    ENV_COLLECTIVE_TIMEOUT,
    ENV_CONNECT_TIMEOUT,
    ENV_MIN_REPLICAS,
    ENV_QUORUM_TIMEOUT,
    ENV_REPLICA_GROUP,
)

log = logging.getLogger("train")


def _seconds(name: str, default: float) -> timedelta:
    return timedelta(seconds=float(os.environ.get(name, default)))


def _listen_on(host: str, checkpoint_port: int) -> None:
    """Make TorchFT's servers listen on `host` only, not on every address: its manager
    server binds "[::]:port" and its checkpoint server ("", 0), both hard-coded. The
    checkpoint server takes `checkpoint_port` (0: any free port)."""
    import torchft.checkpointing.http_transport as http_transport
    import torchft.manager as manager_module

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bind_host = f"[{host}]" if family == socket.AF_INET6 else host
    server_class = manager_module.ManagerServer

    def manager_server(*args: Any, bind: str, **kwargs: Any) -> Any:
        port = bind.rpartition(":")[2]
        return server_class(*args, bind=f"{bind_host}:{port}", **kwargs)

    class HostHTTPServer(ThreadingHTTPServer):
        address_family = family
        request_queue_size = 1024

        def __init__(self, server_address: tuple[str, int], handler: Any) -> None:
            super().__init__((host, checkpoint_port or server_address[1]), handler)

    manager_module.ManagerServer = manager_server
    http_transport._IPv6HTTPServer = HostHTTPServer


def _transport(host: str, timeout: timedelta) -> Any:
    """TorchFT's HTTP checkpoint transport, advertising `host` (it would advertise the
    machine's hostname, which other pods cannot resolve)."""
    from torchft.checkpointing.http_transport import HTTPTransport

    class Transport(HTTPTransport):  # type: ignore[misc]  # torchft ships no type information (py.typed)
        def address(self) -> str:
            port = self._server.socket.getsockname()[1]
            shown = f"[{host}]" if ":" in host else host
            return f"http://{shown}:{port}/checkpoint/"

    return Transport(timeout=timeout, num_chunks=0)


def _flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One contiguous tensor of all of them: one collective instead of one per parameter."""
    return torch.cat([t.reshape(-1) for t in tensors])


def _unflatten(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """`flat` cut back into tensors shaped as `like`."""
    return [chunk.view_as(t) for chunk, t in zip(torch.split(flat, [t.numel() for t in like]), like, strict=True)]


def _quorum_id(manager: Any) -> int:
    """The id of the manager's current quorum (TorchFT keeps it private; -1 if it moves)."""
    return int(getattr(manager, "_quorum_id", -1))


class PerStepTraining:
    """One worker of a replica group, from its start to its exit (see the module's
    docstring). Read `run` top to bottom."""

    def __init__(self, args: argparse.Namespace, notice: SpotNotice) -> None:
        self.args, self.notice = args, notice
        self.group_rank, self.group_world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.replica = os.environ.get(ENV_REPLICA_GROUP) or os.environ.get(ENV_NODE) or socket.gethostname()
        self.advertise = os.environ.get(ENV_ADVERTISE, "")
        self.collective_timeout = _seconds(ENV_COLLECTIVE_TIMEOUT, 1.0)
        self.writer = f"{self.replica.replace('-', '_')}.r{self.group_rank}.{os.getpid()}"
        self.last_quorum_size = 0  # replica groups in the quorum of the step in flight
        self.quorum_seen = -1

    def run(self) -> int:
        self.start()
        loaded = self.resume_from_checkpoint()
        self.join(loaded)
        self.notice.on_notice = self.leave_on_notice
        while self.manager.current_step() < self.args.steps:
            self.train_step()
        self.finish()
        return 0

    # --------------------------------------------------------------------- start
    def start(self) -> None:
        args = self.args
        self.device, backend = pick_device(self.local_rank)
        # The group's own process group: gradients summed within the node first.
        dist.init_process_group(backend, timeout=timedelta(seconds=args.pg_timeout))
        if self.advertise:
            _listen_on(self.advertise, int(os.environ.get(ENV_CHECKPOINT_PORT) or 0))
        events.emit(
            Event.START,
            world_size=self.group_world,
            restarts=self.restarts,
            backend=backend,
            device=str(self.device),
            replica=self.replica,
        )
        self.x_all, self.y_all = make_dataset(args.dataset_size, args.seed)
        torch.manual_seed(args.seed)
        self.net = make_model().to(self.device)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=args.lr, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss(reduction="sum")
        self.sampler = GlobalSampler(args.dataset_size, args.seed)
        self.params = list(self.net.parameters())
        self.store = CheckpointStore(args.checkpoint_dir, args.checkpoint_writes, keep=args.keep_checkpoints)

    # TorchFT heals a joining group with this state of a live peer (its step comes with it).
    def user_state(self) -> dict[str, Any]:
        return {
            "model": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.sampler.epoch,
            "position": self.sampler.position,
        }

    def load_user_state(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.sampler = GlobalSampler(self.args.dataset_size, self.args.seed, state["epoch"], state["position"])

    def resume_from_checkpoint(self) -> TrainingSnapshot | None:
        """The newest durable checkpoint: a group with live peers is healed to their step by
        the first quorum anyway; with none it goes on from here."""
        choice = [self.store.latest() if self.group_rank == 0 else None]
        dist.broadcast_object_list(choice, src=0)
        loaded = self.store.load(choice[0], map_location=self.device) if choice[0] else None
        if loaded is None:
            return None
        snapshot = TrainingSnapshot.from_payload(loaded.state)
        snapshot.apply(self.net, self.optimizer)
        self.sampler = snapshot.sampler(self.args.dataset_size, self.args.seed)
        events.emit(
            Event.CHECKPOINT_LOADED, step=snapshot.step, seconds=round(loaded.seconds, 4), path=loaded.path.name
        )
        return snapshot

    # ---------------------------------------------------------------------- join
    def join(self, loaded: TrainingSnapshot | None) -> None:
        """This group's TorchFT manager: the cross-group process group, the quorum's
        timeouts, the addresses peers reach it at."""
        from torchft import Manager
        from torchft.process_group import ProcessGroupGloo

        advertise, timeout = self.advertise, self.collective_timeout
        self.cross_group = ProcessGroupGloo(timeout=timeout)
        self.manager = Manager(
            pg=self.cross_group,
            load_state_dict=self.load_user_state,
            state_dict=self.user_state,
            min_replica_size=int(os.environ.get(ENV_MIN_REPLICAS, "1")),
            use_async_quorum=False,  # the quorum (and any healing) completes before the step's data is chosen
            timeout=timeout,
            quorum_timeout=_seconds(ENV_QUORUM_TIMEOUT, 900),
            connect_timeout=_seconds(ENV_CONNECT_TIMEOUT, 10),
            replica_id=self.replica,
            # Peers reach this group's manager and its store (for the step's process group) at
            # this address: torchrun's own store address ("localhost" alone) is not theirs.
            hostname=advertise or socket.gethostname(),
            store_addr=advertise or None,
            checkpoint_transport=_transport(advertise, timeout) if advertise else None,
        )
        if self.group_rank == 0:
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
            world_size=self.group_world,
            replica=self.replica,
        )

    # --------------------------------------------------------------------- train
    def train_step(self) -> None:
        """One step: a quorum, this worker's share of the step's batch, the gradients summed
        within the group and across the quorum, and the update if the quorum commits."""
        args, manager = self.args, self.manager
        t0 = time.perf_counter()
        manager.start_quorum()
        participants = self.last_quorum_size = manager.num_participants()
        replica_rank = manager.participating_rank()
        world = max(participants, 1) * self.group_world
        set_lr(self.optimizer, scaled_lr(args.lr, world, args.lr_scaling))
        rank_in_step = (replica_rank or 0) * self.group_world + self.group_rank
        indices, covered = self.sampler.peek(args.batch_size, rank_in_step, world)
        if replica_rank is None:  # healing or spare: contributes nothing to this step
            indices = indices[:0]
        flat, grads, local_loss = self._gradients(indices, covered)
        self._reduce(flat)
        if self._commit(flat, grads, covered):
            self._record_step(indices, local_loss, participants, replica_rank, world, covered, t0)
        else:
            events.emit(
                Event.STEP_DISCARDED,
                step=manager.current_step(),
                participants=participants,
                replica=self.replica,
                quorum=_quorum_id(manager),
                error=str(manager.errored())[:200] if manager.errored() else None,
            )

    def _gradients(self, indices: torch.Tensor, covered: int) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
        """(the gradients as one flat tensor, the gradients, this worker's summed loss).
        Summed over every worker of the step, these gradients are the exact mean over its
        global batch (the last batch of an epoch is short)."""
        device = self.device
        xb, yb = self.x_all[indices].to(device), self.y_all[indices].to(device)
        if self.args.step_time:
            time.sleep(self.args.step_time)
        self.optimizer.zero_grad()
        local_loss = self.loss_fn(self.net(xb), yb) if len(indices) else torch.zeros((), device=device)
        if len(indices):
            (local_loss / covered).backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        return _flatten(grads), grads, local_loss

    def _reduce(self, flat: torch.Tensor) -> None:
        """Sum within the group, then across the quorum's groups."""
        if self.group_world > 1:
            try:
                dist.all_reduce(flat)
            except RuntimeError as exc:
                # A worker of this very group is gone: the group is lost; the agent restarts it.
                events.emit(Event.COLLECTIVE_FAILED, step=self.manager.current_step(), error=type(exc).__name__)
                logging.shutdown()
                os._exit(1)
        self.manager.allreduce(flat, reduce_op=dist.ReduceOp.SUM).wait()
        if self.manager.errored() is not None:
            # A peer is gone: close this step's connections at once. Gloo's ring fails only
            # the dead peer's neighbours; the others would wait out the collective timeout
            # for data that this group no longer sends. The next quorum connects anew.
            self.cross_group.abort()

    def _commit(self, flat: torch.Tensor, grads: list[torch.Tensor], covered: int) -> bool:
        """A notice saves either before this step's commit or after its update: should_commit
        moves the manager's step on, the update follows (the commit waits at most the
        collective timeout)."""
        with self.notice.consistent:
            committed = bool(self.manager.should_commit())
            if committed:
                for p, g in zip(self.params, _unflatten(flat, grads), strict=True):
                    p.grad = g
                self.optimizer.step()
                self.sampler.advance(covered)
        return committed

    def _record_step(
        self,
        indices: torch.Tensor,
        local_loss: torch.Tensor,
        participants: int,
        replica_rank: int | None,
        world: int,
        covered: int,
        t0: float,
    ) -> None:
        """The committed step's events, and its periodic checkpoint."""
        step = self.manager.current_step()
        if self.args.log_samples and len(indices):
            events.emit(
                Event.SAMPLES,
                step=step,
                epoch=self.sampler.epoch_of_last_step,
                indices=indices.tolist(),
                replica=self.replica,
            )
        if self.group_rank == 0:
            quorum = _quorum_id(self.manager)
            events.emit(
                Event.STEP,
                step=step,
                loss=round(local_loss.item() / max(len(indices), 1), 5),
                world_size=world,
                participants=participants,
                participating=replica_rank is not None,
                replica=self.replica,
                quorum=quorum,
                samples=covered,
                epoch=self.sampler.epoch,
                position=self.sampler.position,
                seconds=round(time.perf_counter() - t0, 5),
            )
            if quorum != self.quorum_seen:
                self.quorum_seen = quorum
                log.info("step %d: quorum %s of %d replica group(s)", step, quorum, participants)
        if step % self.args.checkpoint_every == 0 and replica_rank == 0 and self.group_rank == 0:
            with self.notice.consistent:
                self.save(SAVE_INTERVAL)

    # ------------------------------------------------------------- saves, notice, end
    def save(self, reason: str) -> None:
        step = self.manager.current_step()
        if self.store.has(step):
            return
        snapshot = TrainingSnapshot.capture(
            self.net,
            self.optimizer,
            self.sampler,
            step=step,
            world_size=self.group_world,
            batches_committed=self.manager.batches_committed(),
        )
        saved = self.store.save(snapshot.to_payload(), step, self.writer)
        events.emit(
            Event.CHECKPOINT_SAVED,
            step=step,
            reason=reason,
            seconds=round(saved.seconds, 4),
            blocking_s=round(saved.seconds, 4),
            bytes=saved.nbytes,
            path=saved.path.name,
            replica=self.replica,
        )

    def leave_on_notice(self) -> None:
        """A spot notice: the peers carry the job on; the last group standing saves first."""
        # The quorum of the step in flight (asking the manager could wait on a quorum).
        if self.group_rank == 0 and self.last_quorum_size <= 1:
            self.save(SAVE_NOTICE)
        events.emit(
            Event.EXIT,
            reason=EXIT_NOTICE,
            step=self.manager.current_step(),
            notice_to_exit_s=round(self.notice.seconds_since(), 4),
            replica=self.replica,
        )

    def finish(self) -> None:
        if self.group_rank == 0 and self.manager.participating_rank() == 0:
            with self.notice.consistent:
                self.save(SAVE_FINAL)
        events.emit(Event.EXIT, reason=EXIT_DONE, step=self.manager.current_step(), replica=self.replica)
        self.manager.shutdown(wait=False)

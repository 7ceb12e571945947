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
mode (lab.runtime.train): a checkpoint of one mode resumes the other.

The manual `manager.allreduce` of one flat gradient is used rather than TorchFT's
DistributedDataParallel wrapper, which fails in the survivors on gloo when a peer dies.
TorchFT's servers (the manager's, the weights' HTTP server) listen on every address by
default; here they listen on the address the group advertises (LAB_FT_ADVERTISE) only.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from http.server import ThreadingHTTPServer
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from lab.runtime import events
from lab.runtime.checkpoint import CheckpointStore
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

    manager_module.ManagerServer = manager_server  # type: ignore[assignment]
    http_transport._IPv6HTTPServer = HostHTTPServer  # type: ignore[misc]


def _transport(host: str, timeout: timedelta) -> Any:
    """TorchFT's HTTP checkpoint transport, advertising `host` (it would advertise the
    machine's hostname, which other pods cannot resolve)."""
    from torchft.checkpointing.http_transport import HTTPTransport

    class Transport(HTTPTransport):
        def address(self) -> str:
            port = self._server.socket.getsockname()[1]
            shown = f"[{host}]" if ":" in host else host
            return f"http://{shown}:{port}/checkpoint/"

    return Transport(timeout=timeout, num_chunks=0)


def _quorum_id(manager: Any) -> int:
    """The id of the manager's current quorum (TorchFT keeps it private; -1 if it moves)."""
    return int(getattr(manager, "_quorum_id", -1))


@dataclass(frozen=True)
class Demo:
    """What the training script trains, as lab.runtime.train defines it for both modes: the data,
    the model, the sampler by global position, the learning rate's scaling and the device."""

    make_dataset: Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]
    make_model: Callable[[], nn.Module]
    sampler: Callable[..., Any]  # (size, seed[, epoch, position]) -> a GlobalSampler
    scaled_lr: Callable[[float, int, str], float]
    set_lr: Callable[[torch.optim.Optimizer, float], None]
    pick_device: Callable[[int], tuple[torch.device, str]]  # local rank -> (device, backend)


def run(args: Any, notice: Any, demo: Demo) -> int:
    """Train `args.steps` committed steps in per-step mode (see the module's docstring).
    `args` are lab.runtime.train's, `notice` its SpotNotice, `demo` what it trains."""
    from torchft import Manager
    from torchft.process_group import ProcessGroupGloo

    group_rank, group_world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    replica = os.environ.get(ENV_REPLICA_GROUP) or os.environ.get(ENV_NODE) or socket.gethostname()
    advertise = os.environ.get(ENV_ADVERTISE, "")
    collective_timeout = _seconds(ENV_COLLECTIVE_TIMEOUT, 1.0)
    device, backend = demo.pick_device(local_rank)
    # The group's own process group: gradients summed within the node first.
    dist.init_process_group(backend, timeout=timedelta(seconds=args.pg_timeout))
    if advertise:
        _listen_on(advertise, int(os.environ.get(ENV_CHECKPOINT_PORT) or 0))
    events.emit(
        "start", world_size=group_world, restarts=restarts, backend=backend, device=str(device), replica=replica
    )

    x_all, y_all = demo.make_dataset(args.dataset_size, args.seed)
    torch.manual_seed(args.seed)
    net = demo.make_model().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    sampler = demo.sampler(args.dataset_size, args.seed)

    def user_state() -> dict[str, Any]:
        return {
            "model": net.state_dict(),
            "optimizer": optimizer.state_dict(),
            "epoch": sampler.epoch,
            "position": sampler.position,
        }

    def load_user_state(state: dict[str, Any]) -> None:
        nonlocal sampler
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        sampler = demo.sampler(args.dataset_size, args.seed, state["epoch"], state["position"])

    # Resume from the newest durable checkpoint: a group with live peers is healed to their
    # step by the first quorum anyway; with none it goes on from here.
    store = CheckpointStore(args.checkpoint_dir, args.checkpoint_writes, keep=args.keep_checkpoints)
    writer = f"{replica.replace('-', '_')}.r{group_rank}.{os.getpid()}"
    choice = [store.latest() if group_rank == 0 else None]
    dist.broadcast_object_list(choice, src=0)
    loaded = store.load(choice[0], map_location=device) if choice[0] else None
    start_step = 0
    if loaded is not None:
        load_user_state(loaded.state)
        start_step = loaded.state["step"]
        events.emit("checkpoint_loaded", step=start_step, seconds=round(loaded.seconds, 4), path=loaded.path.name)

    cross_group = ProcessGroupGloo(timeout=collective_timeout)
    manager = Manager(
        pg=cross_group,
        load_state_dict=load_user_state,
        state_dict=user_state,
        min_replica_size=int(os.environ.get(ENV_MIN_REPLICAS, "1")),
        use_async_quorum=False,  # the quorum (and any healing) completes before the step's data is chosen
        timeout=collective_timeout,
        quorum_timeout=_seconds(ENV_QUORUM_TIMEOUT, 900),
        connect_timeout=_seconds(ENV_CONNECT_TIMEOUT, 10),
        replica_id=replica,
        # Peers reach this group's manager and its store (for the step's process group) at
        # this address: torchrun's own store address ("localhost" alone) is not theirs.
        hostname=advertise or socket.gethostname(),
        store_addr=advertise or None,
        checkpoint_transport=_transport(advertise, collective_timeout) if advertise else None,
    )
    if group_rank == 0:
        # Where this group serves its peers (TorchFT keeps its servers private).
        server, transport = getattr(manager, "_manager", None), getattr(manager, "_checkpoint_transport", None)
        events.emit(
            "replica_group",
            replica=replica,
            manager=server.address() if server is not None else None,
            weights=transport.address() if transport is not None else None,
        )
    if loaded is not None:
        manager.load_state_dict({"step": start_step, "batches_committed": loaded.state.get("batches_committed", 0)})
    events.emit("resume" if loaded else "fresh", step=start_step, world_size=group_world, replica=replica)

    def save(reason: str) -> None:
        step = manager.current_step()
        if store.has(step):
            return
        snapshot = {**user_state(), "step": step, "world_size": group_world, "rng_by_rank": {}}
        snapshot["batches_committed"] = manager.batches_committed()
        saved = store.save(snapshot, step, writer)
        events.emit(
            "checkpoint_saved",
            step=step,
            reason=reason,
            seconds=round(saved.seconds, 4),
            blocking_s=round(saved.seconds, 4),
            bytes=saved.nbytes,
            path=saved.path.name,
            replica=replica,
        )

    def leave_on_notice() -> None:
        """A spot notice: the peers carry the job on; the last group standing saves first."""
        assert notice.received_at is not None
        # The quorum of the step in flight (asking the manager could wait on a quorum).
        if group_rank == 0 and last_quorum_size[0] <= 1:
            save("notice")
        events.emit(
            "exit",
            reason="notice",
            step=manager.current_step(),
            notice_to_exit_s=round(time.time() - notice.received_at, 4),
            replica=replica,
        )

    last_quorum_size = [0]
    notice.on_notice = leave_on_notice
    params = list(net.parameters())
    quorum_seen = -1
    while manager.current_step() < args.steps:
        t0 = time.perf_counter()
        manager.start_quorum()
        participants = last_quorum_size[0] = manager.num_participants()
        replica_rank = manager.participating_rank()
        world = max(participants, 1) * group_world
        lr = demo.scaled_lr(args.lr, world, args.lr_scaling)
        demo.set_lr(optimizer, lr)
        rank_in_step = (replica_rank or 0) * group_world + group_rank
        indices, covered = sampler.peek(args.batch_size, rank_in_step, world)
        if replica_rank is None:  # healing or spare: contributes nothing to this step
            indices = indices[:0]
        xb, yb = x_all[indices].to(device), y_all[indices].to(device)
        if args.step_time:
            time.sleep(args.step_time)
        optimizer.zero_grad()
        local_loss = loss_fn(net(xb), yb) if len(indices) else torch.zeros((), device=device)
        # Summed over every worker of the step, these gradients are the exact mean over
        # its global batch (the last batch of an epoch is short).
        (local_loss / covered).backward() if len(indices) else None
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = _flatten_dense_tensors(grads)
        if group_world > 1:
            try:
                dist.all_reduce(flat)
            except RuntimeError as exc:
                # A worker of this very group is gone: the group is lost; the agent restarts it.
                events.emit("collective_failed", step=manager.current_step(), error=type(exc).__name__)
                logging.shutdown()
                os._exit(1)
        manager.allreduce(flat, reduce_op=dist.ReduceOp.SUM).wait()
        if manager.errored() is not None:
            # A peer is gone: close this step's connections at once. Gloo's ring fails only
            # the dead peer's neighbours; the others would wait out the collective timeout
            # for data that this group no longer sends. The next quorum connects anew.
            cross_group.abort()
        # A notice saves either before this step's commit or after its update: should_commit
        # moves the manager's step on, the update follows (the commit waits at most the
        # collective timeout).
        with notice.consistent:
            committed = manager.should_commit()
            if committed:
                for p, g in zip(params, _unflatten_dense_tensors(flat, grads), strict=True):
                    p.grad = g
                optimizer.step()
                sampler.advance(covered)
        if committed:
            step = manager.current_step()
            if args.log_samples and len(indices):
                events.emit(
                    "samples",
                    step=step,
                    epoch=sampler.epoch if sampler.position else sampler.epoch - 1,
                    indices=indices.tolist(),
                    replica=replica,
                )
            if group_rank == 0:
                quorum = _quorum_id(manager)
                events.emit(
                    "step",
                    step=step,
                    loss=round(local_loss.item() / max(len(indices), 1), 5),
                    world_size=world,
                    participants=participants,
                    participating=replica_rank is not None,
                    replica=replica,
                    quorum=quorum,
                    samples=covered,
                    epoch=sampler.epoch,
                    position=sampler.position,
                    seconds=round(time.perf_counter() - t0, 5),
                )
                if quorum != quorum_seen:
                    quorum_seen = quorum
                    log.info("step %d: quorum %s of %d replica group(s)", step, quorum, participants)
            if step % args.checkpoint_every == 0 and replica_rank == 0 and group_rank == 0:
                with notice.consistent:
                    save("interval")
        else:
            events.emit(
                "step_discarded",
                step=manager.current_step(),
                participants=participants,
                replica=replica,
                quorum=_quorum_id(manager),
                error=str(manager.errored())[:200] if manager.errored() else None,
            )
    if group_rank == 0 and manager.participating_rank() == 0:
        with notice.consistent:
            save("final")
    events.emit("exit", reason="done", step=manager.current_step(), replica=replica)
    manager.shutdown(wait=False)
    return 0

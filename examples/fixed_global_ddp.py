"""A DDP script of one's own that trains the same model whatever nodes the cloud takes away:
the job's global batch and learning rate stay fixed when the world shrinks (each rank
accumulates micro-batches instead), every sample of an epoch is trained once across evictions,
and the drill can count them.

    elastic-lab drill --script examples/fixed_global_ddp.py --nodes 3 --eviction hard -- --steps 300

What it takes from the project: `lab.runtime.elastic_batches` (which samples, how many
micro-batches, the loss scale and learning rate, the data's place in a checkpoint) and
`lab.runtime.report_step` (the steps, for the drill's report). The rest is the script contract of
docs/drill.md: a process-group timeout, a checkpoint in LAB_CHECKPOINT_DIR written to a temporary
name and renamed, the newest one loaded by every rank at start, a save of the last completed step
on SIGTERM (taken on a thread: a collective waiting on a vanished peer holds the main thread).
"""

import argparse
import datetime
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from lab.runtime.elastic_batches import ElasticBatches, gradient_sync
from lab.runtime.report_step import report_step


def data(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Points labelled by a fixed random teacher: the same on every rank."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(size, 16, generator=g)
    return x, (x @ torch.randn(16, 4, generator=g)).argmax(dim=1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--micro-batch", type=int, default=32, help="samples per forward and backward on one worker")
    p.add_argument("--lr", type=float, default=0.02, help="the learning rate of one micro-batch")
    p.add_argument("--step-time", type=float, default=0.02, help="simulated accelerator seconds per micro-batch")
    p.add_argument("--save-every", type=int, default=20)
    args = p.parse_args()
    path = os.path.join(os.environ.get("LAB_CHECKPOINT_DIR", "checkpoints"), "fixed_global_ddp.pt")
    os.makedirs(os.path.dirname(path), exist_ok=True)

    # SIGTERM (a spot notice) is taken on a thread: it saves the last completed step and leaves.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    timeout = datetime.timedelta(seconds=float(os.environ.get("LAB_PG_TIMEOUT_S", "15")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    x, y = data(4096)
    batches = ElasticBatches(len(x), args.micro_batch, seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=batches.learning_rate(args.lr), momentum=0.9)
    step, lock = 0, threading.Lock()  # the lock: a notice saves before an update or after it

    def save() -> None:
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        tmp = f"{path}.tmp{rank}"
        torch.save({**state, "step": step, "batches": batches.state_dict()}, tmp)
        os.replace(tmp, path)

    def on_notice() -> None:
        signal.sigwait({signal.SIGTERM})
        with lock:
            save()
        print(f"step {step}: saved on SIGTERM, leaving", flush=True)
        os._exit(143)

    threading.Thread(target=on_notice, daemon=True).start()
    if os.path.exists(path):  # every rank loads the same, newest checkpoint
        saved = torch.load(path)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        for group in optimizer.param_groups:  # the job's rate (the same at any world size)
            group["lr"] = batches.learning_rate(args.lr)
        step = saved["step"]
        batches.load_state_dict(saved["batches"])
    ddp = DistributedDataParallel(model)

    while step < args.steps:
        work = batches.next_step(step + 1)
        optimizer.zero_grad()
        total = 0.0
        try:
            for i, part in enumerate(work.parts):
                time.sleep(args.step_time * len(part) / args.micro_batch)
                with gradient_sync(ddp, last=i == len(work.parts) - 1):
                    loss = nn.functional.cross_entropy(ddp(x[part]), y[part], reduction="sum")
                    (loss * work.loss_scale).backward()
                total += loss.item()
        except RuntimeError as exc:  # a peer is gone: save the last completed step, leave at once
            with lock:
                save()
            print(f"step {step}: a collective failed ({exc}); saved, leaving", flush=True)
            sys.stdout.flush()
            os._exit(1)
        with lock:
            optimizer.step()
            batches.advance(work)
            step += 1
        report_step(step, loss=total / max(len(work.indices), 1), samples=work.covered)
        if rank == 0 and step % args.save_every == 0:
            with lock:
                save()
    if rank == 0:
        save()
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

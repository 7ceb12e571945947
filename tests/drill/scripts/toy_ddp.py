"""A small DDP trainer written as users write theirs, with the habits that decide whether a job
survives an eviction behind flags, for the drill's catalogue (tests/drill/test_script_verdicts.py):
where the snapshot goes and how often, whether SIGTERM saves, the process group's timeout, and a
rank that fails after training. It prints "Epoch N" as it goes and emits no lab events."""

import argparse
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 - the tutorials' spelling
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=400)
    p.add_argument("--epoch-time", type=float, default=0.05, help="seconds of simulated work per epoch")
    p.add_argument("--snapshot", default="snapshot.pt", help="relative: the node's own folder")
    p.add_argument("--shared", action="store_true", help="the snapshot under $LAB_CHECKPOINT_DIR, every node's")
    p.add_argument("--save-every", type=int, default=5, help="epochs between snapshots; 0: only at the end")
    p.add_argument("--no-save", action="store_true", help="never save a snapshot")
    p.add_argument("--save-at-start", action="store_true", help="also save after the first epoch")
    p.add_argument("--save-on-sigterm", action="store_true", help="a notice saves the epoch done, then leaves")
    p.add_argument("--pg-timeout", type=float, default=0, help="seconds; 0: torch's default (30 min)")
    p.add_argument("--fail-at-end-rank", type=int, default=-1, help="this rank raises once training is done")
    p.add_argument(
        "--report-steps", action="store_true", help="tell the drill each epoch done (lab.runtime.report_step)"
    )
    args = p.parse_args()
    if args.shared:
        args.snapshot = os.path.join(os.environ["LAB_CHECKPOINT_DIR"], args.snapshot)

    stop = []
    if args.save_on_sigterm:
        signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    timeout = {"timeout": datetime.timedelta(seconds=args.pg_timeout)} if args.pg_timeout else {}
    dist.init_process_group("gloo", **timeout)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    start = 0
    if not args.no_save and os.path.exists(args.snapshot):
        snapshot = torch.load(args.snapshot)
        model.load_state_dict(snapshot["model"])
        start = snapshot["epochs_run"]
        print(f"Resuming from snapshot at Epoch {start}", flush=True)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)

    def save(epochs_run, on_notice=False):
        # Rank 0 saves; on a notice the rank told to go does (DDP: every rank holds the whole model).
        if args.no_save or (rank != 0 and not on_notice):
            return
        tmp = f"{args.snapshot}.tmp{rank}"  # on a notice several ranks may save at once
        torch.save({"model": model.state_dict(), "epochs_run": epochs_run}, tmp)
        os.replace(tmp, args.snapshot)

    x = torch.rand(64, 8)
    for epoch in range(start, args.epochs):
        optimizer.zero_grad()
        loss = F.mse_loss(ddp(x), x.sum(dim=1, keepdim=True))
        loss.backward()
        optimizer.step()
        time.sleep(args.epoch_time)  # the accelerator's work of an epoch
        print(f"Epoch {epoch}", flush=True)
        if args.report_steps:
            from lab.runtime.report_step import report_step

            report_step(epoch + 1, loss=loss.item())
        if stop:
            save(epoch + 1, on_notice=True)
            print(f"Epoch {epoch} | saved on SIGTERM, leaving", flush=True)
            sys.exit(143)
        if (args.save_every and (epoch + 1) % args.save_every == 0) or (args.save_at_start and epoch == start):
            save(epoch + 1)
    save(args.epochs)
    if rank == args.fail_at_end_rank:
        raise RuntimeError("writing this rank's final metrics failed")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

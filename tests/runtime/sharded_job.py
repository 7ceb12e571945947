"""A small FSDP2 job for the sharded-checkpoint tests, run by torchrun on loopback.

    sharded_job.py save DIR STEPS [SAVE_EVERY]   train a GPT with AdamW, saving asynchronously
    sharded_job.py load DIR                      load the newest checkpoint at this world size
                                                 (UNSET=1: into shards whose weights were never drawn),
                                                 saying where its bytes came from (memory, peers, storage)
    sharded_job.py verify DIR                    say why each step can or cannot be loaded

Every mode prints one JSON line per rank (rank 0 first in its line's "rank" field): the step,
and the whole model's and optimizer's state gathered to full tensors, as checksums that do not
depend on the world size.
"""

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

from lab.runtime.gpt import GPT, GPTConfig, TokenData, sample_losses
from lab.runtime.sharded_checkpoint import Progress, ShardedCheckpoints
from lab.runtime.workload import shard, shards_to_fill

# Large enough (about 60 MB of state) that a save takes a moment to write.
CONFIG = GPTConfig(vocab_size=512, seq_len=32, d_model=256, n_layers=int(os.environ.get("LAYERS", "4")), n_heads=4)


def _say(record: dict) -> None:
    """One JSON line in one write(2): the ranks share the pipe (a line under PIPE_BUF bytes is
    never interleaved with another rank's, as print's separate writes of text and newline
    can be when the worker's output is unbuffered)."""
    os.write(1, (json.dumps(record) + "\n").encode())


def checksums(model, optimizer):
    """Sums of the full (gathered) model and optimizer state: equal at any world size."""
    model_state, optim_state = get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
    total = sum(float(v.double().sum()) for v in model_state.values())
    moments = sum(float(st["exp_avg"].double().abs().sum()) for st in optim_state["state"].values())
    return round(total, 6), round(moments, 6)


def main() -> None:
    mode, directory = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(int(os.environ.get("SEED", "0")))  # another SEED: another model, saved alike
    if mode == "load" and os.environ.get("UNSET"):
        model = shards_to_fill(lambda: GPT(CONFIG), torch.device("cpu"))
    else:
        model = shard(GPT(CONFIG), torch.device("cpu"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    checkpoints = ShardedCheckpoints(directory, keep=2)
    out: dict = {"rank": rank, "world": world}
    if mode == "verify":
        out["verdicts"] = {str(s): checkpoints.steps.verify(s) for s in checkpoints.steps.steps()}
        out["newest"] = checkpoints.steps.newest_committed()[0]
    elif mode == "load":
        step, skipped = checkpoints.choose()
        progress = checkpoints.load(step, model, optimizer)
        out.update(step=progress.step, saved_world=progress.world_size, skipped=skipped)
        out["tiers"] = checkpoints.last_load.fields() if checkpoints.last_load is not None else None
        out["split"] = checkpoints.last_split
        out["model"], out["moments"] = checksums(model, optimizer)
    else:
        steps, every = int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 1
        data = TokenData.generate(64, CONFIG.seq_len, CONFIG.vocab_size, seed=0)
        blocked = []
        for step in range(1, steps + 1):
            x, y = data.batch(torch.tensor([(step * world + rank) % 64]))
            sample_losses(model(x), y).sum().backward()
            checkpoints.wait_for_staging()
            optimizer.step()
            optimizer.zero_grad()
            if step % every == 0:
                stats = checkpoints.save(Progress(step, 0, step, world), model, optimizer, reason="interval")
                blocked.append(stats.blocking_s)
                _say({"rank": rank, "saving": step})
                time.sleep(float(os.environ.get("PAUSE_AFTER_SAVE", "0")))
        last = checkpoints.wait()
        out.update(step=steps, committed=last.step if last else None, blocked=blocked)
        out["model"], out["moments"] = checksums(model, optimizer)
        checkpoints.close()
    _say(out)


if __name__ == "__main__":
    main()

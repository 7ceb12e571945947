"""A DDP script written for GPUs only, as most are: each worker first takes the GPU of its local
rank (torch.cuda.set_device), then joins an NCCL process group. On a CPU-only torch the first
call fails."""

import os

import torch
import torch.distributed as dist


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")
    model = torch.nn.Linear(20, 1).cuda()
    for _ in range(100):
        model(torch.rand(64, 20, device="cuda")).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""A script that keeps its tensors on the CPU but asks for the NCCL backend, GPUs' only one: on a
CPU-only torch the process group cannot be made."""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group(backend="nccl")
    model = torch.nn.Linear(20, 1)
    for _ in range(100):
        loss = model(torch.rand(64, 20)).sum()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

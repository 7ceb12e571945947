"""A script that checks for a GPU before anything else, with an assertion."""

import torch
import torch.distributed as dist


def main():
    assert torch.cuda.is_available(), "this trainer needs a GPU"
    dist.init_process_group(backend="nccl")
    model = torch.nn.Linear(20, 1).cuda()
    for _ in range(100):
        model(torch.rand(64, 20, device="cuda")).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

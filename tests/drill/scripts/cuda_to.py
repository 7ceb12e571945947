"""A script that moves its model to the GPU with .to("cuda") after a gloo process group: on a
CPU-only torch the move fails."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817


def build_model():
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    return model.to("cuda")


def main():
    dist.init_process_group(backend="gloo")
    model = DDP(build_model())
    for _ in range(100):
        model(torch.rand(64, 20, device="cuda")).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

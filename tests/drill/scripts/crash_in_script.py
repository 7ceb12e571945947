"""A script with a bug of its own: its model's layers do not fit together, so the first forward
pass fails (inside torch, called from the script's forward)."""

import torch
import torch.distributed as dist


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(20, 32)
        self.out = torch.nn.Linear(64, 1)

    def forward(self, x):
        x = torch.relu(self.hidden(x))
        return self.out(x)


def main():
    dist.init_process_group(backend="gloo")
    model = Net()
    for _ in range(100):
        model(torch.rand(64, 20)).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""A script whose arguments argparse checks: it needs --data, which the drill does not pass."""

import argparse

import torch
import torch.distributed as dist


def parse_args():
    p = argparse.ArgumentParser(description="train a linear model on a folder of tensors")
    p.add_argument("--data", required=True, help="the folder of training tensors")
    p.add_argument("--epochs", type=int, default=10)
    return p.parse_args()


def main():
    args = parse_args()
    dist.init_process_group(backend="gloo")
    model = torch.nn.Linear(20, 1)
    for _ in range(args.epochs):
        model(torch.load(f"{args.data}/x.pt")).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

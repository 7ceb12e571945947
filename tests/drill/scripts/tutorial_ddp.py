"""A training script written the way PyTorch's DDP tutorials write one, for the drill to run as a
user's script: a Trainer class, a DistributedSampler, DDP, a snapshot every few epochs at a path
given on the command line (the tutorials' default is relative: node-local), and
destroy_process_group() at the end. No lab events, no signal handling, no peer-loss handling."""

import argparse
import os

import torch
import torch.nn.functional as F  # noqa: N812 - the tutorials' spelling
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, data, optimizer, save_every, snapshot_path):
        self.rank = int(os.environ["RANK"])
        self.model, self.data, self.optimizer = model, data, optimizer
        self.save_every, self.snapshot_path, self.epochs_run = save_every, snapshot_path, 0
        if os.path.exists(snapshot_path):
            snapshot = torch.load(snapshot_path)
            self.model.load_state_dict(snapshot["MODEL_STATE"])
            self.epochs_run = snapshot["EPOCHS_RUN"]
            print(f"Resuming training from snapshot at Epoch {self.epochs_run}", flush=True)
        self.model = DDP(self.model)

    def _run_epoch(self, epoch):
        self.data.sampler.set_epoch(epoch)
        for source, targets in self.data:
            self.optimizer.zero_grad()
            F.mse_loss(self.model(source), targets).backward()
            self.optimizer.step()

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch + 1}
        tmp = f"{self.snapshot_path}.tmp"
        torch.save(snapshot, tmp)
        os.replace(tmp, self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}", flush=True)

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--save-every", type=int, default=2)
    p.add_argument("--snapshot", default="snapshot.pt")
    args = p.parse_args()
    init_process_group(backend="gloo")
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4096, 20, generator=g)
    dataset = TensorDataset(x, x.sum(dim=1, keepdim=True))
    data = DataLoader(dataset, batch_size=64, shuffle=False, sampler=DistributedSampler(dataset))
    model = torch.nn.Linear(20, 1)
    trainer = Trainer(model, data, torch.optim.SGD(model.parameters(), lr=1e-3), args.save_every, args.snapshot)
    trainer.train(args.epochs)
    destroy_process_group()


if __name__ == "__main__":
    main()
